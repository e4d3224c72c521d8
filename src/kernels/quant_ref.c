/* Scalar reference: dequantization (docs/numerics.md, Tensor types; float operation order kept),
 * activation quantization (docs/numerics.md, Activation quantization) and simple weight quantizers (for
 * synthetic models and tests; they need not match llama.cpp's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5*2^23 leaves the
 * rounded integer in the low mantissa bits (the rounding of that add is the
 * FPU's RNE, the same as _mm256_round_ps(NEAREST) in the SIMD versions). */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static _Noreturn void bad_type(const char *fn, int type) {
    fprintf(stderr, "pinhole: %s: unsupported tensor type %d (%s)\n", fn, type, type_get(type)->name);
    abort();
}

/* ---- dequantization --------------------------------------------------------- */

/* The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block. */
static inline void get_scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void dequant_q8_0(const block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += PH_QK8_0) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < PH_QK8_0; j++) y[j] = b[i].qs[j] * d;
    }
}

static void dequant_q4_0(const block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += PH_QK4_0) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < PH_QK4_0 / 2; j++) {
            y[j] = ((b[i].qs[j] & 15) - 8) * d;
            y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_K(const block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            uint8_t sc, mn;
            get_scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            get_scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) y[l] = d1 * (q[l] & 15) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void dequant_q5_K(const block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            uint8_t sc, mn;
            get_scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            float d1 = d * sc, m1 = dmin * mn;
            get_scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            float d2 = d * sc, m2 = dmin * mn;
            uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) y[l] = d1 * ((q[l] & 15) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dequant_q6_K(const block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void dequant_q8_K(const block_q8_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += PH_QK_K)
        for (int j = 0; j < PH_QK_K; j++) y[j] = b[i].d * b[i].qs[j];
}

void dequant_row(int type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case PH_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case PH_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(((const f16_bits *)src)[i]);
        return;
    case PH_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bfp16_to_f32(((const bf16_bits *)src)[i]);
        return;
    case PH_TYPE_Q8_0: dequant_q8_0(src, dst, n / PH_QK8_0); return;
    case PH_TYPE_Q4_0: dequant_q4_0(src, dst, n / PH_QK4_0); return;
    case PH_TYPE_Q4_K: dequant_q4_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q5_K: dequant_q5_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q6_K: dequant_q6_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q8_K: dequant_q8_K(src, dst, n / PH_QK_K); return;
    default: bad_type("dequant_row", type);
    }
}

/* ---- activation quantization (docs/numerics.md, Activation quantization) ------ */

/* Q8_0 as llama.cpp's x86 AVX path does it: id = 127/amax, ties to even
 * (the generic C reference would use 1/d and ties away from zero). */
void act_q8_0_ref(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / PH_QK8_0; i++, src += PH_QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < PH_QK8_0; j++) amax = fmaxf(amax, fabsf(src[j]));
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < PH_QK8_0; j++) y[i].qs[j] = (int8_t)nearest_int(src[j] * id);
    }
}

void act_q8_K_ref(const float *src, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / PH_QK_K; i++, src += PH_QK_K) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < PH_QK_K; j++) {
            float ax = fabsf(src[j]);
            if (ax > amax) {
                amax = ax;
                max = src[j];
            }
        }
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < PH_QK_K; j++) {
            int v = nearest_int(iscale * src[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int k = 0; k < PH_QK_K / 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[i].qs[16 * k + j];
            y[i].bsums[k] = (int16_t)s;
        }
        y[i].d = 1.f / iscale;
    }
}

/* ---- weight quantizers -------------------------------------------------------- */

