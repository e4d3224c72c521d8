/* Rotary position embeddings (docs/numerics.md, Rope). A table of (cos, sin) pairs is built
 * once per batch of tokens and applied to every head of q and k. */
#ifndef PH_KERNELS_ROPE_H
#define PH_KERNELS_ROPE_H

#include <stdint.h>

typedef enum {
    PH_ROPE_NEOX = 2,    /* one position per token */
    PH_ROPE_IMROPE = 40, /* interleaved M-RoPE: 4 components (t, h, w, e) */
    PH_ROPE_VISION = 24  /* 2D vision rope: (row, col) */
} rope_mode;

typedef struct rope_params {
    rope_mode mode;
    int n_dims; /* rotated dims of a head (pairs = n_dims / 2) */
    float freq_base;
    int sections[4]; /* IMROPE / VISION */
} rope_params;

/* Fills cs[i * n_dims + 2p] = cos, [.. + 2p + 1] = sin for pair p of token i.
 * pos is section-major: pos[c * n + i] is component c of token i (NEOX
 * reads only component 0; VISION reads 0 = row and 1 = col). */
void rope_table(const rope_params *r, const int32_t *pos, int64_t n, float *cs);

/* Rotates one head vector in place with one token's table row; for NEOX,
 * IMROPE and VISION the pairs are (x[p], x[p + n_dims/2]). Elements at or
 * past n_dims are left as they are. */
void rope_apply(float *x, int n_dims, const float *cs_row);

#endif
