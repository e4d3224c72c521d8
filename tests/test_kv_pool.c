/* The KV block pool and the block names (src/state/kv_pool.c, issue 25):
 * names follow the exact encoding kv_pool.h gives, equal prefixes get
 * equal names and any difference (a row, a picture, its grid, a row's
 * offset in it, a position, the model, the format, the domain) changes
 * every name from its block on; a picture without cond_hash stops the
 * names unless looking up. The pool: publish dedup, LRU eviction from a
 * chain's end, held and pinned blocks never evicted, a failed allocation
 * or copy changes nothing, admission counts what eviction could give,
 * copy on write copies the rows asked and counts them, stats add up, the
 * arena's pages are backed only when written; then a few thousand random
 * operations checked against a simple model of the pool. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/sha256.h"
#include "state/kv_pool.h"
#include "test.h"

/* ---- names ------------------------------------------------------------------ */

/* What to vary in the sequence seq_make builds. */
typedef struct variant {
    int32_t tok_at, tok_id; /* a token row to change (-1: none) */
    uint8_t key_a;          /* picture A's embed_key byte */
    int32_t grid_ax, grid_ay;
    int32_t shift_from; /* rows from here get positions one further (-1: none) */
    bool cond_b;        /* picture B has its cond_hash */
    uint8_t model, dom;
    const char *format;
} variant;

static variant base_variant(void) {
    return (variant){.tok_at = -1,
                     .key_a = 0xa1,
                     .grid_ax = 8,
                     .grid_ay = 10,
                     .shift_from = -1,
                     .cond_b = true,
                     .model = 1,
                     .dom = 0,
                     .format = "kv=f16;test"};
}

/* 320 rows, five full blocks: 40 tokens, picture A (80 rows, 8x10, across
 * the first boundary) at 40, 80 tokens, picture B (16 rows, 4x4) at 200,
 * 104 tokens. */
static void seq_make(seq_state *s, const variant *v) {
    seq_clear(s);
    memset(s->model_id, v->model, 32);
    memset(s->domain, v->dom, sizeof s->domain);
    snprintf(s->format, sizeof s->format, "%s", v->format);
    int32_t pos = 0;
    for (int32_t r = 0; r < 320;) {
        int32_t shift = v->shift_from >= 0 && r >= v->shift_from ? 1 : 0;
        if (r == 40 || r == 200) {
            seq_span sp = {.has_cond = r == 40 || v->cond_b};
            sp.grid_x = r == 40 ? v->grid_ax : 4;
            sp.grid_y = r == 40 ? v->grid_ay : 4;
            sp.n_tokens = sp.grid_x * sp.grid_y;
            sp.n_pos = sp.grid_x > sp.grid_y ? sp.grid_x : sp.grid_y;
            memset(sp.embed_key, r == 40 ? v->key_a : 0xb2, 32);
            memset(sp.cond_hash, 0xcc, 32);
            seq_push_span(s, &sp, pos + shift, NULL);
            pos += sp.n_pos;
            r += sp.n_tokens;
        } else {
            seq_push_token(s, r == v->tok_at ? v->tok_id : 1000 + r, pos + shift, NULL);
            pos++;
            r++;
        }
    }
}

#define NB 5

/* The first block whose name differs (NB: none); -1 when a later one is
 * equal again. */
static int first_diff(uint8_t (*a)[KV_NAME_LEN], uint8_t (*b)[KV_NAME_LEN]) {
    int d = 0;
    while (d < NB && !memcmp(a[d], b[d], KV_NAME_LEN)) d++;
    for (int i = d; i < NB; i++)
        if (!memcmp(a[i], b[i], KV_NAME_LEN)) return -1;
    return d;
}

