/* Kernel tests: conversions, hand-built blocks, activation quantization,
 * every ISA's dots and tiles against the scalar reference, mat_mul against
 * a naive float product, and the row ops against their formulas. */
#include <cpuid.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/kernels_impl.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
/* uniform in [-1, 1) */
static float rnd_f(void) { return (float)((int32_t)rnd_u32() >> 8) * 0x1p-23f; }
/* a mix of scales, so blocks have different amplitudes and a few outliers */
static float rnd_act(void) {
    float v = rnd_f();
    uint32_t k = rnd_u32() % 16;
    return k == 0 ? v * 20.f : k < 4 ? v * 0.01f : v;
}

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static const int wtypes[] = {PH_TYPE_F32,  PH_TYPE_F16,  PH_TYPE_BF16, PH_TYPE_Q8_0,
                             PH_TYPE_Q4_0, PH_TYPE_Q4_K, PH_TYPE_Q5_K, PH_TYPE_Q6_K};
#define N_WTYPES (int)(sizeof wtypes / sizeof wtypes[0])

/* ---- conversions ------------------------------------------------------------- */

static void test_f16(void) {
    struct {
        float f;
        uint16_t h;
    } cases[] = {{0.f, 0x0000},
                 {-0.f, 0x8000},
                 {1.f, 0x3c00},
                 {-2.f, 0xc000},
                 {65504.f, 0x7bff},
                 {65519.99f, 0x7bff},
                 {65520.f, 0x7c00},
                 {1e10f, 0x7c00},
                 {-1e10f, 0xfc00},
                 {0x1p-24f, 0x0001},
                 {0x1p-25f, 0x0000},
                 {0x1.8p-25f, 0x0001},
                 {0x1.8p-24f, 0x0002},
                 {0x1p-14f, 0x0400},
                 {1023 * 0x1p-24f, 0x03ff},
                 {0x1.ffcp-15f, 0x0400},
                 {1e-30f, 0x0000},
                 {1.f + 0x1p-11f, 0x3c00},
                 {1.f + 0x3p-11f, 0x3c02},
                 {1.f + 0x1.2p-11f, 0x3c01},
                 {0x1.004p-24f, 0x0001},
                 {-0x1.004p-24f, 0x8001},
                 {2049.f, 0x6800},
                 {2051.f, 0x6802}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECKF(f32_to_fp16(cases[i].f) == cases[i].h, "f16(%a) = %04x, want %04x", cases[i].f,
               f32_to_fp16(cases[i].f), cases[i].h);
    CHECK(f32_to_fp16(INFINITY) == 0x7c00);
    CHECK(f32_to_fp16(-INFINITY) == 0xfc00);
    CHECK(f32_to_fp16(NAN) == 0x7e00);
    CHECK(isnan(fp16_to_f32(0x7e01)) && isinf(fp16_to_f32(0xfc00)) && fp16_to_f32(0xfc00) < 0);
    CHECK(fp16_to_f32(0x0001) == 0x1p-24f);
    CHECK(fp16_to_f32(0x83ff) == -1023 * 0x1p-24f);
    CHECK(fp16_to_f32(0x7bff) == 65504.f);
    CHECK(fp16_to_f32(0x3555) == 0x1.554p-2f);
    /* every non-NaN half survives a round trip */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (f32_to_fp16(fp16_to_f32((f16_bits)h)) != h) bad++;
    }
    CHECKF(bad == 0, "%d halves fail the round trip", bad);
    /* midpoints between neighbouring halves round to the even one */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double mid = ((double)fp16_to_f32((f16_bits)h) + (double)fp16_to_f32((f16_bits)(h + 1))) / 2;
        f16_bits want = (h & 1) ? (f16_bits)(h + 1) : (f16_bits)h;
        if ((double)(float)mid == mid && f32_to_fp16((float)mid) != want) bad++;
    }
    CHECKF(bad == 0, "%d f16 ties not to even", bad);
}

static void test_bf16(void) {
    CHECK(f32_to_bfp16(1.f) == 0x3f80);
    CHECK(f32_to_bfp16(bits_f(0x3f808000)) == 0x3f80); /* tie, even stays */
    CHECK(f32_to_bfp16(bits_f(0x3f818000)) == 0x3f82); /* tie, odd rounds up */
    CHECK(f32_to_bfp16(bits_f(0x3f808001)) == 0x3f81);
    CHECK(f32_to_bfp16(INFINITY) == 0x7f80);
    CHECK(f32_to_bfp16(bits_f(0x7f800001)) == 0x7fc0); /* signalling NaN made quiet */
    CHECK(f32_to_bfp16(bits_f(0xff800001)) == 0xffc0);
    CHECK(f32_to_bfp16(bits_f(0x00008000)) == 0x0000); /* subnormal tie to even */
    CHECK(f32_to_bfp16(bits_f(0x00018000)) == 0x0002);
    CHECK(bfp16_to_f32(0x3f80) == 1.f);
    CHECK(f_bits(bfp16_to_f32(0x8001)) == 0x80010000u);
}

/* ---- dequantization of hand-built blocks ---------------------------------------- */

