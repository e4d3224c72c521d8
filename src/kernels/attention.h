/* Scaled dot-product attention over an F16 KV cache, with an online
 * (flash-style) softmax accumulated in f32. Query heads map to KV heads in
 * contiguous groups (GQA; docs/numerics.md, Attention).
 *
 * Every query row takes the same arithmetic, however many rows a call
 * holds and however many threads run it: queries stay f32 and meet the
 * cells in tiles of PH_ATTN_TILE_KV widened to f32, one online-softmax step
 * per tile (qk_tile, softmax_tile, pv_tile below). A query (one row of one
 * head) is a column of a tile: 64-wide tiles of one head's rows for 64
 * rows or more (a prompt chunk, a picture), else tiles of a KV head's
 * queries (its group of query heads times the rows), 64 or PH_ATTN_TILE_N
 * wide (decode, short batches). A column's result is the same chain of
 * operations in every tile width, and threads share out heads and tiles,
 * never the cells of one query, so a row's output is bit for bit the same
 * evaluated alone, as a decoded token, or inside a prompt chunk of any
 * size, with any thread count (on one ISA level). */
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
} attn_args;

void attn_compute(tpool *pool, const attn_args *a);

/* The n calls a[0..n) as one job of the pool per PH_ATTN_BATCH of them,
 * each as attn_compute alone to the bit: a batch's sequences share one
 * wait for the threads instead of one each. Their outputs must not
 * overlap. */
#define PH_ATTN_BATCH 32
void attn_compute_n(tpool *pool, const attn_args *a, int n);

/* Sets a's table to one block holding all a->n_kv cells (set n_kv first):
 * K's cells from byte k_off of base, V's from v_off, kv_stride apart;
 * table is the caller's one-entry array, which must outlive the call to
 * attn_compute. */
void attn_kv_contiguous(attn_args *a, const uint8_t **table, const void *base, size_t k_off, size_t v_off);

/* Columns (queries) of a wide tile and of a narrow one, and KV cells per
 * tile. */
#define PH_ATTN_TILE_Q  64
#define PH_ATTN_TILE_N  8
#define PH_ATTN_TILE_KV 64

/* The tile primitives, exposed for the SIMD/reference comparison test.
 * A tile has T columns, one per query: T = PH_ATTN_TILE_Q for the wide
 * ones, PH_ATTN_TILE_N for the narrow ones; a narrow primitive gives each
 * column what the wide one gives it, bit for bit. */
typedef struct attn_kernels {
    void (*f16_to_f32)(const f16_bits *src, float *dst, int n);
    /* st[j][i] = (k[j] . qt[.][i]) * scale for j < nk, i < T, the dot as
     * one chain over t (s = k[j][t] * qt[t][i] + s, fused where the ISA
     * has FMA); k is [nk][d], qt is [d][T] (the queries transposed), st is
     * [nk][T]. */
    void (*qk_tile)(const float *k, int nk, const float *qt, int d, float scale, float *st);
    /* One online-softmax step over nk rows of scores: per column i,
     * m = max(M[i], max_j st[j][i]); st[j][i] = exp(st[j][i] - m) (0 where
     * the score is -inf); ms[i] = exp(M[i] - m) (1 if both are -inf);
     * L[i] = L[i] * ms[i] + sum_j st[j][i] (summed in j order); M[i] = m. */
    void (*softmax_tile)(float *st, int nk, float *M, float *L, float *ms);
    /* o[i][t] = o[i][t] * ms[i] + sum_j p[j][i] * v[j][t] (in j order) for
     * i < T, t < d; p is [nk][T], v is [nk][d], o is [T][d]. */
    void (*pv_tile)(const float *p, int nk, const float *v, int d, const float *ms, float *o);
    /* the same three over T = PH_ATTN_TILE_N columns, of which the first
     * nc are queries: qk_narrow may give the others a score of 0 instead,
     * pv_narrow leaves them as they are */
    void (*qk_narrow)(const float *k, int nk, const float *qt, int d, float scale, float *st, int nc);
    void (*softmax_narrow)(float *st, int nk, float *M, float *L, float *ms);
    void (*pv_narrow)(const float *p, int nk, const float *v, int d, const float *ms, float *o, int nc);
} attn_kernels;

extern const attn_kernels attn_kernels_ref;
extern const attn_kernels attn_kernels_avx2;
extern const attn_kernels attn_kernels_avx512;

/* The AVX-512 tiles (attention_avx512.c): the AVX2 tiles' results bit for
 * bit (every output is the same chain of operations, wider vectors only put
 * more of them side by side). */
void attn_qk_tile_avx512(const float *k, int nk, const float *qt, int d, float scale, float *st);
void attn_softmax_tile_avx512(float *st, int nk, float *M, float *L, float *ms);
void attn_pv_tile_avx512(const float *p, int nk, const float *v, int d, const float *ms, float *o);
void attn_pv_narrow_avx512(const float *p, int nk, const float *v, int d, const float *ms, float *o, int nc);

#endif
