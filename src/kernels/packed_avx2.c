/* AVX2 kernels for packed weights (layouts in kernels_impl.h), the
 * packed_avx512.c arithmetic on 256-bit vectors: a 16-row group is two
 * halves of 8 rows (bytes 0-31 and 32-63 of each 64-byte packed vector), and
 * each int32 lane accumulates one output row's dot product.
 *
 * Without VNNI the byte dot is _mm256_maddubs_epi16 (unsigned x signed bytes,
 * pairs added into int16, saturating) and _mm256_madd_epi16. The int16 sums
 * are kept below saturation, so every int32 sum is exact and equals the AVX-512
 * one; the float steps after it are the scalar reference's, in its order (no
 * FMA), so results are the reference's bit for bit for any number of rows:
 *   Q8_0: weights flipped back to signed bytes; |w| times sign(x, w) (|x| <= 127,
 *         pairs <= 2·128·127), one madd per step.
 *   Q4_0: 0..15 times x: pairs <= 3840, the 8 steps of a block add in int16
 *         (<= 30720), one madd by ones; the +8 comes off as in packed_avx512.c.
 *   Q4_K: 0..15 times x: pairs <= 3840, the 8 steps of a sub-block add in int16
 *         (<= 30720), then one madd with the sub-block scale in both halves.
 *   Q5_K: 0..31 times x: pairs <= 7936, four steps add in int16 (<= 31744),
 *         two madds with the scale per sub-block.
 *   Q6_K: 0..63 times x: pairs <= 16128, two steps add in int16, madd with the
 *         scale; q - 32 as in packed_avx512.c (32·Σ scale·bsum).
 * F16 is one FMA chain per output in input order, as in packed_avx512.c: not
 * the reference's double sum, and not the AVX-512 kernel's numbers either,
 * but the same for any number of rows batched and any grouping of calls. */
#define PK_MADD_ACC(s, a, b) _mm256_add_epi32((s), _mm256_madd_epi16((a), (b)))
#include "kernels/packed_x86_256.h"

/* ---- Q8_0 --------------------------------------------------------------------- */

