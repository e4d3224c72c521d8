/* AVX-VNNI kernels for packed weights (layouts in kernels_impl.h): the
 * packed_avx512.c kernels on 256-bit vectors, a 16-row group as two halves
 * of 8 rows (bytes 0-31 and 32-63 of each 64-byte packed vector). VPDPBUSD
 * on ymm (compiled with -mavxvnni; dispatch.c installs these over the plain
 * AVX2 ones of packed_avx2.c when CPUID says AVX-VNNI). Same exact int32 sums
 * and the reference's float steps in its order (no FMA): bit for bit the
 * scalar reference, for any number of rows. The K-quant tiles are
 * packed_x86_256.h's (PK_VNNI 1: VPDPBUSD, and VPDPWSSD for Q6_K's scales).
 * F16 has no VNNI kernel: the table keeps packed_avx2.c's. */
#define PK_VNNI 1
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

/* ---- table ---------------------------------------------------------------------------- */

#include "kernels/packed_tiles.h"

/* over fill_packed_avx2's: its F16 entry stays */
void fill_packed_avxvnni(kernel_table *t) { fill_quantized(t); }
