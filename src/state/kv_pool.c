/* The KV block pool and the block names: see kv_pool.h. */
#include "state/kv_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bigbuf.h"
#include "base/sha256.h"
#include "state/domain.h"

#define ROOT_TAG      "pinhole-kv-block-1"
#define PICTURE_ROW   52
#define MAX_POOL_BLKS ((size_t)1 << 30)

struct kv_pool_block {
    uint8_t name[KV_NAME_LEN], parent[KV_NAME_LEN];
    uint64_t stamp; /* when it was last released (cached): the LRU order */
    int32_t refs, pins;
    int32_t children;   /* blocks published with this one as their parent, still in the pool */
    int32_t up;         /* the parent's block, or -1 */
    int32_t prev, next; /* LRU links; next is also the free list's */
    int32_t hnext;      /* the name table's chain */
    uint32_t mark;      /* kv_pool_available: an ancestor of a held block */
    bool free, named, on_lru;
};

typedef struct kv_pool_block block;

/* ---- bookkeeping --------------------------------------------------------- */

/* The counter of the state b is in (kv_pool.h, States of a block). */
static int32_t *counter(kv_pool *p, const block *b) {
    if (b->free) return &p->n_free;
    if (b->pins) return &p->n_pinned;
    if (b->refs) return &p->n_in_use;
    return &p->n_cached;
}

static bool evictable(const block *b) { return b->named && !b->refs && !b->pins && !b->children; }

static void lru_remove(kv_pool *p, int32_t id) {
    block *b = &p->blk[id];
    if (b->prev >= 0) p->blk[b->prev].next = b->next;
    else p->lru_head = b->next;
    if (b->next >= 0) p->blk[b->next].prev = b->prev;
    else p->lru_tail = b->prev;
    b->prev = b->next = -1;
    b->on_lru = false;
}

/* Inserts id in stamp order: at the end when it was just released (the
 * usual case), else (a parent whose last child was evicted, released
 * before that child or about then) walking from the oldest. */
static void lru_insert(kv_pool *p, int32_t id) {
    block *b = &p->blk[id];
    int32_t after = p->lru_tail;
    if (after >= 0 && p->blk[after].stamp > b->stamp) {
        int32_t before = p->lru_head;
        while (p->blk[before].stamp < b->stamp) before = p->blk[before].next;
        after = p->blk[before].prev;
    }
    b->prev = after;
    b->next = after >= 0 ? p->blk[after].next : p->lru_head;
    if (after >= 0) p->blk[after].next = id;
    else p->lru_head = id;
    if (b->next >= 0) p->blk[b->next].prev = id;
    else p->lru_tail = id;
    b->on_lru = true;
}

/* Puts id on the LRU list exactly when it is evictable. */
static void settle(kv_pool *p, int32_t id) {
    block *b = &p->blk[id];
    if (evictable(b) && !b->on_lru) lru_insert(p, id);
    else if (!evictable(b) && b->on_lru) lru_remove(p, id);
}

static uint32_t bucket_of(const kv_pool *p, const uint8_t name[KV_NAME_LEN]) {
    uint32_t h;
    memcpy(&h, name, sizeof h); /* names are digests: any bytes of them are uniform */
    return h & p->bucket_mask;
}

static int32_t name_find(const kv_pool *p, const uint8_t name[KV_NAME_LEN]) {
    int32_t id = p->bucket[bucket_of(p, name)];
    while (id >= 0 && memcmp(p->blk[id].name, name, KV_NAME_LEN)) id = p->blk[id].hnext;
    return id;
}

static void name_remove(kv_pool *p, int32_t id) {
    int32_t *at = &p->bucket[bucket_of(p, p->blk[id].name)];
    while (*at != id) at = &p->blk[*at].hnext;
    *at = p->blk[id].hnext;
    p->blk[id].hnext = -1;
}

static _Noreturn void misuse(const char *what, int32_t id) {
    fprintf(stderr, "pinhole: kv_pool: %s (block %d)\n", what, id);
    abort();
}

/* A held block that is losing its last hold: cached when named (the most
 * recently released), free otherwise. Called with b counted out. */
static void release(kv_pool *p, int32_t id) {
    block *b = &p->blk[id];
    if (b->named) {
        b->stamp = ++p->clock;
    } else {
        b->free = true;
        b->next = p->free_head;
        p->free_head = id;
    }
}

