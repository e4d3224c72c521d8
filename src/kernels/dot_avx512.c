/* AVX-512 (F, BW, VL, DQ, VNNI) kernels, compiled only with those flags;
 * dispatch.c starts from the AVX2 table and calls fill_avx512 to replace
 * the kernels that gain from wider vectors:
 *   - float rows: 16-lane FMA;
 *   - Q8_0 / Q4_0: VPDPBUSD does |w|·sign(x, w) and the pairwise adds in one;
 *   - Q4_K / Q5_K / Q6_K: 64 elements (two or four sub-blocks) per vector,
 *     VPMADDUBSW then VPDPWSSD (scale multiply and accumulate in one).
 * Activation conversion stays AVX2 (memory-bound). Structure and summation
 * order follow dot_avx2.c: one kernel body for 1 and 4 activation rows. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
INLINE __m512i loadu512(const void *p) { return _mm512_loadu_si512(p); }
INLINE float f16f(f16_bits h) { return _cvtsh_ss(h); }
INLINE float id_f32(float f) { return f; }
INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Two 256-bit halves as one 512-bit vector (lo in the low half). */
INLINE __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* ---- float rows ------------------------------------------------------------------ */

INLINE __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
INLINE __m512 ld_f16(const f16_bits *p) { return _mm512_cvtph_ps(loadu256(p)); }

#define FLOAT_DOT(name, TW, ldw, cw, TX, ldx, cx)                                                                    \
    static float name(int64_t n, const void *w, const void *x) {                                                     \
        const TW *a = w;                                                                                             \
        const TX *b = x;                                                                                             \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                                  \
        int64_t i = 0;                                                                                               \
        for (; i + 64 <= n; i += 64) {                                                                               \
            s0 = _mm512_fmadd_ps(ldw(a + i), ldx(b + i), s0);                                                        \
            s1 = _mm512_fmadd_ps(ldw(a + i + 16), ldx(b + i + 16), s1);                                              \
            s2 = _mm512_fmadd_ps(ldw(a + i + 32), ldx(b + i + 32), s2);                                              \
            s3 = _mm512_fmadd_ps(ldw(a + i + 48), ldx(b + i + 48), s3);                                              \
        }                                                                                                            \
        for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(ldw(a + i), ldx(b + i), s0);                               \
        double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));                \
        for (; i < n; i++) s += (double)(cw(a[i]) * cx(b[i]));                                                       \
        return (float)s;                                                                                             \
    }

FLOAT_DOT(dot_f16, f16_bits, ld_f16, f16f, f16_bits, ld_f16, f16f)

/* One weight row against NR (1 or 2) rows of f32, each in FLOAT_DOT's order
 * exactly: the dot (NR = 1) and the tile (NR = 2, one weight row x two
 * activation rows) give a row the same number bit for bit, so a row's
 * product does not depend on the rows multiplied with it. */
#define FLOAT_ROWS(name, TW, ldw, cw)                                                                                \
    INLINE void name(int64_t n, const TW *a, const float *x0, const float *x1, const int NR, float *y0, float *y1) { \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;              \
        int64_t i = 0;                                                                                               \
        for (; i + 4 * 16 <= n; i += 4 * 16) {                                                                       \
            const __m512 w0 = ldw(a + i), w1 = ldw(a + i + 16), w2 = ldw(a + i + 2 * 16), w3 = ldw(a + i + 3 * 16);  \
            s0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x0 + i), s0);                                                   \
            s1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x0 + i + 16), s1);                                              \
            s2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x0 + i + 2 * 16), s2);                                          \
            s3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x0 + i + 3 * 16), s3);                                          \
            if (NR > 1) {                                                                                            \
                t0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x1 + i), t0);                                               \
                t1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x1 + i + 16), t1);                                          \
                t2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x1 + i + 2 * 16), t2);                                      \
                t3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x1 + i + 3 * 16), t3);                                      \
            }                                                                                                        \
        }                                                                                                            \
        for (; i + 16 <= n; i += 16) {                                                                               \
            const __m512 w0 = ldw(a + i);                                                                            \
            s0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x0 + i), s0);                                                   \
            if (NR > 1) t0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x1 + i), t0);                                       \
        }                                                                                                            \
        const int64_t i0 = i;                                                                                        \
        double s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));                \
        for (i = i0; i < n; i++) s += (double)(cw(a[i]) * x0[i]);                                                    \
        *y0 = (float)s;                                                                                              \
        if (NR > 1) {                                                                                                \
            double t = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(t0, t1), _mm512_add_ps(t2, t3)));            \
            for (i = i0; i < n; i++) t += (double)(cw(a[i]) * x1[i]);                                                \
            *y1 = (float)t;                                                                                          \
        }                                                                                                            \
    }

FLOAT_ROWS(rows_f32, float, ld_f32, id_f32)
FLOAT_ROWS(rows_f16, f16_bits, ld_f16, f16f)

/* matmul's plans for F32 and F16 (x already rounded to f16 and widened:
 * numerically F16 x F16) */