static void test_dequant_blocks(void) {
    float y[256];
    { /* Q8_0 */
        block_q8_0 b;
        b.d = f32_to_fp16(0.5f);
        for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j * 8 - 128);
        dequant_row(PH_TYPE_Q8_0, &b, y, 32);
        CHECK(y[0] == -64.f && y[31] == 60.f && y[16] == 0.f);
    }
    { /* Q4_0: element j from the low nibble of qs[j], j+16 from the high nibble */
        block_q4_0 b;
        b.d = f32_to_fp16(0.25f);
        for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
        dequant_row(PH_TYPE_Q4_0, &b, y, 32);
        CHECK(y[0] == -2.f && y[3] == -1.25f && y[16] == 1.75f && y[31] == -2.f);
    }
    { /* Q4_K: sub-block 1 (j<4 path) and sub-block 6 (j>=4 path, high bits elsewhere) */
        block_q4_K b;
        memset(&b, 0, sizeof b);
        b.d = f32_to_fp16(0.5f);
        b.dmin = f32_to_fp16(0.25f);
        b.scales[1] = 37;                       /* sc(1) = 37 */
        b.scales[5] = 11;                       /* mn(1) = 11 */
        b.scales[10] = (uint8_t)(9 | (5 << 4)); /* low bits of sc(6) = 9, mn(6) = 5 */
        b.scales[2] |= 2 << 6;                  /* sc(6) high bits: 2 -> sc(6) = 9 + 32 = 41 */
        b.scales[6] |= 3 << 6;                  /* mn(6) high bits: 3 -> mn(6) = 5 + 48 = 53 */
        b.qs[0 * 32 + 7] = 0xa0;                /* element 32+7 (high nibble, c=0) = 10 */
        b.qs[3 * 32 + 4] = 0x0c;                /* element 192+4 (low nibble, c=3 -> sub 6) = 12 */
        dequant_row(PH_TYPE_Q4_K, &b, y, 256);
        CHECKF(y[39] == 0.5f * 37 * 10 - 0.25f * 11, "q4_K y[39] = %g", y[39]);
        CHECKF(y[196] == 0.5f * 41 * 12 - 0.25f * 53, "q4_K y[196] = %g", y[196]);
        CHECK(y[197] == -0.25f * 53);
        CHECK(y[0] == 0.f); /* sc(0) = mn(0) = 0 */
    }
    { /* Q5_K: the 5th bit of element 64c+l is bit 2c of qh[l], of 64c+32+l bit 2c+1 */
        block_q5_K b;
        memset(&b, 0, sizeof b);
        b.d = f32_to_fp16(1.f);
        b.dmin = f32_to_fp16(1.f);
        for (int j = 0; j < 4; j++) b.scales[j] = 1; /* sc 0..3 = 1, mins 0 */
        b.scales[8] = 2;                             /* sc(4) = 2 */
        b.qs[32 * 1 + 5] = 0x37;                     /* element 64+5 = 7, 96+5 = 3 */
        b.qh[5] = (1 << 2) | (1 << 3);               /* +16 for both */
        b.qs[32 * 2 + 9] = 0x01;                     /* element 128+9 = 1 (sub-block 4) */
        b.qh[9] = 1 << 4;
        dequant_row(PH_TYPE_Q5_K, &b, y, 256);
        CHECK(y[69] == 23.f && y[101] == 19.f && y[137] == 2.f * 17);
        CHECK(y[5] == 0.f);
    }
    { /* Q6_K: element 128n + 32g + l uses scale 8n + 2g + l/16 */
        block_q6_K b;
        memset(&b, 0, sizeof b);
        b.d = f32_to_fp16(0.5f);
        for (int k = 0; k < 16; k++) b.scales[k] = (int8_t)(k - 8);
        /* element 128 + 64 + 20: n=1, g=2 (high nibble of ql[64+20]), qh bits 4..5 of qh[32+20] */
        b.ql[64 + 20] = 0x50;
        b.qh[32 + 20] = 2 << 4;
        /* element 96 + 3: n=0, g=3 (high nibble of ql[32+3]), qh bits 6..7 of qh[3] */
        b.ql[32 + 3] = 0xf0;
        b.qh[3] = 3 << 6;
        dequant_row(PH_TYPE_Q6_K, &b, y, 256);
        CHECKF(y[212] == 0.5f * (8 + 4 + 1 - 8) * ((5 | 32) - 32), "q6_K y[212] = %g", y[212]);
        CHECKF(y[99] == 0.5f * (6 - 8) * (63 - 32), "q6_K y[99] = %g", y[99]);
        CHECK(y[0] == 0.5f * -8 * -32);
    }
}

/* ---- activation quantization -------------------------------------------------- */

