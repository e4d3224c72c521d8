/* The KV cache of one sequence (DESIGN 5): the K and V cells of every
 * layer, as the forward pass (model/llm.h, llm_kv) reads and appends them,
 * and the operations on them that state needs: truncation, a copy of the
 * first n cells for a checkpoint (RAM tier), and restoring such a copy.
 *
 * Memory: one mapping per layer and per K/V (base/bigbuf), sized for the
 * whole context; the kernel backs only the pages that rows were written
 * to, so a large context costs memory only as it fills.
 *
 * Checkpoint layout (what kv_cache_save writes, kv_cache_load reads and the
 * disk tier stores): per layer, its n K cells then its n V cells, each cell
 * row_bytes of F16 values. */
#ifndef PH_STATE_KV_CACHE_H
#define PH_STATE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/llm.h"

typedef struct kv_cache {
    llm_kv rows;        /* the cells and how many are in use */
    int32_t n_layer;
    size_t row_bytes;   /* one K (or V) cell: n_head_kv * head_dim F16 values */
} kv_cache;

int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, ph_err *e);
void kv_cache_free(kv_cache *c);

/* Keeps the first n cells (later ones are overwritten as rows come). */
void kv_cache_truncate(kv_cache *c, int32_t n);

/* The size of a copy of the first n cells. */
size_t kv_cache_bytes(const kv_cache *c, int32_t n);
void kv_cache_save(const kv_cache *c, int32_t n, void *dst);
/* Makes the cache the first n cells of a copy of src_rows cells (n <=
 * src_rows; n <= n_ctx). */
void kv_cache_load(kv_cache *c, const void *src, int32_t src_rows, int32_t n);

#endif
