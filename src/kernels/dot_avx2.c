/* AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c -mbmi2 only;
 * dispatch.c calls fill_avx2 after checking the CPU).
 *
 * Integer products use the usual int8 recipe: _mm256_maddubs_epi16 multiplies
 * unsigned by signed bytes and adds pairs into int16, _mm256_madd_epi16 then
 * widens pairs to int32 (optionally times a per-sub-block scale). Signed x
 * signed (Q8_0) goes through |w| and sign(x, w). Every kernel is written once
 * for NR activation rows (NR = 1 for vec_dot, 4 for matmul tiles) so a
 * row's result does not depend on which of the two computed it. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
INLINE float f16f(f16_bits h) { return _cvtsh_ss(h); }

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sums of 4 adjacent products of signed bytes, as 8 int32. */
INLINE __m256i dot_i8(__m256i w, __m256i x) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* ---- F32 / F16 / BF16 rows ------------------------------------------------ */

/* Loads 8 elements of a float-like row as f32. */
INLINE __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }
INLINE __m256 ld_f16(const f16_bits *p) { return _mm256_cvtph_ps(loadu128(p)); }
INLINE __m256 ld_bf16(const bf16_bits *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

/* A dot of two float-like rows: four 8-lane f32 accumulators, tail in double. */
#define FLOAT_DOT(name, TW, ldw, cw, TX, ldx, cx)                                                                    \
    static float name(int64_t n, const void *w, const void *x) {                                                     \
        const TW *a = w;                                                                                             \
        const TX *b = x;                                                                                             \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                                  \
        int64_t i = 0;                                                                                               \
        for (; i + 32 <= n; i += 32) {                                                                               \
            s0 = _mm256_fmadd_ps(ldw(a + i), ldx(b + i), s0);                                                        \
            s1 = _mm256_fmadd_ps(ldw(a + i + 8), ldx(b + i + 8), s1);                                                \
            s2 = _mm256_fmadd_ps(ldw(a + i + 16), ldx(b + i + 16), s2);                                              \
            s3 = _mm256_fmadd_ps(ldw(a + i + 24), ldx(b + i + 24), s3);                                              \
        }                                                                                                            \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(ldw(a + i), ldx(b + i), s0);                                 \
        double s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));                             \
        for (; i < n; i++) s += (double)(cw(a[i]) * cx(b[i]));                                                       \
        return (float)s;                                                                                             \
    }

INLINE float id_f32(float f) { return f; }

FLOAT_DOT(dot_f16, f16_bits, ld_f16, f16f, f16_bits, ld_f16, f16f)
FLOAT_DOT(dot_bf16, bf16_bits, ld_bf16, bfp16_to_f32, bf16_bits, ld_bf16, bfp16_to_f32)

/* 2 weight rows x 4 activation rows (f32, rounded to f16 for F16 weights):
 * eight accumulators, each weight vector converted once and used 4 times. */
/* One weight row against NR (1 or 2) rows of f32, each in FLOAT_DOT's order
 * exactly: the dot (NR = 1) and the tile (NR = 2, one weight row x two
 * activation rows) give a row the same number bit for bit, so a row's
 * product does not depend on the rows multiplied with it. */
#define FLOAT_ROWS(name, TW, ldw, cw)                                                                                \
    INLINE void name(int64_t n, const TW *a, const float *x0, const float *x1, const int NR, float *y0, float *y1) { \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;              \
        int64_t i = 0;                                                                                               \
        for (; i + 4 * 8 <= n; i += 4 * 8) {                                                                         \
            const __m256 w0 = ldw(a + i), w1 = ldw(a + i + 8), w2 = ldw(a + i + 2 * 8), w3 = ldw(a + i + 3 * 8);     \
            s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), s0);                                                   \
            s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), s1);                                               \
            s2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x0 + i + 2 * 8), s2);                                           \
            s3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x0 + i + 3 * 8), s3);                                           \
            if (NR > 1) {                                                                                            \
                t0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), t0);                                               \
                t1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), t1);                                           \
                t2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x1 + i + 2 * 8), t2);                                       \
                t3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x1 + i + 3 * 8), t3);                                       \
            }                                                                                                        \
        }                                                                                                            \
        for (; i + 8 <= n; i += 8) {                                                                                 \
            const __m256 w0 = ldw(a + i);                                                                            \
            s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), s0);                                                   \
            if (NR > 1) t0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), t0);                                       \
        }                                                                                                            \
        const int64_t i0 = i;                                                                                        \
        double s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));                             \
        for (i = i0; i < n; i++) s += (double)(cw(a[i]) * x0[i]);                                                    \
        *y0 = (float)s;                                                                                              \
        if (NR > 1) {                                                                                                \
            double t = hsum256(_mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));                         \
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

