/* attn_compute against a plain double-precision softmax attention, causal
 * and bidirectional, with GQA, partial tiles and head sizes that are not a
 * multiple of 16; each SIMD primitive against its scalar reference and the
 * narrow tiles against the wide ones column for column, bit for bit; a
 * row's result bit for bit the same whatever the rows evaluated with it
 * (prompt chunks of 1 to 70 rows) and the thread count; and cells read
 * through a table of blocks lying out of order in memory, bit for bit the
 * result of one contiguous buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "test.h"

/* every row: f32 queries and sums */
#define TOL 2e-5

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

typedef struct shape {
    int n_q, n_kv, n_head, n_head_kv, d;
    bool causal;
    int first_cell;
} shape;

/* The reference in double over the same f16 K and V ([n_kv][kv_stride]). */
static void reference(const attn_args *a, const f16_bits *k, const f16_bits *v, double *out) {
    const int d = a->head_dim, group = a->n_head / a->n_head_kv;
    double *p = malloc((size_t)a->n_kv * sizeof(double));
    for (int64_t i = 0; i < a->n_q; i++)
        for (int h = 0; h < a->n_head; h++) {
            const int g = h / group;
            const int64_t n = a->causal ? a->first_cell + i + 1 : a->n_kv;
            double m = -INFINITY, sum = 0.0;
            for (int64_t c = 0; c < n; c++) {
                double s = 0.0;
                for (int t = 0; t < d; t++)
                    s += (double)a->q[i * a->q_stride + h * d + t] * fp16_to_f32(k[c * a->kv_stride + g * d + t]);
                p[c] = s * a->scale;
                if (p[c] > m) m = p[c];
            }
            for (int64_t c = 0; c < n; c++) sum += p[c] = exp(p[c] - m);
            for (int t = 0; t < d; t++) {
                double o = 0.0;
                for (int64_t c = 0; c < n; c++) o += p[c] * fp16_to_f32(v[c * a->kv_stride + g * d + t]);
                out[(i * a->n_head + h) * d + t] = o / sum;
            }
        }
    free(p);
}

/* Runs one shape through attn_compute with the current kernels and pool.
 * block_rows 0: K and V in one contiguous buffer (attn_kv_contiguous), and
 * returns the largest difference from the reference; else in blocks of
 * that many cells (K's cells, then V's, as a sequence's KV blocks hold one
 * layer's), which lie in memory in a shuffled order, and returns 0 (the
 * caller compares the result with the contiguous one: the reference is
 * the slow part under valgrind). */
