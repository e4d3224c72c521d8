/* Scaled dot-product attention over an F16 KV cache, with an online
 * (flash-style) softmax accumulated in f32. Query heads map to KV heads in
 * contiguous groups (GQA; docs/numerics.md, Attention).
 *
 * As in llama.cpp's CPU flash attention (docs/numerics.md, Attention): with fewer than
 * PH_ATTN_TILE_Q query rows each query is rounded to f16 and meets the cells
 * one by one, summing v in f16 (one query row over a KV view of 512 or more
 * cells: one chunk of cells per pool thread, merged in f32, so that result
 * depends on the thread count, as llama.cpp's does); with PH_ATTN_TILE_Q or
 * more (a picture), or rows of a prompt however few, queries stay f32 and
 * meet tiles of cells widened to f32: a row's result then depends neither
 * on the rows batched with it nor on the thread count, so a prompt's rows
 * come out the same whether they are evaluated at once or a few at a time
 * (a conversation's new message after reused rows). */
#ifndef PH_KERNELS_ATTENTION_H
#define PH_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kernels/types.h"

/* The KV cells are read through a table of blocks (a sequence's KV blocks,
 * docs/state-cache.md, Live state): cell c lies in block c / block_rows, as
 * its row r = c % block_rows; its K values at blocks[b] + k_off + r *
 * kv_stride f16 values, its V values at blocks[b] + v_off + r * kv_stride
 * (KV head g at g * head_dim of either). block_rows is a multiple of
 * PH_ATTN_TILE_KV unless the table has one block (block_rows >= n_kv: a
 * contiguous buffer, attn_kv_contiguous), so that no tile of the tiled
 * path straddles two blocks. The results do not depend on the table: the
 * cells are met in the same order with the same operations. */
typedef struct attn_args {
    const float *q; /* [n_q][q_stride], head h at h * head_dim */
    int64_t q_stride;
    const uint8_t *const *blocks;
    int64_t block_rows;
    size_t k_off, v_off; /* bytes */
    int64_t kv_stride;   /* f16 values from one cell to the next */
    int64_t n_q;
    int64_t n_kv; /* cells available */
    /* causal: query i sees cells [0, first_cell + i]; otherwise all n_kv. */
    bool causal;
    int64_t first_cell;
    int n_head, n_head_kv, head_dim;
    float scale;
    float *out; /* [n_q][out_stride], head h at h * head_dim */
    int64_t out_stride;
    bool prompt; /* rows of a prompt: the tiled path for any n_q */
} attn_args;

void attn_compute(tpool *pool, const attn_args *a);

/* Sets a's table to one block holding all a->n_kv cells (set n_kv first):
 * K's cells from byte k_off of base, V's from v_off, kv_stride apart;
 * table is the caller's one-entry array, which must outlive the call to
 * attn_compute. */
void attn_kv_contiguous(attn_args *a, const uint8_t **table, const void *base, size_t k_off, size_t v_off);

/* Query rows per tile of the tiled path, and KV cells per tile. */
#define PH_ATTN_TILE_Q  64
#define PH_ATTN_TILE_KV 64

/* The per-cell pass of one KV head over cells [c0, c1), for nq queries
 * (query j is row j / group of the pass). Each query keeps
 * a running max M[j], sum S[j] and f16 sum of p * v acc[j][hd]; per cell
 * and query: s = (q . k) * scale; if s > M: acc = f16(acc * exp(M - s)),
 * M = s, w = 1; else w = exp(s - M); acc = f16(acc + v * w);
 * S = S * exp(M_old - M) + w. */
typedef struct attn_cells {
    const f16_bits *k, *v; /* the first head's row of cell c at k + c * stride */
    int64_t stride;
    int64_t c0, c1;
    int n_g;        /* KV heads done together, cell by cell: head g's row is at + g * hd, its
                              queries and states are those of index g * nq + j (one pass over each
                              cell's row, in order through memory) */
    const float *q; /* [n_g][nq][hd] the queries rounded to f16 */
    int nq, hd, group;
    bool causal; /* query j sees cells c <= last0 + j / group */
    int64_t last0;
    float scale;
    float *M, *S, *acc; /* [n_g][nq], [n_g][nq], [n_g][nq][hd] */
    float *kf, *vf;     /* [hd] scratch */
} attn_cells;

/* The primitives, exposed for the SIMD/reference comparison test. */
typedef struct attn_kernels {
    /* the per-cell pass, whole (the SIMD versions fuse the steps below and
     * give the same results bit for bit) */
    void (*cells)(const attn_cells *x);
    /* per-cell path (fewer than PH_ATTN_TILE_Q query rows) */
    void (*f16_to_f32)(const f16_bits *src, float *dst, int n);
    float (*dot)(const float *a, const float *b, int n);
    /* The running sum of v is a row of f16 values held as f32:
     * acc = f16(acc * a), and acc = f16(acc + v * b) (one fused rounding). */
    void (*scale_f16)(float *acc, float a, int n);
    void (*mad_f16)(float *acc, const float *v, float b, int n);

    /* tiled path; T = PH_ATTN_TILE_Q columns, one per query row */
    /* st[j][i] = (k[j] . qt[.][i]) * scale for j < nk, i < T; k is [nk][d],
     * qt is [d][T] (the queries transposed), st is [nk][T]. */
    void (*qk_tile)(const float *k, int nk, const float *qt, int d, float scale, float *st);
    /* One online-softmax step over nk rows of scores: per column i,
     * m = max(M[i], max_j st[j][i]); st[j][i] = exp(st[j][i] - m) (0 where
     * the score is -inf); ms[i] = exp(M[i] - m) (1 if both are -inf);
     * L[i] = L[i] * ms[i] + sum_j st[j][i]; M[i] = m. */
    void (*softmax_tile)(float *st, int nk, float *M, float *L, float *ms);
    /* o[i][t] = o[i][t] * ms[i] + sum_j p[j][i] * v[j][t] for i < T, t < d;
     * p is [nk][T], v is [nk][d], o is [T][d]. */
    void (*pv_tile)(const float *p, int nk, const float *v, int d, const float *ms, float *o);
} attn_kernels;

extern const attn_kernels attn_kernels_ref;
extern const attn_kernels attn_kernels_avx2;
extern const attn_kernels attn_kernels_avx512;

/* The SIMD per-cell passes (attention_avx2.c, attention_avx512.c). */
void attn_cells_avx2(const attn_cells *x);
void attn_cells_avx512(const attn_cells *x);

/* The AVX-512 tiles (attention_avx512.c): the AVX2 tiles' results bit for
 * bit (every output is the same chain of operations, wider vectors only put
 * more of them side by side). */
void attn_qk_tile_avx512(const float *k, int nk, const float *qt, int d, float scale, float *st);
void attn_softmax_tile_avx512(float *st, int nk, float *M, float *L, float *ms);
void attn_pv_tile_avx512(const float *p, int nk, const float *v, int d, const float *ms, float *o);

/* The per-cell pass made of kk's primitives (what kk->cells must equal). */
void attn_cells_with(const attn_kernels *kk, const attn_cells *x);

#endif