/* ---- Q8_0 / Q4_0 weights x Q8_0 activations ----------------------------------- */

#include "kernels/dot_x86_q0.h"

/* ---- Q4_K / Q5_K weights x Q8_K activations ------------------------------------ */

/* The eight 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a Q4_K/Q5_K
 * block, unpacked with 32-bit word operations on the 12 packed bytes
 * (docs/numerics.md, Q4_K: the scale/min unpacking, four sub-blocks per word). */
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

/* int16 scale j (0..7) of a 16-bit scale vector broadcast to all 16 lanes. */
INLINE __m256i bcast_w16(__m256i v, int j) {
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
}

/* Q4_K (Q5 = 0) or Q5_K (Q5 = 1). Per block and row: the integer sum
 * Σ_j sc_j·(q·x over sub-block j) and Σ_j mn_j·(bsums of sub-block j), then
 * acc += (d_w·d_x)·sumi − (dmin_w·d_x)·summ. */
INLINE void k4_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr,
                    const int Q5) {
    const block_q8_K *xr[4];
    UNROLL for (int r = 0; r < nr; r++) xr[r] = (const block_q8_K *)((const char *)x + r * xb);
    __m256 acc[4];
    UNROLL for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
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
        __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m128i mn16 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        __m256i sumi[4];
        UNROLL for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
            __m256i q = loadu256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) { /* 5th bits: bit 2c of qh[l] for the low nibbles, 2c+1 for the high */
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), m16));
                hb = _mm256_srli_epi16(hb, 2);
            }
            __m256i s_lo = bcast_w16(sc16, 2 * c), s_hi = bcast_w16(sc16, 2 * c + 1);
            UNROLL for (int r = 0; r < nr; r++) {
                const int8_t *xq = xr[r][i].qs + 64 * c;
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(xq)), s_lo);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(xq + 32)), s_hi);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
            }
        }
        UNROLL for (int r = 0; r < nr; r++) {
            const block_q8_K *xb8 = &xr[r][i];
            /* pairs of 16-element bsums make the 32-element sub-block sums */
            __m128i bs = _mm_hadd_epi16(loadu128(xb8->bsums), loadu128(xb8->bsums + 8));
            __m256i summ = _mm256_zextsi128_si256(_mm_madd_epi16(mn16, bs));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb8->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin * xb8->d), _mm256_cvtepi32_ps(summ), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < nr; r++) y[r * ldy] = hsum256(acc[r]);
}

/* ---- Q6_K weights x Q8_K activations ----------------------------------------- */

/* Works with the unsigned 6-bit values u = q + 32 and subtracts
 * 32·Σ_k sc_k·bsum_k afterwards, so no per-vector offset is needed. */
