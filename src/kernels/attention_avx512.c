/* AVX-512 tiles of the attention (attention.h): the AVX2 tiles' results
 * bit for bit. */
#include <immintrin.h>
#include <math.h>

#include "kernels/attention.h"

/* ---- tiled path ------------------------------------------------------------
 * The AVX2 tiles (attention_avx2.c) widened: each output lane is the same
 * chain of operations as there (qk: a sequential FMA over t, then * scale;
 * pv: o * ms, then a sequential FMA over j, and for the head columns past the
 * last multiple of 16 AVX2's scalar product and sum; softmax: the same max,
 * the same exp polynomial), so the results are AVX2's bit for bit. Larger
 * register tiles than AVX2's: qk 6 key rows x 64 query columns (24 zmm),
 * pv 4 query rows x 64 head columns (or 8 x 32 where a chunk of the head is
 * that narrow), the tail columns held alongside. */

#define TQ PH_ATTN_TILE_Q
#define AI static inline __attribute__((always_inline))

_Static_assert(TQ == 64, "the tiles hold the query columns in 4 zmm");

/* exp_nonpos of attention_avx2.c, lane for lane: the same constants in the
 * same order; the compare and the zeroing through masks (a masked-off
 * product is +0, as andnot there). */
AI __m512 exp_nonpos16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e));
}

/* R rows of keys (R <= 6) against all TQ query columns: R x 4 accumulators,
 * an array indexed by constants only after the unrolling, so registers. */
AI void qk_rows(const float *k, const float *qt, int d, float scale, float *st, const int R) {
    __m512 a[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) a[r][c] = _mm512_setzero_ps();
    for (int t = 0; t < d; t++) {
        const float *q = qt + t * TQ;
        const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
                     q3 = _mm512_loadu_ps(q + 48);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m512 kb = _mm512_set1_ps(k[r * d + t]);
            a[r][0] = _mm512_fmadd_ps(kb, q0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(kb, q1, a[r][1]);
            a[r][2] = _mm512_fmadd_ps(kb, q2, a[r][2]);
            a[r][3] = _mm512_fmadd_ps(kb, q3, a[r][3]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(st + r * TQ + c * 16, _mm512_mul_ps(a[r][c], sc));
}

static void qk_rows6(const float *k, const float *qt, int d, float scale, float *st) {
    qk_rows(k, qt, d, scale, st, 6);
}
static void qk_rows4(const float *k, const float *qt, int d, float scale, float *st) {
    qk_rows(k, qt, d, scale, st, 4);
}
static void qk_rows3(const float *k, const float *qt, int d, float scale, float *st) {
    qk_rows(k, qt, d, scale, st, 3);
}
static void qk_rows2(const float *k, const float *qt, int d, float scale, float *st) {
    qk_rows(k, qt, d, scale, st, 2);
}
static void qk_rows1(const float *k, const float *qt, int d, float scale, float *st) {
    qk_rows(k, qt, d, scale, st, 1);
}

void attn_qk_tile_avx512(const float *k, int nk, const float *qt, int d, float scale, float *st) {
    int j = 0;
    for (; j + 6 <= nk; j += 6) qk_rows6(k + j * d, qt, d, scale, st + j * TQ);
    switch (nk - j) { /* 0 to 5 rows left */
    case 5:
        qk_rows3(k + j * d, qt, d, scale, st + j * TQ);
        qk_rows2(k + (j + 3) * d, qt, d, scale, st + (j + 3) * TQ);
        break;
    case 4: qk_rows4(k + j * d, qt, d, scale, st + j * TQ); break;
    case 3: qk_rows3(k + j * d, qt, d, scale, st + j * TQ); break;
    case 2: qk_rows2(k + j * d, qt, d, scale, st + j * TQ); break;
    case 1: qk_rows1(k + j * d, qt, d, scale, st + j * TQ); break;
    default: break;
    }
}

/* All TQ columns at once (4 zmm): the column max, then the exponentials. */
void attn_softmax_tile_avx512(float *st, int nk, float *M, float *L, float *ms) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    __m512 mold[4], m[4], sum[4];
    __mmask16 none[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) m[c] = mold[c] = _mm512_loadu_ps(M + c * 16);
    for (int j = 0; j < nk; j++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) m[c] = _mm512_max_ps(m[c], _mm512_loadu_ps(st + j * TQ + c * 16));
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        /* a column with no finite score yet keeps m = -inf: its p are 0 */
        none[c] = _mm512_cmp_ps_mask(m[c], ninf, _CMP_EQ_OQ);
        sum[c] = _mm512_setzero_ps();
    }
    for (int j = 0; j < nk; j++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            float *s = st + j * TQ + c * 16;
            const __m512 p =
                _mm512_maskz_mov_ps((__mmask16)~none[c], exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s), m[c])));
            _mm512_storeu_ps(s, p);
            sum[c] = _mm512_add_ps(sum[c], p);
        }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __mmask16 same = _mm512_cmp_ps_mask(mold[c], m[c], _CMP_EQ_OQ);
        const __m512 f = _mm512_mask_blend_ps(same, exp_nonpos16(_mm512_sub_ps(mold[c], m[c])), one);
        _mm512_storeu_ps(ms + c * 16, f);
        _mm512_storeu_ps(L + c * 16, _mm512_fmadd_ps(_mm512_loadu_ps(L + c * 16), f, sum[c]));
        _mm512_storeu_ps(M + c * 16, m[c]);
    }
}

