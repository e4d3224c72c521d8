/* Scaled dot-product attention over an F16 KV cache, with an online
 * (flash-style) softmax accumulated in f32. Query heads map to KV heads in
 * contiguous groups (GQA, spec B.4). */
#ifndef PH_KERNELS_ATTENTION_H
#define PH_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/types.h"

typedef struct ph_attn_args {
    const float *q;        /* [n_q][q_stride], head h at h * head_dim */
    int64_t q_stride;
    const ph_f16 *k, *v;   /* [n_kv][kv_stride], KV head g at g * head_dim */
    int64_t kv_stride;
    int64_t n_q;
    int64_t n_kv;          /* cells available */
    /* causal: query i sees cells [0, first_cell + i]; otherwise all n_kv. */
    bool causal;
    int64_t first_cell;
    int n_head, n_head_kv, head_dim;
    float scale;
    float *out;            /* [n_q][out_stride], head h at h * head_dim */
    int64_t out_stride;
} ph_attn_args;

void ph_attention(ph_pool *pool, const ph_attn_args *a);

/* The per-cell primitives, exposed for the SIMD/reference comparison test. */
typedef struct ph_attn_kernels {
    void (*f16_to_f32)(const ph_f16 *src, float *dst, int n);
    float (*dot)(const float *a, const float *b, int n);
    /* acc = acc * a + v * b */
    void (*scale_add)(float *acc, float a, const float *v, float b, int n);
} ph_attn_kernels;

extern const ph_attn_kernels ph_attn_kernels_ref;
extern const ph_attn_kernels ph_attn_kernels_avx2;

#endif
