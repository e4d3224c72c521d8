/* The KV cache of one sequence (docs/state-cache.md, Live state): the K and V cells of every
 * layer, as the forward pass (model/llm.h, llm_kv) reads and appends them,
 * and the operations on them that state needs: truncation, a copy of the
 * first n cells for a checkpoint (RAM tier), and restoring such a copy.
 *
 * Layout: ceil(n_ctx / KV_BLOCK_ROWS) KV blocks (state/kv_block.h: a block
 * holds KV_BLOCK_ROWS rows, per attention layer the K cells of its rows,
 * then their V cells, each cell row_bytes of F16 values), the table
 * rows.blocks pointing at them in row order.
 *
 * Memory: one mapping (base/bigbuf) holding the blocks one after another,
 * sized for the whole context; the kernel backs only the pages that rows
 * were written to, so a large context costs memory only as it fills. The
 * mapping can be handed over whole (kv_cache_swap_map): a conversation
 * switch then moves cells instead of copying them.
 *
 * Copy layout (what kv_cache_save writes and kv_cache_load reads): the
 * first ceil(n / KV_BLOCK_ROWS) blocks of the mapping, whole, in the same
 * layout, so the mapping itself is a copy of n_ctx rows and a copy of n
 * rows is kv_cache_bytes(n). (The disk tier stores these blocks, a whole
 * one as it is: state/disk_tier.h.)
 *
 * A model with recurrent layers (qwen35) also has their state here: what
 * its n_rows rows left behind, which no prefix of them can be cut from.
 * Such a cache can be cut back only to a row where that state is known:
 * 0 (an empty sequence), or a snapshot, a copy of the recurrent state taken
 * after some row (kv_cache_snapshot). At most KV_SNAPSHOTS are kept, the
 * latest ones; each costs recurrent_floats * 4 bytes, that is
 * n_rec_layer * ((conv_k - 1) * conv_dim + ssm_hv * ssm_d^2) floats, a
 * little over 1 MiB per recurrent layer whose delta net has 16 value heads
 * of 128 x 128, allocated when first taken. A RAM checkpoint copies the
 * snapshots and the state after all rows (kv_cache_save_recurrent), and the
 * disk tier stores each of them as a resume point (state/disk_tier.h). */
#ifndef PH_STATE_KV_CACHE_H
#define PH_STATE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/llm.h"

/* Snapshots of the recurrent state kept per sequence (below). */
#define KV_SNAPSHOTS 4

typedef struct kv_cache {
    llm_kv rows; /* the block table (pointers into map) and how many rows are in use */
    int32_t n_layer;
    size_t row_bytes; /* one K (or V) cell: n_head_kv * head_dim F16 values */
    void *map;        /* the blocks: a copy of n_ctx rows */
    size_t map_bytes;
    float *recurrent; /* the recurrent layers' states (rows.conv, rows.ssm point into it), or NULL */
    size_t recurrent_floats;
    float *snap[KV_SNAPSHOTS];       /* copies of the recurrent state (allocated when first needed) */
    int32_t snap_rows[KV_SNAPSHOTS]; /* the rows each was taken after, increasing, all <= rows.n_rows */
    int n_snap;
} kv_cache;

int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, ph_err *err);
/* The cells alone (no recurrent layers) of n_layer attention layers with
 * cells of row_bytes, for n_ctx rows, no row in use: what kv_cache_init
 * starts from; 0, or -1 when memory ran out (c is then cleared). */
int kv_cache_init_cells(kv_cache *c, int32_t n_layer, size_t row_bytes, int32_t n_ctx);
/* The K (kind 0) or V (kind 1) cell of a row in attention layer l; the
 * cells of the next rows up to the end of its block (a multiple of
 * KV_BLOCK_ROWS) follow it. */
uint8_t *kv_cache_cells(const kv_cache *c, int32_t row, int32_t l, int kind);
/* The bytes one row of context takes in a model's cache: its K and V cells
 * in every attention layer. */
size_t kv_cache_row_bytes(const llm_hparams *hp);
void kv_cache_free(kv_cache *c);

/* Keeps the first n cells (later ones are overwritten as rows come); with
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

/* The size of a copy of the first n rows: ceil(n / KV_BLOCK_ROWS) blocks. */
size_t kv_cache_bytes(const kv_cache *c, int32_t n);
/* Copies the first n rows to dst (kv_cache_bytes(n); only their cells are
 * written, so the pages of the last block past them are not touched). */
void kv_cache_save(const kv_cache *c, int32_t n, void *dst);
/* Installs `fresh` (a big_alloc of map_bytes) as the cells, with no rows
 * in use, and returns the mapping it replaces, which then belongs to the
 * caller: a copy of n_ctx rows that kv_cache_load reads, or that
 * kv_cache_swap_map installs again. */
void *kv_cache_swap_map(kv_cache *c, void *fresh);
/* Frees the cells and installs map (one that kv_cache_swap_map returned)
 * with its first n rows in use. */
void kv_cache_adopt_map(kv_cache *c, void *map, int32_t n);
/* Gives back the pages of such a mapping past its first n rows, in every
 * block: the blocks after row n's, and in row n's block each layer's K and
 * V cells past it. */
void kv_cache_trim_map(const kv_cache *c, void *map, int32_t n);
/* Makes the cache the first n rows of a copy of at least n rows (n <=
 * n_ctx); with recurrent layers, kv_cache_load_recurrent then gives their
 * state. */
void kv_cache_load(kv_cache *c, const void *src, int32_t n);

#endif