static void test_act_known(void) {
    float x[256];
    memset(x, 0, sizeof x);
    /* Q8_0: amax 127 -> id 1, so ties are visible */
    x[0] = 127.f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 1.5f, x[6] = -127.f;
    for (int isa = 0; isa < 3; isa++) {
        if (kernels_force((isa_level)isa)) continue;
        block_q8_0 b[2];
        quantize_act_row(PH_TYPE_Q8_0, x, b, 64); /* second block all zero */
        CHECK(b[0].d == 0x3c00);
        CHECKF(b[0].qs[0] == 127 && b[0].qs[1] == 2 && b[0].qs[2] == 4 && b[0].qs[3] == -2 && b[0].qs[4] == 0 &&
                   b[0].qs[5] == 2 && b[0].qs[6] == -127 && b[0].qs[7] == 0,
               "%s q8_0 ties", isa_name((isa_level)isa));
        int z = b[1].d == 0;
        for (int j = 0; j < 32; j++) z &= b[1].qs[j] == 0;
        CHECK(z);
    }
    /* Q8_K: the first element of largest magnitude (here +5 before -5) sets the sign */
    float k[512];
    memset(k, 0, sizeof k);
    k[3] = 5.f, k[7] = -5.f, k[8] = 2.5f, k[20] = 1.f;
    for (int isa = 0; isa < 3; isa++) {
        if (kernels_force((isa_level)isa)) continue;
        block_q8_K b[2];
        quantize_act_row(PH_TYPE_Q8_K, k, b, 512);
        float iscale = -127.f / 5.f;
        CHECK(b[0].d == 1.f / iscale);
        CHECK(b[0].qs[3] == -127 && b[0].qs[7] == 127);
        CHECK(b[0].qs[8] == (int8_t)lrintf(iscale * 2.5f) && b[0].qs[20] == -25);
        CHECK(b[0].bsums[0] == b[0].qs[8] && b[0].bsums[1] == -25 && b[0].bsums[2] == 0);
        int z = b[1].d == 0.f;
        for (int j = 0; j < 256; j++) z &= b[1].qs[j] == 0;
        for (int j = 0; j < 16; j++) z &= b[1].bsums[j] == 0;
        CHECK(z);
        /* a Q8_K tie: -127/-127 = 1 scales 0.5 and 1.5 to even */
        float t[256] = {-127.f, 0.5f, 1.5f, -0.5f, 126.5f};
        block_q8_K c;
        quantize_act_row(PH_TYPE_Q8_K, t, &c, 256);
        CHECK(c.d == 1.f && c.qs[0] == -127 && c.qs[1] == 0 && c.qs[2] == 2 && c.qs[3] == 0 && c.qs[4] == 126);
    }
    kernels_force(PH_ISA_SCALAR);
}

/* Every ISA's activation conversion must equal the reference byte for byte. */
static void test_act_simd_exact(void) {
    enum { N = 256 * 9 };
    static float x[N];
    static uint8_t a[N * 4], b[N * 4];
    for (int i = 0; i < N; i++) x[i] = rnd_act();
    for (int i = 0; i < 40; i++) x[rnd_u32() % N] = (float)(int)(rnd_u32() % 200) - 100.f + 0.5f; /* ties */
    x[5] = 0x1p-20f, x[6] = 70000.f, x[7] = -1e-8f; /* f16 subnormal / overflow */
    const int dts[] = {PH_TYPE_F16, PH_TYPE_BF16, PH_TYPE_Q8_0, PH_TYPE_Q8_K};
    for (int isa = 1; isa < 3; isa++) {
        if (!kernels_cpu_has((isa_level)isa)) continue;
        for (int k = 0; k < 4; k++)
            for (int n = dts[k] == PH_TYPE_Q8_K ? 256 : 32; n <= N; n += n * 3) {
                kernels_force(PH_ISA_SCALAR);
                quantize_act_row(dts[k], x, a, n);
                kernels_force((isa_level)isa);
                quantize_act_row(dts[k], x, b, n);
                CHECKF(memcmp(a, b, type_row_bytes(dts[k], n)) == 0, "%s act %s n=%d differs",
                       isa_name((isa_level)isa), type_get(dts[k])->name, n);
            }
        /* odd-length f16 rows (tails) */
        kernels_force(PH_ISA_SCALAR);
        quantize_act_row(PH_TYPE_F16, x, a, 13);
        kernels_force((isa_level)isa);
        quantize_act_row(PH_TYPE_F16, x, b, 13);
        CHECK(memcmp(a, b, 26) == 0);
    }
    kernels_force(PH_ISA_SCALAR);
}

/* ---- weight quantizers round trip ----------------------------------------------- */