INLINE void q6_K_rows(int64_t n, const void *w, const void *x, size_t xb, float *y, size_t ldy, const int nr) {
    const block_q6_K *wb = w;
    const block_q8_K *xr[4];
    UNROLL for (int r = 0; r < nr; r++) xr[r] = (const block_q8_K *)((const char *)x + r * xb);
    __m256 acc[4];
    UNROLL for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    int64_t nb = n / PH_QK_K;
    for (int64_t i = 0; i < nb; i++) {
        const block_q6_K *b = &wb[i];
        float d = f16f(b->d);
        __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b->scales));
        __m256i sumi[4];
        UNROLL for (int r = 0; r < nr; r++) /* start at −32·Σ_k sc_k·bsum_k */
            sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(xr[r][i].bsums)), 5));
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i ql0 = loadu256(b->ql + 64 * h), ql1 = loadu256(b->ql + 64 * h + 32);
            __m256i qh = loadu256(b->qh + 32 * h);
            /* the 8 scales of this half as int16 in both 128-bit lanes; the 32
             * elements of group g use scale 2g (low lane) and 2g+1 (high lane) */
            __m256i sch =
                _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * h))));
            UNROLL for (int g = 0; g < 4; g++) {
                /* group g: the low (g < 2) or high nibbles of ql0 (g even) or
                 * ql1 (g odd), with qh bits 2g, 2g+1 moved to bits 4, 5 */
                __m256i l = g & 1 ? ql1 : ql0;
                l = g < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                __m256i hh = g == 0   ? _mm256_slli_epi16(qh, 4)
                             : g == 1 ? _mm256_slli_epi16(qh, 2)
                             : g == 2 ? qh
                                      : _mm256_srli_epi16(qh, 2);
                __m256i q = _mm256_or_si256(l, _mm256_and_si256(hh, m30));
                __m256i s = _mm256_shuffle_epi8(sch, _mm256_set_m128i(_mm_set1_epi16((short)(0x0302 + 0x0404 * g)),
                                                                      _mm_set1_epi16((short)(0x0100 + 0x0404 * g))));
                UNROLL for (int r = 0; r < nr; r++) {
                    __m256i p = _mm256_maddubs_epi16(q, loadu256(xr[r][i].qs + 128 * h + 32 * g));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, s));
                }
            }
        }
        UNROLL for (int r = 0; r < nr; r++) acc[r] =
            _mm256_fmadd_ps(_mm256_set1_ps(d * xr[r][i].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    }
    UNROLL for (int r = 0; r < nr; r++) y[r * ldy] = hsum256(acc[r]);
}

/* ---- activation conversion ------------------------------------------------------ */

/* 32 int32 (four vectors, in element order) to 32 int8 with signed saturation. */
INLINE __m256i pack_i32_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    /* the packs work per 128-bit lane; restore element order of the 4-byte groups */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

INLINE __m256i round_i32(__m256 v) {
    return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

INLINE float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Q8_0: id = 127/amax, ties to even (docs/numerics.md, Activation quantization: the x86 AVX rule; the
 * reference does the same, so the two agree bit for bit). */
static void act_q8_0(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.f);
    for (int64_t i = 0; i < n / PH_QK8_0; i++, src += PH_QK8_0) {
        __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
        __m256 v2 = _mm256_loadu_ps(src + 16), v3 = _mm256_loadu_ps(src + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        float amax = hmax_ps(m);
        y[i].d = _cvtss_sh(amax / 127.f, _MM_FROUND_TO_NEAREST_INT);
        __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
        __m256i q = pack_i32_i8(round_i32(_mm256_mul_ps(v0, id)), round_i32(_mm256_mul_ps(v1, id)),
                                round_i32(_mm256_mul_ps(v2, id)), round_i32(_mm256_mul_ps(v3, id)));
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
    }
}

/* Q8_K exactly as the reference: the first element of largest magnitude sets
 * iscale = -127/max; q = min(127, RNE(iscale*x)) (the min is the pack's
 * saturation); bsums per 16. */
static void act_q8_K(const float *src, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.f);
    for (int64_t i = 0; i < n / PH_QK_K; i++, src += PH_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < PH_QK_K; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(src + k)));
        float amax = hmax_ps(m);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const __m256 am = _mm256_set1_ps(amax);
        int idx = 0;
        for (int k = 0; k < PH_QK_K; k += 8) {
            int mask =
                _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(src + k)), am, _CMP_EQ_OQ));
            if (mask) {
                idx = k + __builtin_ctz((unsigned)mask);
                break;
            }
        }
        float iscale = -127.f / src[idx];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i bias = _mm256_set1_epi8((char)0x80);
        for (int c = 0; c < PH_QK_K / 32; c++) {
            const float *s = src + 32 * c;
            __m256i q = pack_i32_i8(round_i32(_mm256_mul_ps(is, _mm256_loadu_ps(s))),
                                    round_i32(_mm256_mul_ps(is, _mm256_loadu_ps(s + 8))),
                                    round_i32(_mm256_mul_ps(is, _mm256_loadu_ps(s + 16))),
                                    round_i32(_mm256_mul_ps(is, _mm256_loadu_ps(s + 24))));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * c), q);
            /* sums of 8 bytes via SAD on q+128, minus 8·128 per 8 */
            __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, bias), _mm256_setzero_si256());
            __m128i lo = _mm256_castsi256_si128(sad), hi = _mm256_extracti128_si256(sad, 1);
            lo = _mm_add_epi64(lo, _mm_unpackhi_epi64(lo, lo));
            hi = _mm_add_epi64(hi, _mm_unpackhi_epi64(hi, hi));
            y[i].bsums[2 * c] = (int16_t)(_mm_cvtsi128_si32(lo) - 2048);
            y[i].bsums[2 * c + 1] = (int16_t)(_mm_cvtsi128_si32(hi) - 2048);
        }
        y[i].d = 1.f / iscale;
    }
}

