/* AVX2/F16C/FMA versions of the attention primitives. */
#include <immintrin.h>
#include <math.h>

#include "kernels/attention.h"

static void avx2_f16_to_f32(const f16_bits *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

/* ---- tiled path ------------------------------------------------------------ */

#define TQ PH_ATTN_TILE_Q
#define AI static inline __attribute__((always_inline))

/* exp(x) for x <= 0 (softmax arguments), Cephes-style: x = n ln2 + r with
 * |r| <= ln2/2, exp(r) by a degree-6 polynomial (about 1 ulp), times 2^n;
 * 0 below -87.3 (and for -inf). */
static inline __m256 exp_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n through the exponent field; n >= -126 after the clamp */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Four rows of keys against all TQ query columns (the accumulators are
 * named, not an array, so they stay in registers). */
static void qk_rows4(const float *k, const float *qt, int d, float scale, float *st) {
    const __m256 sc = _mm256_set1_ps(scale);
    const float *k0 = k, *k1 = k + d, *k2 = k + 2 * d, *k3 = k + 3 * d;
    for (int i = 0; i < TQ; i += 16) {
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
        __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (int t = 0; t < d; t++) {
            const __m256 q0 = _mm256_loadu_ps(qt + t * TQ + i), q1 = _mm256_loadu_ps(qt + t * TQ + i + 8);
            __m256 kb = _mm256_broadcast_ss(k0 + t);
            a00 = _mm256_fmadd_ps(kb, q0, a00);
            a01 = _mm256_fmadd_ps(kb, q1, a01);
            kb = _mm256_broadcast_ss(k1 + t);
            a10 = _mm256_fmadd_ps(kb, q0, a10);
            a11 = _mm256_fmadd_ps(kb, q1, a11);
            kb = _mm256_broadcast_ss(k2 + t);
            a20 = _mm256_fmadd_ps(kb, q0, a20);
            a21 = _mm256_fmadd_ps(kb, q1, a21);
            kb = _mm256_broadcast_ss(k3 + t);
            a30 = _mm256_fmadd_ps(kb, q0, a30);
            a31 = _mm256_fmadd_ps(kb, q1, a31);
        }
        _mm256_storeu_ps(st + i, _mm256_mul_ps(a00, sc));
        _mm256_storeu_ps(st + i + 8, _mm256_mul_ps(a01, sc));
        _mm256_storeu_ps(st + TQ + i, _mm256_mul_ps(a10, sc));
        _mm256_storeu_ps(st + TQ + i + 8, _mm256_mul_ps(a11, sc));
        _mm256_storeu_ps(st + 2 * TQ + i, _mm256_mul_ps(a20, sc));
        _mm256_storeu_ps(st + 2 * TQ + i + 8, _mm256_mul_ps(a21, sc));
        _mm256_storeu_ps(st + 3 * TQ + i, _mm256_mul_ps(a30, sc));
        _mm256_storeu_ps(st + 3 * TQ + i + 8, _mm256_mul_ps(a31, sc));
    }
}

/* One row of keys against all TQ query columns. */
static void qk_row1(const float *k, const float *qt, int d, float scale, float *st) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int i = 0; i < TQ; i += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int t = 0; t < d; t++) {
            const __m256 kb = _mm256_broadcast_ss(k + t);
            a0 = _mm256_fmadd_ps(kb, _mm256_loadu_ps(qt + t * TQ + i), a0);
            a1 = _mm256_fmadd_ps(kb, _mm256_loadu_ps(qt + t * TQ + i + 8), a1);
        }
        _mm256_storeu_ps(st + i, _mm256_mul_ps(a0, sc));
        _mm256_storeu_ps(st + i + 8, _mm256_mul_ps(a1, sc));
    }
}

static void avx2_qk_tile(const float *k, int nk, const float *qt, int d, float scale, float *st) {
    int j = 0;
    for (; j + 4 <= nk; j += 4) qk_rows4(k + j * d, qt, d, scale, st + j * TQ);
    for (; j < nk; j++) qk_row1(k + j * d, qt, d, scale, st + j * TQ);
}

