/* The KV cache of one sequence (DESIGN 5): the K and V cells of every
 * layer, as the forward pass (model/llm.h, llm_kv) reads and appends them,
 * and the operations on them that state needs: truncation, a copy of the
 * first n cells for a checkpoint (RAM tier), and restoring such a copy.
 *
 * Memory: one mapping (base/bigbuf) sized for the whole context, laid out
 * as a checkpoint of n_ctx cells (below); the kernel backs only the pages
 * that rows were written to, so a large context costs memory only as it
 * fills. The mapping can be handed over whole (kv_cache_swap_map): a
 * conversation switch then moves cells instead of copying them.
 *
 * Checkpoint layout (what kv_cache_save writes, kv_cache_load reads and the
 * disk tier stores): per layer, its n K cells then its n V cells, each cell
 * row_bytes of F16 values.
 *
 * A model with recurrent layers (qwen35) also has their state here: what
 * its n_rows rows left behind, which no prefix of them can be cut from.
 * Such a cache is only ever emptied (truncated to 0, or given a fresh
 * mapping), never truncated to other rows nor saved or loaded: issue 14's
 * snapshots of the recurrent state will lift that. */
#ifndef PH_STATE_KV_CACHE_H
#define PH_STATE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/llm.h"

typedef struct kv_cache {
    llm_kv rows;        /* the cells and how many are in use (pointers into map) */
    int32_t n_layer;
    size_t row_bytes;   /* one K (or V) cell: n_head_kv * head_dim F16 values */
    void *map;          /* the cells: a checkpoint of n_ctx cells */
    size_t map_bytes;
    float *recurrent;   /* the recurrent layers' states (rows.conv, rows.ssm point into it), or NULL */
    size_t recurrent_floats;
} kv_cache;

int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, ph_err *e);
void kv_cache_free(kv_cache *c);

/* Keeps the first n cells (later ones are overwritten as rows come); with
 * recurrent layers, n is 0 (their state back to zero) or at least n_rows. */
void kv_cache_truncate(kv_cache *c, int32_t n);

/* The size of a copy of the first n cells. */
size_t kv_cache_bytes(const kv_cache *c, int32_t n);
void kv_cache_save(const kv_cache *c, int32_t n, void *dst);
/* Installs `fresh` (a ph_big_alloc of map_bytes) as the cells, with no rows
 * in use, and returns the mapping it replaces, which then belongs to the
 * caller: a checkpoint of n_ctx cells that kv_cache_load reads, or that
 * kv_cache_swap_map installs again. */
void *kv_cache_swap_map(kv_cache *c, void *fresh);
/* Frees the cells and installs map (one that kv_cache_swap_map returned)
 * with its first n cells in use. */
void kv_cache_adopt_map(kv_cache *c, void *map, int32_t n);
/* Gives back the pages of such a mapping past its first n cells. */
void kv_cache_trim_map(const kv_cache *c, void *map, int32_t n);
/* Makes the cache the first n cells of a copy of src_rows cells (n <=
 * src_rows; n <= n_ctx; not for a model with recurrent layers). */
void kv_cache_load(kv_cache *c, const void *src, int32_t src_rows, int32_t n);

#endif