/* Takes evictable block id out of the pool's names and the cached count,
 * for kv_pool_alloc to hand out (its parent may become evictable). */
static void evict(kv_pool *p, int32_t id) {
    block *b = &p->blk[id];
    lru_remove(p, id);
    name_remove(p, id);
    p->n_cached--;
    b->named = false;
    if (b->up >= 0) {
        p->blk[b->up].children--;
        settle(p, b->up);
        b->up = -1;
    }
    p->evictions++;
}

/* ---- the pool -------------------------------------------------------------- */

size_t kv_pool_stride(size_t row_bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = KV_BLOCK_ROWS * row_bytes;
    size_t stride = (bytes + 63) & ~(size_t)63;
    if (stride >= page) stride = (stride + page - 1) / page * page;
    return stride;
}

int kv_pool_init(kv_pool *p, size_t budget, size_t row_bytes, int32_t n_parts, ph_err *err) {
    memset(p, 0, sizeof *p);
    if (!row_bytes || n_parts <= 0 || row_bytes % (size_t)n_parts)
        return err_set(err, "a KV row of %zu bytes in %d parts", row_bytes, n_parts);
    p->row_bytes = row_bytes;
    p->n_parts = n_parts;
    p->block_bytes = KV_BLOCK_ROWS * row_bytes;
    p->stride = kv_pool_stride(row_bytes);
    size_t n = budget / p->stride;
    if (n == 0)
        return err_set(err, "a KV pool of %zu bytes holds no block of %zu bytes (%d rows)", budget, p->block_bytes,
                       KV_BLOCK_ROWS);
    if (n > MAX_POOL_BLKS) n = MAX_POOL_BLKS;
    size_t nb = 1;
    while (nb < n) nb *= 2;
    p->n_blocks = (int32_t)n;
    p->arena_bytes = n * p->stride;
    p->blk = calloc(n, sizeof *p->blk);
    p->bucket = malloc(nb * sizeof *p->bucket);
    p->base = big_alloc(p->arena_bytes);
    if (!p->blk || !p->bucket || !p->base) {
        kv_pool_free(p);
        return err_set(err, "out of memory for a KV pool of %zu blocks of %zu bytes", n, p->block_bytes);
    }
    p->bucket_mask = (uint32_t)(nb - 1);
    memset(p->bucket, 0xff, nb * sizeof *p->bucket); /* -1 */
    p->free_head = -1;
    p->lru_head = p->lru_tail = -1;
    for (int32_t id = p->n_blocks - 1; id >= 0; id--) { /* block 0 first: the arena fills from its start */
        block *b = &p->blk[id];
        b->up = b->prev = b->hnext = -1;
        b->free = true;
        b->next = p->free_head;
        p->free_head = id;
    }
    p->n_free = p->n_blocks;
    return 0;
}

void kv_pool_free(kv_pool *p) {
    big_free(p->base, p->arena_bytes);
    free(p->blk);
    free(p->bucket);
    memset(p, 0, sizeof *p);
}

int kv_pool_populate(const kv_pool *p, int32_t first, int32_t n) {
    if (first < 0 || n <= 0 || first >= p->n_blocks) return 0;
    if (n > p->n_blocks - first) n = p->n_blocks - first;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), from = (size_t)first * p->stride / page * page,
                 to = ((size_t)(first + n) * p->stride + page - 1) / page * page; /* the mapping's pages are whole */
    return big_populate(p->base + from, to - from);
}

int32_t kv_pool_alloc(kv_pool *p) {
    int32_t id = p->free_head;
    if (id >= 0) {
        p->free_head = p->blk[id].next;
        p->n_free--;
    } else {
        id = p->lru_head;
        if (id < 0) return -1;
        evict(p, id);
    }
    p->n_in_use++;
    block *b = &p->blk[id];
    b->free = false;
    b->refs = 1;
    b->next = -1;
    return id;
}

int32_t kv_pool_find(kv_pool *p, const uint8_t name[KV_NAME_LEN]) {
    p->lookups++;
    int32_t id = name_find(p, name);
    if (id < 0) return -1;
    p->hits++;
    kv_pool_ref(p, id);
    return id;
}

bool kv_pool_contains(const kv_pool *p, const uint8_t name[KV_NAME_LEN]) { return name_find(p, name) >= 0; }