/* The softmax step of the 8 columns at st (rows T apart), M, L, ms. */
static inline void softmax_cols8(float *st, int nk, int T, float *M, float *L, float *ms) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256 mold = _mm256_loadu_ps(M);
    __m256 m = mold;
    for (int j = 0; j < nk; j++) m = _mm256_max_ps(m, _mm256_loadu_ps(st + j * T));
    /* a column with no finite score yet keeps m = -inf: its p are 0 */
    const __m256 none = _mm256_cmp_ps(m, ninf, _CMP_EQ_OQ);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nk; j++) {
        __m256 p = _mm256_andnot_ps(none, exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(st + j * T), m)));
        _mm256_storeu_ps(st + j * T, p);
        sum = _mm256_add_ps(sum, p);
    }
    const __m256 same = _mm256_cmp_ps(mold, m, _CMP_EQ_OQ);
    const __m256 f = _mm256_blendv_ps(exp_nonpos(_mm256_sub_ps(mold, m)), _mm256_set1_ps(1.0f), same);
    _mm256_storeu_ps(ms, f);
    _mm256_storeu_ps(L, _mm256_fmadd_ps(_mm256_loadu_ps(L), f, sum));
    _mm256_storeu_ps(M, m);
}

static void avx2_softmax_tile(float *st, int nk, float *M, float *L, float *ms) {
    for (int i = 0; i < TQ; i += 8) softmax_cols8(st + i, nk, TQ, M + i, L + i, ms + i);
}

/* Columns [0, NC) of o (rows d apart), head columns [0, 8 NV), against nk
 * rows of p (rows T apart) and v: per output o * ms, then one FMA per row
 * of p in order. */
AI void pv_block(const float *p, int T, int nk, const float *v, int d, const float *ms, float *o, const int NC,
                 const int NV) {
    __m256 a[4][4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) {
        const __m256 f = _mm256_broadcast_ss(ms + c);
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) a[c][u] = _mm256_mul_ps(_mm256_loadu_ps(o + c * d + 8 * u), f);
    }
    for (int j = 0; j < nk; j++) {
        __m256 vv[4];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) vv[u] = _mm256_loadu_ps(v + j * d + 8 * u);
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const __m256 pb = _mm256_broadcast_ss(p + j * T + c);
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++) a[c][u] = _mm256_fmadd_ps(pb, vv[u], a[c][u]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) _mm256_storeu_ps(o + c * d + 8 * u, a[c][u]);
}

/* Column r of o, head columns [t0, d): the product rounded, then the sum, no
 * FMA (ISO C11 builds with GCC do not contract it). */
static void pv_tail(const float *p, int T, int nk, const float *v, int d, const float *ms, float *o, int r, int t0) {
    for (int t = t0; t < d; t++) {
        float acc = o[r * d + t] * ms[r];
        for (int j = 0; j < nk; j++) acc += p[j * T + r] * v[j * d + t];
        o[r * d + t] = acc;
    }
}

static void avx2_pv_tile(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    const int d16 = d & ~15;
    for (int i = 0; i < TQ; i += 4) {
        for (int t = 0; t < d16; t += 16) pv_block(p + i, TQ, nk, v + t, d, ms + i, o + i * d + t, 4, 2);
        for (int r = i; r < i + 4; r++) pv_tail(p, TQ, nk, v, d, ms, o, r, d16);
    }
}

/* ---- narrow tiles: TN columns, each as in the wide tiles ------------------- */

#define TN PH_ATTN_TILE_N
_Static_assert(TN == 8, "a narrow tile's columns are one ymm");

/* Eight rows of keys against the TN columns: the chain of qk_rows4 per
 * output. */
