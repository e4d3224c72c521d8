/* AVX-VNNI kernels for packed weights (layouts in kernels_impl.h): the
 * packed_avx512.c kernels on 256-bit vectors, a 16-row group as two halves
 * of 8 rows (bytes 0-31 and 32-63 of each 64-byte packed vector). VPDPBUSD
 * on ymm (compiled with -mavxvnni; dispatch.c installs these over the plain
 * AVX2 ones of packed_avx2.c when CPUID says AVX-VNNI). Same exact int32 sums
 * and the reference's float steps in its order (no FMA): bit for bit the
 * scalar reference, for any number of rows. Q6_K is packed_x86_256.h's tile
 * with VPDPWSSD as PK_MADD_ACC. F16 has no VNNI kernel: the table keeps
 * packed_avx2.c's. */
#define PK_MADD_ACC(s, a, b) _mm256_dpwssd_avx_epi32((s), (a), (b))
#include "kernels/packed_x86_256.h"

INLINE __m256i dpbusd(__m256i s, __m256i u, __m256i x) { return _mm256_dpbusd_avx_epi32(s, u, x); }

/* ---- Q8_0 --------------------------------------------------------------------- */

INLINE void q8_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m256 acc[MX][2];
    q8_rows(x, xb, nb, xr, ex, acc, NR);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q8_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * k + PF_0);
                __m256i q = ld(wg + 32 + 64 * k + 32 * h);
                UNROLL for (int r = 0; r < NR; r++) s[r] = dpbusd(s[r], q, bc32(xr[r][i].qs + 4 * k));
            }
            q8_accumulate(acc, h, wg, ex, i, s, 0, NR);
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
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q4_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
            UNROLL for (int v = 0; v < 4; v++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * v + PF_0);
                __m256i q = ld(wg + 32 + 64 * v + 32 * h);
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                UNROLL for (int r = 0; r < NR; r++) {
                    const int8_t *xq = xr[r][i].qs + 8 * v;
                    s[r] = dpbusd(s[r], lo, bc32(xq));
                    s[r] = dpbusd(s[r], hi, bc32(xq + 4));
                }
            }
            q8_accumulate(acc, h, wg, ex, i, s, 4, NR);
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
                __m256i s[MX];
                UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
                UNROLL for (int v = 0; v < 4; v++) {
                    if (h == 0) PREFETCH(qs + 64 * (4 * j + v) + PF_K);
                    __m256i q = ld(qs + 64 * (4 * j + v) + 32 * h);
                    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    UNROLL for (int r = 0; r < NR; r++) {
                        const int8_t *xq = xr[r][i].qs + 32 * j + 8 * v;
                        s[r] = dpbusd(s[r], lo, bc32(xq));
                        s[r] = dpbusd(s[r], hi, bc32(xq + 4));
                    }
                }
                __m256i scj = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8 * h)));
                UNROLL for (int r = 0; r < NR; r++) sumi[r] =
                    _mm256_add_epi32(sumi[r], _mm256_mullo_epi32(s[r], scj));
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
                __m256i s[MX];
                UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
                __m256i hb = ld(qj + 256 + 32 * h);
                UNROLL for (int v = 0; v < 4; v++) {
                    __m256i q = ld(qj + 64 * v + 32 * h);
                    __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit_to4(hb, 2 * v));
                    __m256i hi =
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), bit_to4(hb, 2 * v + 1));
                    UNROLL for (int r = 0; r < NR; r++) {
                        const int8_t *xq = xr[r][i].qs + 32 * j + 8 * v;
                        s[r] = dpbusd(s[r], lo, bc32(xq));
                        s[r] = dpbusd(s[r], hi, bc32(xq + 4));
                    }
                }
                __m256i scj = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 * j + 8 * h)));
                UNROLL for (int r = 0; r < NR; r++) sumi[r] =
                    _mm256_add_epi32(sumi[r], _mm256_mullo_epi32(s[r], scj));
            }
            kq_mins(summ, mn, h, ex, i, NR);
            kq_accumulate(acc, h, wg, xr, i, sumi, summ, NR);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- table ---------------------------------------------------------------------------- */

TILE(q8_0)
TILE(q4_0)
TILE(q4_K)
TILE(q5_K)
TILE(q6_K)

/* over fill_packed_avx2's: its F16 entry stays */
void fill_packed_avxvnni(kernel_table *t) {
    t->pk[PH_TYPE_Q8_0] = (pk_plan){tile_q8_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_0] = (pk_plan){tile_q4_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_K] = (pk_plan){tile_q4_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q5_K] = (pk_plan){tile_q5_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q6_K] = (pk_plan){tile_q6_K, MX, PH_PK_ROWS, NULL};
}
