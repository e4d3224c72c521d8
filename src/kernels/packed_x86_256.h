/* What the 256-bit packed-weight kernels share (packed_avx2.c and
 * packed_avxvnni.c; layouts in kernels_impl.h): loads, the store of a
 * 16-row group's two halves, the tiles' setup, the K-quants' mins term, the
 * float steps (the scalar reference's, in its order), the whole Q6_K tile
 * and the dispatch by activation rows. Elsewhere only how the integer sums
 * are made differs.
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
/* Software prefetch distance and hint (see packed_avx512.c), issued in the first
 * half's pass over each 64-byte line. */
#define PF_K        (4 * PH_PK_Q5_K_BYTES)
#define PF_0        (16 * PH_PK_Q8_0_BYTES)
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

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

/* An accumulator GCC keeps as a chain (it would otherwise reassociate the
 * unrolled integer sums into trees whose many live terms spill). */
INLINE __m256i chain(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
}

/* ---- Q8_0 and Q4_0 ------------------------------------------------------------------ */

typedef struct {
    float d;
    int32_t c128;
} q8_0_extra;

/* The NR activation rows of a Q8_0 / Q4_0 tile (their blocks and the extras
 * after them) and zeroed accumulators. */
INLINE void q8_rows(const uint8_t *x, size_t xb, int64_t nb, const block_q8_0 **xr, const q8_0_extra **ex,
                    __m256 (*acc)[2], const int NR) {
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_0 *)(x + r * xb);
        ex[r] = (const q8_0_extra *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_0)));
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
}

/* acc[r][h] += (sumi[r] - off[r]) · (dw · dx), the reference's float steps
 * (s += sumi * (dw * dx)); off is the block's 128·Σx >> shift (what an
 * unsigned weight byte adds), or nothing with shift < 0. */
INLINE void q8_accumulate(__m256 (*acc)[2], int h, const uint8_t *wg, const q8_0_extra *const *ex, int64_t i,
                          const __m256i *sumi, const int shift, const int NR) {
    __m256 dw = ld_f16x8(wg + 16 * h);
    UNROLL for (int r = 0; r < NR; r++) {
        __m256i s = shift < 0 ? sumi[r] : _mm256_sub_epi32(sumi[r], _mm256_set1_epi32(ex[r][i].c128 >> shift));
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(ex[r][i].d)));
        acc[r][h] = _mm256_add_ps(acc[r][h], t);
    }
}

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

/* ---- Q6_K ------------------------------------------------------------------------- */

/* The same for both files: maddubs pairs (two sub-block steps in int16) scaled
 * by PK_MADD_ACC (with AVX-VNNI one VPDPWSSD, which measured faster than
 * VPDPBUSD and a VPMULLD per sub-block). */

INLINE void q6_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK_K;
    const ph_block_q8_K *xr[MX];
    __m256 acc[MX][2];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const ph_block_q8_K *)(x + r * xb);
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q6_K_BYTES) {
        const uint8_t *sc = wg + 32, *ql = wg + 288, *qh = wg + 288 + 128;
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i sumi[MX], corr[MX];
            UNROLL for (int r = 0; r < NR; r++) sumi[r] = corr[r] = _mm256_setzero_si256();
            for (int m = 0; m < 8; m++) {
                /* scales 2m and 2m+1 of each row as int16 pairs, and each in both int16 of the lane */
                __m256i sp = _mm256_cvtepi8_epi16(ld128(sc + 32 * m + 16 * h));
                __m256i sk[2] = {_mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sp, 0xA0), 0xA0),
                                 _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(sp, 0xF5), 0xF5)};
                UNROLL for (int hh = 0; hh < 2; hh++) {
                    int k = 2 * m + hh;
                    if (h == 0) {
                        PREFETCH(ql + 192 * k + PF_K);
                        PREFETCH(ql + 192 * k + 64 + PF_K);
                        PREFETCH(ql + 192 * k + 128 + PF_K);
                    }
                    __m256i l0 = ld(ql + 192 * k + 32 * h), l1 = ld(ql + 192 * k + 64 + 32 * h),
                            hb = ld(qh + 192 * k + 32 * h);
                    __m256i u[4] = {
                        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                        _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(hb, m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
                    };
                    UNROLL for (int r = 0; r < NR; r++) {
                        const int8_t *xq = xr[r][i].qs + 16 * k;
                        /* 0..63 times x: pairs <= 16128, two of them add in int16 */
                        __m256i a = _mm256_add_epi16(mub(u[0], bc32(xq)), mub(u[1], bc32(xq + 4)));
                        __m256i b = _mm256_add_epi16(mub(u[2], bc32(xq + 8)), mub(u[3], bc32(xq + 12)));
                        sumi[r] = chain(PK_MADD_ACC(PK_MADD_ACC(sumi[r], a, sk[hh]), b, sk[hh]));
                    }
                }
                UNROLL for (int r = 0; r < NR; r++) corr[r] = PK_MADD_ACC(corr[r], sp, bc32(xr[r][i].bsums + 2 * m));
            }
            __m256 d = ld_f16x8(wg + 16 * h);
            UNROLL for (int r = 0; r < NR; r++) {
                /* Σ sc·(q - 32)·x = Σ sc·q·x - 32·Σ sc·bsum; reference: s += d * xd * sumi */
                __m256i t = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(corr[r], 5));
                __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(xr[r][i].d)), _mm256_cvtepi32_ps(t));
                acc[r][h] = _mm256_add_ps(acc[r][h], a);
            }
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
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
