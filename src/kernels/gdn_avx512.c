/* AVX512 versions of the gated delta net's kernels (kernels/gdn.h). */
#include <immintrin.h>
#include <stddef.h>

#include "kernels/gdn.h"

/* the reference's products and sums, 16 channels side by side (the last
 * block masked) */
static void avx512_conv(float *st, const float *w, const float *x, float *u, int n, int ld, int kc) {
    for (int c = 0; c < n; c += 16) {
        const __mmask16 m = n - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c)) - 1);
        const __m512 xc = _mm512_maskz_loadu_ps(m, x + c);
        __m512 s = _mm512_setzero_ps();
        float *row = st + c;
        const float *wr = w + c;
        for (int i = 0; i < kc - 1; i++, row += ld, wr += ld) {
            s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row), _mm512_maskz_loadu_ps(m, wr)));
            /* the state moves up a row as it is read */
            _mm512_mask_storeu_ps(row, m, i + 1 < kc - 1 ? _mm512_maskz_loadu_ps(m, row + ld) : xc);
        }
        _mm512_mask_storeu_ps(u + c, m, _mm512_add_ps(s, _mm512_mul_ps(xc, _mm512_maskz_loadu_ps(m, wr))));
    }
}

/* One pass over a state row r of dk values in blocks of 16 (the last
 * masked): r = r * a + b * y (b's products first, as the reference does),
 * returning r . z. */
static inline float row_pass(float *r, __m512 a, const float *y, __m512 b, const float *z, int dk) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < dk; i += 16) {
        const __mmask16 m = dk - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dk - i)) - 1);
        const __m512 x = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, r + i), a),
                                       _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), b));
        _mm512_mask_storeu_ps(r + i, m, x);
        acc = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, z + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* any dk: the decay as r * decay + k * 0, the update as r * 1 + k * delta
 * (adding 0 and multiplying by 1 change no bits); the dot products are
 * summed in another order than the reference's */
static void avx512_step(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                        float scale, float *o, int dk, int dv) {
    const __m512 vdecay = _mm512_set1_ps(decay), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    for (int j = 0; j < dv; j++) {
        float *r = S + (size_t)j * dk;
        const float delta = (v[j] - row_pass(r, vdecay, k, zero, k, dk)) * beta;
        o[j] = row_pass(r, one, k, _mm512_set1_ps(delta), q, dk) * scale;
    }
}

const gdn_kernels gdn_kernels_avx512 = {avx512_conv, avx512_step};
