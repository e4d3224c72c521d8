/* The gated delta net's kernels (kernels/gdn.h): each SIMD version against
 * the scalar reference, over many tokens so that errors in the recurrent
 * state would grow: the convolution bit for bit, the step within rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gdn.h"
#include "kernels/kernels.h"
#include "test.h"

static uint32_t seed = 7;
static float rnd(void) { /* uniform in [-1, 1) */
    seed = seed * 1664525u + 1013904223u;
    return (float)((int32_t)seed >> 8) * 0x1p-23f;
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rnd();
}

static void l2norm(float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    const float r = 1.0f / sqrtf((float)s);
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* n channels (some not a multiple of the vector width), kc taps, 40 rows */
static void check_conv(const gdn_kernels *kk, const char *name, int n, int kc) {
    const int ld = n + 3, rows = 40;
    float *w = malloc((size_t)kc * ld * sizeof(float)), *x = malloc((size_t)rows * n * sizeof(float));
    float *st0 = calloc((size_t)kc * ld, sizeof(float)), *st1 = calloc((size_t)kc * ld, sizeof(float));
    float *u0 = malloc((size_t)n * sizeof(float)), *u1 = malloc((size_t)n * sizeof(float));
    fill(w, (size_t)kc * ld);
    fill(x, (size_t)rows * n);
    int same = 1;
    for (int r = 0; r < rows; r++) {
        gdn_kernels_ref.conv(st0, w, x + (size_t)r * n, u0, n, ld, kc);
        memcpy(u1, x + (size_t)r * n, (size_t)n * sizeof(float)); /* in place, as the model calls it */
        kk->conv(st1, w, u1, u1, n, ld, kc);
        same &= memcmp(u0, u1, (size_t)n * sizeof(float)) == 0;
    }
    for (int i = 0; i < kc - 1; i++)
        same &= memcmp(st0 + (size_t)i * ld, st1 + (size_t)i * ld, (size_t)n * sizeof(float)) == 0;
    CHECKF(same, "%s: conv of %d channels, %d taps differs from the reference", name, n, kc);
    free(w);
    free(x);
    free(st0);
    free(st1);
    free(u0);
    free(u1);
}

static void check_step(const gdn_kernels *kk, const char *name, int dk, int dv) {
    const int tokens = 200;
    float *S0 = calloc((size_t)dk * dv, sizeof(float)), *S1 = calloc((size_t)dk * dv, sizeof(float));
    float *q = malloc((size_t)dk * sizeof(float)), *k = malloc((size_t)dk * sizeof(float));
    float *v = malloc((size_t)dv * sizeof(float)), *o0 = malloc((size_t)dv * sizeof(float)),
          *o1 = malloc((size_t)dv * sizeof(float));
    double worst = 0;
    for (int t = 0; t < tokens; t++) {
        fill(q, (size_t)dk);
        fill(k, (size_t)dk);
        fill(v, (size_t)dv);
        l2norm(q, dk);
        l2norm(k, dk);
        const float decay = expf(-0.5f * (rnd() + 1.0f)), beta = 0.5f * (rnd() + 1.0f);
        const float scale = 1.0f / sqrtf((float)dv);
        gdn_kernels_ref.step(S0, q, k, v, decay, beta, scale, o0, dk, dv);
        kk->step(S1, q, k, v, decay, beta, scale, o1, dk, dv);
        for (int j = 0; j < dv; j++) worst = fmax(worst, fabs((double)o0[j] - o1[j]));
    }
    for (int i = 0; i < dk * dv; i++) worst = fmax(worst, fabs((double)S0[i] - S1[i]));
    CHECKF(worst < 1e-5, "%s: step with dk %d, dv %d off by %g", name, dk, dv, worst);
    printf("%-6s step dk %3d dv %3d: worst %.2g\n", name, dk, dv, worst);
    free(S0);
    free(S1);
    free(q);
    free(k);
    free(v);
    free(o0);
    free(o1);
}

static void check(const gdn_kernels *kk, const char *name) {
    const int convs[][2] = {{256, 4}, {37, 4}, {512, 4}, {24, 2}, {5, 1}, {100, 3}};
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) check_conv(kk, name, convs[i][0], convs[i][1]);
    const int steps[][2] = {{16, 16}, {32, 32}, {64, 64}, {128, 128}, {12, 20}, {8, 8}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) check_step(kk, name, steps[i][0], steps[i][1]);
}

int main(void) {
    kernels_init();
    check(&gdn_kernels_ref, "scalar");
    if (kernels_cpu_has(PH_ISA_AVX2)) check(&gdn_kernels_avx2, "avx2");
    if (kernels_cpu_has(PH_ISA_AVX512)) check(&gdn_kernels_avx512, "avx512");
    TEST_END();
}