static void qk_narrow_rows8(const float *k, const float *qt, int d, float scale, float *st) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int t = 0; t < d; t++) {
        const __m256 q = _mm256_loadu_ps(qt + t * TN);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + t), q, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + d + t), q, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 2 * d + t), q, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 3 * d + t), q, a3);
        a4 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 4 * d + t), q, a4);
        a5 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 5 * d + t), q, a5);
        a6 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 6 * d + t), q, a6);
        a7 = _mm256_fmadd_ps(_mm256_broadcast_ss(k + 7 * d + t), q, a7);
    }
    const __m256 sc = _mm256_set1_ps(scale);
    _mm256_storeu_ps(st, _mm256_mul_ps(a0, sc));
    _mm256_storeu_ps(st + TN, _mm256_mul_ps(a1, sc));
    _mm256_storeu_ps(st + 2 * TN, _mm256_mul_ps(a2, sc));
    _mm256_storeu_ps(st + 3 * TN, _mm256_mul_ps(a3, sc));
    _mm256_storeu_ps(st + 4 * TN, _mm256_mul_ps(a4, sc));
    _mm256_storeu_ps(st + 5 * TN, _mm256_mul_ps(a5, sc));
    _mm256_storeu_ps(st + 6 * TN, _mm256_mul_ps(a6, sc));
    _mm256_storeu_ps(st + 7 * TN, _mm256_mul_ps(a7, sc));
}

/* r[u][c] = r[c][u]: eight rows of eight floats transposed. */
static inline void transpose8(__m256 r[8]) {
    const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]),
                 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]),
                 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]),
                 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee),
                 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee),
                 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee),
                 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
    r[0] = _mm256_permute2f128_ps(b0, b4, 0x20);
    r[1] = _mm256_permute2f128_ps(b1, b5, 0x20);
    r[2] = _mm256_permute2f128_ps(b2, b6, 0x20);
    r[3] = _mm256_permute2f128_ps(b3, b7, 0x20);
    r[4] = _mm256_permute2f128_ps(b0, b4, 0x31);
    r[5] = _mm256_permute2f128_ps(b1, b5, 0x31);
    r[6] = _mm256_permute2f128_ps(b2, b6, 0x31);
    r[7] = _mm256_permute2f128_ps(b3, b7, 0x31);
}

/* Eight rows of keys against NC (1-4) columns, the rows in the lanes: each
 * lane the chain of qk_rows4 over t (k[t] * q[t] + s, fused), so the same
 * scores as the column-lane kernels, for a quarter to a half of their
 * instructions when the columns are few (a decoded row's query heads of
 * one KV head). */
static inline __attribute__((always_inline)) void qk_cells8(const float *k, const float *qt, int d, float scale,
                                                            float *st, const int NC) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int t = 0;
    for (; t + 8 <= d; t += 8) {
        __m256 r[8];
        for (int c = 0; c < 8; c++) r[c] = _mm256_loadu_ps(k + c * d + t);
        transpose8(r);
        for (int u = 0; u < 8; u++)
            for (int i = 0; i < NC; i++)
                acc[i] = _mm256_fmadd_ps(r[u], _mm256_broadcast_ss(qt + (t + u) * TN + i), acc[i]);
    }
    for (; t < d; t++) {
        const __m256 kc = _mm256_set_ps(k[7 * d + t], k[6 * d + t], k[5 * d + t], k[4 * d + t], k[3 * d + t],
                                        k[2 * d + t], k[d + t], k[t]);
        for (int i = 0; i < NC; i++) acc[i] = _mm256_fmadd_ps(kc, _mm256_broadcast_ss(qt + t * TN + i), acc[i]);
    }
    float out[4][8];
    for (int i = 0; i < NC; i++) _mm256_storeu_ps(out[i], _mm256_mul_ps(acc[i], _mm256_set1_ps(scale)));
    for (int c = 0; c < 8; c++) {
        for (int i = 0; i < NC; i++) st[c * TN + i] = out[i][c];
        for (int i = NC; i < TN; i++) st[c * TN + i] = 0.0f;
    }
}