static double run_shape(const shape *s, tpool *pool, float *out_copy, int block_rows) {
    const int64_t qs = (int64_t)s->n_head * s->d + 3, kvs = (int64_t)s->n_head_kv * s->d + 5; /* odd strides */
    float *q = malloc((size_t)(s->n_q * qs) * sizeof(float));
    f16_bits *kv = malloc((size_t)(2 * s->n_kv * kvs) * sizeof(f16_bits)), *k = kv, *v = kv + s->n_kv * kvs;
    float *out = malloc((size_t)s->n_q * s->n_head * s->d * sizeof(float));
    double *ref = malloc((size_t)s->n_q * s->n_head * s->d * sizeof(double));
    uint64_t seed = rng;
    for (int64_t i = 0; i < s->n_q * qs; i++) q[i] = 2.0f * frand();
    for (int64_t i = 0; i < s->n_kv * kvs; i++) {
        k[i] = f32_to_fp16(2.0f * frand());
        v[i] = f32_to_fp16(frand());
    }
    attn_args a = {
        .q = q,
        .q_stride = qs,
        .kv_stride = kvs,
        .n_q = s->n_q,
        .n_kv = s->n_kv,
        .causal = s->causal,
        .first_cell = s->first_cell,
        .n_head = s->n_head,
        .n_head_kv = s->n_head_kv,
        .head_dim = s->d,
        .scale = 1.0f / sqrtf((float)s->d),
        .out = out,
        .out_stride = (int64_t)s->n_head * s->d,
    };
    const uint8_t *one[1], **table = NULL;
    f16_bits *blocks = NULL;
    if (!block_rows) {
        attn_kv_contiguous(&a, one, kv, 0, (size_t)(s->n_kv * kvs) * sizeof(f16_bits));
    } else {
        /* block b at slot perm[b]: a shuffle, so no block follows its predecessor */
        const int64_t nb = (s->n_kv + block_rows - 1) / block_rows, cells = (int64_t)block_rows * kvs;
        blocks = malloc((size_t)(nb * 2 * cells) * sizeof(f16_bits));
        table = malloc((size_t)nb * sizeof *table);
        int64_t *perm = malloc((size_t)nb * sizeof *perm);
        for (int64_t b = 0; b < nb; b++) perm[b] = b;
        for (int64_t b = nb - 1; b > 0; b--) {
            const int64_t o = (int64_t)((frand() + 1.0f) * 0.5f * (float)(b + 1)) % (b + 1), t = perm[b];
            perm[b] = perm[o], perm[o] = t;
        }
        if (nb > 1 && perm[0] == 0) perm[0] = perm[1], perm[1] = 0; /* never the contiguous order */
        for (int64_t b = 0; b < nb; b++) {
            f16_bits *blk = blocks + perm[b] * 2 * cells;
            for (int64_t i = 0; i < 2 * cells; i++) blk[i] = f32_to_fp16(NAN); /* cells past n_kv are never read */
            const int64_t n = s->n_kv - b * block_rows < block_rows ? s->n_kv - b * block_rows : block_rows;
            memcpy(blk, k + b * cells, (size_t)(n * kvs) * sizeof(f16_bits));
            memcpy(blk + cells, v + b * cells, (size_t)(n * kvs) * sizeof(f16_bits));
            table[b] = (const uint8_t *)blk;
        }
        free(perm);
        a.blocks = table;
        a.block_rows = block_rows;
        a.k_off = 0;
        a.v_off = (size_t)cells * sizeof(f16_bits);
    }
    rng = seed; /* the same data on every call with this shape */
    attn_compute(pool, &a);
    double worst = 0.0;
    if (!block_rows) reference(&a, k, v, ref);
    for (int64_t i = 0; !block_rows && i < s->n_q * s->n_head * s->d; i++) {
        double diff = fabs(out[i] - ref[i]);
        if (!(diff <= worst)) worst = diff; /* NaN sticks */
    }
    if (out_copy) memcpy(out_copy, out, (size_t)s->n_q * s->n_head * s->d * sizeof(float));
    free(q);
    free(kv);
    free(blocks);
    free(table);
    free(out);
    free(ref);
    return worst;
}

static const shape shapes[] = {
    /* 64 rows or more: a picture (bidirectional), partial tiles and groups */
    {64, 64, 2, 2, 16, false, 0},
    {300, 300, 4, 4, 64, false, 0},
    {150, 150, 3, 3, 20, false, 0},
    /* a causal prompt after 37 cells, GQA */
    {130, 167, 8, 2, 128, true, 37},
    {64, 64, 2, 1, 32, true, 0},
    /* fewer rows: decode and short batches, wide and narrow tiles of a KV
     * head's queries */
    {1, 200, 4, 2, 64, true, 199},
    {1, 300, 4, 2, 64, true, 299},
    {1, 1000, 2, 2, 32, false, 0},
    {5, 40, 2, 2, 16, false, 0},
    {63, 80, 2, 1, 32, true, 17},
    {1, 100, 16, 8, 128, true, 99},
    {3, 120, 8, 4, 64, true, 117},
    {1, 700, 16, 8, 128, true, 699},
    {40, 300, 8, 2, 72, true, 260},
    {7, 90, 12, 3, 35, false, 0},
};

/* Shapes for the block tables: n_kv not a multiple of 64, causal or not;
 * one query row, a few rows, and 64 or more. */
static const shape block_shapes[] = {
    {1, 200, 4, 2, 64, true, 199},   {1, 300, 4, 2, 64, true, 299},   {1, 1000, 2, 2, 32, false, 0},
    {1, 700, 16, 8, 128, true, 699}, {1, 90, 16, 8, 128, false, 0},   {5, 150, 2, 2, 16, false, 0},
    {3, 190, 8, 4, 64, true, 187},   {130, 167, 8, 2, 128, true, 37}, {150, 150, 3, 3, 20, false, 0},
    {64, 1000, 2, 1, 32, true, 936}, {70, 600, 4, 4, 64, false, 0},
};

