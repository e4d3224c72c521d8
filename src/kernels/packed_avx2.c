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
 * The K-quant tiles are packed_x86_256.h's, with these sums (PK_VNNI 0).
 * F16 is one FMA chain per output in input order, as in packed_avx512.c: not
 * the reference's double sum, and not the AVX-512 kernel's numbers either,
 * but the same for any number of rows batched and any grouping of calls. */
#define PK_VNNI 0
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

#include "kernels/packed_tiles.h"

/* (the VNNI fill replaces the quantized entries and keeps this F16 one) */
void fill_packed_avx2(kernel_table *t) {
    t->pk[PH_TYPE_F16] = (pk_plan){tile_f16, MX_F16, 2 * PH_PK_ROWS, t->mm[PH_TYPE_F16].act};
    fill_quantized(t);
}