static void le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_names(void) {
    seq_state s, t;
    seq_init(&s, 512, NULL);
    seq_init(&t, 512, NULL);
    variant v = base_variant();
    seq_make(&s, &v);
    uint8_t a[NB][KV_NAME_LEN], b[NB][KV_NAME_LEN];
    CHECK(kv_block_names(&s, s.n_rows, false, a) == NB);

    /* the encoding, byte for byte: the root, then block 0 (40 tokens, then
     * picture A's rows 0 to 23) */
    uint8_t rec[196] = {0}, root[32], want[32];
    memcpy(rec, "pinhole-kv-block-1", 18);
    le32(rec + 32, KV_BLOCK_ROWS);
    memset(rec + 36, 1, 32);
    memcpy(rec + 68, "kv=f16;test", 11);
    sha256_digest(rec, sizeof rec, root);
    uint8_t got[32];
    kv_block_root(&s, got);
    CHECK(!memcmp(got, root, 32));
    uint8_t blk0[32 + 40 * 8 + 24 * 52], *w = blk0;
    memcpy(w, root, 32);
    w += 32;
    for (int32_t r = 0; r < 40; r++, w += 8) {
        le32(w, (uint32_t)(1000 + r));
        le32(w + 4, (uint32_t)(r + 1));
    }
    for (int32_t o = 0; o < 24; o++, w += 52) {
        le32(w, 0xffffffffu);
        memset(w + 4, 0xa1, 32);
        le32(w + 36, 8);
        le32(w + 40, 10);
        le32(w + 44, (uint32_t)o);
        le32(w + 48, 40 + 10);
    }
    sha256_digest(blk0, sizeof blk0, want);
    CHECK(!memcmp(a[0], want, 32));
    /* block 1 from block 0's name alone; the output may be the input */
    memcpy(got, a[0], 32);
    CHECK(kv_block_name(&s, 1, got, false, got) && !memcmp(got, a[1], 32));
    CHECK(!kv_block_name(&s, NB, a[NB - 1], false, got)); /* rows 320.. are not there */

    /* the same stream again: the same names */
    seq_make(&t, &v);
    CHECK(kv_block_names(&t, t.n_rows, false, b) == NB && first_diff(a, b) == NB);
    /* one difference: the same names before its block, none after */
    static const struct {
        const char *what;
        int first; /* the block it is in */
    } diffs[] = {
        {"a token at row 192 (a boundary: the first three blocks agree)", 3},
        {"a token at row 191 (the last row of block 2)", 2},
        {"another picture A (rows 40 to 119)", 0},
        {"picture A's grid 10x8 (the same rows and positions)", 0},
        {"positions one further from row 150", 2},
        {"another model_id", 0},
        {"another format tag", 0},
        {"another domain", 0},
    };
    for (int i = 0; i < (int)(sizeof diffs / sizeof diffs[0]); i++) {
        v = base_variant();
        switch (i) {
        case 0: v.tok_at = 192, v.tok_id = 7; break;
        case 1: v.tok_at = 191, v.tok_id = 7; break;
        case 2: v.key_a = 0xa2; break;
        case 3: v.grid_ax = 10, v.grid_ay = 8; break;
        case 4: v.shift_from = 150; break;
        case 5: v.model = 2; break;
        case 6: v.format = "kv=f16;test2"; break;
        default: v.dom = 0x5a; break;
        }
        seq_make(&t, &v);
        CHECK(kv_block_names(&t, t.n_rows, false, b) == NB);
        CHECKF(first_diff(a, b) == diffs[i].first, "%s: names differ from block %d", diffs[i].what, first_diff(a, b));
    }
    kv_block_root(&t, got); /* the last one: the domain is folded into the root */
    domain_fold(root, t.domain);
    CHECK(!memcmp(got, root, 32));

    /* a row's offset in its picture: block 1 of a 128-row picture starting
     * at row 0, against one starting at row 64 with the same positions and
     * grid, after the same name */
    seq_span sp = {.n_tokens = 128, .grid_x = 8, .grid_y = 16, .n_pos = 16, .has_cond = true};
    memset(sp.embed_key, 0x33, 32);
    seq_clear(&s);
    seq_push_span(&s, &sp, 0, NULL);
    seq_clear(&t);
    for (int32_t r = 0; r < 64; r++) seq_push_token(&t, r, r, NULL);
    seq_push_span(&t, &sp, 0, NULL);
    uint8_t n1[32], n2[32];
    memset(got, 0x44, 32);
    CHECK(kv_block_name(&s, 1, got, false, n1) && kv_block_name(&t, 1, got, false, n2) && memcmp(n1, n2, 32));

    /* a picture without cond_hash (B, in block 3): no name from its block
     * on, unless looking up, which names it as if it had one */
    v = base_variant();
    seq_make(&s, &v);
    v.cond_b = false;
    seq_make(&t, &v);
    CHECK(kv_block_names(&t, t.n_rows, false, b) == 3 && !memcmp(a, b, 3 * KV_NAME_LEN));
    CHECK(kv_block_names(&t, t.n_rows, true, b) == NB && first_diff(a, b) == NB);
    /* only full blocks of the first n rows; n may cut a picture */
    CHECK(kv_block_names(&s, 130, false, b) == 2 && !memcmp(a[1], b[1], 32));
    CHECK(kv_block_names(&s, 100, false, b) == 1 && !memcmp(a[0], b[0], 32));
    CHECK(kv_block_names(&s, 63, false, b) == 0);
    CHECK(kv_block_names(&s, 10000, false, b) == NB);
    seq_free(&s);
    seq_free(&t);
}