static void test_weight_roundtrip(void) {
    enum { N = 256 * 4 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    for (int i = 0; i < N; i++) x[i] = rnd_f();
    const struct {
        int type;
        double tol;
    } cases[] = {{PH_TYPE_F32, 0},     {PH_TYPE_F16, 1e-3},  {PH_TYPE_BF16, 8e-3}, {PH_TYPE_Q8_0, 0.01},
                 {PH_TYPE_Q6_K, 0.03}, {PH_TYPE_Q5_K, 0.05}, {PH_TYPE_Q4_K, 0.1},  {PH_TYPE_Q4_0, 0.1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        quantize_weight_row(cases[k].type, x, q, N);
        dequant_row(cases[k].type, q, y, N);
        double e = 0, s = 0;
        for (int i = 0; i < N; i++) e += (x[i] - y[i]) * (double)(x[i] - y[i]), s += x[i] * (double)x[i];
        CHECKF(sqrt(e / s) <= cases[k].tol, "%s round trip rms error %g", type_get(cases[k].type)->name, sqrt(e / s));
    }
}

/* ---- dots ---------------------------------------------------------------------------- */

/* Σ|w_i·x_i| over the dequantized rows: the scale for dot tolerances. */
static double abs_dot(int wtype, const void *w, const void *x, int64_t n) {
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    dequant_row(wtype, w, a, n);
    dequant_row(type_get(wtype)->dot_type, x, b, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)a[i] * b[i]);
    free(a);
    free(b);
    return s;
}

static void test_dots(void) {
    for (int k = 0; k < N_WTYPES; k++) {
        int wt = wtypes[k], dt = type_get(wt)->dot_type, be = type_get(wt)->block_elems;
        const int64_t mults_q[] = {1, 3, 7, 8, 17, 64};
        const int64_t sizes_f[] = {1, 7, 8, 33, 64, 256, 1000, 2051};
        for (int s = 0; s < 6 + (be == 1 ? 2 : 0); s++) {
            int64_t n = be == 1 ? sizes_f[s] : (be == 256 && s == 5 ? 21 : mults_q[s]) * be;
            float *xf = malloc(sizeof(float) * (size_t)n), *wf = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) xf[i] = rnd_act(), wf[i] = rnd_f();
            void *w = malloc(type_row_bytes(wt, n)), *x = malloc(type_row_bytes(dt, n) + 4);
            quantize_weight_row(wt, wf, w, n);
            kernels_force(PH_ISA_SCALAR);
            quantize_act_row(dt, xf, x, n);
            float want = vec_dot(wt, n, w, x);
            double tol = 2e-6 * abs_dot(wt, w, x, n) + 1e-30;
            for (int isa = 1; isa < 3; isa++) {
                if (kernels_force((isa_level)isa)) continue;
                float got = vec_dot(wt, n, w, x);
                CHECKF(fabs(got - want) <= tol, "%s dot %s n=%lld: %.9g vs ref %.9g (tol %g)",
                       isa_name((isa_level)isa), type_get(wt)->name, (long long)n, got, want, tol);
            }
            free(xf), free(wf), free(w), free(x);
        }
    }
    kernels_force(PH_ISA_SCALAR);
}

/* Saturation corners: largest quants and scales against ±127 activations. */
static void test_dot_extremes(void) {
    enum { N = 512 };
    static uint8_t w[N * 4], x[N * 4];
    for (int k = 0; k < N_WTYPES; k++) {
        int wt = wtypes[k], dt = type_get(wt)->dot_type;
        if (type_get(wt)->block_elems == 1) continue;
        for (int pat = 0; pat < 3; pat++) {
            /* weights: raw bytes all 0xff / 0x00 / random, with sane f16 scales */
            for (size_t i = 0; i < type_row_bytes(wt, N); i++)
                w[i] = pat == 0 ? 0xff : pat == 1 ? 0 : (uint8_t)rnd_u32();
            int bb = type_get(wt)->block_bytes;
            for (int b = 0; b < N / type_get(wt)->block_elems; b++) {
                uint8_t *blk = w + b * bb;
                f16_bits one = 0x3c00;
                if (wt == PH_TYPE_Q6_K) memcpy(blk + 208, &one, 2);
                else memcpy(blk, &one, 2);
                if (wt == PH_TYPE_Q4_K || wt == PH_TYPE_Q5_K) memcpy(blk + 2, &one, 2);
            }
            /* activations: all +127 or alternating ±127 (also -128 never occurs) */
            for (int i = 0; i < N; i++) {
                float v = pat == 1 ? ((i & 1) ? -1.f : 1.f) : 1.f;
                ((float *)x)[i] = v; /* scratch, converted below */
            }
            static float xf[N];
            memcpy(xf, x, sizeof xf);
            kernels_force(PH_ISA_SCALAR);
            quantize_act_row(dt, xf, x, N);
            float want = vec_dot(wt, N, w, x);
            double tol = 2e-6 * abs_dot(wt, w, x, N) + 1e-30;
            for (int isa = 1; isa < 3; isa++) {
                if (kernels_force((isa_level)isa)) continue;
                float got = vec_dot(wt, N, w, x);
                CHECKF(fabs(got - want) <= tol, "%s extreme dot %s pattern %d: %.9g vs %.9g",
                       isa_name((isa_level)isa), type_get(wt)->name, pat, got, want);
            }
        }
    }
    kernels_force(PH_ISA_SCALAR);
}

/* A plan's tile must match its single-row dot bit for bit, for every type
 * (the same summation order): a row's product does not depend on the rows
 * multiplied with it. */
static void test_tiles(void) {
    enum { N = 256 * 5, MAXR = 4 };
    static float xf[MAXR][N], wf[2][N], y[MAXR * 2];
    static _Alignas(64) uint8_t w[2][N * 4], xq[MAXR][N * 4];
    for (int r = 0; r < MAXR; r++)
        for (int i = 0; i < N; i++) xf[r][i] = rnd_act();
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++) wf[r][i] = rnd_f();
    for (int isa = 0; isa < 3; isa++) {
        if (kernels_force((isa_level)isa)) continue;
        for (int k = 0; k < N_WTYPES; k++) {
            int wt = wtypes[k];
            const mm_plan *p = &kern_table()->mm[wt];
            CHECK(p->dot != NULL);
            if (!p->tile) continue;
            for (int r = 0; r < 2; r++) quantize_weight_row(wt, wf[r], w[r], N);
            for (int r = 0; r < p->mx; r++) {
                if (p->act) p->act(xf[r], xq[r], N);
                else memcpy(xq[r], xf[r], sizeof xf[r]);
            }
            p->tile(N, w[0], sizeof w[0], xq[0], sizeof xq[0], y, 2);
            int bad = 0;
            for (int r = 0; r < p->mx; r++)
                for (int o = 0; o < p->mw; o++) {
                    float want = p->dot(N, w[o], xq[r]), got = y[r * 2 + o];
                    bad += f_bits(got) != f_bits(want);
                }
            CHECKF(bad == 0, "%s tile %s: %d results differ from the dot", isa_name((isa_level)isa),
                   type_get(wt)->name, bad);
        }
    }
    kernels_force(PH_ISA_SCALAR);
}

