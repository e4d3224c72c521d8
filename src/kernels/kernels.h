/* Numeric kernels. Each has a scalar reference (suffix _ref, always built)
 * and the public name dispatches to the fastest version the CPU supports
 * (AVX-512 / AVX2 / scalar), chosen once by ph_kernels_init(). */
#ifndef PH_KERNELS_KERNELS_H
#define PH_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/types.h"

/* ---- CPU features and dispatch ------------------------------------------ */
typedef enum { PH_ISA_SCALAR = 0, PH_ISA_AVX2 = 1, PH_ISA_AVX512 = 2 } ph_isa;

/* Detects the CPU (or honours PINHOLE_ISA=scalar|avx2|avx512 when the CPU
 * has it) and installs the kernels. Idempotent, thread-safe. */
void ph_kernels_init(void);
ph_isa ph_kernels_isa(void);          /* what was chosen */
int ph_cpu_has(ph_isa isa);           /* what the CPU supports */
const char *ph_isa_name(ph_isa isa);
/* Forces an ISA (tests use it to compare versions). Returns -1 if the CPU
 * lacks it. */
int ph_kernels_force(ph_isa isa);

/* ---- scalar conversions (docs/numerics.md, F16 and BF16) ----------------- */
float ph_f16_to_f32(ph_f16 h);
ph_f16 ph_f32_to_f16(float f);        /* RNE, overflow to inf, NaN -> 0x7E00 */
float ph_bf16_to_f32(ph_bf16 h);
ph_bf16 ph_f32_to_bf16(float f);      /* RNE, NaN forced quiet */

/* ---- rows ------------------------------------------------------------------ */
/* Dequantizes n elements (multiple of the block size) of `type`. */
void ph_dequant_row(int type, const void *src, float *dst, int64_t n);
/* Converts an F32 activation row to `type`'s dot type (ph_type_get(type)->dot_type)
 * the way llama.cpp's CPU backend does (docs/numerics.md, Activation quantization). dst holds
 * ph_row_bytes(dot_type, n) bytes. */
void ph_quantize_act_row(int dot_type, const float *src, void *dst, int64_t n);
/* Quantizes weights (for synth and tests): F32->type, any supported type. */
void ph_quantize_weight_row(int type, const float *src, void *dst, int64_t n);

/* Dot product of one weight row of `wtype` (n elements) with one activation
 * row already converted to its dot type. */
float ph_vec_dot(int wtype, int64_t n, const void *w, const void *x);

/* ---- matrix products ------------------------------------------------------ */
/* A weight matrix as stored in GGUF: n_out rows of n_in elements. */
typedef struct ph_mat {
    int type;
    int64_t n_in, n_out;
    const void *data;
    size_t row_bytes;
    const void *packed; /* NULL, or the same weights repacked by ph_mat_pack */
} ph_mat;

/* Weights can be repacked for the kernels in use: groups of 16 output rows
 * interleaved so that one vector holds the same few inputs of 16 rows (the
 * layout of the int8 dot instructions), scales unpacked. ph_matmul then
 * reads `packed` instead of `data`; the results are the scalar reference's,
 * bit for bit, whichever path computes them. ph_mat_pack_size is 0 when
 * there is nothing to gain (type without a packed kernel, scalar kernels). */
size_t ph_mat_pack_size(const ph_mat *m);
/* Fills dst (ph_mat_pack_size bytes, 64-byte aligned; on the pool's
 * threads) and sets m->packed. */
void ph_mat_pack(ph_pool *pool, ph_mat *m, void *dst);

/* y[r][o] = W[o] . x[r] for r < n_rows (x rows n_in wide, y rows n_out wide,
 * both contiguous). Activations are converted to the dot type first. One
 * row takes the decode path (parallel over outputs); many rows take the
 * prefill path (tiles of outputs x rows). */
void ph_matmul(ph_pool *pool, const ph_mat *w, const float *x, int64_t n_rows, float *y);

/* ---- elementwise / row ops ------------------------------------------------ */
/* y = x * 1/sqrt(mean(x^2)+eps) * w (w may be NULL); sum of squares in double. */
void ph_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* y = (x-mean)/sqrt(var+eps) * w + b (docs/numerics.md, LayerNorm and GELU). */
void ph_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps);
/* out[i] = silu(g[i]) * u[i] */
void ph_swiglu(float *out, const float *g, const float *u, int64_t n);
/* tanh GELU through the f16 table (docs/numerics.md, LayerNorm and GELU), in place. */
void ph_gelu(float *x, int64_t n);

#endif
