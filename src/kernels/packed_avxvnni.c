/* AVX-VNNI kernels for packed weights (layouts in kernels_impl.h): the
 * packed_avx512.c kernels on 256-bit vectors, a 16-row group as two halves
 * of 8 rows (bytes 0-31 and 32-63 of each 64-byte packed vector). VPDPBUSD
 * on ymm (compiled with -mavxvnni; dispatch.c installs these over the plain
 * AVX2 ones of packed_avx2.c when CPUID says AVX-VNNI). Same exact int32 sums
 * and the reference's float steps in its order (no FMA): bit for bit the
 * scalar reference, for any number of rows. Q6_K keeps packed_avx2.c's
 * maddubs pairs (two sub-block steps in int16) and scales them with VPDPWSSD:
 * that measured faster than VPDPBUSD and a VPMULLD per sub-block. F16 has
 * no VNNI kernel: the table keeps packed_avx2.c's. */
#define PK_MADD_ACC(s, a, b) _mm256_dpwssd_avx_epi32((s), (a), (b))
#include "kernels/packed_x86_256.h"

INLINE __m256i dpbusd(__m256i s, __m256i u, __m256i x) { return _mm256_dpbusd_avx_epi32(s, u, x); }
INLINE __m256i dpwssd(__m256i s, __m256i a, __m256i b) { return _mm256_dpwssd_avx_epi32(s, a, b); }

/* ---- Q8_0 --------------------------------------------------------------------- */

INLINE void q8_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m256 acc[MX][2];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_0 *)(x + r * xb);
        ex[r] = (const q8_0_extra *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_0)));
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q8_0_BYTES) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm256_setzero_si256();
            UNROLL for (int k = 0; k < 8; k++) {
                if (h == 0) PREFETCH(wg + 32 + 64 * k + PF_0);
                __m256i q = ld(wg + 32 + 64 * k + 32 * h);
                UNROLL for (int r = 0; r < NR; r++) s[r] = dpbusd(s[r], q, bc32(xr[r][i].qs + 4 * k));
            }
            __m256 dw = ld_f16x8(wg + 16 * h);
            UNROLL for (int r = 0; r < NR; r++) {
                /* reference: s += sumi * (dw * dx) */
                __m256i sumi = _mm256_sub_epi32(s[r], _mm256_set1_epi32(ex[r][i].c128));
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(dw, _mm256_set1_ps(ex[r][i].d)));
                acc[r][h] = _mm256_add_ps(acc[r][h], t);
            }
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
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_0 *)(x + r * xb);
        ex[r] = (const q8_0_extra *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_0)));
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
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
            __m256 dw = ld_f16x8(wg + 16 * h);
            UNROLL for (int r = 0; r < NR; r++) {
                /* reference: s += sumi * (dw * dx) */
                __m256i sumi = _mm256_sub_epi32(s[r], _mm256_set1_epi32(ex[r][i].c128 >> 4));
                __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(dw, _mm256_set1_ps(ex[r][i].d)));
                acc[r][h] = _mm256_add_ps(acc[r][h], t);
            }
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

/* ---- Q6_K ---------------------------------------------------------------------- */

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
                        sumi[r] = dpwssd(dpwssd(sumi[r], a, sk[hh]), b, sk[hh]);
                    }
                }
                UNROLL for (int r = 0; r < NR; r++) corr[r] = dpwssd(corr[r], sp, bc32(xr[r][i].bsums + 2 * m));
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