/* Each block shape through a shuffled table of 64- and 128-cell blocks:
 * bit for bit the result of the same cells in one contiguous buffer, which
 * is within the tolerance of the reference, on one thread and on the
 * pool. */
static void check_blocks(tpool *pool, isa_level isa) {
    static const int block_rows[] = {64, 128};
    for (size_t i = 0; i < sizeof block_shapes / sizeof block_shapes[0]; i++) {
        const shape *s = &block_shapes[i];
        const size_t n_out = (size_t)s->n_q * s->n_head * s->d;
        float *flat = malloc(n_out * sizeof(float)), *got = malloc(n_out * sizeof(float));
        for (int p = 0; p < 2; p++) {
            tpool *tp = p ? pool : NULL;
            const double worst = run_shape(s, tp, flat, 0);
            CHECKF(worst < TOL, "%s: block shape %zu (%d queries, %d cells): off by %g", isa_name(isa), i, s->n_q,
                   s->n_kv, worst);
            for (size_t b = 0; b < sizeof block_rows / sizeof *block_rows; b++) {
                run_shape(s, tp, got, block_rows[b]);
                CHECKF(memcmp(flat, got, n_out * sizeof(float)) == 0,
                       "%s: block shape %zu (%d queries, %d cells%s, blocks of %d, %s): not the contiguous result",
                       isa_name(isa), i, s->n_q, s->n_kv, s->causal ? ", causal" : "", block_rows[b],
                       p ? "pool" : "one thread");
            }
        }
        free(flat);
        free(got);
    }
}

static void check_kernels(const attn_kernels *simd, const char *name) {
    enum { TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV, D = 40 };
    static float k[TK * D], qt[D * TQ], v[TK * D], st1[TK * TQ], st2[TK * TQ], o1[TQ * D], o2[TQ * D];
    float M1[TQ], M2[TQ], L1[TQ], L2[TQ], ms1[TQ], ms2[TQ];
    for (int i = 0; i < TK * D; i++) k[i] = frand(), v[i] = frand();
    for (int i = 0; i < D * TQ; i++) qt[i] = frand();
    for (int i = 0; i < TQ * D; i++) o1[i] = o2[i] = frand();
    for (int i = 0; i < TQ; i++) {
        M1[i] = M2[i] = i % 3 == 0 ? -INFINITY : frand();
        L1[i] = L2[i] = i % 3 == 0 ? 0.0f : 1.0f + frand();
    }
    const int nk = TK - 3; /* a partial tile */
    attn_kernels_ref.qk_tile(k, nk, qt, D, 0.3f, st1);
    simd->qk_tile(k, nk, qt, D, 0.3f, st2);
    double worst = 0.0;
    for (int i = 0; i < nk * TQ; i++) worst = fmax(worst, fabs(st1[i] - st2[i]));
    CHECKF(worst < 1e-5, "%s qk_tile differs by %g", name, worst);
    st1[5 * TQ + 7] = -INFINITY;                              /* a masked score */
    for (int j = 0; j < nk; j++) st1[j * TQ + 9] = -INFINITY; /* a column with nothing visible */
    memcpy(st2, st1, sizeof st1);
    M1[9] = M2[9] = -INFINITY;
    L1[9] = L2[9] = 0.0f;
    attn_kernels_ref.softmax_tile(st1, nk, M1, L1, ms1);
    simd->softmax_tile(st2, nk, M2, L2, ms2);
    worst = 0.0;
    for (int i = 0; i < nk * TQ; i++) worst = fmax(worst, fabs(st1[i] - st2[i]));
    for (int i = 0; i < TQ; i++) {
        worst = fmax(worst, fabs(L1[i] - L2[i]) / fmax(1.0, L1[i]));
        worst = fmax(worst, fabs(ms1[i] - ms2[i]));
        CHECKF(M1[i] == M2[i], "%s softmax_tile: M[%d] %g vs %g", name, i, M1[i], M2[i]);
    }
    CHECKF(worst < 1e-6, "%s softmax_tile differs by %g", name, worst);
    CHECKF(st2[5 * TQ + 7] == 0.0f && st2[9] == 0.0f && ms2[9] == 1.0f && L2[9] == 0.0f,
           "%s softmax_tile: masked scores must give p = 0", name);
    attn_kernels_ref.pv_tile(st1, nk, v, D, ms1, o1);
    simd->pv_tile(st1, nk, v, D, ms1, o2);
    worst = 0.0;
    for (int i = 0; i < TQ * D; i++) worst = fmax(worst, fabs(o1[i] - o2[i]) / fmax(1.0, fabs(o1[i])));
    CHECKF(worst < 1e-5, "%s pv_tile differs by %g", name, worst);
}

