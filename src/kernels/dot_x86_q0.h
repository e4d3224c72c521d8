/* Q8_0 / Q4_0 weights x Q8_0 activations, shared by the AVX2 and AVX-512
 * kernel files. A template: the including file (compiled with its own
 * target flags) defines INLINE, UNROLL, loadu256, loadu128, f16f, hsum256
 * and dot_i8 (its fastest signed-byte dot) first. Include it once. */
#ifndef PH_KERNELS_DOT_X86_Q0_H
#define PH_KERNELS_DOT_X86_Q0_H

/* Weight block as 32 signed bytes (Q4_0: low nibbles are elements 0..15). */
INLINE __m256i q0_w(const uint8_t *b, const int Q4) {
    if (!Q4) return loadu256(b + offsetof(block_q8_0, qs));
    __m128i t = loadu128(b + offsetof(block_q4_0, qs));
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

/* The f16 scale at the start of a block. */
INLINE uint16_t ld_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* Q8_0 (Q4 = 0) or Q4_0 (Q4 = 1) weights. Blocks go in pairs:
 * t = p0·(d_w0·d_x0) + p1·(d_w1·d_x1), acc += t, so the loop-carried chain is
 * one add per two blocks and each row needs one accumulator. (Converting the
 * scales of 8 blocks as one vector measured slower: it costs registers.) */
INLINE void q0_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr,
                    const int Q4) {
    const size_t wbs = Q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const uint8_t *wp = w;
    const block_q8_0 *xr[4];
    UNROLL for (int r = 0; r < nr; r++) xr[r] = (const block_q8_0 *)((const char *)x + r * xb);
    __m256 acc[4];
    UNROLL for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    int64_t nb = n / PH_QK8_0, i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i q0 = q0_w(wp + i * wbs, Q4), q1 = q0_w(wp + (i + 1) * wbs, Q4);
        float d0 = f16f(ld_u16(wp + i * wbs)), d1 = f16f(ld_u16(wp + (i + 1) * wbs));
        UNROLL for (int r = 0; r < nr; r++) {
            __m256 p0 = _mm256_cvtepi32_ps(dot_i8(q0, loadu256(xr[r][i].qs)));
            __m256 p1 = _mm256_cvtepi32_ps(dot_i8(q1, loadu256(xr[r][i + 1].qs)));
            __m256 t = _mm256_mul_ps(_mm256_set1_ps(d0 * f16f(xr[r][i].d)), p0);
            t = _mm256_fmadd_ps(_mm256_set1_ps(d1 * f16f(xr[r][i + 1].d)), p1, t);
            acc[r] = _mm256_add_ps(acc[r], t);
        }
    }
    if (i < nb) {
        __m256i q = q0_w(wp + i * wbs, Q4);
        float dw = f16f(ld_u16(wp + i * wbs));
        UNROLL for (int r = 0; r < nr; r++) {
            __m256 p = _mm256_cvtepi32_ps(dot_i8(q, loadu256(xr[r][i].qs)));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_set1_ps(dw * f16f(xr[r][i].d)), p));
        }
    }
    UNROLL for (int r = 0; r < nr; r++) y[r * ldy] = hsum256(acc[r]);
}
INLINE void q8_0_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    q0_rows(n, w, x, xb, y, ldy, nr, 0);
}
INLINE void q4_0_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    q0_rows(n, w, x, xb, y, ldy, nr, 1);
}

#endif