/* Query rows [0, R) of o (row stride d; p's rows PS apart), head columns [0, 16 NZ) and, with
 * TAIL, the columns of tm past them (AVX2's scalar tail: the product
 * rounded, then the sum, no FMA; ISO C11 builds with GCC do not contract
 * it), against nk rows of p and v. */
AI void pv_block(const float *p, const int PS, int nk, const float *v, int d, const float *ms, float *o, const int R,
                 const int NZ, const int TAIL, __mmask16 tm) {
    __m512 a[8][4], at[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const __m512 f = _mm512_set1_ps(ms[r]);
#pragma GCC unroll 4
        for (int c = 0; c < NZ; c++) a[r][c] = _mm512_mul_ps(_mm512_loadu_ps(o + r * d + c * 16), f);
        if (TAIL) at[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, o + r * d + NZ * 16), f);
    }
    for (int j = 0; j < nk; j++) {
        const float *vj = v + j * d, *pj = p + j * PS;
        __m512 vc[4], vt = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < NZ; c++) vc[c] = _mm512_loadu_ps(vj + c * 16);
        if (TAIL) vt = _mm512_maskz_loadu_ps(tm, vj + NZ * 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 pb = _mm512_set1_ps(pj[r]);
#pragma GCC unroll 4
            for (int c = 0; c < NZ; c++) a[r][c] = _mm512_fmadd_ps(pb, vc[c], a[r][c]);
            if (TAIL) at[r] = _mm512_add_ps(at[r], _mm512_mul_ps(pb, vt));
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (int c = 0; c < NZ; c++) _mm512_storeu_ps(o + r * d + c * 16, a[r][c]);
        if (TAIL) _mm512_mask_storeu_ps(o + r * d + NZ * 16, tm, at[r]);
    }
}

/* One chunk of head columns for all TQ query rows: 4 rows at a time, or 8
 * where the chunk is at most 2 zmm wide. */
#define PV_CHUNK(NZ, TAIL)                                                                                           \
    static void pv_chunk_##NZ##_##TAIL(const float *p, int nk, const float *v, int d, const float *ms, float *o,     \
                                       __mmask16 tm) {                                                               \
        enum { R = (NZ) + (TAIL) <= 2 ? 8 : 4 };                                                                     \
        for (int i = 0; i < TQ; i += R) pv_block(p + i, TQ, nk, v, d, ms + i, o + i * d, R, NZ, TAIL, tm);           \
    }
