/* The RAM tier: checkpoints of recent sequences, LRU within a byte budget. */
#include "state/ram_tier.h"

#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
#include "base/grow.h"
#include "base/meminfo.h"

void ram_tier_init(ram_tier *t, size_t budget) {
    memset(t, 0, sizeof *t);
    t->budget = budget;
    t->floor = RAM_TIER_FLOOR;
}

static void drop(ram_tier *t, int32_t i) {
    ram_ckpt *c = &t->v[i];
    t->bytes -= c->bytes;
    ram_ckpt_free(c);
    t->v[i] = t->v[--t->n];
}

void ram_tier_free(ram_tier *t) {
    while (t->n) drop(t, t->n - 1);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static bool same_identity(const seq_state *a, const seq_state *b) {
    return !memcmp(a->model_id, b->model_id, sizeof a->model_id) && !strcmp(a->format, b->format);
}

/* seq's first n rows, read-only (n does not cut a span). */
static seq_state view(const seq_state *seq, int32_t n) {
    seq_state v = *seq;
    v.n_rows = n;
    while (v.n_spans && v.spans[v.n_spans - 1].start >= n) v.n_spans--;
    return v;
}

int32_t ram_ckpt_cut(const ram_ckpt *c, int32_t n) { return c->rec ? kv_rows_at_most(c->rec_rows, c->n_rec, n) : n; }

/* Makes room for nc, a checkpoint of bytes holding seq's rows (v):
 * false when one already holds them and resumes at their end (it is made
 * most recent) or it cannot fit. Checkpoints that are prefixes of it that
 * it resumes at the end of are dropped, then the least recently used until
 * it fits. */
static bool make_room(ram_tier *t, const ram_ckpt *nc, const seq_state *v, size_t bytes) {
    for (int32_t i = t->n - 1; i >= 0; i--) {
        ram_ckpt *c = &t->v[i];
        if (!same_identity(&c->seq, v)) continue;
        int32_t common = seq_common_prefix(&c->seq, v);
        if (common == v->n_rows && ram_ckpt_cut(c, common) == common) {
            c->used = ++t->clock;
            return false;
        }
        if (common == c->seq.n_rows && ram_ckpt_cut(nc, common) == common) {
            drop(t, i);
            t->evictions++;
        }
    }
    if (bytes > t->budget) return false;
    while (t->n && t->bytes + bytes > t->budget) {
        int32_t lru = 0;
        for (int32_t i = 1; i < t->n; i++)
            if (t->v[i].used < t->v[lru].used) lru = i;
        drop(t, lru);
        t->evictions++;
    }
    ram_ckpt *grown = grow_array(t->v, &t->cap, (size_t)t->n, sizeof *grown, 8);
    if (!grown) return false;
    t->v = grown;
    return true;
}

static void append(ram_tier *t, const ram_ckpt *c) {
    t->v[t->n] = *c;
    t->v[t->n].used = ++t->clock;
    t->n++;
    t->bytes += c->bytes;
}

/* A checkpoint of seq's first n rows without its cells (kv NULL). */
static int ckpt_make(ram_ckpt *c, const seq_state *seq, int32_t n, size_t kv_bytes, int64_t floor) {
    memset(c, 0, sizeof *c);
    if (n <= 0 || n > seq->n_rows || !seq_complete(seq, n)) return 1;
    const seq_state v = view(seq, n);
    c->bytes = kv_bytes + (size_t)n * (sizeof *seq->tok + sizeof *seq->pos_after) +
               (size_t)v.n_spans * sizeof(seq_span) + sizeof(ram_ckpt);
    const int64_t avail = ph_mem_available();
    if (avail >= 0 && avail - (int64_t)c->bytes < floor) return -1;
    if (seq_init(&c->seq, n, NULL)) return -1;
    c->kv_bytes = kv_bytes;
    if (seq_copy(&c->seq, &v, n, NULL)) {
        ram_ckpt_free(c);
        return -1;
    }
    return 0;
}

int ram_ckpt_new(ram_ckpt *c, const seq_state *seq, int32_t n, size_t kv_bytes, int64_t floor) {
    int rc = ckpt_make(c, seq, n, kv_bytes, floor);
    if (rc) return rc;
    if (!(c->kv = big_alloc(kv_bytes))) {
        ram_ckpt_free(c);
        return -1;
    }
    c->map_bytes = kv_bytes;
    c->kv_rows = n;
    return 0;
}

int ram_ckpt_wrap(ram_ckpt *c, const seq_state *seq, int32_t n, size_t kv_bytes, void *map, size_t map_bytes,
                  int32_t kv_rows, int64_t floor) {
    int rc = ckpt_make(c, seq, n, kv_bytes, floor);
    if (rc) return rc;
    c->kv = map;
    c->map_bytes = map_bytes;
    c->kv_rows = kv_rows;
    return 0;
}

bool ram_tier_add(ram_tier *t, ram_ckpt *c) {
    if (c->kv_bytes > t->budget || !make_room(t, c, &c->seq, c->bytes)) return false;
    append(t, c);
    t->saves++;
    memset(c, 0, sizeof *c);
    return true;
}

void *ram_tier_put(ram_tier *t, const seq_state *seq, int32_t n, size_t kv_bytes) {
    if (kv_bytes > t->budget) return NULL;
    /* made (its KV not yet touched, so not yet in memory) before anything is
     * evicted: a refusal for want of memory loses nothing */
    ram_ckpt c;
    int rc = ram_ckpt_new(&c, seq, n, kv_bytes, t->floor);
    if (rc) {
        if (rc < 0) t->refused++;
        return NULL;
    }
    if (!ram_tier_add(t, &c)) {
        ram_ckpt_free(&c);
        return NULL;
    }
    return t->v[t->n - 1].kv;
}

void ram_tier_take(ram_tier *t, int32_t i, ram_ckpt *out) {
    *out = t->v[i];
    t->bytes -= out->bytes;
    t->v[i] = t->v[--t->n];
    t->hits++;
}

void ram_tier_return(ram_tier *t, ram_ckpt *c) {
    if (make_room(t, c, &c->seq, c->bytes)) append(t, c);
    else ram_ckpt_free(c);
    memset(c, 0, sizeof *c);
}

int ram_ckpt_set_recurrent(ram_ckpt *c, const kv_cache *kv) {
    if (!(c->n_rec = kv_cache_recurrent_points(kv, c->rec_rows))) return 0;
    const size_t bytes = (size_t)c->n_rec * kv->recurrent_floats * sizeof(float);
    if (!(c->rec = malloc(bytes))) return -1;
    kv_cache_save_recurrent(kv, c->rec);
    c->bytes += bytes;
    return 0;
}

void ram_ckpt_free(ram_ckpt *c) {
    free(c->rec);
    big_free(c->kv, c->map_bytes);
    seq_free(&c->seq);
    memset(c, 0, sizeof *c);
}

int32_t ram_tier_find(const ram_tier *t, const seq_state *want, int32_t limit, int32_t *prefix) {
    int32_t best = -1, best_n = 0;
    for (int32_t i = 0; i < t->n; i++) {
        const ram_ckpt *c = &t->v[i];
        if (!same_identity(&c->seq, want)) continue;
        int32_t common = seq_common_prefix(&c->seq, want);
        common = ram_ckpt_cut(c, common < limit ? common : limit);
        if (common > best_n || (common == best_n && common > 0 && c->used > t->v[best].used)) {
            best = i;
            best_n = common;
        }
    }
    *prefix = best_n;
    return best;
}