INLINE void q8_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m256 acc[MX][2];
    q8_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q8_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * k + PF_0);
                __m256i w = _mm256_xor_si256(ld(wg + 32 + 64 * k + 32 * h), flip), aw = _mm256_abs_epi8(w);
                UNROLL for (int r = 0; r < NR; r++) {
                    __m256i p = mub(aw, _mm256_sign_epi8(bc32(xr[r][i].qs + 4 * k), w));
                    s[r] = chain(_mm256_add_epi32(s[r], _mm256_madd_epi16(p, ones)));
                }
            }
            q8_accumulate(acc, h, wg, ex, i, s, -1, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q4_0 --------------------------------------------------------------------- */

/* Nibbles q = w + 8 times x; the 8 comes off through the block's 128·Σx (>> 4). */
INLINE void q4_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m256 acc[MX][2];
    q8_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q4_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i p[MX];
            UNROLL for (int r = 0; r < NR; r++) p[r] = _mm256_setzero_si256();
            UNROLL for (int v = 0; v < 4; v++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * v + PF_0);
                __m256i q = ld(wg + 32 + 64 * v + 32 * h);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                UNROLL for (int r = 0; r < NR; r++) {
                    const int8_t *xq = xr[r][i].qs + 8 * v;
                    __m256i t = _mm256_add_epi16(mub(lo, bc32(xq)), mub(hi, bc32(xq + 4)));
                    p[r] = chain(_mm256_add_epi16(p[r], t));
                }
            }
            UNROLL for (int r = 0; r < NR; r++) p[r] = _mm256_madd_epi16(p[r], ones);
            q8_accumulate(acc, h, wg, ex, i, p, 4, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q4_K ---------------------------------------------------------------------- */

INLINE void q4_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK_K;
    const ph_block_q8_K *xr[MX];
    const int16_t *ex[MX];
    __m256 acc[MX][2];
    kq_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q4_K_BYTES) {
        const uint8_t *sc = wg + 64, *mn = wg + 192, *qs = wg + 320;
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i sumi[MX], summ[MX];
            UNROLL for (int r = 0; r < NR; r++) sumi[r] = summ[r] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                __m256i p[MX];
                UNROLL for (int r = 0; r < NR; r++) p[r] = _mm256_setzero_si256();
                UNROLL for (int v = 0; v < 4; v++) {
                    if (h == 0) PREFETCH(qs + 64 * (4 * j + v) + PF_K);
                    __m256i q = ld(qs + 64 * (4 * j + v) + 32 * h);
                    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    UNROLL for (int r = 0; r < NR; r++) {
                        const int8_t *xq = xr[r][i].qs + 32 * j + 8 * v;
                        __m256i t = _mm256_add_epi16(mub(lo, bc32(xq)), mub(hi, bc32(xq + 4)));
                        p[r] = chain(_mm256_add_epi16(p[r], t));
                    }
                }
                /* the 8 rows' scales of sub-block j, each in both int16 of its lane */
                __m128i s8 = _mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8 * h));
                __m256i scj = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8));
                UNROLL for (int r = 0; r < NR; r++) sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p[r], scj));
            }
            kq_mins(summ, mn, h, ex, i, NR);
            kq_accumulate(acc, h, wg, xr, i, sumi, summ, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q5_K ---------------------------------------------------------------------- */

INLINE void q5_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK_K;
    const ph_block_q8_K *xr[MX];
    const int16_t *ex[MX];
    __m256 acc[MX][2];
    kq_rows(x, xb, nb, xr, ex, acc, NR);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q5_K_BYTES) {
        const uint8_t *sc = wg + 64, *mn = wg + 192, *qs = wg + 320;
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i sumi[MX], summ[MX];
            UNROLL for (int r = 0; r < NR; r++) sumi[r] = summ[r] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const uint8_t *qj = qs + 320 * j; /* four q vectors, then their fifth bits */
                if (h == 0) {
                    UNROLL for (int v = 0; v < 5; v++) PREFETCH(qj + 64 * v + PF_K);
                }
                __m256i hb = ld(qj + 256 + 32 * h);
                /* the 8 rows' scales of sub-block j, each in both int16 of its lane */
                __m128i s8 = _mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8 * h));
                __m256i scj = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8));
                UNROLL for (int c = 0; c < 2; c++) {
                    /* vectors 2c, 2c+1: four steps of pairs <= 7936 add in int16 */
                    __m256i p[MX];
                    UNROLL for (int r = 0; r < NR; r++) p[r] = _mm256_setzero_si256();
                    UNROLL for (int v = 2 * c; v < 2 * c + 2; v++) {
                        __m256i q = ld(qj + 64 * v + 32 * h);
                        __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit_to4(hb, 2 * v));
                        __m256i hi =
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bit_to4(hb, 2 * v + 1));
                        UNROLL for (int r = 0; r < NR; r++) {
                            const int8_t *xq = xr[r][i].qs + 32 * j + 8 * v;
                            __m256i t = _mm256_add_epi16(mub(lo, bc32(xq)), mub(hi, bc32(xq + 4)));
                            p[r] = chain(_mm256_add_epi16(p[r], t));
                        }
                    }
                    UNROLL for (int r = 0; r < NR; r++) sumi[r] =
                        chain(_mm256_add_epi32(sumi[r], _mm256_madd_epi16(p[r], scj)));
                }
            }
            kq_mins(summ, mn, h, ex, i, NR);
            kq_accumulate(acc, h, wg, xr, i, sumi, summ, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- F16 ------------------------------------------------------------------------------ */

/* G groups (16 or 32 weight rows) x NR activation rows, one FMA chain per
 * output in input order; acc[g][r][h] holds outputs 16g + 8h .. 16g + 8h + 7
 * of row r. A chain does not see the other rows or groups of its call, so
 * how the calls are cut (tile_f16 below) does not change any number. */
#define MX_F16 6
INLINE void f16_step(const uint8_t *const *wp, const float *const *xr, int64_t k, __m256 (*acc)[MX_F16][2],
                     const int NR, const int G) {
    UNROLL for (int g = 0; g < G; g++) {
        __m256 w0 = ld_f16x8(wp[g] + 32 * k), w1 = ld_f16x8(wp[g] + 32 * k + 16);
        UNROLL for (int r = 0; r < NR; r++) {
            __m256 b = _mm256_broadcast_ss(xr[r] + k);
            acc[g][r][0] = _mm256_fmadd_ps(w0, b, acc[g][r][0]);
            acc[g][r][1] = _mm256_fmadd_ps(w1, b, acc[g][r][1]);
        }
    }
}

INLINE void f16_tile(int64_t n, const uint8_t *wg, const float *x, size_t xb, float *y, size_t ldy, int no,
                     const int NR, const int G) {
    const float *xr[MX_F16];
    const uint8_t *wp[2] = {wg, wg + (size_t)n * PH_PK_ROWS * sizeof(f16_bits)};
    __m256 acc[2][MX_F16][2];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const float *)((const char *)x + r * xb);
        UNROLL for (int g = 0; g < G; g++) acc[g][r][0] = acc[g][r][1] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) { /* two inputs: one 64-byte line of each group */
        UNROLL for (int g = 0; g < G; g++) PREFETCH(wp[g] + 32 * k + PF_0);
        f16_step(wp, xr, k, acc, NR, G);
        f16_step(wp, xr, k + 1, acc, NR, G);
    }
    if (k < n) f16_step(wp, xr, k, acc, NR, G);
    UNROLL for (int r = 0; r < NR; r++) {
        store(y + r * ldy, acc[0][r], no < PH_PK_ROWS ? no : PH_PK_ROWS);
        if (G == 2) store(y + r * ldy + PH_PK_ROWS, acc[1][r], no - PH_PK_ROWS);
    }
}