/* ---- packed matrices ------------------------------------------------------------------ */

/* A packed quantized matrix multiplies to the scalar reference's numbers bit
 * for bit, whatever the number of rows (decode or prefill tiles, tails) and
 * threads; weights random or at the quant extremes (raw bytes 0xff). F16
 * (float sums in another order) agrees to rounding, and its rows do not
 * depend on the rows batched with them. */
static void test_packed(void) {
    tpool *pool2 = tpool_create(2);
    CHECK(pool2 != NULL);
    const int ptypes[] = {PH_TYPE_F16, PH_TYPE_Q8_0, PH_TYPE_Q4_0, PH_TYPE_Q4_K, PH_TYPE_Q5_K, PH_TYPE_Q6_K};
    const struct {
        int64_t n_in_blocks, n_out, n_rows;
    } shapes[] = {{1, 1, 1}, {2, 16, 1}, {3, 37, 1}, {2, 16, 4}, {1, 33, 5}, {2, 130, 9}, {1, 48, 37}, {2, 100, 260}};
    /* each ISA's table, then the AVX2 one with the plain AVX2 packed kernels
     * where this CPU has AVX-VNNI (the table then holds packed_avxvnni.c's) */
    static kernel_table plain;
    enum { NT = 6 };
    int n_packed[4][NT] = {{0}}, tried[4] = {0};
    for (int v = 0; v < 4; v++) {
        int isa = v < 3 ? v : PH_ISA_AVX2;
        const char *name = isa_name((isa_level)isa);
        if (kernels_force((isa_level)isa)) continue;
        if (v == 3) {
            plain = *kern_table();
            fill_packed_avx2(&plain);
            if (memcmp(plain.pk, kern_table()->pk, sizeof plain.pk) == 0) continue; /* what v = 1 ran */
            kernels_use(&plain);
            name = "avx2 without avx-vnni";
        }
        tried[v] = 1;
        for (size_t k = 0; k < sizeof ptypes / sizeof ptypes[0]; k++)
            for (int extreme = 0; extreme < 2; extreme++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    int wt = ptypes[k];
                    const type_info *ti = type_get(wt);
                    if (wt == PH_TYPE_F16 && extreme) continue;
                    int64_t n_in = shapes[s].n_in_blocks * (wt == PH_TYPE_F16 ? 96 : ti->block_elems),
                            n_out = shapes[s].n_out, n_rows = shapes[s].n_rows;
                    size_t rb = type_row_bytes(wt, n_in);
                    uint8_t *w = malloc(rb * (size_t)n_out);
                    float *wf = malloc(sizeof(float) * (size_t)n_in),
                          *x = malloc(sizeof(float) * (size_t)(n_in * n_rows));
                    for (int64_t o = 0; o < n_out; o++) {
                        for (int64_t i = 0; i < n_in; i++) wf[i] = rnd_f();
                        quantize_weight_row(wt, wf, w + o * rb, n_in);
                    }
                    if (extreme) /* every quant at its largest, scales kept sane */
                        for (int64_t b = 0; b < n_out * shapes[s].n_in_blocks; b++) {
                            uint8_t *blk = w + b * ti->block_bytes;
                            f16_bits one = 0x3c00;
                            size_t d_at = wt == PH_TYPE_Q6_K ? 208 : 0;
                            memset(blk, 0xff, (size_t)ti->block_bytes);
                            memcpy(blk + d_at, &one, 2);
                            if (wt == PH_TYPE_Q4_K || wt == PH_TYPE_Q5_K) memcpy(blk + 2, &one, 2);
                        }
                    for (int64_t i = 0; i < n_in * n_rows; i++) x[i] = extreme ? (i & 1 ? -3.f : 3.f) : rnd_act();
                    size_t ny = sizeof(float) * (size_t)(n_out * n_rows);
                    float *want = malloc(ny), *got = malloc(ny), *got2 = malloc(ny);
                    wmat m = {.type = wt, .n_in = n_in, .n_out = n_out, .data = w, .row_bytes = rb};
                    size_t pbytes = mat_pack_size(&m);
                    if (isa == PH_ISA_SCALAR) CHECK(pbytes == 0);
                    if (pbytes) {
                        const kernel_table *cur = kern_table();
                        kernels_force(PH_ISA_SCALAR);
                        mat_mul(NULL, &m, x, n_rows, want);
                        kernels_use(cur);
                        void *pk = aligned_alloc(64, (pbytes + 63) / 64 * 64);
                        mat_pack(pool2, &m, pk);
                        mat_mul(NULL, &m, x, n_rows, got);
                        mat_mul(pool2, &m, x, n_rows, got2);
                        int bad = 0;
                        for (int64_t i = 0; i < n_out * n_rows; i++)
                            bad += wt == PH_TYPE_F16 ? fabsf(got[i] - want[i]) > 1e-5f * (float)n_in
                                                     : f_bits(got[i]) != f_bits(want[i]);
                        if (wt == PH_TYPE_F16 && n_rows > 1) { /* each row alone gives the same numbers */
                            float *one = malloc(sizeof(float) * (size_t)n_out);
                            int dep = 0;
                            for (int64_t r = 0; r < n_rows; r++) {
                                mat_mul(NULL, &m, x + r * n_in, 1, one);
                                dep += memcmp(one, got + r * n_out, sizeof(float) * (size_t)n_out) != 0;
                            }
                            CHECKF(dep == 0, "%s packed f16 %lldx%lld: %d of %lld rows depend on their batch", name,
                                   (long long)n_out, (long long)n_in, dep, (long long)n_rows);
                            free(one);
                        }
                        CHECKF(bad == 0, "%s packed %s %lldx%lld, %lld rows%s: %d of %lld differ from the reference",
                               name, ti->name, (long long)n_out, (long long)n_in, (long long)n_rows,
                               extreme ? " (extreme)" : "", bad, (long long)(n_out * n_rows));
                        CHECKF(memcmp(got, got2, ny) == 0, "%s packed %s: threads change the result", name, ti->name);
                        free(pk);
                        n_packed[v][k]++;
                    }
                    free(w), free(wf), free(x), free(want), free(got), free(got2);
                }
    }
    /* every SIMD table of this CPU (and the plain AVX2 one on a VNNI CPU) has a
     * packed kernel for every type: the test ran each of them */
    CHECK(sizeof ptypes / sizeof ptypes[0] == NT);
    for (int v = 1; v < 4; v++)
        for (int k = 0; tried[v] && k < NT; k++)
            CHECKF(n_packed[v][k] > 0, "%s: no packed %s kernel ran",
                   v == 3 ? "avx2 without avx-vnni" : isa_name((isa_level)v), type_get(ptypes[k])->name);
    kernels_force(PH_ISA_SCALAR);
    tpool_free(pool2);
}

