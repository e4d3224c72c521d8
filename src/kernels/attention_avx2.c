/* AVX2/F16C/FMA versions of the attention primitives. */
#include <immintrin.h>

#include "kernels/attention.h"

static void avx2_f16_to_f32(const ph_f16 *src, float *dst, int n) {
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

static void avx2_scale_add(float *acc, float a, const float *v, float b, int n) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(acc + i), va);
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vb, x));
    }
    for (; i < n; i++) acc[i] = acc[i] * a + v[i] * b;
}

const ph_attn_kernels ph_attn_kernels_avx2 = {avx2_f16_to_f32, avx2_dot, avx2_scale_add};
