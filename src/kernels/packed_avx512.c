/* AVX-512 VNNI kernels for packed weights (layouts in kernels_impl.h).
 *
 * One 512-bit vector holds 4 consecutive inputs of 16 weight rows as
 * unsigned bytes; VPDPBUSD multiplies it by 4 inputs of one activation row
 * broadcast to every lane, so each lane accumulates one output's dot product
 * and no horizontal sums are needed. Inside a block every sum is an exact
 * int32; the float steps after it are the scalar reference's, in its order
 * (no FMA), so a result is the reference's bit for bit, for 1 row (decode)
 * as for NR rows (prefill). Rows of x are independent: a tile of NR rows
 * only shares the weight loads and unpacking. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define INLINE      static inline __attribute__((always_inline))
#define UNROLL      _Pragma("GCC unroll 8")
#define MX          6 /* activation rows per prefill call */
/* Software prefetch, a few blocks ahead: with one activation row (decode)
 * the hardware prefetcher alone leaves a single thread short of the
 * memory's bandwidth on the K-quants. Into L2 (hint T1), not L1: a T0
 * prefetch holds one of the core's few L1 fill buffers until its line
 * arrives, and so many in flight held up the loads the kernel needed at
 * once (measured on the Xeon: decode q4_k_m 19.5 -> 21.0 tokens/s here,
 * 17.1 -> 19.0 with the AVX2 kernels; twice the distance gained nothing). */
#define PF_K        (4 * PH_PK_Q5_K_BYTES)
#define PF_0        (16 * PH_PK_Q8_0_BYTES)
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)

INLINE __m512i ld(const void *p) { return _mm512_loadu_si512(p); }
INLINE __m512i bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
INLINE __m512 ld_f16x16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

INLINE void store(float *y, __m512 v, int no) {
    if (no == PH_PK_ROWS) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << no) - 1), v);
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------------- */

typedef struct {
    float d;
    int32_t c128;
} q8_0_extra;

/* Q8_0 (Q4 = 0: the bytes are w + 128) or Q4_0 (Q4 = 1: nibbles q = w + 8);
 * the offset comes off through the activation block's sum. */
INLINE void q0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                    const int NR, const int Q4) {
    int64_t nb = n / PH_QK8_0;
    const block_q8_0 *xr[MX];
    const q8_0_extra *ex[MX];
    __m512 acc[MX];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_0 *)(x + r * xb);
        ex[r] = (const q8_0_extra *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_0)));
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += Q4 ? PH_PK_Q4_0_BYTES : PH_PK_Q8_0_BYTES) {
        __m512i s[MX];
        UNROLL for (int r = 0; r < NR; r++) s[r] = _mm512_setzero_si512();
        UNROLL for (int k = 0; k < 8; k++) {
            /* inputs 4k..4k+3 of the block: a Q8_0 vector, or half of a Q4_0 one */
            if (!Q4 || k % 2 == 0) PREFETCH(wg + 32 + 64 * (Q4 ? k / 2 : k) + PF_0);
            __m512i q = ld(wg + 32 + 64 * (Q4 ? k / 2 : k));
            if (Q4) q = _mm512_and_si512(k % 2 ? _mm512_srli_epi16(q, 4) : q, m4);
            const int at = Q4 ? 8 * (k / 2) + 4 * (k % 2) : 4 * k;
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm512_dpbusd_epi32(s[r], q, bc32(xr[r][i].qs + at));
        }
        __m512 dw = ld_f16x16(wg);
        UNROLL for (int r = 0; r < NR; r++) {
            /* reference: s += sumi * (dw * dx) */
            __m512i sumi = _mm512_sub_epi32(s[r], _mm512_set1_epi32(Q4 ? ex[r][i].c128 >> 4 : ex[r][i].c128));
            __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, _mm512_set1_ps(ex[r][i].d)));
            acc[r] = _mm512_add_ps(acc[r], t);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q4_K / Q5_K ---------------------------------------------------------------- */

/* Bit `bit` of every byte moved to bit 4 (shifts within 16-bit lanes: what
 * crosses a byte boundary lands outside bit 4). */
