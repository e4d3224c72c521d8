/* attn_compute against a plain double-precision softmax attention: the
 * tiled path (64 or more query rows: pictures, prompts) tightly, the
 * per-cell path (f16 query and f16 sums, as llama.cpp) loosely, and the
 * per-thread chunks of one query row over many cells; causal and
 * bidirectional, with GQA, partial tiles and head sizes that are not a
 * multiple of 16; each SIMD primitive against its scalar reference; results
 * independent of the thread count except where llama.cpp's own chunking
 * depends on it; and cells read through a table of blocks lying out of
 * order in memory, bit for bit the result of one contiguous buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "test.h"

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
    /* tiled: a picture (bidirectional), partial tiles and groups */
    {64, 64, 2, 2, 16, false, 0},
    {300, 300, 4, 4, 64, false, 0},
    {150, 150, 3, 3, 20, false, 0},
    /* tiled: a causal prompt after 37 cells, GQA */
    {130, 167, 8, 2, 128, true, 37},
    {64, 64, 2, 1, 32, true, 0},
    /* per-cell: decode and short batches */
    {1, 200, 4, 2, 64, true, 199},
    {1, 300, 4, 2, 64, true, 299}, /* a view of 512 cells: one chunk per thread */
    {1, 1000, 2, 2, 32, false, 0},
    {5, 40, 2, 2, 16, false, 0},
    {63, 80, 2, 1, 32, true, 17},
    /* per-cell, several KV heads per thread, one and a few rows */
    {1, 100, 16, 8, 128, true, 99},
    {3, 120, 8, 4, 64, true, 117},
    {1, 700, 16, 8, 128, true, 699}, /* and one chunk per thread */
};