static void act_f16(const float *src, void *dst, int64_t n) {
    f16_bits *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = f32_to_fp16(src[i]);
}

/* For the F16 matmul plan: x rounded to f16, kept as f32. */
static void act_f16_as_f32(const float *src, void *dst, int64_t n) {
    float *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i,
                         _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) d[i] = fp16_to_f32(f32_to_fp16(src[i]));
}

/* ---- table ---------------------------------------------------------------------- */

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

void fill_avx2(kernel_table *t) {
    t->isa = PH_ISA_AVX2;
    t->dot[PH_TYPE_F32] = dot_f32;
    t->dot[PH_TYPE_F16] = dot_f16;
    t->dot[PH_TYPE_BF16] = dot_bf16;
    t->dot[PH_TYPE_Q8_0] = dot_q8_0;
    t->dot[PH_TYPE_Q4_0] = dot_q4_0;
    t->dot[PH_TYPE_Q4_K] = dot_q4_K;
    t->dot[PH_TYPE_Q5_K] = dot_q5_K;
    t->dot[PH_TYPE_Q6_K] = dot_q6_K;
    t->act[PH_TYPE_F16] = act_f16;
    t->act[PH_TYPE_Q8_0] = act_q8_0;
    t->act[PH_TYPE_Q8_K] = act_q8_K;
    t->mm[PH_TYPE_F32] = (mm_plan){NULL, PH_TYPE_F32, dot_f32, tile_f32, 1, 2};
    t->mm[PH_TYPE_F16] = (mm_plan){act_f16_as_f32, PH_TYPE_F32, dot_f16_f32, tile_f16, 1, 2};
    t->mm[PH_TYPE_BF16] = (mm_plan){t->act[PH_TYPE_BF16], PH_TYPE_BF16, dot_bf16, NULL, 1, 1};
    t->mm[PH_TYPE_Q8_0] = (mm_plan){act_q8_0, PH_TYPE_Q8_0, dot_q8_0, tile_q8_0, 1, 4};
    t->mm[PH_TYPE_Q4_0] = (mm_plan){act_q8_0, PH_TYPE_Q8_0, dot_q4_0, tile_q4_0, 1, 4};
    t->mm[PH_TYPE_Q4_K] = (mm_plan){act_q8_K, PH_TYPE_Q8_K, dot_q4_K, tile_q4_K, 1, 4};
    t->mm[PH_TYPE_Q5_K] = (mm_plan){act_q8_K, PH_TYPE_Q8_K, dot_q5_K, tile_q5_K, 1, 4};
    t->mm[PH_TYPE_Q6_K] = (mm_plan){act_q8_K, PH_TYPE_Q8_K, dot_q6_K, tile_q6_K, 1, 4};
    fill_packed_avx2(t);
}