/* ---- matmul ------------------------------------------------------------------------- */

static void test_matmul(void) {
    tpool *pool2 = tpool_create(2), *pool3 = tpool_create(3);
    CHECK(pool2 && pool3);
    const struct {
        int64_t n_in_blocks, n_out, n_rows;
    } shapes[] = {{3, 1, 1}, {3, 7, 1}, {2, 130, 1}, {1, 1, 5}, {3, 130, 3}, {2, 37, 9}, {1, 301, 37}, {2, 64, 260}};
    for (int isa = 0; isa < 3; isa++) {
        if (kernels_force((isa_level)isa)) continue;
        for (int k = 0; k < N_WTYPES; k++) {
            int wt = wtypes[k], dt = type_get(wt)->dot_type, be = type_get(wt)->block_elems;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                int64_t n_in = shapes[s].n_in_blocks * (be == 1 ? 96 + 5 : be), n_out = shapes[s].n_out,
                        n_rows = shapes[s].n_rows;
                if (isa == 0 && n_rows * n_out > 5000) continue; /* scalar is slow under sanitizers */
                size_t rb = type_row_bytes(wt, n_in);
                uint8_t *w = malloc(rb * (size_t)n_out);
                float *wf = malloc(sizeof(float) * (size_t)n_in),
                      *wd = malloc(sizeof(float) * (size_t)(n_in * n_out));
                for (int64_t o = 0; o < n_out; o++) {
                    for (int64_t i = 0; i < n_in; i++) wf[i] = rnd_f();
                    quantize_weight_row(wt, wf, w + o * rb, n_in);
                    dequant_row(wt, w + o * rb, wd + o * n_in, n_in);
                }
                float *x = malloc(sizeof(float) * (size_t)(n_in * n_rows)),
                      *xd = malloc(sizeof(float) * (size_t)n_in);
                for (int64_t i = 0; i < n_in * n_rows; i++) x[i] = rnd_act();
                float *y1 = malloc(sizeof(float) * (size_t)(n_out * n_rows)),
                      *y2 = malloc(sizeof(float) * (size_t)(n_out * n_rows)),
                      *y3 = malloc(sizeof(float) * (size_t)(n_out * n_rows));
                wmat m = {.type = wt, .n_in = n_in, .n_out = n_out, .data = w, .row_bytes = rb};
                mat_mul(NULL, &m, x, n_rows, y1);
                mat_mul(pool2, &m, x, n_rows, y2);
                mat_mul(pool3, &m, x, n_rows, y3);
                CHECKF(memcmp(y1, y2, sizeof(float) * (size_t)(n_out * n_rows)) == 0 &&
                           memcmp(y1, y3, sizeof(float) * (size_t)(n_out * n_rows)) == 0,
                       "%s matmul %s: threads change the result", isa_name((isa_level)isa), type_get(wt)->name);
                if (n_rows > 1) { /* each row alone (decode) gives its numbers in the batch bit for bit */
                    float *one = malloc(sizeof(float) * (size_t)n_out);
                    int dep = 0;
                    for (int64_t r = 0; r < n_rows; r++) {
                        mat_mul(r % 2 ? pool2 : NULL, &m, x + r * n_in, 1, one);
                        dep += memcmp(one, y1 + r * n_out, sizeof(float) * (size_t)n_out) != 0;
                    }
                    CHECKF(dep == 0, "%s matmul %s %lldx%lld: %d of %lld rows depend on their batch",
                           isa_name((isa_level)isa), type_get(wt)->name, (long long)n_out, (long long)n_in, dep,
                           (long long)n_rows);
                    free(one);
                }
                /* against float products: tight with the activations converted as
                 * the kernels do (to within float reassociation), loose with the raw ones */
                void *xq = malloc(type_row_bytes(dt, n_in));
                int bad_tight = 0, bad_loose = 0;
                for (int64_t r = 0; r < n_rows; r++) {
                    quantize_act_row(dt, x + r * n_in, xq, n_in);
                    dequant_row(dt, xq, xd, n_in);
                    for (int64_t o = 0; o < n_out; o++) {
                        /* loose bound: Σ|w|·|x − converted x| (the activation rounding) */
                        double t = 0, l = 0, a = 0, e = 0;
                        for (int64_t i = 0; i < n_in; i++) {
                            double wv = wd[o * n_in + i], xv = x[r * n_in + i];
                            t += wv * xd[i], a += fabs(wv * xd[i]);
                            l += wv * xv, e += fabs(wv) * fabs(xv - xd[i]);
                        }
                        double got = y1[r * n_out + o];
                        if (fabs(got - t) > 1e-5 * a + 1e-30) bad_tight++;
                        if (fabs(got - l) > e * 1.001 + 1e-5 * a + 1e-30) bad_loose++;
                    }
                }
                CHECKF(bad_tight == 0 && bad_loose == 0,
                       "%s matmul %s %lldx%lld x %lld rows: %d tight, %d loose misses", isa_name((isa_level)isa),
                       type_get(wt)->name, (long long)n_out, (long long)n_in, (long long)n_rows, bad_tight,
                       bad_loose);
                free(xq), free(w), free(wf), free(wd), free(x), free(xd), free(y1), free(y2), free(y3);
            }
        }
    }
    kernels_force(PH_ISA_SCALAR);
    tpool_free(pool2);
    tpool_free(pool3);
}

