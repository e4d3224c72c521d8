/* AVX-512 per-cell attention pass (one query row or a short batch: decode).
 * The same arithmetic as the AVX2 pass in the same order, bit for bit: the
 * dot product's 16 lanes are AVX2's two accumulators of 8 side by side, and
 * the f16 roundings of the running sum are per element. */
#include <immintrin.h>
#include <math.h>

#include "kernels/attention.h"

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float dot_f16row(const float *q, const ph_f16 *k, int n) {
    __m512 s = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        s = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i))), s);
    __m256 s0 = _mm512_castps512_ps256(s), s1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), s0);
    float r = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) r += q[i] * _cvtsh_ss(k[i]);
    return r;
}

static inline void scale_f16row(float *acc, float a, int n) {
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(acc + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(_mm512_loadu_ps(acc + i), va),
                                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    for (; i < n; i++) acc[i] = _cvtsh_ss(_cvtss_sh(acc[i] * a, _MM_FROUND_TO_NEAREST_INT));
}

static inline void mad_f16row(float *acc, const ph_f16 *v, float b, int n) {
    const __m512 vb = _mm512_set1_ps(b);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 y = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + i))), vb,
                                   _mm512_loadu_ps(acc + i));
        _mm512_storeu_ps(acc + i, _mm512_cvtph_ps(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
    for (; i < n; i++) acc[i] = _cvtsh_ss(_cvtss_sh(fmaf(_cvtsh_ss(v[i]), b, acc[i]), _MM_FROUND_TO_NEAREST_INT));
}

#define ATTN_CELLS_NAME ph_attn_cells_avx512
#include "kernels/attention_cells.h"
