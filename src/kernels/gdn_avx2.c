/* AVX2 versions of the gated delta net's kernels (kernels/gdn.h). */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/gdn.h"

/* the reference's products and sums, 8 channels side by side */
static void avx2_conv(float *st, const float *w, const float *x, float *u, int n, int ld, int kc) {
    int c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 xc = _mm256_loadu_ps(x + c);
        __m256 s = _mm256_setzero_ps();
        for (int i = 0; i < kc - 1; i++)
            s = _mm256_add_ps(
                s, _mm256_mul_ps(_mm256_loadu_ps(st + (size_t)i * ld + c), _mm256_loadu_ps(w + (size_t)i * ld + c)));
        s = _mm256_add_ps(s, _mm256_mul_ps(xc, _mm256_loadu_ps(w + (size_t)(kc - 1) * ld + c)));
        for (int i = 0; i + 1 < kc - 1; i++)
            _mm256_storeu_ps(st + (size_t)i * ld + c, _mm256_loadu_ps(st + (size_t)(i + 1) * ld + c));
        if (kc > 1) _mm256_storeu_ps(st + (size_t)(kc - 2) * ld + c, xc);
        _mm256_storeu_ps(u + c, s);
    }
    if (c < n) gdn_kernels_ref.conv(st + c, w + c, x + c, u + c, n - c, ld, kc);
}

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the state's elements are the reference's given the same delta; the dot
 * products are summed in another order */
static void avx2_step(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                      float *o, int dk, int dv) {
    if (dk % 8) {
        gdn_kernels_ref.step(S, q, k, v, decay, beta, scale, o, dk, dv);
        return;
    }
    const __m256 vdecay = _mm256_set1_ps(decay);
    for (int j = 0; j < dv; j++) {
        float *r = S + (size_t)j * dk;
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(r + i), vdecay);
            _mm256_storeu_ps(r + i, x);
            acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(k + i), acc);
        }
        const __m256 d = _mm256_set1_ps((v[j] - hsum(acc)) * beta);
        acc = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 8) {
            const __m256 x = _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_mul_ps(_mm256_loadu_ps(k + i), d));
            _mm256_storeu_ps(r + i, x);
            acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(q + i), acc);
        }
        o[j] = hsum(acc) * scale;
    }
}

const gdn_kernels gdn_kernels_avx2 = {avx2_conv, avx2_step};
