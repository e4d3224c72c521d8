/* Row operations with llama.cpp's CPU rounding points (docs/numerics.md, RMSNorm, LayerNorm and GELU). */
#include <math.h>
#include <pthread.h>

#include "kernels/kernels_impl.h"

void rms_norm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0; /* squares in float, summed in double, in order */
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void layer_norm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i];
    const float mean = (float)(sum / (double)n);
    double sum2 = 0; /* differences and squares in float, summed in double */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] - mean;
        y[i] = v;
        sum2 += (double)(v * v);
    }
    const float var = (float)(sum2 / (double)n);
    const float scale = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = y[i] * scale;
        if (w) v = v * w[i];
        if (b) v = v + b[i];
        y[i] = v;
    }
}

void act_swiglu(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* GELU table: f16 bit pattern -> f32(f16(gelu_tanh(f32(pattern)))). */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, coef_a = 0.044715f;
    for (uint32_t i = 0; i < (1u << 16); i++) {
        float v = fp16_to_f32((f16_bits)i);
        float g = 0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * v * (1.0f + coef_a * v * v)));
        gelu_table[i] = fp16_to_f32(f32_to_fp16(g));
    }
}

void act_gelu(float *x, int64_t n) {
    pthread_once(&gelu_once, gelu_table_init);
    f16_bits h[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        quantize_act_row(PH_TYPE_F16, x + i0, h, m); /* the SIMD f32->f16 row */
        for (int64_t i = 0; i < m; i++) {
            float v = x[i0 + i];
            x[i0 + i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : gelu_table[h[i]];
        }
    }
}