/* ---- the pool ------------------------------------------------------------------ */

static void name_of(int k, uint8_t out[KV_NAME_LEN]) {
    uint8_t in[4];
    le32(in, (uint32_t)k);
    sha256_digest(in, sizeof in, out);
}

/* Whether the stats add up and say what is expected. */
static bool stats_are(const kv_pool *p, int32_t in_use, int32_t pinned, int32_t cached, int32_t fr) {
    kv_pool_stats st;
    kv_pool_get_stats(p, &st);
    bool ok = st.total == p->n_blocks && st.in_use + st.pinned + st.cached + st.free == st.total;
    ok = ok && st.in_use == in_use && st.pinned == pinned && st.cached == cached && st.free == fr;
    if (!ok)
        fprintf(stderr, "stats: total %d in use %d pinned %d cached %d free %d\n", st.total, st.in_use, st.pinned,
                st.cached, st.free);
    return ok;
}

/* A block named k with parent name parent_k (-1: the root name R), held
 * once by the caller. */
static int32_t named_block(kv_pool *p, int k, int parent_k) {
    uint8_t n[32], par[32];
    name_of(k, n);
    name_of(parent_k < 0 ? 9999 : parent_k, par);
    int32_t id = kv_pool_alloc(p);
    return id < 0 ? -1 : kv_pool_publish(p, id, n, par);
}

static int32_t find_k(kv_pool *p, int k) {
    uint8_t n[32];
    name_of(k, n);
    return kv_pool_find(p, n);
}

/* Everything the pool says, to check that a call changed nothing. */
typedef struct snapshot {
    kv_pool_stats st;
    kv_block_info b[64];
} snapshot;

static void snap(const kv_pool *p, snapshot *s) {
    memset(s, 0, sizeof *s);
    kv_pool_get_stats(p, &s->st);
    for (int32_t i = 0; i < p->n_blocks && i < 64; i++) kv_pool_get_block(p, i, &s->b[i]);
}