static void avx2_qk_narrow(const float *k, int nk, const float *qt, int d, float scale, float *st, int nc) {
    int j = 0;
    if (nc <= 4) { /* the rows in the lanes; the other columns' scores are 0 */
        for (; j + 8 <= nk; j += 8) switch (nc) {
            case 1: qk_cells8(k + j * d, qt, d, scale, st + j * TN, 1); break;
            case 2: qk_cells8(k + j * d, qt, d, scale, st + j * TN, 2); break;
            case 3: qk_cells8(k + j * d, qt, d, scale, st + j * TN, 3); break;
            default: qk_cells8(k + j * d, qt, d, scale, st + j * TN, 4); break;
            }
        for (; j < nk; j++) {
            __m128 a = _mm_setzero_ps();
            for (int t = 0; t < d; t++)
                a = _mm_fmadd_ps(_mm_broadcast_ss(k + j * d + t), _mm_loadu_ps(qt + t * TN), a);
            _mm_storeu_ps(st + j * TN, _mm_mul_ps(a, _mm_set1_ps(scale)));
        }
        for (j = 0; j < nk; j++) _mm_storeu_ps(st + j * TN + 4, _mm_setzero_ps());
        return;
    }
    for (; j + 8 <= nk; j += 8) qk_narrow_rows8(k + j * d, qt, d, scale, st + j * TN);
    for (; j < nk; j++) {
        __m256 a = _mm256_setzero_ps();
        for (int t = 0; t < d; t++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(k + j * d + t), _mm256_loadu_ps(qt + t * TN), a);
        _mm256_storeu_ps(st + j * TN, _mm256_mul_ps(a, _mm256_set1_ps(scale)));
    }
}

static void avx2_softmax_narrow(float *st, int nk, float *M, float *L, float *ms) {
    softmax_cols8(st, nk, TN, M, L, ms);
}

/* Columns four, two or one at a time (a block of v then meets as many
 * columns as are left), 16 or 32 head columns per block, AVX2's scalar tail. */
static void avx2_pv_narrow(const float *p, int nk, const float *v, int d, const float *ms, float *o, int nc) {
    const int d16 = d & ~15;
    int i = 0;
    for (; i + 4 <= nc; i += 4)
        for (int t = 0; t < d16; t += 16) pv_block(p + i, TN, nk, v + t, d, ms + i, o + i * d + t, 4, 2);
    for (; i + 2 <= nc; i += 2) {
        int t = 0;
        for (; t + 32 <= d16; t += 32) pv_block(p + i, TN, nk, v + t, d, ms + i, o + i * d + t, 2, 4);
        for (; t < d16; t += 16) pv_block(p + i, TN, nk, v + t, d, ms + i, o + i * d + t, 2, 2);
    }
    for (; i < nc; i++) {
        int t = 0;
        for (; t + 32 <= d16; t += 32) pv_block(p + i, TN, nk, v + t, d, ms + i, o + i * d + t, 1, 4);
        for (; t < d16; t += 16) pv_block(p + i, TN, nk, v + t, d, ms + i, o + i * d + t, 1, 2);
    }
    for (int r = 0; r < nc; r++) pv_tail(p, TN, nk, v, d, ms, o, r, d16);
}

const attn_kernels attn_kernels_avx2 = {avx2_f16_to_f32, avx2_qk_tile,        avx2_softmax_tile, avx2_pv_tile,
                                        avx2_qk_narrow,  avx2_softmax_narrow, avx2_pv_narrow};

/* AVX-512: its own wide tiles and narrow pv (attention_avx512.c, the AVX2
 * ones' results bit for bit); the narrow qk and softmax are one ymm of
 * columns wide, AVX2's. */
const attn_kernels attn_kernels_avx512 = {avx2_f16_to_f32,      attn_qk_tile_avx512, attn_softmax_tile_avx512,
                                          attn_pv_tile_avx512,  avx2_qk_narrow,      avx2_softmax_narrow,
                                          attn_pv_narrow_avx512};
