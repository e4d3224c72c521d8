/* The RAM tier: resume points of displaced sequences over the KV pool. */
#include "state/ram_tier.h"

#include <stdlib.h>
#include <string.h>

void ram_tier_init(ram_tier *t, kv_pool *pool, size_t budget) {
    memset(t, 0, sizeof *t);
    t->pool = pool;
    t->budget = budget;
}

static void drop(ram_tier *t, int32_t i) {
    t->bytes -= t->v[i].bytes;
    ram_point_free(&t->v[i], t->pool);
    t->v[i] = t->v[--t->n];
}

void ram_tier_free(ram_tier *t) {
    while (t->n) drop(t, t->n - 1);
    memset(t, 0, sizeof *t);
}

static bool same_identity(const seq_state *a, const seq_state *b) {
    return !memcmp(a->model_id, b->model_id, sizeof a->model_id) && !strcmp(a->format, b->format);
}

int32_t ram_point_cut(const ram_point *p, int32_t n) { return p->rec ? kv_rows_at_most(p->rec_rows, p->n_rec, n) : n; }

int32_t ram_point_tail_start(const ram_point *p) { return p->seq.n_rows / KV_BLOCK_ROWS * KV_BLOCK_ROWS; }

int ram_point_make(ram_point *p, kv_pool *pool, const seq_state *seq, const kv_cache *kv, bool pin) {
    memset(p, 0, sizeof *p);
    p->tail = -1;
    const int32_t n = seq->n_rows;
    if (n <= 0 || !seq_complete(seq, n)) return 1;
    if (seq_init(&p->seq, n, NULL) || seq_copy(&p->seq, seq, n, NULL)) goto oom;
    p->bytes = sizeof *p + (size_t)n * (sizeof *seq->tok + sizeof *seq->pos_after) +
               (size_t)seq->n_spans * sizeof(seq_span);
    if ((p->n_rec = kv_cache_recurrent_points(kv, p->rec_rows))) {
        const size_t bytes = (size_t)p->n_rec * kv->recurrent_floats * sizeof(float);
        if (!(p->rec = malloc(bytes))) goto oom;
        kv_cache_save_recurrent(kv, p->rec);
        p->bytes += bytes;
    }
    const int32_t nb = (n + KV_BLOCK_ROWS - 1) / KV_BLOCK_ROWS;
    p->bytes += (size_t)nb * pool->block_bytes;
    if (pin) {
        if (!(p->pinned = malloc((size_t)nb * sizeof *p->pinned))) goto oom;
        for (int32_t b = 0; b < nb; b++) kv_pool_pin(pool, p->pinned[b] = kv->ids[b]);
        p->n_pinned = nb;
    } else if (n % KV_BLOCK_ROWS) {
        kv_pool_ref(pool, p->tail = kv->ids[nb - 1]);
    }
    return 0;
oom:
    ram_point_free(p, pool);
    return -1;
}

void ram_point_free(ram_point *p, kv_pool *pool) {
    if (p->tail >= 0) kv_pool_unref(pool, p->tail);
    for (int32_t b = 0; b < p->n_pinned; b++) kv_pool_unpin(pool, p->pinned[b]);
    free(p->pinned);
    free(p->rec);
    seq_free(&p->seq);
    memset(p, 0, sizeof *p);
    p->tail = -1;
}

/* Makes room for np: false when one already holds its rows and resumes at
 * their end (it is made most recent), or it cannot fit. Points that are
 * prefixes of it that it resumes at the end of are dropped, then the least
 * recently used until it fits. */
static bool make_room(ram_tier *t, const ram_point *np) {
    for (int32_t i = t->n - 1; i >= 0; i--) {
        ram_point *p = &t->v[i];
        if (!same_identity(&p->seq, &np->seq)) continue;
        const int32_t common = seq_common_prefix(&p->seq, &np->seq);
        if (common == np->seq.n_rows && ram_point_cut(p, common) == common) {
            p->used = ++t->clock;
            return false;
        }
        if (common == p->seq.n_rows && ram_point_cut(np, common) == common) {
            drop(t, i);
            t->evictions++;
        }
    }
    if (np->bytes > t->budget) return false;
    while (t->n && (t->n == RAM_POINTS || t->bytes + np->bytes > t->budget)) {
        int32_t lru = 0;
        for (int32_t i = 1; i < t->n; i++)
            if (t->v[i].used < t->v[lru].used) lru = i;
        drop(t, lru);
        t->evictions++;
    }
    return true;
}

static void append(ram_tier *t, ram_point *p) {
    t->v[t->n] = *p;
    t->v[t->n].used = ++t->clock;
    t->bytes += p->bytes;
    t->n++;
    memset(p, 0, sizeof *p);
    p->tail = -1;
}

bool ram_tier_add(ram_tier *t, ram_point *p) {
    if (p->pinned || !make_room(t, p)) return false;
    append(t, p);
    t->saves++;
    return true;
}

int32_t ram_tier_find(const ram_tier *t, const seq_state *want, int32_t limit, int32_t pool_rows, int32_t *prefix) {
    int32_t best = -1, best_n = 0;
    for (int32_t i = 0; i < t->n; i++) {
        const ram_point *p = &t->v[i];
        if (!same_identity(&p->seq, want)) continue;
        int32_t common = seq_common_prefix(&p->seq, want);
        if (common > limit) common = limit;
        /* rows past the pool's run only from its tail block, when the run reaches it */
        if (common > pool_rows && !(pool_rows >= ram_point_tail_start(p) && p->tail >= 0)) common = pool_rows;
        common = ram_point_cut(p, seq_back_off(want, common));
        if (common > best_n || (common == best_n && common > 0 && p->used > t->v[best].used)) {
            best = i;
            best_n = common;
        }
    }
    *prefix = best_n;
    return best;
}

void ram_tier_take(ram_tier *t, int32_t i, ram_point *out) {
    *out = t->v[i];
    t->bytes -= out->bytes;
    t->v[i] = t->v[--t->n];
    t->hits++;
}

void ram_tier_return(ram_tier *t, ram_point *p) {
    if (make_room(t, p)) append(t, p);
    else ram_point_free(p, t->pool);
}

bool ram_tier_cond(const ram_tier *t, const seq_span *sp, uint8_t cond[32]) {
    for (int32_t i = 0; i < t->n; i++)
        if (seq_span_cond(&t->v[i].seq, sp, cond)) return true;
    return false;
}
