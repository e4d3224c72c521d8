/* Tensor element types, in ggml's numbering (the GGUF files store these ids),
 * and the block layouts of the quantized ones (docs/numerics.md, Tensor types). */
#ifndef PH_KERNELS_TYPES_H
#define PH_KERNELS_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum tensor_type {
    PH_TYPE_F32 = 0,
    PH_TYPE_F16 = 1,
    PH_TYPE_Q4_0 = 2,
    PH_TYPE_Q8_0 = 8,
    PH_TYPE_Q4_K = 12,
    PH_TYPE_Q5_K = 13,
    PH_TYPE_Q6_K = 14,
    PH_TYPE_Q8_K = 15, /* activation type only */
    PH_TYPE_BF16 = 30,
    PH_TYPE_COUNT = 40 /* upper bound of ids we look up; not a type */
} tensor_type;

typedef uint16_t f16_bits;
typedef uint16_t bf16_bits;

#define PH_QK8_0        32
#define PH_QK4_0        32
#define PH_QK_K         256
#define PH_K_SCALE_SIZE 12

typedef struct {
    f16_bits d;
    int8_t qs[PH_QK8_0];
} block_q8_0; /* 34 bytes */
typedef struct {
    f16_bits d;
    uint8_t qs[PH_QK4_0 / 2];
} block_q4_0; /* 18 bytes */
typedef struct {
    f16_bits d, dmin;
    uint8_t scales[PH_K_SCALE_SIZE];
    uint8_t qs[PH_QK_K / 2];
} block_q4_K; /* 144 bytes */
typedef struct {
    f16_bits d, dmin;
    uint8_t scales[PH_K_SCALE_SIZE];
    uint8_t qh[PH_QK_K / 8];
    uint8_t qs[PH_QK_K / 2];
} block_q5_K; /* 176 bytes */
typedef struct {
    uint8_t ql[PH_QK_K / 2];
    uint8_t qh[PH_QK_K / 4];
    int8_t scales[PH_QK_K / 16];
    f16_bits d;
} block_q6_K; /* 210 bytes */
typedef struct {
    float d;
    int8_t qs[PH_QK_K];
    int16_t bsums[PH_QK_K / 16];
} block_q8_K; /* 292 bytes */

/* Facts about a type; known == 0 for ids this build does not support. */
typedef struct type_info {
    const char *name; /* "q4_K", as llama.cpp prints it */
    int known;        /* 1 if pinhole can load tensors of this type */
    int block_elems;
    int block_bytes;
    tensor_type dot_type; /* what activations are converted to before a product */
} type_info;

const type_info *type_get(int type); /* never NULL; .known tells */

/* Bytes of a row of n elements; n must be a multiple of the block size. */
static inline size_t type_row_bytes(int type, int64_t n) {
    const type_info *ti = type_get(type);
    return (size_t)(n / ti->block_elems) * (size_t)ti->block_bytes;
}

#endif