/* ---- row ops ------------------------------------------------------------------------- */

static void test_ops(void) {
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, -1}, b[4] = {0.25f, 0, 0, 1}, y[4];
    rms_norm(y, x, w, 4, 1e-6f);
    float sc = 1.0f / sqrtf(7.5f + 1e-6f);
    CHECK(y[0] == 1 * sc * 1 && y[1] == (2 * sc) * 0.5f && y[3] == (4 * sc) * -1);
    rms_norm(y, x, NULL, 4, 0.f);
    CHECK(fabsf(y[2] - 3 / sqrtf(7.5f)) < 1e-6f);
    layer_norm(y, x, w, b, 4, 1e-5f);
    float ls = 1.0f / sqrtf(1.25f + 1e-5f);
    CHECK(y[0] == (-1.5f * ls) * 1 + 0.25f && y[1] == (-0.5f * ls) * 0.5f && y[3] == (1.5f * ls) * -1 + 1);
    layer_norm(y, x, NULL, NULL, 4, 0.f);
    CHECK(fabsf(y[2] - 0.5f / sqrtf(1.25f)) < 1e-6f);

    float g[3] = {-1.f, 0.f, 2.f}, u[3] = {2.f, 3.f, 0.5f}, o[3];
    act_swiglu(o, g, u, 3);
    CHECK(fabsf(o[0] - (float)(-1 / (1 + exp(1.0)) * 2)) < 1e-6f && o[1] == 0.f &&
          fabsf(o[2] - (float)(2 / (1 + exp(-2.0)) * 0.5)) < 1e-6f);

    float v[300];
    for (int i = 0; i < 300; i++) v[i] = (i - 150) * 0.09f;
    v[0] = -10.f, v[1] = 10.f, v[2] = -30.f, v[3] = 12.5f, v[4] = 1.f, v[5] = 0.f;
    float in[300];
    memcpy(in, v, sizeof v);
    act_gelu(v, 300);
    CHECK(v[0] == 0.f && v[1] == 10.f && v[2] == 0.f && v[3] == 12.5f && v[5] == 0.f);
    int bad = 0;
    for (int i = 6; i < 300; i++) {
        /* the table value: gelu of the f16-rounded input, rounded to f16 */
        double t = fp16_to_f32(f32_to_fp16(in[i]));
        double want = 0.5 * t * (1 + tanh(0.7978845608028654 * t * (1 + 0.044715 * t * t)));
        if (fabsf(in[i]) < 10.f && fp16_to_f32(f32_to_fp16(v[i])) != v[i]) bad++; /* an f16 value */
        if (in[i] >= 10.f) want = in[i];
        if (in[i] <= -10.f) want = 0;
        if (fabs(v[i] - want) > 1e-3 * fabs(want) + 1e-7) bad++;
    }
    CHECKF(bad == 0, "%d gelu values off", bad);
    CHECK(v[4] == fp16_to_f32(f32_to_fp16(0.8411920f)));
}

/* ---- dispatch ------------------------------------------------------------------------ */