/* A narrow tile gives each of its columns what a wide tile gives the same
 * query, bit for bit: the columns of a narrow tile are taken from a wide
 * one's (at an odd offset), through qk, a masked softmax and pv, for
 * partial tiles of keys, head sizes with and without a tail past the last
 * multiple of 16, and nc of 1 to 8 columns. */
static void check_narrow(const attn_kernels *kk, const char *name) {
    enum { TQ = PH_ATTN_TILE_Q, TN = PH_ATTN_TILE_N, TK = PH_ATTN_TILE_KV, DMAX = 136, C0 = 13 };
    static const int nks[] = {1, 7, 9, 64}, dims[] = {8, 20, 35, 72, 136};
    static float k[TK * DMAX], v[TK * DMAX], qw[DMAX * TQ], qn[DMAX * TN], sw[TK * TQ], sn[TK * TN], ow[TQ * DMAX],
        on[TN * DMAX];
    float Mw[TQ], Lw[TQ], msw[TQ], Mn[TN], Ln[TN], msn[TN];
    int bad = 0;
    for (size_t ni = 0; ni < sizeof nks / sizeof *nks; ni++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (int nc = 1; nc <= TN; nc++) {
                const int nk = nks[ni], d = dims[di];
                for (int i = 0; i < nk * d; i++) k[i] = 2.0f * frand(), v[i] = frand();
                for (int i = 0; i < d * TQ; i++) qw[i] = 2.0f * frand();
                for (int i = 0; i < TQ * d; i++) ow[i] = 4.0f * frand();
                for (int i = 0; i < TQ; i++) {
                    Mw[i] = i % 5 == 0 ? -INFINITY : 3.0f * frand(); /* nothing visible before */
                    Lw[i] = i % 5 == 0 ? 0.0f : 1.0f + frand();
                }
                for (int t = 0; t < d; t++)
                    for (int i = 0; i < TN; i++) qn[t * TN + i] = i < nc ? qw[t * TQ + C0 + i] : 7.0f;
                for (int i = 0; i < TN; i++) {
                    Mn[i] = i < nc ? Mw[C0 + i] : 0.0f;
                    Ln[i] = i < nc ? Lw[C0 + i] : 1.0f;
                    for (int t = 0; t < d; t++) on[i * d + t] = i < nc ? ow[(C0 + i) * d + t] : -1.0f;
                }
                const float scale = 1.0f / sqrtf((float)d);
                kk->qk_tile(k, nk, qw, d, scale, sw);
                kk->qk_narrow(k, nk, qn, d, scale, sn, nc);
                for (int j = 0; j < nk; j++)
                    for (int i = 0; i < nc; i++) {
                        bad += memcmp(&sw[j * TQ + C0 + i], &sn[j * TN + i], sizeof(float)) != 0;
                        if ((i + j) % 3 == 1) sw[j * TQ + C0 + i] = sn[j * TN + i] = -INFINITY; /* masked */
                    }
                kk->softmax_tile(sw, nk, Mw, Lw, msw);
                kk->softmax_narrow(sn, nk, Mn, Ln, msn);
                for (int i = 0; i < nc; i++) {
                    bad += memcmp(&Mw[C0 + i], &Mn[i], sizeof(float)) != 0;
                    bad += memcmp(&Lw[C0 + i], &Ln[i], sizeof(float)) != 0;
                    bad += memcmp(&msw[C0 + i], &msn[i], sizeof(float)) != 0;
                    for (int j = 0; j < nk; j++)
                        bad += memcmp(&sw[j * TQ + C0 + i], &sn[j * TN + i], sizeof(float)) != 0;
                }
                kk->pv_tile(sw, nk, v, d, msw, ow);
                kk->pv_narrow(sn, nk, v, d, msn, on, nc);
                for (int i = 0; i < TN; i++)
                    for (int t = 0; t < d; t++)
                        bad += i < nc ? memcmp(&ow[(C0 + i) * d + t], &on[i * d + t], sizeof(float)) != 0
                                      : on[i * d + t] != -1.0f; /* columns past nc are left alone */
            }
    CHECKF(bad == 0, "%s: %d results of the narrow tiles differ from the wide tiles'", name, bad);
}

/* A row's result is the same bit for bit whatever rows are evaluated with
 * it: P prompt rows after B cells, evaluated at once and in chunks of every
 * size from 1 to P (each chunk sees the cells before it and its own, as a
 * prompt cut in chunks or decoded token by token), and uneven chunks; on
 * one thread and on the pool; causal (GQA groups of 4, head size 40: a
 * tail past the last multiple of 16) and bidirectional (a picture's rows
 * against all cells, in groups of rows); the chunks one call each, and all
 * in one attn_compute_n (as a batch's sequences go). */
static void check_chunks(tpool *pool, isa_level isa) {
    enum { B = 30, P = 70, HKV = 2, GROUP = 4, H = HKV * GROUP, D = 40 };
    const int64_t qs = (int64_t)H * D, kvs = (int64_t)HKV * D, n_kv = B + P;
    float *q = malloc(sizeof(float) * (size_t)(P * qs)), *all = malloc(sizeof(float) * (size_t)(P * qs)),
          *got = malloc(sizeof(float) * (size_t)(P * qs));
    f16_bits *kv = malloc(sizeof(f16_bits) * (size_t)(2 * n_kv * kvs));
    for (int64_t i = 0; i < P * qs; i++) q[i] = 2.0f * frand();
    for (int64_t i = 0; i < 2 * n_kv * kvs; i++) kv[i] = f32_to_fp16(2.0f * frand());
    for (int causal = 1; causal >= 0; causal--)
        for (int p = 0; p < 2; p++) {
            tpool *tp = p ? pool : NULL;
            attn_args a = {.q_stride = qs,
                           .kv_stride = kvs,
                           .causal = causal,
                           .n_head = H,
                           .n_head_kv = HKV,
                           .head_dim = D,
                           .scale = 1.0f / sqrtf((float)D),
                           .out_stride = qs};
            const uint8_t *table[1];
            /* all P rows at once */
            a.q = q, a.out = all, a.n_q = P, a.first_cell = B, a.n_kv = n_kv;
            attn_kv_contiguous(&a, table, kv, 0, sizeof(f16_bits) * (size_t)(n_kv * kvs));
            attn_compute(tp, &a);
            int bad_sizes = 0, bad_batched = 0;
            attn_args parts[P];
            const uint8_t *tables[P][1];
            for (int cs = 0; cs <= P; cs++) { /* cs 0: uneven chunks 5, 1, 63, 1 */
                static const int uneven[] = {5, 1, 63, 1};
                int n_parts = 0;
                for (int r0 = 0, u = 0; r0 < P; u++, n_parts++) {
                    int n = cs ? cs : uneven[u];
                    if (n > P - r0) n = P - r0;
                    attn_args *c = &parts[n_parts];
                    *c = a;
                    c->q = q + r0 * qs, c->n_q = n, c->first_cell = B + r0;
                    c->n_kv = causal ? B + r0 + n : n_kv;
                    attn_kv_contiguous(c, tables[n_parts], kv, 0, sizeof(f16_bits) * (size_t)(n_kv * kvs));
                    r0 += n;
                }
                /* one after the other, and all in one job (up to 70 calls: 32 a job;
                 * the short chunks, and the long ones beside short: tiled and narrow) */
                for (int batched = 0; batched < (cs < 8 || cs > 60 ? 2 : 1); batched++) {
                    memset(got, 0, sizeof(float) * (size_t)(P * qs));
                    for (int i = 0; i < n_parts; i++) parts[i].out = got + (parts[i].q - q);
                    if (batched) attn_compute_n(tp, parts, n_parts);
                    else
                        for (int i = 0; i < n_parts; i++) attn_compute(tp, &parts[i]);
                    const int bad = memcmp(all, got, sizeof(float) * (size_t)(P * qs)) != 0;
                    if (batched) bad_batched += bad;
                    else bad_sizes += bad;
                }
            }
            CHECKF(bad_sizes == 0, "%s%s, %s: %d of %d chunkings change a row's result", isa_name(isa),
                   causal ? " causal" : " bidirectional", p ? "pool" : "one thread", bad_sizes, P + 1);
            CHECKF(bad_batched == 0, "%s%s, %s: %d of %d chunkings change a row's result in one batch", isa_name(isa),
                   causal ? " causal" : " bidirectional", p ? "pool" : "one thread", bad_batched, P + 1);
        }
    free(q), free(all), free(got), free(kv);
}

/* The AVX-512 tiles equal the AVX2 tiles bit for bit: partial tiles of keys
 * (nk not a multiple of the row blocks) and head sizes with a tail past the
 * last multiple of 16 (AVX2's scalar columns), masked scores, columns with
 * nothing visible and columns that had nothing visible before. */
static void check_tiles_avx512(void) {
    enum { TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV, DMAX = 200 };
    static const int nks[] = {1, 3, 4, 5, 7, 11, 64}, dims[] = {64, 72, 80, 128, 8, 35, 200};
    static float k[TK * DMAX], qt[DMAX * TQ], v[TK * DMAX], st[2][TK * TQ], o[2][TQ * DMAX];
    float M[2][TQ], L[2][TQ], ms[2][TQ];
    const attn_kernels *kk[2] = {&attn_kernels_avx2, &attn_kernels_avx512};
    for (size_t ni = 0; ni < sizeof nks / sizeof *nks; ni++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const int nk = nks[ni], d = dims[di];
            for (int i = 0; i < nk * d; i++) k[i] = 2.0f * frand(), v[i] = frand();
            for (int i = 0; i < d * TQ; i++) qt[i] = 2.0f * frand();
            for (int i = 0; i < TQ * d; i++) o[0][i] = o[1][i] = 4.0f * frand();
            for (int i = 0; i < TQ; i++) {
                M[0][i] = M[1][i] = i % 5 == 0 ? -INFINITY : 3.0f * frand(); /* nothing visible before */
                L[0][i] = L[1][i] = i % 5 == 0 ? 0.0f : 1.0f + frand();
            }
            const float scale = 1.0f / sqrtf((float)d);
            for (int s = 0; s < 2; s++) kk[s]->qk_tile(k, nk, qt, d, scale, st[s]);
            CHECKF(memcmp(st[0], st[1], sizeof(float) * nk * TQ) == 0,
                   "avx512 qk_tile differs from avx2 (nk %d, d %d)", nk, d);
            for (int j = 0; j < nk; j++)
                for (int i = 0; i < TQ; i++) {
                    if (i % 7 == 3 || (i + j) % 11 == 0) st[0][j * TQ + i] = -INFINITY; /* masked cells */
                    if (j == 1 && i == 2) st[0][j * TQ + i] = -100.0f;                  /* exp underflows */
                }
            for (int j = 0; j < nk; j++) st[0][j * TQ + 10] = st[0][j * TQ + 3] = -INFINITY; /* nothing visible */
            M[0][10] = M[1][10] = -INFINITY, L[0][10] = L[1][10] = 0.0f; /* and nothing before either */
            memcpy(st[1], st[0], sizeof(float) * nk * TQ);
            for (int s = 0; s < 2; s++) kk[s]->softmax_tile(st[s], nk, M[s], L[s], ms[s]);
            CHECKF(memcmp(st[0], st[1], sizeof(float) * nk * TQ) == 0 && memcmp(M[0], M[1], sizeof M[0]) == 0 &&
                       memcmp(L[0], L[1], sizeof L[0]) == 0 && memcmp(ms[0], ms[1], sizeof ms[0]) == 0,
                   "avx512 softmax_tile differs from avx2 (nk %d, d %d)", nk, d);
            CHECKF(st[1][10] == 0.0f && ms[1][10] == 1.0f && L[1][10] == 0.0f,
                   "avx512 softmax_tile: a column with nothing visible must give p = 0 (nk %d)", nk);
            for (int s = 0; s < 2; s++) kk[s]->pv_tile(st[0], nk, v, d, ms[0], o[s]);
            CHECKF(memcmp(o[0], o[1], sizeof(float) * TQ * d) == 0, "avx512 pv_tile differs from avx2 (nk %d, d %d)",
                   nk, d);
        }
}

/* The AVX-512 narrow pv equals the AVX2 one bit for bit. */
static void check_narrow_avx512(void) {
    enum { TN = PH_ATTN_TILE_N, TK = PH_ATTN_TILE_KV, DMAX = 200 };
    static const int nks[] = {1, 5, 64}, dims[] = {8, 35, 64, 72, 128, 200};
    static float p[TK * TN], v[TK * DMAX], o[2][TN * DMAX];
    float ms[TN];
    for (size_t ni = 0; ni < sizeof nks / sizeof *nks; ni++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (int nc = 1; nc <= TN; nc++) {
                const int nk = nks[ni], d = dims[di];
                for (int i = 0; i < nk * TN; i++) p[i] = 0.5f * (frand() + 1.0f);
                for (int i = 0; i < nk * d; i++) v[i] = frand();
                for (int i = 0; i < TN * d; i++) o[0][i] = o[1][i] = 4.0f * frand();
                for (int i = 0; i < TN; i++) ms[i] = 0.5f * (frand() + 1.0f);
                attn_kernels_avx2.pv_narrow(p, nk, v, d, ms, o[0], nc);
                attn_kernels_avx512.pv_narrow(p, nk, v, d, ms, o[1], nc);
                CHECKF(memcmp(o[0], o[1], sizeof(float) * TN * (size_t)d) == 0,
                       "avx512 pv_narrow differs from avx2 (nk %d, d %d, nc %d)", nk, d, nc);
            }
}

int main(void) {
    kernels_init();
    tpool *pool = tpool_create(2);
    const isa_level isas[] = {PH_ISA_SCALAR, PH_ISA_AVX2, PH_ISA_AVX512};
    for (size_t n = 0; n < sizeof isas / sizeof isas[0]; n++) {
        if (kernels_force(isas[n]) != 0) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const shape *s = &shapes[i];
            const size_t n_out = (size_t)s->n_q * s->n_head * s->d;
            float *one = malloc(n_out * sizeof(float)), *two = malloc(n_out * sizeof(float));
            const double worst = run_shape(s, NULL, one, 0);
            run_shape(s, pool, two, 0);
            CHECKF(worst < TOL, "%s: shape %zu (%d queries, %d cells, d %d%s): off by %g", isa_name(isas[n]), i,
                   s->n_q, s->n_kv, s->d, s->causal ? ", causal" : "", worst);
            CHECKF(memcmp(one, two, n_out * sizeof(float)) == 0, "%s: shape %zu depends on the thread count",
                   isa_name(isas[n]), i);
            printf("%-6s %4d queries %4d cells %2d/%d heads d %3d %-6s worst %.2g\n", isa_name(isas[n]), s->n_q,
                   s->n_kv, s->n_head, s->n_head_kv, s->d, s->causal ? "causal" : "", worst);
            free(one);
            free(two);
        }
        check_blocks(pool, isas[n]);
        check_chunks(pool, isas[n]);
    }
    check_narrow(&attn_kernels_ref, "scalar");
    if (kernels_cpu_has(PH_ISA_AVX2)) {
        check_kernels(&attn_kernels_avx2, "avx2");
        check_narrow(&attn_kernels_avx2, "avx2");
    }
    if (kernels_cpu_has(PH_ISA_AVX512)) {
        check_kernels(&attn_kernels_avx512, "avx512");
        check_narrow(&attn_kernels_avx512, "avx512");
        /* and its tiles: equal to the AVX2 tiles, bit for bit */
        check_tiles_avx512();
        check_narrow_avx512();
    }
    tpool_free(pool);
    TEST_END();
}