int32_t kv_pool_publish(kv_pool *p, int32_t id, const uint8_t name[KV_NAME_LEN], const uint8_t parent[KV_NAME_LEN]) {
    block *b = &p->blk[id];
    if (b->free || b->named || !b->refs) misuse("publish of a block that is not held and unnamed", id);
    int32_t had = name_find(p, name);
    if (had >= 0) {
        kv_pool_ref(p, had);
        kv_pool_unref(p, id);
        return had;
    }
    b->up = name_find(p, parent);
    if (b->up >= 0) {
        p->blk[b->up].children++;
        settle(p, b->up);
    }
    memcpy(b->name, name, KV_NAME_LEN);
    memcpy(b->parent, parent, KV_NAME_LEN);
    b->named = true;
    uint32_t k = bucket_of(p, name);
    b->hnext = p->bucket[k];
    p->bucket[k] = id;
    return id;
}

/* Adds d (1 or -1) to block id's references, or its pins: a block left
 * with neither is released. */
static void hold(kv_pool *p, int32_t id, bool pin, int32_t d) {
    block *b = &p->blk[id];
    int32_t *n = pin ? &b->pins : &b->refs;
    if (b->free || *n + d < 0)
        misuse(pin ? "pin count below zero or on a free block" : "reference count below zero or on a free block", id);
    (*counter(p, b))--;
    *n += d;
    if (d < 0 && !b->refs && !b->pins) release(p, id);
    (*counter(p, b))++;
    settle(p, id);
}

void kv_pool_ref(kv_pool *p, int32_t id) { hold(p, id, false, 1); }
void kv_pool_unref(kv_pool *p, int32_t id) { hold(p, id, false, -1); }
void kv_pool_pin(kv_pool *p, int32_t id) { hold(p, id, true, 1); }
void kv_pool_unpin(kv_pool *p, int32_t id) { hold(p, id, true, -1); }

bool kv_pool_writable(const kv_pool *p, int32_t id) {
    const block *b = &p->blk[id];
    return !b->free && !b->named && b->refs == 1 && !b->pins;
}

int32_t kv_pool_cow(kv_pool *p, int32_t id, int32_t rows) {
    const block *b = &p->blk[id];
    if (b->free || !b->refs) misuse("copy of a block that is not held", id);
    if (kv_pool_writable(p, id)) return id;
    int32_t to = kv_pool_alloc(p); /* never id: the caller holds it */
    if (to < 0) return -1;
    const uint8_t *src = kv_pool_data(p, id);
    uint8_t *dst = kv_pool_data(p, to);
    size_t part = p->block_bytes / (size_t)p->n_parts, used = (size_t)rows * (p->row_bytes / (size_t)p->n_parts);
    if (rows == KV_BLOCK_ROWS) memcpy(dst, src, p->block_bytes);
    else
        for (int32_t j = 0; j < p->n_parts; j++) memcpy(dst + j * part, src + j * part, used);
    p->bytes_copied += (uint64_t)rows * p->row_bytes;
    kv_pool_unref(p, id);
    return to;
}

int32_t kv_pool_available(kv_pool *p) {
    if (++p->epoch == 0) { /* the marks wrapped: clear them */
        for (int32_t id = 0; id < p->n_blocks; id++) p->blk[id].mark = 0;
        p->epoch = 1;
    }
    /* a cached block that is the ancestor of a held one cannot be evicted:
     * mark each such once, walking up from every held named block until a
     * held or marked ancestor (whose own walk covers what is above it) */
    int32_t stuck = 0;
    for (int32_t id = 0; id < p->n_blocks; id++) {
        const block *b = &p->blk[id];
        if (!b->named || (!b->refs && !b->pins)) continue;
        for (int32_t u = b->up; u >= 0; u = p->blk[u].up) {
            block *a = &p->blk[u];
            if (a->refs || a->pins || a->mark == p->epoch) break;
            a->mark = p->epoch;
            stuck++;
        }
    }
    return p->n_free + p->n_cached - stuck;
}

void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st) {
    st->total = p->n_blocks;
    st->in_use = p->n_in_use;
    st->pinned = p->n_pinned;
    st->cached = p->n_cached;
    st->free = p->n_free;
    st->evictions = p->evictions;
    st->lookups = p->lookups;
    st->hits = p->hits;
    st->bytes_copied = p->bytes_copied;
    st->block_bytes = p->block_bytes;
}