static void test_pool(void) {
    kv_pool p;
    ph_err err;
    CHECK(kv_pool_init(&p, 1000, 64, 4, &err) == -1);          /* not one block */
    CHECK(kv_pool_init(&p, 1 << 20, 66, 4, &err) == -1);       /* 4 parts do not divide a row */
    CHECK(kv_pool_init(&p, 8 * 4096 + 100, 64, 4, &err) == 0); /* 8 blocks of a page */
    CHECK(p.n_blocks == 8 && p.block_bytes == 4096 && p.stride == 4096 && ((uintptr_t)p.base & 4095) == 0);
    CHECK(stats_are(&p, 0, 0, 0, 8) && kv_pool_available(&p) == 8);

    /* publish, then another block with the same rows: dedup */
    int32_t a0 = named_block(&p, 0, -1);
    int32_t x = kv_pool_alloc(&p);
    uint8_t n0[32], par[32];
    name_of(0, n0);
    name_of(9999, par);
    CHECK(a0 >= 0 && x >= 0 && x != a0);
    CHECK(kv_pool_publish(&p, x, n0, par) == a0);
    kv_block_info bi;
    kv_pool_get_block(&p, a0, &bi);
    CHECK(bi.refs == 2 && bi.named && !memcmp(bi.name, n0, 32) && !memcmp(bi.parent, par, 32));
    kv_pool_get_block(&p, x, &bi);
    CHECK(bi.free && stats_are(&p, 1, 0, 0, 7)); /* the duplicate went back */
    kv_pool_unref(&p, a0);
    kv_pool_unref(&p, a0);
    CHECK(stats_are(&p, 0, 0, 1, 7));
    CHECK(find_k(&p, 0) == a0 && stats_are(&p, 1, 0, 0, 7)); /* a hit takes it back */
    CHECK(find_k(&p, 77) == -1);
    kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    CHECK(st.lookups == 2 && st.hits == 1);
    kv_pool_unref(&p, a0);

    /* two chains, released front to back: chain c (names 0..3) first, d
     * (10, 11) later; the pool fills up: c goes from its end, then d */
    int32_t c[4], d[2];
    c[0] = find_k(&p, 0);
    for (int k = 1; k < 4; k++) c[k] = named_block(&p, k, k - 1);
    d[0] = named_block(&p, 10, -1);
    d[1] = named_block(&p, 11, 10);
    kv_pool_get_block(&p, c[1], &bi);
    CHECK(bi.children == 1);
    for (int k = 0; k < 4; k++) kv_pool_unref(&p, c[k]);
    for (int k = 0; k < 2; k++) kv_pool_unref(&p, d[k]);
    CHECK(stats_are(&p, 0, 0, 6, 2) && kv_pool_available(&p) == 8);
    int32_t fresh[8], nf = 0;
    fresh[nf++] = kv_pool_alloc(&p);
    fresh[nf++] = kv_pool_alloc(&p);
    kv_pool_get_stats(&p, &st);
    CHECK(st.evictions == 0 && stats_are(&p, 2, 0, 6, 0)); /* the free ones first */
    const int32_t order[6] = {c[3], c[2], c[1], c[0], d[1], d[0]};
    for (int i = 0; i < 6; i++) {
        fresh[nf] = kv_pool_alloc(&p);
        CHECKF(fresh[nf] == order[i], "eviction %d took block %d, not %d", i, fresh[nf], order[i]);
        nf++;
    }
    kv_pool_get_stats(&p, &st);
    CHECK(st.evictions == 6 && stats_are(&p, 8, 0, 0, 0) && find_k(&p, 0) == -1);
    /* every block held: the allocation fails and changes nothing */
    snapshot s1, s2;
    snap(&p, &s1);
    CHECK(kv_pool_alloc(&p) == -1 && kv_pool_available(&p) == 0);
    snap(&p, &s2);
    CHECK(!memcmp(&s1, &s2, sizeof s1));
    for (int i = 0; i < nf; i++) kv_pool_unref(&p, fresh[i]); /* unnamed: free again */
    CHECK(stats_are(&p, 0, 0, 0, 8));

    /* released back to front, another chain's block released in between:
     * e's end first (released first), then f, then the rest of e (a parent
     * waits for its child, then goes by its own release time) */
    int32_t e[3], f;
    for (int k = 0; k < 3; k++) e[k] = named_block(&p, 20 + k, k ? 20 + k - 1 : -1);
    f = named_block(&p, 30, -1);
    kv_pool_unref(&p, e[2]); /* stamps: e2 1, e1 3, e0 4, f 2 */
    kv_pool_unref(&p, f);
    kv_pool_unref(&p, e[1]);
    kv_pool_unref(&p, e[0]);
    int32_t g[8];
    for (int i = 0; i < 4; i++) g[i] = kv_pool_alloc(&p); /* the 4 free blocks */
    const int32_t order2[4] = {e[2], f, e[1], e[0]};
    for (int i = 0; i < 4; i++) {
        g[4 + i] = kv_pool_alloc(&p);
        CHECKF(g[4 + i] == order2[i], "eviction %d took block %d, not %d", i, g[4 + i], order2[i]);
    }
    for (int i = 0; i < 8; i++) kv_pool_unref(&p, g[i]);

    /* held and pinned blocks are never evicted; a cached parent of a held
     * block is not either, and admission does not count it */
    int32_t h[4];
    h[0] = named_block(&p, 40, -1);
    h[1] = named_block(&p, 41, 40);
    h[2] = named_block(&p, 42, 41); /* stays held */
    h[3] = named_block(&p, 50, -1); /* pinned */
    kv_pool_pin(&p, h[3]);
    kv_pool_unref(&p, h[3]);
    kv_pool_unref(&p, h[0]);
    kv_pool_unref(&p, h[1]);
    CHECK(stats_are(&p, 1, 1, 2, 4));
    CHECKF(kv_pool_available(&p) == 4, "available %d", kv_pool_available(&p));
    for (int i = 0; i < 4; i++) g[i] = kv_pool_alloc(&p);
    snap(&p, &s1);
    CHECK(kv_pool_alloc(&p) == -1);
    snap(&p, &s2);
    CHECK(!memcmp(&s1, &s2, sizeof s1));
    kv_pool_get_stats(&p, &st);
    CHECK(st.evictions == 10 && stats_are(&p, 5, 1, 2, 0));
    CHECK(find_k(&p, 40) == h[0] && find_k(&p, 41) == h[1] && find_k(&p, 50) == h[3]);
    kv_pool_unref(&p, h[3]); /* the find's reference; the pin stays */
    kv_pool_get_block(&p, h[3], &bi);
    CHECK(bi.pins == 1 && bi.refs == 0 && stats_are(&p, 7, 1, 0, 0));
    kv_pool_unpin(&p, h[3]); /* cached now, the most recent */
    for (int k = 0; k < 3; k++) kv_pool_unref(&p, h[k]);
    CHECK(stats_are(&p, 4, 0, 4, 0) && kv_pool_available(&p) == 4);
    int32_t last[4];
    const int32_t order3[4] = {h[3], h[2], h[1], h[0]}; /* h[3] released first */
    for (int i = 0; i < 4; i++) {
        last[i] = kv_pool_alloc(&p);
        CHECKF(last[i] == order3[i], "eviction %d took block %d, not %d", i, last[i], order3[i]);
    }
    for (int i = 0; i < 4; i++) kv_pool_unref(&p, last[i]);
    for (int i = 0; i < 4; i++) kv_pool_unref(&p, g[i]);
    CHECK(stats_are(&p, 0, 0, 0, 8));
    kv_pool_free(&p);
}

