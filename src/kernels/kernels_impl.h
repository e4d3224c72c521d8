/* Private to src/kernels: the per-ISA kernel tables that dispatch.c installs
 * and matmul.c drives. */
#ifndef PH_KERNELS_IMPL_H
#define PH_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* One weight row (n elements) . one activation row. */
typedef float (*ph_dot_fn)(int64_t n, const void *w, const void *x);
/* A full tile of the matmul: y[r*ldy + o] = W[o] . X[r] for o < mw, r < mx,
 * weight rows wb bytes apart, activation rows xb bytes apart. */
typedef void (*ph_tile_fn)(int64_t n, const void *w, size_t wb, const void *x, size_t xb, float *y, size_t ldy);
/* Converts an F32 row of n elements to some activation format. */
typedef void (*ph_act_fn)(const float *src, void *dst, int64_t n);

/* How ph_matmul multiplies one weight type. The activation format of a plan
 * may differ from the public dot type when that is numerically identical:
 * the AVX2 F16 plan stores x rounded to f16 but widened back to f32, so its
 * inner loop converts only the weights. */
typedef struct ph_mm_plan {
    ph_act_fn act;     /* NULL: use the F32 rows as they are */
    int act_type;      /* storage type of converted rows (for row sizes) */
    ph_dot_fn dot;     /* one weight row . one converted row */
    ph_tile_fn tile;   /* NULL: dot only */
    int mw, mx;        /* tile shape */
} ph_mm_plan;

typedef struct ph_kernel_table {
    ph_isa isa;
    ph_dot_fn dot[PH_TYPE_COUNT];   /* public ph_vec_dot, by weight type */
    ph_act_fn act[PH_TYPE_COUNT];   /* public ph_quantize_act_row, by dot type */
    ph_mm_plan mm[PH_TYPE_COUNT];   /* by weight type */
} ph_kernel_table;

/* The table in use (installed by ph_kernels_init / ph_kernels_force). */
const ph_kernel_table *ph_kt(void);

/* Table fillers: each overwrites the entries its ISA implements. */
void ph_fill_ref(ph_kernel_table *t);
void ph_fill_avx2(ph_kernel_table *t);
void ph_fill_avx512(ph_kernel_table *t);

/* ---- scalar references (dot_ref.c, quant_ref.c, convert.c) ---------------- */
float ph_dot_f32_ref(int64_t n, const void *w, const void *x);
float ph_dot_f16_ref(int64_t n, const void *w, const void *x);
float ph_dot_bf16_ref(int64_t n, const void *w, const void *x);
float ph_dot_q8_0_ref(int64_t n, const void *w, const void *x);
float ph_dot_q4_0_ref(int64_t n, const void *w, const void *x);
float ph_dot_q4_K_ref(int64_t n, const void *w, const void *x);
float ph_dot_q5_K_ref(int64_t n, const void *w, const void *x);
float ph_dot_q6_K_ref(int64_t n, const void *w, const void *x);

void ph_act_f16_ref(const float *src, void *dst, int64_t n);
void ph_act_bf16_ref(const float *src, void *dst, int64_t n);
void ph_act_q8_0_ref(const float *src, void *dst, int64_t n);
void ph_act_q8_K_ref(const float *src, void *dst, int64_t n);

#endif