static void test_dispatch(const char *self) {
    CHECK(kernels_cpu_has(PH_ISA_SCALAR));
    CHECK(!kernels_cpu_has(PH_ISA_AVX512) || kernels_cpu_has(PH_ISA_AVX2));
    /* the init self-test drops an ISA whose kernels disagree with the
     * reference; on a CPU that has the features that is a test failure */
    __builtin_cpu_init();
    unsigned a, b, c, d;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    int hw_avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c && __builtin_cpu_supports("bmi2");
    int hw_avx512 = hw_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512vnni");
    CHECKF(kernels_cpu_has(PH_ISA_AVX2) == hw_avx2, "avx2 kernels rejected by their self-test");
    CHECKF(kernels_cpu_has(PH_ISA_AVX512) == hw_avx512, "avx512 kernels rejected by their self-test");
    for (int isa = 0; isa < 3; isa++) {
        int r = kernels_force((isa_level)isa);
        CHECK(r == (kernels_cpu_has((isa_level)isa) ? 0 : -1));
        if (r == 0) CHECK(kernels_isa() == (isa_level)isa);
    }
    /* with AVX-VNNI the AVX2 table has packed_avxvnni.c's quantized kernels
     * (a self-test failure there only warns and keeps the plain ones) and
     * packed_avx2.c's F16 one */
    int hw_avxvnni = hw_avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & bit_AVXVNNI);
    if (hw_avxvnni && kernels_force(PH_ISA_AVX2) == 0) {
        static kernel_table plain;
        plain = *kern_table();
        fill_packed_avx2(&plain);
        const int vt[] = {PH_TYPE_Q8_0, PH_TYPE_Q4_0, PH_TYPE_Q4_K, PH_TYPE_Q5_K, PH_TYPE_Q6_K};
        for (size_t k = 0; k < sizeof vt / sizeof vt[0]; k++)
            CHECKF(kern_table()->pk[vt[k]].tile && kern_table()->pk[vt[k]].tile != plain.pk[vt[k]].tile,
                   "avx2 table: no avx-vnni packed %s kernel (rejected by its self-test?)", type_get(vt[k])->name);
        CHECK(kern_table()->pk[PH_TYPE_F16].tile && kern_table()->pk[PH_TYPE_F16].tile == plain.pk[PH_TYPE_F16].tile);
        kernels_force(PH_ISA_SCALAR);
    }
    CHECK(strcmp(isa_name(PH_ISA_AVX2), "avx2") == 0);
    const type_info *ti = type_get(PH_TYPE_Q6_K);
    CHECK(ti->known && ti->block_elems == 256 && ti->block_bytes == 210 && ti->dot_type == PH_TYPE_Q8_K);
    CHECK(strcmp(type_get(PH_TYPE_Q4_K)->name, "q4_K") == 0 && !type_get(3)->known && !type_get(-1)->known &&
          !type_get(1000)->known && type_get(PH_TYPE_Q8_K)->block_bytes == (int)sizeof(block_q8_K));
    CHECK(sizeof(block_q4_K) == 144 && sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 &&
          sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q8_K) == 292);
    /* PINHOLE_ISA is read at the first use: check it in fresh processes */
    for (int isa = 0; isa < 3; isa++) {
        if (!kernels_cpu_has((isa_level)isa)) continue;
        char cmd[4200], out[64] = "";
        snprintf(cmd, sizeof cmd, "PINHOLE_ISA=%s '%s' --print-isa", isa_name((isa_level)isa), self);
        FILE *f = popen(cmd, "r");
        CHECK(f != NULL);
        if (!f) continue;
        if (!fgets(out, sizeof out, f)) out[0] = 0;
        pclose(f);
        out[strcspn(out, "\n")] = 0;
        CHECKF(strcmp(out, isa_name((isa_level)isa)) == 0, "PINHOLE_ISA=%s gave %s", isa_name((isa_level)isa), out);
    }
    if (kernels_cpu_has(PH_ISA_AVX2)) {
        char cmd[4200], out[64] = "";
        snprintf(cmd, sizeof cmd, "PINHOLE_ISA=avx2-novnni '%s' --print-isa", self);
        FILE *f = popen(cmd, "r");
        CHECK(f != NULL);
        if (f) {
            if (!fgets(out, sizeof out, f)) out[0] = 0;
            pclose(f);
        }
        /* the child checked that its table has no avx-vnni kernel */
        CHECKF(strcmp(out, "avx2-novnni plain\n") == 0, "PINHOLE_ISA=avx2-novnni gave %s", out);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--print-isa") == 0) {
        const kernel_table *t = kern_table();
        if (strcmp(kernels_name(), "avx2-novnni") != 0) {
            printf("%s\n", isa_name(kernels_isa()));
            return 0;
        }
        /* the installed table must be packed_avx2.c's for every quantized type */
        static kernel_table plain;
        plain = *t;
        fill_packed_avx2(&plain);
        int same = t->isa == PH_ISA_AVX2;
        for (int w = 0; w < PH_TYPE_COUNT; w++) same &= t->pk[w].tile == plain.pk[w].tile;
        printf("%s %s\n", kernels_name(), same ? "plain" : "has avx-vnni kernels");
        return 0;
    }
    kernels_init();
    printf("kernels: default isa %s (cpu: avx2 %d, avx512 %d)\n", isa_name(kernels_isa()),
           kernels_cpu_has(PH_ISA_AVX2), kernels_cpu_has(PH_ISA_AVX512));
    test_f16();
    test_bf16();
    test_dequant_blocks();
    test_act_known();
    test_act_simd_exact();
    test_weight_roundtrip();
    test_dots();
    test_dot_extremes();
    test_tiles();
    test_matmul();
    test_packed();
    test_ops();
    test_dispatch(argc > 0 ? argv[0] : "");
    TEST_END();
}