/* Shapes for the block tables: n_kv not a multiple of 64, causal or not;
 * one query row (per-cell, and views of 512 cells or more: the split
 * path, whose chunks end inside blocks), a few rows, and tiled. */
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
        const double tol = s->n_q >= PH_ATTN_TILE_Q ? 2e-5 : 5e-3;
        for (int p = 0; p < 2; p++) {
            tpool *tp = p ? pool : NULL;
            const double worst = run_shape(s, tp, flat, 0);
            CHECKF(worst < tol, "%s: block shape %zu (%d queries, %d cells): off by %g", isa_name(isa), i, s->n_q,
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

    /* the f16 running sums of the per-cell path: the same roundings exactly */
    float a1[D + 3], a2[D + 3];
    for (int i = 0; i < D + 3; i++) a1[i] = a2[i] = fp16_to_f32(f32_to_fp16(frand()));
    attn_kernels_ref.scale_f16(a1, 0.37f, D + 3);
    simd->scale_f16(a2, 0.37f, D + 3);
    attn_kernels_ref.mad_f16(a1, v, 0.61f, D + 3);
    simd->mad_f16(a2, v, 0.61f, D + 3);
    CHECKF(memcmp(a1, a2, sizeof a1) == 0, "%s scale_f16/mad_f16 differ from the reference", name);
    int exact = 1;
    for (int i = 0; i < D + 3; i++) exact &= a2[i] == fp16_to_f32(f32_to_fp16(a2[i]));
    CHECKF(exact, "%s mad_f16 leaves values that are not f16", name);
}

/* The fused per-cell pass of a kernel table equals, bit for bit, the same
 * pass made of that table's primitives, for several heads at once, causal
 * rows and head sizes with a tail; the SIMD primitives' own pass, in turn,
 * is within the per-cell tolerance of the double reference above. */
static void check_cells(const attn_kernels *kk, const char *name) {
    enum { CELLS = 37, G = 3, NQ = 6, GROUP = 2 };
    static const int dims[] = {128, 40, 35};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        const int hd = dims[di];
        const int64_t stride = (int64_t)G * hd + 5;
        f16_bits *k = malloc(sizeof(f16_bits) * (size_t)(CELLS * stride)),
                 *v = malloc(sizeof(f16_bits) * (size_t)(CELLS * stride));
        float *q = malloc(sizeof(float) * G * NQ * (size_t)hd), *acc[2], M[2][G * NQ], S[2][G * NQ], kf[128], vf[128];
        for (int64_t i = 0; i < CELLS * stride; i++) k[i] = f32_to_fp16(2.0f * frand()), v[i] = f32_to_fp16(frand());
        for (int i = 0; i < G * NQ * hd; i++) q[i] = fp16_to_f32(f32_to_fp16(frand()));
        for (int causal = 0; causal < 2; causal++) {
            for (int t = 0; t < 2; t++) {
                acc[t] = calloc((size_t)G * NQ * hd, sizeof(float));
                for (int j = 0; j < G * NQ; j++) M[t][j] = -INFINITY, S[t][j] = 0.0f;
            }
            for (int t = 0; t < 2; t++) {
                const attn_cells x = {.k = k,
                                      .v = v,
                                      .stride = stride,
                                      .c0 = 0,
                                      .c1 = CELLS,
                                      .n_g = G,
                                      .q = q,
                                      .nq = NQ,
                                      .hd = hd,
                                      .group = GROUP,
                                      .causal = causal,
                                      .last0 = CELLS - 4,
                                      .scale = 0.3f,
                                      .M = M[t],
                                      .S = S[t],
                                      .acc = acc[t],
                                      .kf = kf,
                                      .vf = vf};
                if (t == 0) attn_cells_with(kk, &x);
                else kk->cells(&x);
            }
            CHECKF(memcmp(M[0], M[1], sizeof M[0]) == 0 && memcmp(S[0], S[1], sizeof S[0]) == 0 &&
                       memcmp(acc[0], acc[1], sizeof(float) * G * NQ * (size_t)hd) == 0,
                   "%s: the fused per-cell pass differs from its primitives (d %d%s)", name, hd,
                   causal ? ", causal" : "");
            free(acc[0]);
            free(acc[1]);
        }
        free(k);
        free(v);
        free(q);
    }
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

int main(void) {
    kernels_init();
    tpool *pool = tpool_create(3);
    const isa_level isas[] = {PH_ISA_SCALAR, PH_ISA_AVX2, PH_ISA_AVX512};
    for (size_t n = 0; n < sizeof isas / sizeof isas[0]; n++) {
        if (kernels_force(isas[n]) != 0) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const shape *s = &shapes[i];
            const size_t n_out = (size_t)s->n_q * s->n_head * s->d;
            float *one = malloc(n_out * sizeof(float)), *three = malloc(n_out * sizeof(float));
            const double worst = run_shape(s, NULL, one, 0);
            run_shape(s, pool, three, 0);
            /* tiled: f32 throughout; per-cell: whatever rounding llama.cpp's
             * short-batch path does to q and the sums (spec B.4) */
            const double tol = s->n_q >= PH_ATTN_TILE_Q ? 2e-5 : 5e-3;
            CHECKF(worst < tol, "%s: shape %zu (%d queries, %d cells, d %d%s): off by %g", isa_name(isas[n]), i,
                   s->n_q, s->n_kv, s->d, s->causal ? ", causal" : "", worst);
            if (s->n_q > 1)
                CHECKF(memcmp(one, three, n_out * sizeof(float)) == 0, "%s: shape %zu depends on the thread count",
                       isa_name(isas[n]), i);
            printf("%-6s %4d queries %4d cells %d/%d heads d %3d %-6s worst %.2g\n", isa_name(isas[n]), s->n_q,
                   s->n_kv, s->n_head, s->n_head_kv, s->d, s->causal ? "causal" : "", worst);
            free(one);
            free(three);
        }
        check_blocks(pool, isas[n]);
    }
    check_cells(&attn_kernels_ref, "scalar");
    if (kernels_cpu_has(PH_ISA_AVX2)) {
        check_kernels(&attn_kernels_avx2, "avx2");
        check_cells(&attn_kernels_avx2, "avx2");
    }
    if (kernels_cpu_has(PH_ISA_AVX512)) {
        /* the AVX-512 pass: equal to the AVX2 primitives' pass, bit for bit */
        check_cells(&attn_kernels_avx512, "avx512");
        check_kernels(&attn_kernels_avx512, "avx512");
        /* and its tiles: equal to the AVX2 tiles, bit for bit */
        check_tiles_avx512();
    }
    tpool_free(pool);
    TEST_END();
}
