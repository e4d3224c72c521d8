/* The RAM tier (src/state/ram_tier.c) on hand-made sequences over a KV
 * pool: only complete state is kept, a held prefix is not kept twice, a
 * longer sequence replaces its prefixes, the best match wins, another
 * isolation domain matches nothing and holds or replaces nothing, the
 * byte budget evicts the least recently used point, a point holds its
 * last partial block (and gives it back when dropped) or pins all its
 * blocks when parked, rows past the pool's blocks come only from a point's
 * own block, and a point with recurrent states resumes, holds and replaces
 * only at their rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state/ram_tier.h"
#include "test.h"

/* s: token 5, a 2x2 picture span, then n_tok tokens from base. */
static void fill_seq(seq_state *s, int32_t n_tok, int base, bool cond) {
    seq_clear(s);
    memset(s->model_id, 1, 32);
    snprintf(s->format, sizeof s->format, "test");
    seq_span sp = {.n_tokens = 4, .grid_x = 2, .grid_y = 2, .n_pos = 2, .has_cond = cond};
    memset(sp.embed_key, 9, 32);
    seq_push_token(s, 5, 0, NULL);
    seq_push_span(s, &sp, 1, NULL);
    for (int32_t i = 0; i < n_tok; i++) seq_push_token(s, base + i, 3 + i, NULL);
}

static kv_cache g_kv;
static seq_state g_view;

/* A point of s's first n rows, their KV in fresh blocks of g_kv: what
 * ram_point_make gives. */
static int point(ram_point *p, const seq_state *s, int32_t n, bool pin) {
    seq_copy(&g_view, s, n, NULL);
    kv_cache_truncate(&g_kv, 0);
    if (kv_cache_reserve(&g_kv, n, NULL)) return -2;
    kv_cache_set_rows(&g_kv, n);
    return ram_point_make(p, g_kv.pool, &g_view, &g_kv, pin);
}

static int32_t refs(int32_t id) {
    kv_block_info b;
    kv_pool_get_block(g_kv.pool, id, &b);
    return b.refs + b.pins;
}

/* Makes a point of s's first n rows and adds it: whether it was kept. */
static bool put(ram_tier *t, const seq_state *s, int32_t n) {
    ram_point p;
    if (point(&p, s, n, false)) return false;
    if (ram_tier_add(t, &p)) return true;
    ram_point_free(&p, g_kv.pool);
    return false;
}