/* Whether block id's first rows rows (of every part) hold byte v. */
static bool rows_hold(const kv_pool *p, int32_t id, int32_t rows, uint8_t v) {
    size_t part = p->block_bytes / (size_t)p->n_parts, cell = p->row_bytes / (size_t)p->n_parts;
    const uint8_t *b = kv_pool_data(p, id);
    for (int32_t j = 0; j < p->n_parts; j++)
        for (size_t i = 0; i < (size_t)rows * cell; i++)
            if (b[j * part + i] != v) return false;
    return true;
}

/* Whether blocks a and b agree on their first rows rows (of every part). */
static bool rows_equal(const kv_pool *p, int32_t a, int32_t b, int32_t rows) {
    size_t part = p->block_bytes / (size_t)p->n_parts, cell = p->row_bytes / (size_t)p->n_parts;
    for (int32_t j = 0; j < p->n_parts; j++)
        if (memcmp(kv_pool_data(p, a) + j * part, kv_pool_data(p, b) + j * part, (size_t)rows * cell)) return false;
    return true;
}

static void test_cow(void) {
    kv_pool p;
    CHECK(kv_pool_init(&p, 4 * 64 * 24, 24, 6, NULL) == 0); /* 4 blocks of 1536 bytes, 6 parts */
    CHECK(p.stride == 1536);
    int32_t a = kv_pool_alloc(&p);
    memset(kv_pool_data(&p, a), 0x5e, p.block_bytes);
    CHECK(kv_pool_cow(&p, a, 10) == a); /* its own: written in place */
    kv_pool_ref(&p, a);                 /* shared (a sequence forked) */
    int32_t b = kv_pool_cow(&p, a, 10);
    kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    CHECK(b >= 0 && b != a && st.bytes_copied == 10 * 24);
    CHECK(rows_hold(&p, b, 10, 0x5e) && !rows_hold(&p, b, 11, 0x5e)); /* 10 rows of each part, no more */
    CHECK(rows_hold(&p, a, KV_BLOCK_ROWS, 0x5e));                     /* the original intact */
    kv_block_info bi;
    kv_pool_get_block(&p, a, &bi);
    CHECK(bi.refs == 1);
    /* a named block is copied even when the caller alone holds it; the
     * original stays, cached */
    uint8_t n[32], par[32];
    name_of(1, n);
    name_of(2, par);
    CHECK(kv_pool_publish(&p, a, n, par) == a);
    int32_t c = kv_pool_cow(&p, a, KV_BLOCK_ROWS);
    kv_pool_get_stats(&p, &st);
    CHECK(c >= 0 && st.bytes_copied == (10 + KV_BLOCK_ROWS) * 24 && rows_hold(&p, c, KV_BLOCK_ROWS, 0x5e));
    CHECK(stats_are(&p, 2, 0, 1, 1));
    /* a pinned one too */
    kv_pool_pin(&p, c);
    int32_t d = kv_pool_cow(&p, c, 3);
    CHECK(d >= 0 && d != c && stats_are(&p, 2, 1, 1, 0));
    /* no block to be had: -1, nothing changed */
    int32_t e = kv_pool_alloc(&p); /* evicts a */
    kv_pool_ref(&p, e);
    snapshot s1, s2;
    snap(&p, &s1);
    CHECK(kv_pool_cow(&p, e, 5) == -1);
    snap(&p, &s2);
    CHECK(!memcmp(&s1, &s2, sizeof s1));
    kv_pool_free(&p);
}