static float dot_f32(int64_t n, const void *w, const void *x) {
    float y;
    rows_f32(n, w, x, NULL, 1, &y, NULL);
    return y;
}
static float dot_f16_f32(int64_t n, const void *w, const void *x) {
    float y;
    rows_f16(n, w, x, NULL, 1, &y, NULL);
    return y;
}
/* 1 weight row x 2 activation rows */
static void tile_f32(int64_t n, const void *w, size_t wb, const void *x, size_t xb, float *y, size_t ldy) {
    (void)wb;
    rows_f32(n, w, x, (const float *)((const char *)x + xb), 2, y, y + ldy);
}
static void tile_f16(int64_t n, const void *w, size_t wb, const void *x, size_t xb, float *y, size_t ldy) {
    (void)wb;
    rows_f16(n, w, x, (const float *)((const char *)x + xb), 2, y, y + ldy);
}

/* ---- Q8_0 / Q4_0 x Q8_0 --------------------------------------------------------------- */

/* Σ over groups of 4 of w·x (signed bytes) as 8 int32, via |w| and sign(x, w). */
INLINE __m256i dot_i8(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

#include "kernels/dot_x86_q0.h"

/* ---- Q4_K / Q5_K x Q8_K ------------------------------------------------------------------ */

/* Scales (bytes 0..7) and mins (8..15) of a Q4_K/Q5_K block; see dot_avx2.c. */
INLINE __m128i k4_scales_mins(const uint8_t *s) {
    uint32_t w[3];
    memcpy(w, s, 12);
    /* built in registers: four 32-bit stores read back as one 128-bit load
     * would defeat store forwarding */
    return _mm_setr_epi32((int)(w[0] & 0x3f3f3f3fu),                                                /* sc 0..3 */
                          (int)((w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4)),         /* sc 4..7 */
                          (int)(w[1] & 0x3f3f3f3fu),                                                /* mn 0..3 */
                          (int)(((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4))); /* mn 4..7 */
}

/* Per chunk c (64 elements): the vector [low nibbles | high nibbles] of
 * qs[32c..32c+31] covers elements 64c..64c+63 in order, sub-blocks 2c and
 * 2c+1 in its two halves, matching 64 contiguous activation bytes. */
INLINE void k4_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr,
                    const int Q5) {
    const block_q8_K *xr[4];
    UNROLL for (int r = 0; r < nr; r++) xr[r] = (const block_q8_K *)((const char *)x + r * xb);
    __m512 acc[4];
    UNROLL for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
    int64_t nb = n / PH_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *qs, *scales;
        float d, dmin;
        __m256i hb = _mm256_setzero_si256();
        if (Q5) {
            const block_q5_K *b = (const block_q5_K *)w + i;
            qs = b->qs, scales = b->scales, d = f16f(b->d), dmin = f16f(b->dmin);
            hb = loadu256(b->qh);
        } else {
            const block_q4_K *b = (const block_q4_K *)w + i;
            qs = b->qs, scales = b->scales, d = f16f(b->d), dmin = f16f(b->dmin);
        }
        __m128i sm = k4_scales_mins(scales);
        /* int16 scales 0..7 in the low 128 bits; lane pattern picks 2c / 2c+1 */
        __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        __m128i mn16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        __m512i sumi[4];
        UNROLL for (int r = 0; r < nr; r++) sumi[r] = _mm512_setzero_si512();
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = loadu256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), m16));
                hb = _mm256_srli_epi16(hb, 2);
            }
            __m512i qv = join256(lo, hi);
            __m512i s = _mm512_permutexvar_epi16(
                join256(_mm256_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1))), sc16);
            UNROLL for (int r = 0; r < nr; r++) {
                __m512i p = _mm512_maddubs_epi16(qv, loadu512(xr[r][i].qs + 64 * c));
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], p, s);
            }
        }
        UNROLL for (int r = 0; r < nr; r++) {
            const block_q8_K *xb8 = &xr[r][i];
            __m128i bs = _mm_hadd_epi16(loadu128(xb8->bsums), loadu128(xb8->bsums + 8));
            __m512i summ = _mm512_castsi128_si512(_mm_madd_epi16(mn16, bs));
            summ = _mm512_maskz_mov_epi32(0x000f, summ); /* only the 4 defined lanes */
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * xb8->d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(-dmin * xb8->d), _mm512_cvtepi32_ps(summ), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < nr; r++) y[r * ldy] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- Q6_K x Q8_K ---------------------------------------------------------------------- */

/* Per half h (128 elements): A = [q1 | q2] covers elements 0..63, B = [q3 | q4]
 * elements 64..127; each 128-bit lane is one 16-element sub-block, so the
 * scale vectors hold one scale per lane. Unsigned u = q + 32, corrected by
 * −32·Σ sc·bsum as in dot_avx2.c. */