int main(void) {
    if (kv_cache_init_cells(&g_kv, 1, 16, 4096, NULL) || seq_init(&g_view, 4096, NULL)) return 2;
    kv_pool *pool = g_kv.pool;
    ram_tier t;
    ram_tier_init(&t, pool, 1 << 30);
    seq_state a, b;
    seq_init(&a, 256, NULL);
    seq_init(&b, 256, NULL);
    ram_point p;
    fill_seq(&a, 10, 100, false);
    CHECK(point(&p, &a, a.n_rows, false) == 1); /* a span without cond_hash */
    fill_seq(&a, 10, 100, true);
    CHECK(put(&t, &a, 8) && t.n == 1); /* rows 0..7 */
    CHECK(refs(t.v[0].tail) == 2);     /* its block: the cache's and the point's */
    CHECK(!put(&t, &a, 6) && t.n == 1); /* held already */
    CHECK(put(&t, &a, a.n_rows) && t.n == 1 && t.v[0].seq.n_rows == a.n_rows && t.evictions == 1); /* replaces it */
    fill_seq(&b, 10, 200, true); /* shares 5 rows with a */
    CHECK(put(&t, &b, b.n_rows) && t.n == 2);
    int32_t pre = 0;
    fill_seq(&b, 3, 100, true);
    b.tok[b.n_rows - 1] = 999; /* a's first 7 rows, then another token */
    int32_t i = ram_tier_find(&t, &b, INT32_MAX, 0, &pre);
    CHECKF(i >= 0 && pre == 7 && t.v[i].seq.tok[7] == 102, "best match: %d rows", pre);
    memset(b.model_id, 2, 32); /* another model never matches */
    CHECK(ram_tier_find(&t, &b, INT32_MAX, 0, &pre) < 0 && pre == 0);
    ram_tier_take(&t, 0, &p);
    CHECK(t.n == 1 && t.hits == 1);
    ram_tier_return(&t, &p);
    CHECK(t.n == 2 && p.tail == -1);
    fill_seq(&b, 10, 100, true); /* a's rows, in another isolation domain */
    memset(b.domain, 0x11, 32);
    CHECK(ram_tier_find(&t, &b, INT32_MAX, 0, &pre) < 0 && pre == 0);
    CHECK(put(&t, &b, 8) && t.n == 3); /* held by a, but not in its domain */
    CHECK(put(&t, &b, 15) && t.n == 3 && t.evictions == 2); /* extends that prefix in its domain */
    i = ram_tier_find(&t, &b, INT32_MAX, 0, &pre);
    CHECKF(i >= 0 && pre == 15 && !memcmp(t.v[i].seq.domain, b.domain, 32), "its own domain: %d rows", pre);
    memset(b.domain, 0x22, 32);
    CHECK(ram_tier_find(&t, &b, INT32_MAX, 0, &pre) < 0 && pre == 0);
    memset(b.domain, 0, 32);
    /* the budget (a point counts the KV of its rows): the least recently
     * used point goes, and its block with it */
    const size_t one = t.v[0].bytes;
    CHECK(one > pool->block_bytes);
    ram_tier_free(&t);
    ram_tier_init(&t, pool, one * 5 / 2);
    fill_seq(&a, 10, 300, true);
    CHECK(put(&t, &a, a.n_rows));
    const int32_t first = t.v[0].tail;
    fill_seq(&a, 10, 400, true);
    CHECK(put(&t, &a, a.n_rows));
    fill_seq(&a, 10, 500, true);
    CHECK(put(&t, &a, a.n_rows) && t.n == 2 && t.evictions == 1);
    kv_cache_truncate(&g_kv, 0);
    kv_pool_stats st;
    kv_pool_get_stats(pool, &st);
    CHECK(st.in_use == 2 && st.free == st.total - 2); /* the two points' blocks */
    kv_block_info bi;
    kv_pool_get_block(pool, first, &bi);
    CHECK(bi.free || bi.refs == 1); /* the first point's block was given back (or reused by a later one) */
    /* rows past the pool's run of full blocks come only from a point's own
     * (last) block: 100 rows are a full block and 36 in the next */
    ram_tier_free(&t);
    ram_tier_init(&t, pool, 1 << 30);
    fill_seq(&a, 95, 600, true);
    CHECK(put(&t, &a, a.n_rows) && t.v[0].tail >= 0);
    CHECK(ram_tier_find(&t, &a, INT32_MAX, 0, &pre) < 0 && pre == 0);
    CHECK(ram_tier_find(&t, &a, INT32_MAX, 64, &pre) == 0 && pre == 100);
    CHECK(ram_tier_find(&t, &a, 80, 64, &pre) == 0 && pre == 80);
    /* a parked point pins all its blocks, and is not the tier's */
    CHECK(point(&p, &a, a.n_rows, true) == 0 && p.n_pinned == 2 && p.tail == -1);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 2 && !ram_tier_add(&t, &p));
    ram_point_free(&p, pool);
    kv_cache_truncate(&g_kv, 0);
    kv_pool_get_stats(pool, &st);
    CHECK(st.pinned == 0 && st.in_use == 1); /* the tier's point's block alone */
    /* points of a model with recurrent layers resume only at a row after
     * which they hold its state (rows 5 and 15 here) */
    ram_tier_free(&t);
    ram_tier_init(&t, pool, 1 << 30);
    fill_seq(&a, 10, 600, true); /* 15 rows */
    ram_point r;
    CHECK(point(&r, &a, a.n_rows, false) == 0);
    r.rec = calloc(2, sizeof *r.rec);
    r.rec_rows[0] = 5;
    r.rec_rows[1] = 15;
    r.n_rec = 2;
    CHECK(r.rec && ram_tier_add(&t, &r) && t.n == 1);
    fill_seq(&b, 10, 600, true);
    b.tok[12] = 1; /* shares 12 rows */
    i = ram_tier_find(&t, &b, INT32_MAX, 0, &pre);
    CHECKF(i == 0 && pre == 5 && ram_point_cut(&t.v[0], 12) == 5, "recurrent: %d rows of 12 shared", pre);
    CHECK(ram_tier_find(&t, &b, 4, 0, &pre) < 0 && pre == 0); /* no state in the first 4 rows */
    CHECK(put(&t, &a, 10) && t.n == 2);                        /* a prefix it cannot resume at: not held */
    fill_seq(&a, 12, 600, true);                               /* 17 rows, with states after rows 5 and 17 */
    CHECK(point(&r, &a, a.n_rows, false) == 0);
    r.rec = calloc(2, sizeof *r.rec);
    r.rec_rows[0] = 5;
    r.rec_rows[1] = 17;
    r.n_rec = 2;
    CHECK(r.rec && ram_tier_add(&t, &r) && t.n == 3 && t.evictions == 0); /* replaces neither */
    ram_tier_free(&t);
    seq_free(&a);
    seq_free(&b);
    seq_free(&g_view);
    kv_cache_free(&g_kv);
    TEST_END();
}