/* The arena's pages are backed only when written or populated: none after
 * init, a block written backs its own pages, not a far one's, and
 * kv_pool_populate backs the blocks asked for, not a far one, keeping
 * what was written. */
static void test_pages(void) {
    kv_pool p;
    CHECK(kv_pool_init(&p, (size_t)16 << 18, 4096, 2, NULL) == 0); /* 16 blocks of 256 KiB */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = p.arena_bytes / page;
    unsigned char *vec = malloc(np);
    CHECK(vec && mincore(p.base, p.arena_bytes, vec) == 0);
    size_t resident = 0;
    for (size_t i = 0; i < np; i++) resident += vec[i] & 1;
    CHECKF(resident == 0, "%zu pages resident before any write", resident);
    int32_t a = kv_pool_alloc(&p);
    CHECK(a == 0);
    memset(kv_pool_data(&p, a), 1, p.block_bytes);
    CHECK(mincore(p.base, p.arena_bytes, vec) == 0);
    size_t first = 0, far = 0, per = p.stride / page;
    for (size_t i = 0; i < per; i++) first += vec[i] & 1;
    for (size_t i = np - per; i < np; i++) far += vec[i] & 1;
    CHECKF(first == per && far == 0, "block 0: %zu of %zu pages, block 15: %zu", first, per, far);
    /* populated: blocks 0-2 backed, block 0's bytes kept, block 3 on not */
    if (kv_pool_populate(&p, 0, 3) == 0) {
        CHECK(mincore(p.base, p.arena_bytes, vec) == 0);
        size_t three = 0, far2 = 0;
        for (size_t i = 0; i < 3 * per; i++) three += vec[i] & 1;
        for (size_t i = np - per; i < np; i++) far2 += vec[i] & 1; /* (huge pages may back blocks 3-7 too) */
        CHECKF(three == 3 * per && far2 == 0, "blocks 0-2: %zu of %zu pages, block 15: %zu", three, 3 * per, far2);
        size_t ones = 0;
        for (size_t i = 0; i < p.block_bytes; i++) ones += kv_pool_data(&p, 0)[i] == 1;
        CHECK(ones == p.block_bytes);
    } else {
        printf("# kv_pool_populate: not on this kernel (MADV_POPULATE_WRITE), skipped\n");
    }
    free(vec);
    kv_pool_free(&p);
}

/* ---- random operations against a model ---------------------------------------- */

#define MB     12 /* blocks */
#define MNAMES 24 /* names 0..23; name k's parent is k - 4 / 2 for k >= 4, the root otherwise */
#define MHELD  256

typedef struct mblock {
    bool free, named;
    int refs, pins, name, up;
    uint64_t stamp;
} mblock;

typedef struct model {
    mblock b[MB];
    uint64_t clock, evictions, lookups, hits, copied;
} model;

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static int m_parent(int k) { return k >= 4 ? (k - 4) / 2 : -1; }