/* Up to F16_G2 rows, both groups in one pass (4·NR accumulators of the 16 ymm
 * registers); more rows, one group at a time (both groups at once spilled
 * accumulators: 6 rows 35 -> 54 GMAC/s, 3 rows 37 -> 40 with F16_G2 3 over 2). */
#define F16_G2 3
#define F16_CASE(NR)                                                                                                 \
    case NR:                                                                                                         \
        if (no > PH_PK_ROWS && NR <= F16_G2) {                                                                       \
            f16_tile(n, wg, x, xb, y, ldy, no, NR, 2);                                                               \
        } else {                                                                                                     \
            f16_tile(n, wg, x, xb, y, ldy, no < PH_PK_ROWS ? no : PH_PK_ROWS, NR, 1);                                \
            if (no > PH_PK_ROWS)                                                                                     \
                f16_tile(n, (const uint8_t *)wg + (size_t)n * PH_PK_ROWS * sizeof(f16_bits), x, xb, y + PH_PK_ROWS,  \
                         ldy, no - PH_PK_ROWS, NR, 1);                                                               \
        }                                                                                                            \
        break;

static void tile_f16(int64_t n, const void *wg, const void *x, size_t xb, int nr, float *y, size_t ldy, int no) {
    switch (nr) {
        F16_CASE(1)
        F16_CASE(2)
        F16_CASE(3)
        F16_CASE(4)
        F16_CASE(5)
    default: F16_CASE(MX_F16)
    }
}

/* ---- table ---------------------------------------------------------------------------- */

TILE(q8_0)
TILE(q4_0)
TILE(q4_K)
TILE(q5_K)
TILE(q6_K)

/* (the VNNI fill replaces the quantized entries and keeps this F16 one) */
void fill_packed_avx2(kernel_table *t) {
    t->pk[PH_TYPE_F16] = (pk_plan){tile_f16, MX_F16, 2 * PH_PK_ROWS, t->mm[PH_TYPE_F16].act};
    t->pk[PH_TYPE_Q8_0] = (pk_plan){tile_q8_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_0] = (pk_plan){tile_q4_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_K] = (pk_plan){tile_q4_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q5_K] = (pk_plan){tile_q5_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q6_K] = (pk_plan){tile_q6_K, MX, PH_PK_ROWS, NULL};
}
