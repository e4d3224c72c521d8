/* The gated delta net's per-token kernels (docs/numerics.md, Gated delta net), as llama.cpp's CPU
 * path runs them: the short causal depthwise convolution with its state,
 * and one value head's recurrence step (decay, delta rule, readout). */
#ifndef PH_KERNELS_GDN_H
#define PH_KERNELS_GDN_H

typedef struct gdn_kernels {
    /* One row through the convolution of n channels with kc taps. The
     * state st holds the kc - 1 previous rows, oldest first, and the
     * weights are tap-major: row i of either at i * ld (ld >= n; the SIMD
     * versions hand a tail of channels to the reference). Per channel c:
     * u[c] = st[0][c]*w[0][c] + ... + st[kc-2][c]*w[kc-2][c] + x[c]*w[kc-1][c]
     * (summed left to right from 0, no fused multiply-add: every version
     * gives the reference's bits), then the state moves up one row and x
     * becomes its last. u may be x. */
    void (*conv)(float *st, const float *w, const float *x, float *u, int n, int ld, int kc);
    /* One token of one value head. S is the head's state, dv rows of dk
     * (row j holds S[.][j]); q and k are L2-normed. Per row j:
     * S[j] *= decay; delta = (v[j] - S[j].k) * beta; S[j] += k * delta;
     * o[j] = (S[j].q) * scale. */
    void (*step)(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                 float *o, int dk, int dv);
} gdn_kernels;

extern const gdn_kernels gdn_kernels_ref;
extern const gdn_kernels gdn_kernels_avx2;
extern const gdn_kernels gdn_kernels_avx512;

/* The versions for the kernels in use (kernels_isa). */
const gdn_kernels *gdn_kernels_get(void);

#endif