static int m_find(const model *m, int k) {
    for (int i = 0; i < MB; i++)
        if (!m->b[i].free && m->b[i].named && m->b[i].name == k) return i;
    return -1;
}

static int m_children(const model *m, int id) {
    int n = 0;
    for (int i = 0; i < MB; i++) n += !m->b[i].free && m->b[i].named && m->b[i].up == id;
    return n;
}

static bool m_cached(const mblock *b) { return !b->free && b->named && !b->refs && !b->pins; }

/* The block an allocation gets: a free one (-2: any), else the evictable
 * one released longest ago, else -1. */
static int m_alloc_choice(const model *m) {
    int best = -1;
    for (int i = 0; i < MB; i++) {
        if (m->b[i].free) return -2;
        if (m_cached(&m->b[i]) && !m_children(m, i) && (best < 0 || m->b[i].stamp < m->b[best].stamp)) best = i;
    }
    return best;
}

/* Checks the pool's answer id against the model's choice and makes the
 * model's block a fresh one. */
static bool m_alloc(model *m, int32_t id) {
    int want = m_alloc_choice(m);
    if (want == -1) return id == -1;
    if (id < 0 || id >= MB || (want == -2 ? !m->b[id].free : id != want)) return false;
    if (want >= 0) m->evictions++;
    m->b[id] = (mblock){.refs = 1, .up = -1};
    return true;
}

static void m_release(model *m, int id) {
    mblock *b = &m->b[id];
    if (b->refs || b->pins) return;
    if (b->named) b->stamp = ++m->clock;
    else b->free = true;
}

/* Drops a random one of the n references (or pins) in list, in the pool
 * and in the model. */
static void m_drop(kv_pool *p, model *m, int32_t *list, int *n, bool pin) {
    int j = (int)rnd((uint32_t)*n);
    int32_t id = list[j];
    list[j] = list[--*n];
    if (pin) {
        kv_pool_unpin(p, id);
        m->b[id].pins--;
    } else {
        kv_pool_unref(p, id);
        m->b[id].refs--;
    }
    m_release(m, id);
}

static int m_available(const model *m) {
    bool stuck[MB] = {0};
    int n = 0;
    for (int i = 0; i < MB; i++) {
        if (m->b[i].free) n++;
        else if (m_cached(&m->b[i])) n++;
        if (m->b[i].free || !m->b[i].named || (!m->b[i].refs && !m->b[i].pins)) continue;
        for (int u = m->b[i].up; u >= 0; u = m->b[u].up)
            if (m_cached(&m->b[u])) stuck[u] = true;
    }
    for (int i = 0; i < MB; i++) n -= stuck[i];
    return n;
}

static bool m_agrees(const kv_pool *p, const model *m) {
    int in_use = 0, pinned = 0, cached = 0, fr = 0;
    for (int i = 0; i < MB; i++) {
        const mblock *b = &m->b[i];
        kv_block_info bi;
        kv_pool_get_block(p, i, &bi);
        if (bi.free != b->free) return false;
        if (b->free) {
            fr++;
            continue;
        }
        uint8_t n[32];
        name_of(b->name, n);
        if (bi.named != b->named || bi.refs != b->refs || bi.pins != b->pins) return false;
        if (b->named && (memcmp(bi.name, n, 32) || bi.children != m_children(m, i))) return false;
        if (b->pins) pinned++;
        else if (b->refs) in_use++;
        else cached++;
    }
    kv_pool_stats st;
    kv_pool_get_stats(p, &st);
    return st.in_use == in_use && st.pinned == pinned && st.cached == cached && st.free == fr &&
           st.evictions == m->evictions && st.lookups == m->lookups && st.hits == m->hits &&
           st.bytes_copied == m->copied;
}

