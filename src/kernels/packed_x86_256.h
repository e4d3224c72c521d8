/* What the 256-bit packed-weight kernels share (packed_avx2.c and
 * packed_avxvnni.c; layouts in kernels_impl.h): loads, the store of a
 * 16-row group's two halves, the K-quant tiles' setup, their mins term and
 * their float steps (the scalar reference's, in its order), and the
 * dispatch by activation rows. Only how the integer sums are made differs.
 * A template: the including file (compiled with its own target flags)
 * defines PK_MADD_ACC(s, a, b), s plus the int32 sums of a's and b's int16
 * pair products, first. Include it once. */
#ifndef PH_KERNELS_PACKED_X86_256_H
#define PH_KERNELS_PACKED_X86_256_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define INLINE      static inline __attribute__((always_inline))
#define UNROLL      _Pragma("GCC unroll 8")
#define MX          6 /* activation rows per prefill call (measured: 6 > 4 > 2) */
/* Software prefetch distance (see packed_avx512.c), issued in the first
 * half's pass over each 64-byte line. */
#define PF_K        (4 * PH_PK_Q5_K_BYTES)
#define PF_0        (16 * PH_PK_Q8_0_BYTES)
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

INLINE __m256i ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m128i ld128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
INLINE __m256i bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
INLINE __m256 ld_f16x8(const void *p) { return _mm256_cvtph_ps(ld128(p)); }
INLINE __m256i mub(__m256i u, __m256i x) { return _mm256_maddubs_epi16(u, x); }

/* acc[h] holds outputs 8h .. 8h+7 */
INLINE void store(float *y, const __m256 *acc, int no) {
    if (no == PH_PK_ROWS) {
        _mm256_storeu_ps(y, acc[0]);
        _mm256_storeu_ps(y + 8, acc[1]);
    } else {
        float t[PH_PK_ROWS];
        _mm256_storeu_ps(t, acc[0]);
        _mm256_storeu_ps(t + 8, acc[1]);
        memcpy(y, t, sizeof(float) * (size_t)no);
    }
}

typedef struct {
    float d;
    int32_t c128;
} q8_0_extra;

/* ---- Q4_K and Q5_K --------------------------------------------------------------- */

/* The NR activation rows of a K-quant tile (their blocks and the bsums
 * pairs after them) and zeroed accumulators. */
INLINE void kq_rows(const uint8_t *x, size_t xb, int64_t nb, const ph_block_q8_K **xr, const int16_t **ex,
                    __m256 (*acc)[2], const int NR) {
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const ph_block_q8_K *)(x + r * xb);
        ex[r] = (const int16_t *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(ph_block_q8_K)));
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
}

/* summ = Σ min·bsum over the 8 sub-blocks of half h of block i. */
INLINE void kq_mins(__m256i *summ, const uint8_t *mn, int h, const int16_t *const *ex, int64_t i, const int NR) {
    UNROLL for (int m = 0; m < 4; m++) {
        __m256i mp = _mm256_cvtepu8_epi16(ld128(mn + 32 * m + 16 * h));
        UNROLL for (int r = 0; r < NR; r++) summ[r] = PK_MADD_ACC(summ[r], mp, bc32(ex[r] + 8 * i + 2 * m));
    }
}

/* acc[r][h] += xd·d·sumi − xd·dmin·summ, the reference's float steps. */
INLINE void kq_accumulate(__m256 (*acc)[2], int h, const uint8_t *wg, const ph_block_q8_K *const *xr, int64_t i,
                          const __m256i *sumi, const __m256i *summ, const int NR) {
    __m256 d = ld_f16x8(wg + 16 * h), dmin = ld_f16x8(wg + 32 + 16 * h);
    UNROLL for (int r = 0; r < NR; r++) {
        __m256 xd = _mm256_set1_ps(xr[r][i].d);
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(xd, d), _mm256_cvtepi32_ps(sumi[r]));
        __m256 b = _mm256_mul_ps(_mm256_mul_ps(xd, dmin), _mm256_cvtepi32_ps(summ[r]));
        acc[r][h] = _mm256_add_ps(acc[r][h], _mm256_sub_ps(a, b));
    }
}

/* Bit `bit` of every byte moved to bit 4 (shifts within 16-bit lanes: what
 * crosses a byte boundary lands outside bit 4). */
INLINE __m256i bit_to4(__m256i h, const int bit) {
    if (bit < 4) h = _mm256_slli_epi16(h, (unsigned)(4 - bit));
    if (bit > 4) h = _mm256_srli_epi16(h, (unsigned)(bit - 4));
    return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}

/* ---- the table's entry points ------------------------------------------------------ */

#define TILE(T)                                                                                                      \
    static void tile_##T(int64_t n, const void *wg, const void *x, size_t xb, int nr, float *y, size_t ldy,          \
                         int no) {                                                                                   \
        switch (nr) {                                                                                                \
        case 1: T##_tile(n, wg, x, xb, y, ldy, no, 1); break;                                                        \
        case 2: T##_tile(n, wg, x, xb, y, ldy, no, 2); break;                                                        \
        case 3: T##_tile(n, wg, x, xb, y, ldy, no, 3); break;                                                        \
        case 4: T##_tile(n, wg, x, xb, y, ldy, no, 4); break;                                                        \
        case 5: T##_tile(n, wg, x, xb, y, ldy, no, 5); break;                                                        \
        default: T##_tile(n, wg, x, xb, y, ldy, no, MX); break;                                                      \
        }                                                                                                            \
    }

#endif
