/* The gated delta net's kernels: the scalar reference and the choice of
 * version (docs/numerics.md, Gated delta net). */
#include "kernels/gdn.h"

#include <stddef.h>

#include "kernels/kernels.h"

static void ref_conv(float *st, const float *w, const float *x, float *u, int n, int ld, int kc) {
    for (int c = 0; c < n; c++) {
        const float xc = x[c];
        float s = 0.0f;
        for (int i = 0; i < kc - 1; i++) s += st[(size_t)i * ld + c] * w[(size_t)i * ld + c];
        s += xc * w[(size_t)(kc - 1) * ld + c];
        for (int i = 0; i + 1 < kc - 1; i++) st[(size_t)i * ld + c] = st[(size_t)(i + 1) * ld + c];
        if (kc > 1) st[(size_t)(kc - 2) * ld + c] = xc;
        u[c] = s;
    }
}

static void ref_step(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                     float *o, int dk, int dv) {
    for (int j = 0; j < dv; j++) {
        float *r = S + (size_t)j * dk;
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) {
            r[i] *= decay;
            kv += r[i] * k[i];
        }
        const float d = (v[j] - kv) * beta;
        float qs = 0.0f;
        for (int i = 0; i < dk; i++) {
            r[i] += k[i] * d;
            qs += r[i] * q[i];
        }
        o[j] = qs * scale;
    }
}

const gdn_kernels gdn_kernels_ref = {ref_conv, ref_step};

const gdn_kernels *gdn_kernels_get(void) {
    const isa_level isa = kernels_isa();
    return isa >= PH_ISA_AVX512 ? &gdn_kernels_avx512 : isa >= PH_ISA_AVX2 ? &gdn_kernels_avx2 : &gdn_kernels_ref;
}