INLINE void q6_K_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    const block_q6_K *wb = w;
    const block_q8_K *xr[4];
    UNROLL for (int r = 0; r < nr; r++) xr[r] = (const block_q8_K *)((const char *)x + r * xb);
    __m512 acc[4];
    UNROLL for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* qh shifts: A takes qh bits 0-1 (low half) and 2-3 (high half) to bits 4-5,
     * B takes bits 4-5 and 6-7 */
    const __m512i shl_a = join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    const __m512i shr_b = join256(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    int64_t nb = n / PH_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const block_q6_K *b = &wb[i];
        float d = f16f(b->d);
        __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b->scales));
        __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i sumi[4];
        UNROLL for (int r = 0; r < nr; r++) sumi[r] = _mm512_castsi256_si512(_mm256_sub_epi32(
            _mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(xr[r][i].bsums)), 5)));
        UNROLL for (int r = 0; r < nr; r++) /* clear the upper half left undefined by the cast */
            sumi[r] = _mm512_maskz_mov_epi32(0x00ff, sumi[r]);
        UNROLL for (int h = 0; h < 2; h++) {
            __m512i ql = loadu512(b->ql + 64 * h);
            __m512i qh = _mm512_broadcast_i64x4(loadu256(b->qh + 32 * h));
            __m512i qa =
                _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl_a), m30));
            __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                         _mm512_and_si512(_mm512_srlv_epi16(qh, shr_b), m30));
            /* lane k of A: scale 8h+k; of B: 8h+4+k */
            __m512i ia = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0);
            ia = _mm512_inserti32x4(ia, _mm_set1_epi16((short)(8 * h + 0)), 0);
            ia = _mm512_inserti32x4(ia, _mm_set1_epi16((short)(8 * h + 1)), 1);
            ia = _mm512_inserti32x4(ia, _mm_set1_epi16((short)(8 * h + 2)), 2);
            ia = _mm512_inserti32x4(ia, _mm_set1_epi16((short)(8 * h + 3)), 3);
            __m512i sa = _mm512_permutexvar_epi16(ia, sc512);
            __m512i sb = _mm512_permutexvar_epi16(_mm512_add_epi16(ia, _mm512_set1_epi16(4)), sc512);
            UNROLL for (int r = 0; r < nr; r++) {
                const int8_t *xq = xr[r][i].qs + 128 * h;
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(qa, loadu512(xq)), sa);
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(qb, loadu512(xq + 64)), sb);
            }
        }
        UNROLL for (int r = 0; r < nr; r++) acc[r] =
            _mm512_fmadd_ps(_mm512_set1_ps(d * xr[r][i].d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
    }
    UNROLL for (int r = 0; r < nr; r++) y[r * ldy] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- table ------------------------------------------------------------------------------- */

#define ROW_WRAPPERS(T, call)                                                                                        \
    static float dot_##T(int64_t n, const void *w, const void *x) {                                                  \
        float y;                                                                                                     \
        call(n, w, x, 0, &y, 0, 1);                                                                                  \
        return y;                                                                                                    \
    }                                                                                                                \
    static void tile_##T(int64_t n, const void *w, size_t wb, const void *x, size_t xb, float *y, size_t ldy) {      \
        (void)wb;                                                                                                    \
        call(n, w, x, xb, y, ldy, 4);                                                                                \
    }

INLINE void q4_K_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    k4_rows(n, w, x, xb, y, ldy, nr, 0);
}
INLINE void q5_K_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    k4_rows(n, w, x, xb, y, ldy, nr, 1);
}

ROW_WRAPPERS(q8_0, q8_0_rows)
ROW_WRAPPERS(q4_0, q4_0_rows)
ROW_WRAPPERS(q4_K, q4_K_rows)
ROW_WRAPPERS(q5_K, q5_K_rows)
ROW_WRAPPERS(q6_K, q6_K_rows)

void fill_avx512(kernel_table *t) {
    t->isa = PH_ISA_AVX512;
    t->dot[PH_TYPE_F32] = dot_f32;
    t->dot[PH_TYPE_F16] = dot_f16;
    t->dot[PH_TYPE_Q8_0] = dot_q8_0;
    t->dot[PH_TYPE_Q4_0] = dot_q4_0;
    t->dot[PH_TYPE_Q4_K] = dot_q4_K;
    t->dot[PH_TYPE_Q5_K] = dot_q5_K;
    t->dot[PH_TYPE_Q6_K] = dot_q6_K;
    /* activation formats are the AVX2 ones already in t */
    t->mm[PH_TYPE_F32].dot = dot_f32, t->mm[PH_TYPE_F32].tile = tile_f32;
    t->mm[PH_TYPE_F16].dot = dot_f16_f32, t->mm[PH_TYPE_F16].tile = tile_f16;
    t->mm[PH_TYPE_Q8_0].dot = dot_q8_0, t->mm[PH_TYPE_Q8_0].tile = tile_q8_0;
    t->mm[PH_TYPE_Q4_0].dot = dot_q4_0, t->mm[PH_TYPE_Q4_0].tile = tile_q4_0;
    t->mm[PH_TYPE_Q4_K].dot = dot_q4_K, t->mm[PH_TYPE_Q4_K].tile = tile_q4_K;
    t->mm[PH_TYPE_Q5_K].dot = dot_q5_K, t->mm[PH_TYPE_Q5_K].tile = tile_q5_K;
    t->mm[PH_TYPE_Q6_K].dot = dot_q6_K, t->mm[PH_TYPE_Q6_K].tile = tile_q6_K;
    fill_packed_avx512(t);
}
