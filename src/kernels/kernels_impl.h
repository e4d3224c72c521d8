/* Private to src/kernels: the per-ISA kernel tables that dispatch.c installs
 * and matmul.c drives. */
#ifndef PH_KERNELS_IMPL_H
#define PH_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* One weight row (n elements) . one activation row. */
typedef float (*dot_fn)(int64_t n, const void *w, const void *x);
/* A full tile of the matmul: y[r*ldy + o] = W[o] . X[r] for o < mw, r < mx,
 * weight rows wb bytes apart, activation rows xb bytes apart. */
typedef void (*tile_fn)(int64_t n, const void *w, size_t wb, const void *x, size_t xb, float *y, size_t ldy);
/* Converts an F32 row of n elements to some activation format. */
typedef void (*act_fn)(const float *src, void *dst, int64_t n);

/* How mat_mul multiplies one weight type. The activation format of a plan
 * may differ from the public dot type when that is numerically identical:
 * the AVX2 F16 plan stores x rounded to f16 but widened back to f32, so its
 * inner loop converts only the weights. */
typedef struct mm_plan {
    act_fn act;   /* NULL: use the F32 rows as they are */
    int act_type; /* storage type of converted rows (for row sizes) */
    dot_fn dot;   /* one weight row . one converted row */
    tile_fn tile; /* NULL: dot only */
    int mw, mx;   /* tile shape */
} mm_plan;

/* Packed weights (pack.c): groups of PH_PK_ROWS output rows; per block of
 * the type along the inputs, one group block of pk_block_bytes(type):
 *   F16 (1 input):     f16 w[16]
 *   Q8_0 (32 inputs):  f16 d[16] | u8 q[8 steps][16 rows][4]  (q = w + 128)
 *   Q4_0 (32 inputs):  f16 d[16] | u8 q[4][16 rows][4]: byte b of vector v
 *                      holds inputs 8v+b (low nibble) and 8v+4+b (high), q + 8
 *   Q4_K (256 inputs): f16 d[16] | f16 dmin[16] | u8 sc[8][16] |
 *                      u8 mn[4][16][2] (mins 2m, 2m+1 of a row side by side) |
 *                      u8 q[8 sub-blocks][4][16 rows][4]: byte b of vector v
 *                      holds inputs 32j+8v+b (low nibble) and 32j+8v+4+b (high)
 *   Q5_K (256 inputs): Q4_K's layout, but each sub-block's four q vectors are
 *                      followed by u8 qh[16 rows][4]: bits 2v and 2v+1 of byte b
 *                      are the fifth bits of vector v's two inputs
 *   Q6_K (256 inputs): f16 d[16] | i8 sc[8][16][2] (scales 2m, 2m+1) |
 *                      per sub-block k (16 inputs): u8 ql[2][16][4]: vector v,
 *                      byte b: inputs 16k+8v+b (low nibble), 16k+8v+4+b (high),
 *                      then u8 qh[16][4]: bits 2i..2i+1 of byte b are bits 4-5
 *                      of input 16k+4i+b (q + 32, 0..63)
 * (each block in the order the kernels read it: one stream through memory)
 * Activations for packed quantized weights are the dot type's rows followed
 * (at PH_PK_EXTRAS_AT) by per-block extras (pk_act_extras):
 *   Q8_0: {f32 d, i32 128·Σq} per block;  Q8_K: i16 Σq over each 32 inputs [8];
 * for F16 weights they are the F16 plan's f32 rows (rounded to f16). */
#define PH_PK_ROWS 16
enum {
    PH_PK_Q8_0_BYTES = 32 + 512,
    PH_PK_Q4_0_BYTES = 32 + 256,
    PH_PK_Q4_K_BYTES = 64 + 128 + 128 + 2048,
    PH_PK_Q5_K_BYTES = PH_PK_Q4_K_BYTES + 512,
    PH_PK_Q6_K_BYTES = 32 + 256 + 2048 + 1024
};
size_t pk_block_bytes(int type); /* 0: no packed layout */
/* Packs n_out rows (row_bytes apart) into ceil(n_out/16) groups at dst. */
void pk_pack(tpool *pool, int type, const void *data, size_t row_bytes, int64_t n_in, int64_t n_out, void *dst);
/* The extras start at the first multiple of 8 bytes after the row's
 * blocks (bytes of them). */
#define PH_PK_EXTRAS_AT(bytes) (((size_t)(bytes) + 7) & ~(size_t)7)
size_t pk_act_bytes(int type, int64_t n);
void pk_act_extras(int type, void *row, int64_t n);

/* nr (1 .. the plan's mx) activation rows times the packed groups of `no`
 * weight rows at wg (no <= the plan's mw; groups are n-dependent bytes apart,
 * contiguous): y[r*ldy + o] for o < no. The quantized ones are the reference
 * dot bit for bit. */
typedef void (*pk_tile_fn)(int64_t n, const void *wg, const void *x, size_t xb, int nr, float *y, size_t ldy, int no);
typedef struct pk_plan {
    pk_tile_fn tile; /* NULL: no packed kernel for this type */
    int mx, mw;      /* activation rows, weight rows (a multiple of 16) per call */
    act_fn act;      /* activation rows; NULL: the dot type's, then pk_act_extras */
} pk_plan;

typedef struct kernel_table {
    isa_level isa;
    dot_fn dot[PH_TYPE_COUNT]; /* public vec_dot, by weight type */
    act_fn act[PH_TYPE_COUNT]; /* public quantize_act_row, by dot type */
    mm_plan mm[PH_TYPE_COUNT]; /* by weight type */
    pk_plan pk[PH_TYPE_COUNT]; /* by weight type, for packed matrices */
} kernel_table;

/* The table in use (installed by kernels_init / kernels_force). */
const kernel_table *kern_table(void);
/* Tests: installs t, a variant of one of this CPU's tables, as the table in use. */
void kernels_use(const kernel_table *t);

/* Table fillers: each overwrites the entries its ISA implements. */
void fill_ref(kernel_table *t);
void fill_avx2(kernel_table *t);
void fill_avx512(kernel_table *t);
/* after fill_avx2 / fill_avx512 set the table's act and mm entries */
void fill_packed_avx2(kernel_table *t);
void fill_packed_avxvnni(kernel_table *t); /* over the AVX2 ones where CPUID has AVX-VNNI */
void fill_packed_avx512(kernel_table *t);

/* ---- scalar references (dot_ref.c, quant_ref.c, convert.c) ---------------- */
float dot_f32_ref(int64_t n, const void *w, const void *x);
float dot_f16_ref(int64_t n, const void *w, const void *x);
float dot_bf16_ref(int64_t n, const void *w, const void *x);
float dot_q8_0_ref(int64_t n, const void *w, const void *x);
float dot_q4_0_ref(int64_t n, const void *w, const void *x);
float dot_q4_K_ref(int64_t n, const void *w, const void *x);
float dot_q5_K_ref(int64_t n, const void *w, const void *x);
float dot_q6_K_ref(int64_t n, const void *w, const void *x);

/* The eight 6-bit scales and mins of a Q4_K / Q5_K block. */
void k4_scales_ref(const uint8_t *s, uint8_t *sc, uint8_t *mn);

void act_f16_ref(const float *src, void *dst, int64_t n);
void act_bf16_ref(const float *src, void *dst, int64_t n);
void act_q8_0_ref(const float *src, void *dst, int64_t n);
void act_q8_K_ref(const float *src, void *dst, int64_t n);

#endif
