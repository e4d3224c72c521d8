/* Numeric kernels. Each has a scalar reference (suffix _ref, always built)
 * and the public name dispatches to the fastest version the CPU supports
 * (AVX-512 / AVX2 / scalar), chosen once by kernels_init(). */
#ifndef PH_KERNELS_KERNELS_H
#define PH_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/types.h"

/* ---- CPU features and dispatch ------------------------------------------ */
typedef enum { PH_ISA_SCALAR = 0, PH_ISA_AVX2 = 1, PH_ISA_AVX512 = 2 } isa_level;

/* Detects the CPU (or honours PINHOLE_ISA=scalar|avx2|avx2-novnni|avx512
 * when the CPU has it) and installs the kernels. avx2-novnni is the AVX2
 * level without the AVX-VNNI kernels, as on a CPU without AVX-VNNI.
 * Idempotent, thread-safe. */
void kernels_init(void);
isa_level kernels_isa(void);        /* what was chosen */
const char *kernels_name(void);     /* its name: isa_name's, or "avx2-novnni" */
int kernels_cpu_has(isa_level isa); /* what the CPU supports */
const char *isa_name(isa_level isa);
/* Forces an ISA (tests use it to compare versions). Returns -1 if the CPU
 * lacks it. */
int kernels_force(isa_level isa);

/* ---- scalar conversions (docs/numerics.md, F16 and BF16) ----------------- */
float fp16_to_f32(f16_bits h);
f16_bits f32_to_fp16(float f); /* RNE, overflow to inf, NaN -> 0x7E00 */
float bfp16_to_f32(bf16_bits h);
bf16_bits f32_to_bfp16(float f); /* RNE, NaN forced quiet */

/* ---- rows ------------------------------------------------------------------ */
/* Dequantizes n elements (multiple of the block size) of `type`. */
void dequant_row(int type, const void *src, float *dst, int64_t n);
/* Converts an F32 activation row to `type`'s dot type (type_get(type)->dot_type)
 * the way llama.cpp's CPU backend does (docs/numerics.md, Activation quantization). dst holds
 * type_row_bytes(dot_type, n) bytes. */
void quantize_act_row(int dot_type, const float *src, void *dst, int64_t n);
/* Quantizes weights (for synth and tests): F32->type, any supported type. */
void quantize_weight_row(int type, const float *src, void *dst, int64_t n);

/* Dot product of one weight row of `wtype` (n elements) with one activation
 * row already converted to its dot type. */
float vec_dot(int wtype, int64_t n, const void *w, const void *x);

/* ---- matrix products ------------------------------------------------------ */
/* A weight matrix as stored in GGUF: n_out rows of n_in elements. */
typedef struct wmat {
    int type;
    int64_t n_in, n_out;
    const void *data;
    size_t row_bytes;
    const void *packed; /* NULL, or the same weights repacked by mat_pack */
} wmat;

/* Weights can be repacked for the kernels in use: groups of 16 output rows
 * interleaved so that one vector holds the same few inputs of 16 rows (the
 * layout of the int8 dot instructions), scales unpacked. mat_mul then
 * reads `packed` instead of `data`; the results are the scalar reference's,
 * bit for bit, whichever path computes them. mat_pack_size is 0 when
 * there is nothing to gain (type without a packed kernel, scalar kernels). */
size_t mat_pack_size(const wmat *m);
/* Fills dst (mat_pack_size bytes, 64-byte aligned; on the pool's
 * threads) and sets m->packed. */
void mat_pack(tpool *pool, wmat *m, void *dst);

/* y[r][o] = W[o] . x[r] for r < n_rows (x rows n_in wide, y rows n_out wide,
 * both contiguous). Activations are converted to the dot type first. One
 * row takes the decode path (parallel over outputs); many rows take the
 * prefill path (tiles of outputs x rows). */
void mat_mul(tpool *pool, const wmat *w, const float *x, int64_t n_rows, float *y);

/* ---- elementwise / row ops ------------------------------------------------ */
/* y = x * 1/sqrt(mean(x^2)+eps) * w (w may be NULL); sum of squares in double. */
void rms_norm(float *y, const float *x, const float *w, int64_t n, float eps);
/* y = (x-mean)/sqrt(var+eps) * w + b (docs/numerics.md, LayerNorm and GELU). */
void layer_norm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps);
/* out[i] = silu(g[i]) * u[i] */
void act_swiglu(float *out, const float *g, const float *u, int64_t n);
/* tanh GELU through the f16 table (docs/numerics.md, LayerNorm and GELU), in place. */
void act_gelu(float *x, int64_t n);

#endif
