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

static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float avx2_dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* acc = f16(acc * a): the product rounded to f16, kept as f32 */
static void avx2_scale_f16(float *acc, float a, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(acc + i), va),
                                                                  _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) acc[i] = _cvtsh_ss(_cvtss_sh(acc[i] * a, _MM_FROUND_TO_NEAREST_INT));
}

/* acc = f16(acc + v * b) */
static void avx2_mad_f16(float *acc, const float *v, float b, int n) {
    const __m256 vb = _mm256_set1_ps(b);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vb, _mm256_loadu_ps(acc + i));
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = _cvtsh_ss(_cvtss_sh(fmaf(v[i], b, acc[i]), _MM_FROUND_TO_NEAREST_INT));
}

/* q . row of f16 values, in avx2_dot's order (the row widened on the way):
 * the same sum as avx2_dot(q, f32(row)) bit for bit. */
static inline float dot_f16row(const float *q, const f16_bits *k, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i + 8))), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += q[i] * _cvtsh_ss(k[i]);
    return s;
}

/* acc = f16(acc + f32(v) * b): avx2_mad_f16 with the row widened on the way. */
static inline void mad_f16row(float *acc, const f16_bits *v, float b, int n) {
    const __m256 vb = _mm256_set1_ps(b);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y =
            _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))), vb, _mm256_loadu_ps(acc + i));
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = _cvtsh_ss(_cvtss_sh(fmaf(_cvtsh_ss(v[i]), b, acc[i]), _MM_FROUND_TO_NEAREST_INT));
}

#define scale_f16row    avx2_scale_f16
#define ATTN_CELLS_NAME attn_cells_avx2
#include "kernels/attention_cells.h"
#undef scale_f16row

/* ---- tiled path ------------------------------------------------------------ */

#define TQ PH_ATTN_TILE_Q

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

static void avx2_softmax_tile(float *st, int nk, float *M, float *L, float *ms) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < TQ; i += 8) {
        const __m256 mold = _mm256_loadu_ps(M + i);
        __m256 m = mold;
        for (int j = 0; j < nk; j++) m = _mm256_max_ps(m, _mm256_loadu_ps(st + j * TQ + i));
        /* a column with no finite score yet keeps m = -inf: its p are 0 */
        const __m256 none = _mm256_cmp_ps(m, ninf, _CMP_EQ_OQ);
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < nk; j++) {
            __m256 p = _mm256_andnot_ps(none, exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(st + j * TQ + i), m)));
            _mm256_storeu_ps(st + j * TQ + i, p);
            sum = _mm256_add_ps(sum, p);
        }
        const __m256 same = _mm256_cmp_ps(mold, m, _CMP_EQ_OQ);
        const __m256 f = _mm256_blendv_ps(exp_nonpos(_mm256_sub_ps(mold, m)), _mm256_set1_ps(1.0f), same);
        _mm256_storeu_ps(ms + i, f);
        _mm256_storeu_ps(L + i, _mm256_fmadd_ps(_mm256_loadu_ps(L + i), f, sum));
        _mm256_storeu_ps(M + i, m);
    }
}

/* Query rows [i, i + 4) of o, columns [t, t + 16), against nk rows of p
 * and v (named accumulators, as in qk_rows4). */
static void pv_block(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    float *o0 = o, *o1 = o + d, *o2 = o + 2 * d, *o3 = o + 3 * d;
    __m256 f = _mm256_broadcast_ss(ms);
    __m256 a00 = _mm256_mul_ps(_mm256_loadu_ps(o0), f), a01 = _mm256_mul_ps(_mm256_loadu_ps(o0 + 8), f);
    f = _mm256_broadcast_ss(ms + 1);
    __m256 a10 = _mm256_mul_ps(_mm256_loadu_ps(o1), f), a11 = _mm256_mul_ps(_mm256_loadu_ps(o1 + 8), f);
    f = _mm256_broadcast_ss(ms + 2);
    __m256 a20 = _mm256_mul_ps(_mm256_loadu_ps(o2), f), a21 = _mm256_mul_ps(_mm256_loadu_ps(o2 + 8), f);
    f = _mm256_broadcast_ss(ms + 3);
    __m256 a30 = _mm256_mul_ps(_mm256_loadu_ps(o3), f), a31 = _mm256_mul_ps(_mm256_loadu_ps(o3 + 8), f);
    for (int j = 0; j < nk; j++) {
        const __m256 v0 = _mm256_loadu_ps(v + j * d), v1 = _mm256_loadu_ps(v + j * d + 8);
        const float *pj = p + j * TQ;
        __m256 pb = _mm256_broadcast_ss(pj);
        a00 = _mm256_fmadd_ps(pb, v0, a00);
        a01 = _mm256_fmadd_ps(pb, v1, a01);
        pb = _mm256_broadcast_ss(pj + 1);
        a10 = _mm256_fmadd_ps(pb, v0, a10);
        a11 = _mm256_fmadd_ps(pb, v1, a11);
        pb = _mm256_broadcast_ss(pj + 2);
        a20 = _mm256_fmadd_ps(pb, v0, a20);
        a21 = _mm256_fmadd_ps(pb, v1, a21);
        pb = _mm256_broadcast_ss(pj + 3);
        a30 = _mm256_fmadd_ps(pb, v0, a30);
        a31 = _mm256_fmadd_ps(pb, v1, a31);
    }
    _mm256_storeu_ps(o0, a00);
    _mm256_storeu_ps(o0 + 8, a01);
    _mm256_storeu_ps(o1, a10);
    _mm256_storeu_ps(o1 + 8, a11);
    _mm256_storeu_ps(o2, a20);
    _mm256_storeu_ps(o2 + 8, a21);
    _mm256_storeu_ps(o3, a30);
    _mm256_storeu_ps(o3 + 8, a31);
}

static void avx2_pv_tile(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    const int d16 = d & ~15;
    for (int i = 0; i < TQ; i += 4) {
        for (int t = 0; t < d16; t += 16) pv_block(p + i, nk, v + t, d, ms + i, o + i * d + t);
        for (int r = i; r < i + 4; r++) /* columns past the last multiple of 16 */
            for (int t = d16; t < d; t++) {
                float acc = o[r * d + t] * ms[r];
                for (int j = 0; j < nk; j++) acc += p[j * TQ + r] * v[j * d + t];
                o[r * d + t] = acc;
            }
    }
}

const attn_kernels attn_kernels_avx2 = {attn_cells_avx2, avx2_f16_to_f32, avx2_dot,          avx2_scale_f16,
                                        avx2_mad_f16,    avx2_qk_tile,    avx2_softmax_tile, avx2_pv_tile};

/* AVX-512: its own per-cell pass and tiles (attention_avx512.c, the AVX2
 * ones' results bit for bit), the AVX2 per-element primitives. */
const attn_kernels attn_kernels_avx512 = {attn_cells_avx512,        avx2_f16_to_f32,    avx2_dot,
                                          avx2_scale_f16,           avx2_mad_f16,       attn_qk_tile_avx512,
                                          attn_softmax_tile_avx512, attn_pv_tile_avx512};