static void quant_q4_0(const float *x, block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += PH_QK4_0) {
        /* the value of largest magnitude maps to -8, using the full range */
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < PH_QK4_0; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < PH_QK4_0 / 2; j++) {
            int a = nearest_int(x[j] * id) + 8, b = nearest_int(x[j + 16] * id) + 8;
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            b = b < 0 ? 0 : b > 15 ? 15 : b;
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* Per 32-element sub-block an affine map x ~ D*q - M (q in 0..qmax) from the
 * sub-block's min and max; D and M quantized to 6 bits against the block's
 * f16 d and dmin. Writes the quants to q[256] and the packed scales to s[12]. */
static void quant_k_affine(const float *x, int qmax, f16_bits *pd, f16_bits *pdmin, uint8_t *s, uint8_t *q) {
    float scale[8], minv[8], max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.f, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        scale[j] = (hi - lo) / qmax;
        minv[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, minv[j]);
    }
    *pd = f32_to_fp16(max_scale / 63.f);
    *pdmin = f32_to_fp16(max_min / 63.f);
    float d = fp16_to_f32(*pd), dmin = fp16_to_f32(*pdmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        int a = d > 0.f ? nearest_int(scale[j] / d) : 0, b = dmin > 0.f ? nearest_int(minv[j] / dmin) : 0;
        sc[j] = (uint8_t)(a > 63 ? 63 : a);
        mn[j] = (uint8_t)(b > 63 ? 63 : b);
        float D = d * sc[j], M = dmin * mn[j];
        for (int l = 0; l < 32; l++) {
            int v = D > 0.f ? nearest_int((x[32 * j + l] + M) / D) : 0;
            q[32 * j + l] = (uint8_t)(v < 0 ? 0 : v > qmax ? qmax : v);
        }
    }
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

static void quant_q4_K(const float *x, block_q4_K *y, int64_t nb) {
    uint8_t q[PH_QK_K];
    for (int64_t i = 0; i < nb; i++, x += PH_QK_K) {
        quant_k_affine(x, 15, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

static void quant_q5_K(const float *x, block_q5_K *y, int64_t nb) {
    uint8_t q[PH_QK_K];
    for (int64_t i = 0; i < nb; i++, x += PH_QK_K) {
        quant_k_affine(x, 31, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                uint8_t a = q[64 * c + l], b = q[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((a & 15) | ((b & 15) << 4));
                y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
            }
    }
}

static void quant_q6_K(const float *x, block_q6_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += PH_QK_K) {
        /* per 16 elements: the value of largest magnitude maps to -32 */
        float scale[16], max_abs_scale = 0.f;
        for (int k = 0; k < 16; k++) {
            float amax = 0.f, max = 0.f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * k + l]) > amax) {
                    amax = fabsf(x[16 * k + l]);
                    max = x[16 * k + l];
                }
            scale[k] = max / -32.f;
            max_abs_scale = fmaxf(max_abs_scale, fabsf(scale[k]));
        }
        y[i].d = f32_to_fp16(max_abs_scale / 127.f);
        float d = fp16_to_f32(y[i].d);
        uint8_t q[PH_QK_K];
        for (int k = 0; k < 16; k++) {
            int s = d > 0.f ? nearest_int(scale[k] / d) : 0;
            s = s < -127 ? -127 : s > 127 ? 127 : s;
            y[i].scales[k] = (int8_t)s;
            float D = d * s;
            for (int l = 0; l < 16; l++) {
                int v = D != 0.f ? nearest_int(x[16 * k + l] / D) : 0;
                q[16 * k + l] = (uint8_t)((v < -32 ? -32 : v > 31 ? 31 : v) + 32);
            }
        }
        for (int n = 0; n < 2; n++) {
            const uint8_t *qn = q + 128 * n;
            uint8_t *ql = y[i].ql + 64 * n, *qh = y[i].qh + 32 * n;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((qn[l] & 15) | ((qn[l + 64] & 15) << 4));
                ql[l + 32] = (uint8_t)((qn[l + 32] & 15) | ((qn[l + 96] & 15) << 4));
                qh[l] = (uint8_t)((qn[l] >> 4) | ((qn[l + 32] >> 4) << 2) | ((qn[l + 64] >> 4) << 4) |
                                  ((qn[l + 96] >> 4) << 6));
            }
        }
    }
}

void quantize_weight_row(int type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case PH_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case PH_TYPE_F16: act_f16_ref(src, dst, n); return;
    case PH_TYPE_BF16: act_bf16_ref(src, dst, n); return;
    case PH_TYPE_Q8_0: act_q8_0_ref(src, dst, n); return;
    case PH_TYPE_Q4_0: quant_q4_0(src, dst, n / PH_QK4_0); return;
    case PH_TYPE_Q4_K: quant_q4_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q5_K: quant_q5_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q6_K: quant_q6_K(src, dst, n / PH_QK_K); return;
    case PH_TYPE_Q8_K: act_q8_K_ref(src, dst, n); return;
    default: bad_type("quantize_weight_row", type);
    }
}