INLINE __m512i bit_to4(__m512i h, const int bit) {
    if (bit < 4) h = _mm512_slli_epi16(h, (unsigned)(4 - bit));
    if (bit > 4) h = _mm512_srli_epi16(h, (unsigned)(bit - 4));
    return _mm512_and_si512(h, _mm512_set1_epi8(0x10));
}

INLINE void k4_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                    const int NR, const int Q5) {
    const size_t gbb = Q5 ? PH_PK_Q5_K_BYTES : PH_PK_Q4_K_BYTES;
    int64_t nb = n / PH_QK_K;
    const block_q8_K *xr[MX];
    const int16_t *ex[MX];
    __m512 acc[MX];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_K *)(x + r * xb);
        ex[r] = (const int16_t *)((const uint8_t *)xr[r] + PH_PK_EXTRAS_AT(nb * sizeof(block_q8_K)));
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, wg += gbb) {
        const uint8_t *sc = wg + 64, *mn = wg + 192, *qs = wg + 320;
        __m512i sumi[MX], summ[MX];
        UNROLL for (int r = 0; r < NR; r++) sumi[r] = summ[r] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i s[MX];
            UNROLL for (int r = 0; r < NR; r++) s[r] = _mm512_setzero_si512();
            const uint8_t *qj = qs + (Q5 ? 320 : 256) * j; /* Q5_K: its fifth bits after the nibbles */
            if (Q5) PREFETCH(qj + 256 + PF_K);
            __m512i hb = Q5 ? ld(qj + 256) : _mm512_setzero_si512();
            UNROLL for (int v = 0; v < 4; v++) {
                PREFETCH(qj + 64 * v + PF_K);
                __m512i q = ld(qj + 64 * v);
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (Q5) {
                    lo = _mm512_or_si512(lo, bit_to4(hb, 2 * v));
                    hi = _mm512_or_si512(hi, bit_to4(hb, 2 * v + 1));
                }
                UNROLL for (int r = 0; r < NR; r++) {
                    const int8_t *xq = xr[r][i].qs + 32 * j + 8 * v;
                    s[r] = _mm512_dpbusd_epi32(s[r], lo, bc32(xq));
                    s[r] = _mm512_dpbusd_epi32(s[r], hi, bc32(xq + 4));
                }
            }
            __m512i scj = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16 * j)));
            UNROLL for (int r = 0; r < NR; r++) sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(s[r], scj));
        }
        UNROLL for (int m = 0; m < 4; m++) {
            __m512i mp = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(mn + 32 * m)));
            UNROLL for (int r = 0; r < NR; r++) summ[r] =
                _mm512_dpwssd_epi32(summ[r], mp, bc32(ex[r] + 8 * i + 2 * m));
        }
        __m512 d = ld_f16x16(wg), dmin = ld_f16x16(wg + 32);
        UNROLL for (int r = 0; r < NR; r++) {
            /* reference: s += xd * d * sumi - xd * dmin * summ */
            __m512 xd = _mm512_set1_ps(xr[r][i].d);
            __m512 a = _mm512_mul_ps(_mm512_mul_ps(xd, d), _mm512_cvtepi32_ps(sumi[r]));
            __m512 b = _mm512_mul_ps(_mm512_mul_ps(xd, dmin), _mm512_cvtepi32_ps(summ[r]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_sub_ps(a, b));
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- Q6_K ---------------------------------------------------------------------- */

INLINE void q6_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    int64_t nb = n / PH_QK_K;
    const block_q8_K *xr[MX];
    __m512 acc[MX];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const block_q8_K *)(x + r * xb);
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int64_t i = 0; i < nb; i++, wg += PH_PK_Q6_K_BYTES) {
        const uint8_t *sc = wg + 32, *ql = wg + 288, *qh = wg + 288 + 128;
        __m512i sumi[MX], corr[MX];
        UNROLL for (int r = 0; r < NR; r++) sumi[r] = corr[r] = _mm512_setzero_si512();
        for (int m = 0; m < 8; m++) {
            /* scales 2m and 2m+1 of each row as int16 pairs, and each alone as int32 */
            __m512i sp = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(sc + 32 * m)));
            __m512i sk[2] = {_mm512_srai_epi32(_mm512_slli_epi32(sp, 16), 16), _mm512_srai_epi32(sp, 16)};
            UNROLL for (int h = 0; h < 2; h++) {
                int k = 2 * m + h;
                PREFETCH(ql + 192 * k + PF_K);
                PREFETCH(ql + 192 * k + 64 + PF_K);
                PREFETCH(qh + 192 * k + PF_K);
                __m512i l0 = ld(ql + 192 * k), l1 = ld(ql + 192 * k + 64), hb = ld(qh + 192 * k);
                __m512i u[4] = {
                    _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                                    _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)),
                    _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(hb, m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                    _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30)),
                };
                UNROLL for (int r = 0; r < NR; r++) {
                    const int8_t *xq = xr[r][i].qs + 16 * k;
                    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], bc32(xq));
                    s = _mm512_dpbusd_epi32(s, u[1], bc32(xq + 4));
                    s = _mm512_dpbusd_epi32(s, u[2], bc32(xq + 8));
                    s = _mm512_dpbusd_epi32(s, u[3], bc32(xq + 12));
                    sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(s, sk[h]));
                }
            }
            UNROLL for (int r = 0; r < NR; r++) corr[r] =
                _mm512_dpwssd_epi32(corr[r], sp, bc32(xr[r][i].bsums + 2 * m));
        }
        __m512 d = ld_f16x16(wg);
        UNROLL for (int r = 0; r < NR; r++) {
            /* Σ sc·(q - 32)·x = Σ sc·q·x - 32·Σ sc·bsum; reference: s += d * xd * sumi */
            __m512i t = _mm512_sub_epi32(sumi[r], _mm512_slli_epi32(corr[r], 5));
            __m512 a = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(xr[r][i].d)), _mm512_cvtepi32_ps(t));
            acc[r] = _mm512_add_ps(acc[r], a);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) store(y + r * ldy, acc[r], no);
}

