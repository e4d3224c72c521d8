/* The KV cache of one sequence (docs/state-cache.md, Live state): the K and V cells of every
 * layer, as the forward pass (model/llm.h, llm_kv) reads and appends them,
 * and the operations on them that state needs: truncation, and a table of
 * blocks that can be handed over and taken from others without a copy.
 *
 * Layout: a table of KV blocks (state/kv_block.h: a block holds
 * KV_BLOCK_ROWS rows, per attention layer the K cells of its rows, then
 * their V cells, each cell row_bytes of F16 values), rows.blocks pointing
 * at them in row order, ids[] their ids in the pool.
 *
 * Memory: the blocks come from a KV pool (state/kv_pool.h, docs/state-cache.md,
 * Blocks and the pool), shared with whatever else the pool holds, or from a
 * pool of one context's blocks of the cache's own. A block is taken when
 * the first row is written into it (kv_cache_reserve), not before, and one
 * the cache does not hold alone, or that is named, is copied before a row
 * is written into it (kv_pool_cow): a cache may hold blocks that other
 * sequences, the RAM tier's resume points or a parked conversation hold
 * too. Truncation gives back the blocks past the rows kept (a named block
 * stays in the pool, cached, until eviction takes it).
 *
 * A model with recurrent layers (qwen35) also has their state here: what
 * its n_rows rows left behind, which no prefix of them can be cut from.
 * Such a cache can be cut back only to a row where that state is known:
 * 0 (an empty sequence), or a snapshot, a copy of the recurrent state taken
 * after some row (kv_cache_snapshot). At most KV_SNAPSHOTS are kept, the
 * latest ones; each costs recurrent_floats * 4 bytes, that is
 * n_rec_layer * ((conv_k - 1) * conv_dim + ssm_hv * ssm_d^2) floats, a
 * little over 1 MiB per recurrent layer whose delta net has 16 value heads
 * of 128 x 128, allocated when first taken. A resume point of the RAM tier
 * copies the snapshots and the state after all rows
 * (kv_cache_save_recurrent), and the disk tier stores each of them as a
 * resume point (state/disk_tier.h). */
#ifndef PH_STATE_KV_CACHE_H
#define PH_STATE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/llm.h"
#include "state/kv_pool.h"

/* Snapshots of the recurrent state kept per sequence (below). */
#define KV_SNAPSHOTS 4

typedef struct kv_cache {
    llm_kv rows; /* the block table (pointers into the pool) and how many rows are in use */
    int32_t n_layer;
    size_t row_bytes; /* one K (or V) cell: n_head_kv * head_dim F16 values */
    kv_pool *pool;    /* where the blocks come from */
    kv_pool *own;     /* the pool, when it is the cache's own (else NULL) */
    int32_t *ids;     /* the blocks held, in row order: n_held of them, at least ceil(n_rows / KV_BLOCK_ROWS) */
    int32_t n_held;
    float *recurrent; /* the recurrent layers' states (rows.conv, rows.ssm point into it), or NULL */
    size_t recurrent_floats;
    float *snap[KV_SNAPSHOTS];       /* copies of the recurrent state (allocated when first needed) */
    int32_t snap_rows[KV_SNAPSHOTS]; /* the rows each was taken after, increasing, all <= rows.n_rows */
    int n_snap;
} kv_cache;

/* A cache for n_ctx rows of model m, no row in use, its blocks taken
 * from pool (NULL: a pool of its own of ceil(n_ctx / KV_BLOCK_ROWS)
 * blocks). */
int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, kv_pool *pool, ph_err *err);
/* The cells alone (no recurrent layers) of n_layer attention layers with
 * cells of row_bytes, for n_ctx rows, no row in use, over pool (NULL: its
 * own): what kv_cache_init starts from; 0, or -1 when memory ran out (c is
 * then cleared). */