PV_CHUNK(1, 0)
PV_CHUNK(2, 0)
PV_CHUNK(3, 0)
PV_CHUNK(4, 0)
PV_CHUNK(0, 1)
PV_CHUNK(1, 1)
PV_CHUNK(2, 1)
PV_CHUNK(3, 1)
PV_CHUNK(4, 1)
#undef PV_CHUNK

void attn_pv_tile_avx512(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    typedef void (*chunk_fn)(const float *, int, const float *, int, const float *, float *, __mmask16);
    static const chunk_fn chunks[5][2] = {{NULL, pv_chunk_0_1},
                                          {pv_chunk_1_0, pv_chunk_1_1},
                                          {pv_chunk_2_0, pv_chunk_2_1},
                                          {pv_chunk_3_0, pv_chunk_3_1},
                                          {pv_chunk_4_0, pv_chunk_4_1}};
    const int nz = d / 16, tail = d % 16 != 0; /* AVX2's SIMD columns, its scalar tail */
    const __mmask16 tm = (__mmask16)((1u << (d % 16)) - 1);
    /* the zmm columns in chunks of at most 4, as even as possible; the tail
     * goes with the last chunk */
    const int n_chunks = nz > 0 ? (nz + 3) / 4 : tail;
    int t = 0;
    for (int c = 0; c < n_chunks; c++) {
        const int w = nz / n_chunks + (c < nz % n_chunks), last = c == n_chunks - 1;
        chunks[w][last && tail](p, nk, v + t, d, ms, o + t, tm);
        t += 16 * w;
    }
}

/* ---- narrow tiles ----------------------------------------------------------
 * pv over the first nc of PH_ATTN_TILE_N columns: pv_block as above, four,
 * two or one column at a time. */

#define TN PH_ATTN_TILE_N

#define PVN_CHUNK(NZ, TAIL)                                                                                          \
    static void pvn_chunk_##NZ##_##TAIL(const float *p, int nk, const float *v, int d, const float *ms, float *o,    \
                                        __mmask16 tm, int nc) {                                                      \
        int i = 0;                                                                                                   \
        for (; i + 4 <= nc; i += 4) pv_block(p + i, TN, nk, v, d, ms + i, o + i * d, 4, NZ, TAIL, tm);               \
        for (; i + 2 <= nc; i += 2) pv_block(p + i, TN, nk, v, d, ms + i, o + i * d, 2, NZ, TAIL, tm);               \
        for (; i < nc; i++) pv_block(p + i, TN, nk, v, d, ms + i, o + i * d, 1, NZ, TAIL, tm);                       \
    }
PVN_CHUNK(1, 0)
PVN_CHUNK(2, 0)
PVN_CHUNK(3, 0)
PVN_CHUNK(4, 0)
PVN_CHUNK(0, 1)
PVN_CHUNK(1, 1)
PVN_CHUNK(2, 1)
PVN_CHUNK(3, 1)
PVN_CHUNK(4, 1)
#undef PVN_CHUNK

void attn_pv_narrow_avx512(const float *p, int nk, const float *v, int d, const float *ms, float *o, int nc) {
    typedef void (*chunk_fn)(const float *, int, const float *, int, const float *, float *, __mmask16, int);
    static const chunk_fn chunks[5][2] = {{NULL, pvn_chunk_0_1},
                                          {pvn_chunk_1_0, pvn_chunk_1_1},
                                          {pvn_chunk_2_0, pvn_chunk_2_1},
                                          {pvn_chunk_3_0, pvn_chunk_3_1},
                                          {pvn_chunk_4_0, pvn_chunk_4_1}};
    const int nz = d / 16, tail = d % 16 != 0;
    const __mmask16 tm = (__mmask16)((1u << (d % 16)) - 1);
    const int n_chunks = nz > 0 ? (nz + 3) / 4 : tail;
    int t = 0;
    for (int c = 0; c < n_chunks; c++) {
        const int w = nz / n_chunks + (c < nz % n_chunks), last = c == n_chunks - 1;
        chunks[w][last && tail](p, nk, v + t, d, ms, o + t, tm, nc);
        t += 16 * w;
    }
}