static void test_random(void) {
    kv_pool p;
    CHECK(kv_pool_init(&p, MB * 64 * 16, 16, 2, NULL) == 0 && p.n_blocks == MB);
    model m = {0};
    for (int i = 0; i < MB; i++) m.b[i] = (mblock){.free = true, .up = -1};
    int32_t held[MHELD], pinned[MHELD];
    int nh = 0, np = 0, bad = 0;
    for (int step = 0; step < 6000 && bad < 5; step++) {
        int op = (int)rnd(11);
        bool ok = true;
        if (op <= 1 && nh < MHELD) { /* allocate */
            int32_t id = kv_pool_alloc(&p);
            ok = m_alloc(&m, id);
            if (ok && id >= 0) {
                memset(kv_pool_data(&p, id), (int)(step & 0xff), p.block_bytes);
                held[nh++] = id;
            }
        } else if (op <= 3 && nh < MHELD) { /* look a name up */
            int k = (int)rnd(MNAMES), want = m_find(&m, k);
            int32_t id = find_k(&p, k);
            m.lookups++;
            ok = id == want;
            if (ok && id >= 0) {
                m.hits++;
                m.b[id].refs++;
                held[nh++] = id;
            }
        } else if (op == 4) { /* publish a held unnamed block */
            int j = nh ? (int)rnd((uint32_t)nh) : 0;
            if (!nh || m.b[held[j]].named) continue;
            int32_t id = held[j];
            int k = (int)rnd(MNAMES), had = m_find(&m, k);
            uint8_t n[32], par[32];
            name_of(k, n);
            name_of(m_parent(k) < 0 ? 9999 : m_parent(k), par);
            int32_t got = kv_pool_publish(&p, id, n, par);
            if (had >= 0) {
                ok = got == had;
                m.b[had].refs++;
                m.b[id].refs--;
                m_release(&m, id);
            } else {
                ok = got == id;
                m.b[id].named = true;
                m.b[id].name = k;
                m.b[id].up = m_parent(k) < 0 ? -1 : m_find(&m, m_parent(k));
            }
            held[j] = got;
        } else if (op <= 6 && nh) { /* drop a reference */
            m_drop(&p, &m, held, &nh, false);
        } else if (op == 7 && nh && nh < MHELD) { /* another reference */
            int32_t id = held[rnd((uint32_t)nh)];
            kv_pool_ref(&p, id);
            m.b[id].refs++;
            held[nh++] = id;
        } else if (op == 8) { /* pin any block that is not free, or unpin one */
            if (np && rnd(2)) {
                m_drop(&p, &m, pinned, &np, true);
            } else if (np < MHELD) {
                int32_t id = (int32_t)rnd(MB);
                if (m.b[id].free) continue;
                kv_pool_pin(&p, id);
                m.b[id].pins++;
                pinned[np++] = id;
            }
        } else if (op == 9 && nh) { /* copy on write */
            int j = (int)rnd((uint32_t)nh);
            int32_t id = held[j], rows = (int32_t)rnd(KV_BLOCK_ROWS + 1);
            mblock was = m.b[id];
            int32_t got = kv_pool_cow(&p, id, rows);
            if (!was.named && was.refs == 1 && !was.pins) {
                ok = got == id;
            } else if (m_alloc_choice(&m) == -1) {
                ok = got == -1;
            } else {
                ok = m_alloc(&m, got);
                if (ok) {
                    ok = got != id && rows_equal(&p, got, id, rows);
                    m.copied += (uint64_t)rows * p.row_bytes;
                    m.b[id].refs--;
                    m_release(&m, id);
                    held[j] = got;
                }
            }
        } else if (op == 10) { /* admission */
            ok = kv_pool_available(&p) == m_available(&m);
        }
        ok = ok && m_agrees(&p, &m);
        if (!ok) bad++;
        CHECKF(ok, "step %d, operation %d", step, op);
    }
    while (nh) kv_pool_unref(&p, held[--nh]);
    while (np) kv_pool_unpin(&p, pinned[--np]);
    kv_pool_stats st;
    kv_pool_get_stats(&p, &st);
    CHECKF(st.in_use == 0 && st.pinned == 0 && kv_pool_available(&p) == MB && st.evictions > 50 && st.hits > 50 &&
               st.bytes_copied > 0,
           "after the run: %llu evictions, %llu hits, %llu bytes copied", (unsigned long long)st.evictions,
           (unsigned long long)st.hits, (unsigned long long)st.bytes_copied);
    kv_pool_free(&p);
}

int main(void) {
    test_names();
    test_pool();
    test_cow();
    test_pages();
    test_random();
    TEST_END();
}