/* ---- F16 ------------------------------------------------------------------------------ */

/* Two groups (32 weight rows) x NR activation rows, one FMA chain per output
 * in input order: not the reference's double sum, but the same for any NR,
 * so a row's result does not depend on the rows batched with it. */
#define MX_F16 6
INLINE void f16_tile(int64_t n, const uint8_t *wg, const float *x, size_t xb, float *y, size_t ldy, int no,
                     const int NR, const int G) {
    const float *xr[MX_F16];
    const uint8_t *wp[2] = {wg, wg + (size_t)n * PH_PK_ROWS * sizeof(f16_bits)};
    __m512 acc[2][MX_F16];
    UNROLL for (int r = 0; r < NR; r++) {
        xr[r] = (const float *)((const char *)x + r * xb);
        UNROLL for (int g = 0; g < G; g++) acc[g][r] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < n; k++) {
        __m512 w[2];
        UNROLL for (int g = 0; g < G; g++) w[g] = ld_f16x16(wp[g] + 32 * k);
        UNROLL for (int r = 0; r < NR; r++) {
            __m512 b = _mm512_set1_ps(xr[r][k]);
            UNROLL for (int g = 0; g < G; g++) acc[g][r] = _mm512_fmadd_ps(w[g], b, acc[g][r]);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) {
        store(y + r * ldy, acc[0][r], no < PH_PK_ROWS ? no : PH_PK_ROWS);
        if (G == 2) store(y + r * ldy + PH_PK_ROWS, acc[1][r], no - PH_PK_ROWS);
    }
}

#define F16_CASE(NR)                                                                                                 \
    case NR:                                                                                                         \
        if (no > PH_PK_ROWS) f16_tile(n, wg, x, xb, y, ldy, no, NR, 2);                                              \
        else f16_tile(n, wg, x, xb, y, ldy, no, NR, 1);                                                              \
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

INLINE void q8_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    q0_tile(n, wg, x, xb, y, ldy, no, NR, 0);
}
INLINE void q4_0_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    q0_tile(n, wg, x, xb, y, ldy, no, NR, 1);
}

#include "kernels/packed_tiles.h"

void fill_packed_avx512(kernel_table *t) {
    t->pk[PH_TYPE_F16] = (pk_plan){tile_f16, MX_F16, 2 * PH_PK_ROWS, t->mm[PH_TYPE_F16].act};
    fill_quantized(t);
}
