/* Scalar reference dot products (docs/numerics.md, Dot products and summation order): integer sums inside a block,
 * float scaling outside; float rows accumulate in double. */
#include "kernels/kernels_impl.h"

float dot_f32_ref(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(a[i] * b[i]);
    return (float)s;
}

float dot_f16_ref(int64_t n, const void *w, const void *x) {
    const f16_bits *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(fp16_to_f32(a[i]) * fp16_to_f32(b[i]));
    return (float)s;
}

float dot_bf16_ref(int64_t n, const void *w, const void *x) {
    const bf16_bits *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(bfp16_to_f32(a[i]) * bfp16_to_f32(b[i]));
    return (float)s;
}

float dot_q8_0_ref(int64_t n, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    float s = 0.f;
    for (int64_t i = 0; i < n / PH_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < PH_QK8_0; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += sumi * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d));
    }
    return s;
}

float dot_q4_0_ref(int64_t n, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float s = 0.f;
    for (int64_t i = 0; i < n / PH_QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < PH_QK4_0 / 2; j++)
            sumi += ((a[i].qs[j] & 15) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        s += sumi * (fp16_to_f32(a[i].d) * fp16_to_f32(b[i].d));
    }
    return s;
}

void k4_scales_ref(const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* Shared tail of Q4_K / Q5_K: q[256] holds the unsigned weight quants. */
static float k4_block(const uint8_t *q, const uint8_t *scales, float d, float dmin, const block_q8_K *b) {
    uint8_t sc[8], mn[8];
    k4_scales_ref(scales, sc, mn);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int l = 0; l < 32; l++) s += q[32 * j + l] * b->qs[32 * j + l];
        sumi += sc[j] * s;
        summ += mn[j] * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    }
    return b->d * d * sumi - b->d * dmin * summ;
}

float dot_q4_K_ref(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float s = 0.f;
    uint8_t q[PH_QK_K];
    for (int64_t i = 0; i < n / PH_QK_K; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = a[i].qs[32 * c + l] & 15;
                q[64 * c + 32 + l] = a[i].qs[32 * c + l] >> 4;
            }
        s += k4_block(q, a[i].scales, fp16_to_f32(a[i].d), fp16_to_f32(a[i].dmin), &b[i]);
    }
    return s;
}

float dot_q5_K_ref(int64_t n, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float s = 0.f;
    uint8_t q[PH_QK_K];
    for (int64_t i = 0; i < n / PH_QK_K; i++) {
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                uint8_t h = a[i].qh[l];
                q[64 * c + l] = (uint8_t)((a[i].qs[32 * c + l] & 15) | (((h >> (2 * c)) & 1) << 4));
                q[64 * c + 32 + l] = (uint8_t)((a[i].qs[32 * c + l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4));
            }
        s += k4_block(q, a[i].scales, fp16_to_f32(a[i].d), fp16_to_f32(a[i].dmin), &b[i]);
    }
    return s;
}

float dot_q6_K_ref(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float s = 0.f;
    int8_t q[PH_QK_K];
    for (int64_t i = 0; i < n / PH_QK_K; i++) {
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            int8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                qq[l] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
                qq[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
                qq[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                qq[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        /* scale k covers elements 16k .. 16k+15 */
        int sumi = 0;
        for (int k = 0; k < 16; k++) {
            int t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * k + l] * b[i].qs[16 * k + l];
            sumi += a[i].scales[k] * t;
        }
        s += fp16_to_f32(a[i].d) * b[i].d * sumi;
    }
    return s;
}
