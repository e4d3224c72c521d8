/* What the 256-bit packed-weight kernels share (packed_avx2.c and
 * packed_avxvnni.c; layouts in kernels_impl.h): loads, the store of a
 * 16-row group's two halves, the tiles' setup, the float steps (the scalar
 * reference's, in its order), and the Q4_0, Q4_K, Q5_K and Q6_K tiles
 * whole, with the few integer steps that differ chosen by PK_VNNI. Each
 * file keeps its own Q8_0 tile (and packed_avx2.c the F16 one); the entry
 * points come from packed_tiles.h.
 * A template: the including file (compiled with its own target flags)
 * defines PK_VNNI, 1 with AVX-VNNI's int8 and int16 dot instructions, 0
 * without, first. Include it once. */
#ifndef PH_KERNELS_PACKED_X86_256_H
#define PH_KERNELS_PACKED_X86_256_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* PK_MADD_ACC(s, a, b): s plus the int32 sums of a's and b's int16 pair products. */
#if PK_VNNI
#define PK_MADD_ACC(s, a, b) _mm256_dpwssd_avx_epi32((s), (a), (b))
#else
#define PK_MADD_ACC(s, a, b) _mm256_add_epi32((s), _mm256_madd_epi16((a), (b)))
#endif

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

/* How nibble products are summed, what the two files do differently in the
 * Q4_0, Q4_K and Q5_K tiles: with AVX-VNNI, VPDPBUSD into int32 (and a
 * K-quant sub-block's scale by VPMULLD); without, VPMADDUBSW pairs added in
 * int16 (KQ_RUN vectors at most: 0..15 times x, pairs <= 3840, four steps
 * <= 30720; 0..31, pairs <= 7936, two steps <= 31744), then VPMADDWD, by
 * ones or by the scale in both int16 of each lane. Exact either way.
 * nib_dot: s plus lo times x's bytes 0-3 and hi times its bytes 4-7, in
 * every lane; nib_widen: those sums as int32. */
#if PK_VNNI
#define KQ_RUN(Q5) 4
INLINE __m256i nib_dot(__m256i s, __m256i lo, __m256i hi, const int8_t *xq) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(s, lo, bc32(xq)), hi, bc32(xq + 4));
}
INLINE __m256i nib_widen(__m256i s) { return s; }
INLINE __m256i kq_scales(const uint8_t *sc) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)); }
INLINE __m256i kq_scale_add(__m256i sumi, __m256i s, __m256i scj) {
    return _mm256_add_epi32(sumi, _mm256_mullo_epi32(s, scj));
}
#else
#define KQ_RUN(Q5) ((Q5) ? 2 : 4)
INLINE __m256i nib_dot(__m256i s, __m256i lo, __m256i hi, const int8_t *xq) {
    return chain(_mm256_add_epi16(s, _mm256_add_epi16(mub(lo, bc32(xq)), mub(hi, bc32(xq + 4)))));
}
INLINE __m256i nib_widen(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
INLINE __m256i kq_scales(const uint8_t *sc) {
    __m128i s8 = _mm_loadl_epi64((const __m128i *)sc);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8));
}
INLINE __m256i kq_scale_add(__m256i sumi, __m256i s, __m256i scj) {
    return chain(_mm256_add_epi32(sumi, _mm256_madd_epi16(s, scj)));
}
#endif

/* Nibbles q = w + 8 times x; the 8 comes off through the block's 128·Σx (>> 4). */
INLINE void q4_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m256 acc[MX][2];
    q8_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q4_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
            UNROLL for (int v = 0; v < 4; v++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * v + PF_0);
                __m256i q = ld(wg + 32 + 64 * v + 32 * h);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                UNROLL for (int r = 0; r < NR; r++) s[r] = nib_dot(s[r], lo, hi, xr[r][i].qs + 8 * v);
            }
            UNROLL for (int r = 0; r < NR; r++) s[r] = nib_widen(s[r]);
            q8_accumulate(acc, h, wg, ex, i, s, 4, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q4_K and Q5_K --------------------------------------------------------------- */

/* The NR activation rows of a K-quant tile (their blocks and the bsums
 * pairs after them) and zeroed accumulators. */
INLINE void kq_rows(const uint8_t *x, size_t xb, int64_t nb, const block_q8_K **xr, const int16_t **ex,
                    __m256 (*acc)[2], const int NR) {
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_K *)(x + r * xb);
        ex[r] = (const int16_t *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_K)));
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
INLINE void kq_accumulate(__m256 (*acc)[2], int h, const uint8_t *wg, const block_q8_K *const *xr, int64_t i,
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

/* Q4_K, and Q5_K (Q5: the fifth bits, a vector after each sub-block's four). */
INLINE void k4_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                    const int NR, const int Q5) {
    int64_t nb = n / PH_QK_K;
    const block_q8_K *xr[MX];
    const int16_t *ex[MX];
    __m256 acc[MX][2];
    kq_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += Q5 ? PH_PK_Q5_K_BYTES : PH_PK_Q4_K_BYTES) {
        const uint8_t *sc = wg + 64, *mn = wg + 192, *qs = wg + 320;
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i sumi[MX], summ[MX];
            UNROLL for (int r = 0; r < NR; r++) sumi[r] = summ[r] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const uint8_t *qj = qs + (Q5 ? 320 : 256) * j;
                if (h == 0 && Q5) PREFETCH(qj + 256 + PF_K);
                __m256i hb = Q5 ? ld(qj + 256 + 32 * h) : _mm256_setzero_si256();
                __m256i scj = kq_scales(sc + 16 * j + 8 * h);
                __m256i s[MX];
                UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
                UNROLL for (int v = 0; v < 4; v++) {
                    if (h == 0) PREFETCH(qj + 64 * v + PF_K);
                    __m256i q = ld(qj + 64 * v + 32 * h);
                    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if (Q5) {
                        lo = _mm256_or_si256(lo, bit_to4(hb, 2 * v));
                        hi = _mm256_or_si256(hi, bit_to4(hb, 2 * v + 1));
                    }
                    UNROLL for (int r = 0; r < NR; r++) s[r] = nib_dot(s[r], lo, hi, xr[r][i].qs + 32 * j + 8 * v);
                    if ((v + 1) % KQ_RUN(Q5) == 0) { /* a run's sums, scaled, into sumi */
                        UNROLL for (int r = 0; r < NR; r++) {
                            sumi[r] = kq_scale_add(sumi[r], s[r], scj);
                            s[r] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            kq_mins(summ, mn, h, ex, i, NR);
            kq_accumulate(acc, h, wg, xr, i, sumi, summ, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q6_K ------------------------------------------------------------------------- */

/* The same for both files: maddubs pairs (two sub-block steps in int16) scaled
 * by PK_MADD_ACC (with AVX-VNNI one VPDPWSSD, which measured faster than
 * VPDPBUSD and a VPMULLD per sub-block). */

INLINE void q6_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK_K;
    const block_q8_K *xr[MX];
    __m256 acc[MX][2];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_K *)(x + r * xb);
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

#endif