void kv_pool_get_block(const kv_pool *p, int32_t id, kv_block_info *out) {
    const block *b = &p->blk[id];
    memset(out, 0, sizeof *out);
    out->free = b->free;
    out->named = b->named;
    out->refs = b->refs;
    out->pins = b->pins;
    out->children = b->children;
    if (b->named) {
        memcpy(out->name, b->name, KV_NAME_LEN);
        memcpy(out->parent, b->parent, KV_NAME_LEN);
    }
}

/* ---- block names ----------------------------------------------------------- */

static uint8_t *put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

void kv_block_root(const seq_state *s, uint8_t root[KV_NAME_LEN]) {
    uint8_t rec[32 + 4 + 32 + 128] = {0};
    memcpy(rec, ROOT_TAG, sizeof ROOT_TAG - 1);
    put32(rec + 32, KV_BLOCK_ROWS);
    memcpy(rec + 36, s->model_id, 32);
    memcpy(rec + 68, s->format, strnlen(s->format, sizeof s->format));
    sha256_digest(rec, sizeof rec, root);
    domain_fold(root, s->domain);
}

/* The SHA-256 of prev, then tag (its bytes, without the NUL), then rows
 * [r0, r1) of s encoded as in a block's name (at most KV_BLOCK_ROWS of
 * them): true; false when (without lookup) one is a picture row without
 * cond_hash. */
static bool rows_digest(const seq_state *s, int32_t r0, int32_t r1, const uint8_t prev[KV_NAME_LEN], const char *tag,
                        bool lookup, uint8_t name[KV_NAME_LEN]) {
    uint8_t buf[KV_NAME_LEN + 16 + KV_BLOCK_ROWS * PICTURE_ROW], *w = buf + KV_NAME_LEN;
    memcpy(buf, prev, KV_NAME_LEN);
    const size_t tag_len = strnlen(tag, 16);
    memcpy(w, tag, tag_len);
    w += tag_len;
    /* the first span that ends after r0 (spans are in row order) */
    int32_t lo = 0, hi = s->n_spans;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->spans[mid].start + s->spans[mid].n_tokens <= r0) lo = mid + 1;
        else hi = mid;
    }
    for (int32_t r = r0; r < r1; r++) {
        if (s->tok[r] != SEQ_ROW_PICTURE) {
            w = put32(w, (uint32_t)s->tok[r]);
            w = put32(w, (uint32_t)s->pos_after[r]);
            continue;
        }
        while (lo < s->n_spans && s->spans[lo].start + s->spans[lo].n_tokens <= r) lo++;
        const seq_span *sp = lo < s->n_spans && s->spans[lo].start <= r ? &s->spans[lo] : NULL;
        if (!sp || (!lookup && !sp->has_cond)) return false;
        w = put32(w, 0xffffffffu);
        memcpy(w, sp->embed_key, 32);
        w = put32(w + 32, (uint32_t)sp->grid_x);
        w = put32(w, (uint32_t)sp->grid_y);
        w = put32(w, (uint32_t)(r - sp->start));
        w = put32(w, (uint32_t)s->pos_after[r]);
    }
    sha256_digest(buf, (size_t)(w - buf), name);
    return true;
}

bool kv_block_name(const seq_state *s, int32_t i, const uint8_t prev[KV_NAME_LEN], bool lookup,
                   uint8_t name[KV_NAME_LEN]) {
    if (i < 0 || i >= s->n_rows / KV_BLOCK_ROWS) return false;
    return rows_digest(s, i * KV_BLOCK_ROWS, (i + 1) * KV_BLOCK_ROWS, prev, "", lookup, name);
}

bool kv_resume_name(const seq_state *s, int32_t n, const uint8_t prev[KV_NAME_LEN], bool lookup,
                    uint8_t name[KV_NAME_LEN]) {
    if (n < 0 || n > s->n_rows) return false;
    return rows_digest(s, n / KV_BLOCK_ROWS * KV_BLOCK_ROWS, n, prev, "resume", lookup, name);
}

int32_t kv_block_names(const seq_state *s, int32_t n, bool lookup, uint8_t (*names)[KV_NAME_LEN]) {
    if (n > s->n_rows) n = s->n_rows;
    uint8_t prev[KV_NAME_LEN];
    kv_block_root(s, prev);
    int32_t i = 0;
    for (; i < n / KV_BLOCK_ROWS && kv_block_name(s, i, prev, lookup, names[i]); i++)
        memcpy(prev, names[i], KV_NAME_LEN);
    return i;
}
