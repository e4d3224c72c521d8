/* The RAM tier (src/state/ram_tier.c) on hand-made sequences: only
 * complete state is kept, a held prefix is not saved twice, a longer
 * sequence replaces its prefixes, the best match wins, another isolation
 * domain matches nothing and holds or replaces nothing, the byte budget
 * holds, a memory floor refuses without losing anything, and a checkpoint
 * with recurrent states resumes, holds and replaces only at their rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
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

int main(void) {
    ram_tier t;
    ram_tier_init(&t, 2000);
    seq_state a, b;
    seq_init(&a, 64, NULL);
    seq_init(&b, 64, NULL);
    fill_seq(&a, 10, 100, false);
    CHECK(ram_tier_put(&t, &a, a.n_rows, 16) == NULL); /* a span without cond_hash */
    fill_seq(&a, 10, 100, true);
    CHECK(ram_tier_put(&t, &a, 3, 16) == NULL); /* n cuts the span */
    void *kv = ram_tier_put(&t, &a, 8, 16);     /* rows 0..7 */
    CHECK(kv != NULL && t.n == 1);
    CHECK(ram_tier_put(&t, &a, 6, 16) == NULL && t.n == 1); /* held already */
    kv = ram_tier_put(&t, &a, a.n_rows, 16);                /* replaces its prefix */
    CHECK(kv != NULL && t.n == 1 && t.v[0].seq.n_rows == a.n_rows && t.evictions == 1);
    fill_seq(&b, 10, 200, true); /* shares 5 rows with a */
    CHECK(ram_tier_put(&t, &b, b.n_rows, 16) != NULL && t.n == 2);
    int32_t pre = 0;
    ram_ckpt c;
    fill_seq(&b, 3, 100, true);
    b.tok[b.n_rows - 1] = 999; /* a's first 7 rows, then another token */
    int32_t i = ram_tier_find(&t, &b, INT32_MAX, &pre);
    CHECKF(i >= 0 && pre == 7 && t.v[i].seq.tok[7] == 102, "best match: %d rows", pre);
    memset(b.model_id, 2, 32); /* another model never matches */
    CHECK(ram_tier_find(&t, &b, INT32_MAX, &pre) < 0 && pre == 0);
    ram_tier_take(&t, 0, &c);
    CHECK(t.n == 1 && t.hits == 1);
    ram_tier_return(&t, &c);
    CHECK(t.n == 2 && c.kv == NULL);
    fill_seq(&b, 10, 100, true); /* a's rows, in another isolation domain */
    memset(b.domain, 0x11, 32);
    CHECK(ram_tier_find(&t, &b, INT32_MAX, &pre) < 0 && pre == 0);
    b.n_rows = 8;
    void *kd = ram_tier_put(&t, &b, b.n_rows, 16); /* held by a, but not in its domain */
    CHECK(kd != NULL && t.n == 3);
    b.n_rows = 15; /* extends that prefix in its domain: replaces it */
    CHECK(ram_tier_put(&t, &b, b.n_rows, 16) != NULL && t.n == 3 && t.evictions == 2);
    i = ram_tier_find(&t, &b, INT32_MAX, &pre);
    CHECKF(i >= 0 && pre == 15 && !memcmp(t.v[i].seq.domain, b.domain, 32), "its own domain: %d rows", pre);
    memset(b.domain, 0x22, 32);
    CHECK(ram_tier_find(&t, &b, INT32_MAX, &pre) < 0 && pre == 0);
    memset(b.domain, 0, 32);
    /* a budget for one (KV plus its bookkeeping) but not two: the least
     * recently used goes */
    ram_tier_free(&t);
    fill_seq(&a, 10, 100, true);
    ram_tier_init(&t, 1 << 20);
    CHECK(ram_tier_put(&t, &a, a.n_rows, 4096) != NULL);
    const size_t one = t.bytes;
    ram_tier_free(&t);
    ram_tier_init(&t, one * 3 / 2);
    void *k1 = ram_tier_put(&t, &a, a.n_rows, 4096);
    fill_seq(&b, 10, 300, true);
    void *k2 = ram_tier_put(&t, &b, b.n_rows, 4096);
    CHECK(k1 && k2 && t.n == 1 && t.v[0].seq.tok[5] == 300 && t.bytes <= one * 3 / 2 && t.evictions == 1);
    CHECK(ram_tier_put(&t, &a, a.n_rows, one * 2) == NULL && t.n == 1); /* larger than the budget */
    /* a checkpoint made of a mapping the caller had (a session's own cells):
     * the tier owns it once added; refused, it stays the caller's */
    fill_seq(&a, 10, 500, true);
    ram_ckpt w;
    void *map = big_alloc(1 << 16);
    CHECK(map && ram_ckpt_wrap(&w, &a, a.n_rows, 100, map, 1 << 16, 64, t.floor) == 0);
    CHECK(ram_tier_add(&t, &w) && w.kv == NULL && t.v[t.n - 1].kv == map && t.v[t.n - 1].kv_rows == 64);
    CHECK(ram_ckpt_wrap(&w, &a, 6, 100, map, 1 << 16, 64, t.floor) == 0);
    CHECK(!ram_tier_add(&t, &w) && w.kv == map); /* its rows are held already */
    w.kv = NULL;
    ram_ckpt_free(&w);
    t.floor = INT64_MAX / 2; /* memory short: nothing is taken, nothing lost */
    fill_seq(&a, 10, 400, true);
    CHECK(ram_tier_put(&t, &a, a.n_rows, 100) == NULL && t.n <= 2 && t.refused == 1);
    /* checkpoints of a model with recurrent layers resume only at a row
     * after which they hold its state (rows 5 and 15 here) */
    ram_tier_free(&t);
    ram_tier_init(&t, 1 << 20);
    t.floor = 0;
    fill_seq(&a, 10, 600, true); /* 15 rows */
    ram_ckpt r;
    CHECK(ram_ckpt_new(&r, &a, a.n_rows, 64, t.floor) == 0);
    r.rec = calloc(2, sizeof *r.rec);
    r.rec_rows[0] = 5;
    r.rec_rows[1] = 15;
    r.n_rec = 2;
    CHECK(r.rec && ram_tier_add(&t, &r) && t.n == 1);
    fill_seq(&b, 10, 600, true);
    b.tok[12] = 1; /* shares 12 rows */
    i = ram_tier_find(&t, &b, INT32_MAX, &pre);
    CHECKF(i == 0 && pre == 5 && ram_ckpt_cut(&t.v[0], 12) == 5, "recurrent: %d rows of 12 shared", pre);
    CHECK(ram_tier_find(&t, &b, 4, &pre) < 0 && pre == 0);   /* no state in the first 4 rows */
    CHECK(ram_tier_put(&t, &a, 10, 64) != NULL && t.n == 2); /* a prefix it cannot resume at: not held */
    fill_seq(&a, 12, 600, true);                             /* 17 rows, with states after rows 5 and 17 */
    CHECK(ram_ckpt_new(&r, &a, a.n_rows, 64, t.floor) == 0);
    r.rec = calloc(2, sizeof *r.rec);
    r.rec_rows[0] = 5;
    r.rec_rows[1] = 17;
    r.n_rec = 2;
    CHECK(r.rec && ram_tier_add(&t, &r) && t.n == 3 && t.evictions == 0); /* replaces neither */
    ram_tier_free(&t);
    seq_free(&a);
    seq_free(&b);
    TEST_END();
}