int kv_cache_init_cells(kv_cache *c, int32_t n_layer, size_t row_bytes, int32_t n_ctx, kv_pool *pool);
/* The K (kind 0) or V (kind 1) cell of a row in attention layer l (a row
 * of a block the cache holds); the cells of the next rows up to the end of
 * its block (a multiple of KV_BLOCK_ROWS) follow it. */
uint8_t *kv_cache_cells(const kv_cache *c, int32_t row, int32_t l, int kind);
/* The bytes one row of context takes in a model's cache: its K and V cells
 * in every attention layer. */
size_t kv_cache_row_bytes(const llm_hparams *hp);
/* Gives back the blocks (to the pool, or with the pool when it is its
 * own) and frees the rest. */
void kv_cache_free(kv_cache *c);

/* Makes rows n_rows .. n - 1 writable by the cache alone before the
 * forward pass writes them: the block of row n_rows copied when it is
 * shared or named (kv_pool_cow), fresh blocks taken up to row n's. 0; or
 * -1 with nothing changed and err (may be NULL) naming the sizes when the
 * pool cannot give that many blocks (docs/state-cache.md, Blocks and the
 * pool: admission). */
int kv_cache_reserve(kv_cache *c, int32_t n, ph_err *err);
/* The blocks kv_cache_reserve(c, n) would take from the pool. */
int32_t kv_cache_blocks_needed(const kv_cache *c, int32_t n);
/* Appends block id, of which the caller hands its hold (a reference) to
 * the cache, after the blocks held (the rows it holds follow the cache's
 * last full block; the caller sets the rows in use with kv_cache_set_rows). */
void kv_cache_push_block(kv_cache *c, int32_t id);
/* Gives back the blocks from the table's block b on (their rows no longer
 * in use: rows.n_rows becomes at most b * KV_BLOCK_ROWS); the recurrent
 * state is not touched (the caller replaces it). */
void kv_cache_drop_blocks(kv_cache *c, int32_t b);
/* Says that the first n rows of the blocks held are in use (n within
 * them), the recurrent state not touched. */
void kv_cache_set_rows(kv_cache *c, int32_t n);
/* Replaces the table's block b (held) by id, whose rows are the same (a
 * block published under a name another block had: kv_pool_publish); the
 * hold moves with it. */
void kv_cache_replace_block(kv_cache *c, int32_t b, int32_t id);

/* Keeps the first n rows (the blocks past them given back); with
 * recurrent layers, n is one that kv_cache_cut_point gives (their state
 * back to zero or to the snapshot after row n; later snapshots dropped). */
void kv_cache_truncate(kv_cache *c, int32_t n);
/* The most rows, at most n, that truncation can keep: n itself without
 * recurrent layers; with them, n_rows when n >= n_rows (the state as it
 * is), else the last snapshot at or before n, else 0. */
int32_t kv_cache_cut_point(const kv_cache *c, int32_t n);
/* The last of rows[0..n) (increasing) that is at most x, or 0. */
int32_t kv_rows_at_most(const int32_t *rows, int n, int32_t x);
/* The rows after which the recurrent state is known (its snapshots, then
 * all rows in use unless a snapshot is there): how many (0 without
 * recurrent layers), their rows in rows[]. */
int kv_cache_recurrent_points(const kv_cache *c, int32_t rows[KV_SNAPSHOTS + 1]);
/* Copies the recurrent states at those points, in that order, to dst
 * (recurrent_floats each). */
void kv_cache_save_recurrent(const kv_cache *c, float *dst);
/* Makes the recurrent state the one after row n of such a copy (n one of
 * its n_points rows), the copy's states up to n its snapshots; the caller
 * has put the cache at n rows. */
void kv_cache_load_recurrent(kv_cache *c, const float *src, const int32_t *rows, int n_points, int32_t n);
/* Records the recurrent state after the rows in use as a snapshot (the
 * earliest one dropped when KV_SNAPSHOTS are kept); nothing without
 * recurrent layers, when it is recorded already, or when memory is short
 * (a snapshot only saves work). */
void kv_cache_snapshot(kv_cache *c);

#endif
