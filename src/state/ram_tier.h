/* The RAM tier (docs/state-cache.md, RAM tier): checkpoints of recent sequences, so that a
 * conversation displaced from the live state by another one (an
 * interleaved chat, an agent's side call, an edit) resumes from memory
 * instead of being prefilled again.
 *
 * A checkpoint is a copy of a sequence's KV cells with the provenance of
 * every row (seq_state: token ids, picture spans with their embed_key and
 * cond_hash, model_id and format tag), so that it is matched against a new
 * request exactly as the live state is (seq_common_prefix): a picture's
 * rows are reused only for the same embed_key and grid, and a prefix never
 * ends inside a picture. Only complete state is kept (docs/state-cache.md, Reuse rules).
 *
 * A model with recurrent layers (qwen35) can resume a checkpoint only
 * where it holds their state (ram_ckpt_cut): at its frontier or one of the
 * live state's snapshots that it copied.
 *
 * The KV bytes are opaque here (the session lays them out and reads them
 * back). The tier is bounded by bytes, evicts the least recently used
 * checkpoint first, and never keeps two checkpoints of which one is a
 * prefix of the other (the longer one serves both). A checkpoint is not
 * taken when it would leave the process less than `floor` bytes of memory
 * (base/meminfo: MemAvailable and the cgroup limit), and a failed
 * allocation means it is not kept: never an error.
 *
 * Threads: none of its own; it belongs to the inference worker. */
#ifndef PH_STATE_RAM_TIER_H
#define PH_STATE_RAM_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state/kv_cache.h"
#include "state/seq_state.h"

typedef struct ram_ckpt {
    seq_state seq; /* provenance of its rows; seq.n_rows is its frontier */
    float *rec;    /* with recurrent layers, their states after rec_rows (kv_cache_save_recurrent), or NULL */
    int32_t rec_rows[KV_SNAPSHOTS + 1];
    int n_rec;
    void *kv;        /* its KV cells, as the session wrote them (a big_alloc of map_bytes) */
    int32_t kv_rows; /* the rows kv has room for (state/kv_cache.h, copy layout): seq.n_rows
                          for a copy, the context size for a session's own mapping
                          (kv_cache_swap_map) */
    size_t kv_bytes; /* what the cells of its rows take */
    size_t map_bytes;
    size_t bytes;  /* KV bytes plus bookkeeping */
    uint64_t used; /* LRU clock */
} ram_ckpt;

typedef struct ram_tier {
    size_t budget, bytes;
    int64_t floor; /* memory to leave to the rest of the machine */
    ram_ckpt *v;
    int32_t n;
    size_t cap;
    uint64_t clock;
    uint64_t saves, hits, evictions;
    uint64_t refused; /* not taken: memory below the floor, or out of memory */
} ram_tier;

#define RAM_TIER_FLOOR ((int64_t)1 << 30)

/* budget 0: the tier keeps nothing. The floor starts at RAM_TIER_FLOOR. */
void ram_tier_init(ram_tier *t, size_t budget);
void ram_tier_free(ram_tier *t);

/* Reserves a checkpoint of the first n rows of seq, with kv_bytes of KV:
 * returns the buffer the caller fills with those cells, or NULL when
 * nothing is to be saved: the rows are not complete (a span cut or without
 * cond_hash), a checkpoint already holds them (it is made most recent), the
 * budget cannot hold them, memory is short (below the floor) or ran out. Checkpoints that are prefixes
 * of the new one are dropped; then the least recently used ones until it
 * fits. */
void *ram_tier_put(ram_tier *t, const seq_state *seq, int32_t n, size_t kv_bytes);

/* The checkpoint with the longest common prefix with want, at most limit
 * rows and cut to where it can resume (ram_ckpt_cut) (same model_id and
 * format tag; ties go to the most recent), its length in *prefix; -1 when
 * none has a row to give. */
int32_t ram_tier_find(const ram_tier *t, const seq_state *want, int32_t limit, int32_t *prefix);
/* The most of c's first n rows that it can resume at: n, or with
 * recurrent layers the last row at or before n after which it holds their
 * state (0: none). */
int32_t ram_ckpt_cut(const ram_ckpt *c, int32_t n);
/* Copies the recurrent layers' states that kv holds (kv_cache_save_recurrent)
 * into c, counted in its bytes: 0, or -1 when memory ran out. Nothing
 * without recurrent layers. */
int ram_ckpt_set_recurrent(ram_ckpt *c, const kv_cache *kv);

/* A checkpoint of seq's first n rows outside any tier, with a kv_bytes KV
 * buffer (c->kv) for the caller to fill: 0; 1 when the rows are not
 * complete; -1 when it would leave less than floor bytes of memory or
 * memory ran out. *c is cleared on failure. */
int ram_ckpt_new(ram_ckpt *c, const seq_state *seq, int32_t n, size_t kv_bytes, int64_t floor);

/* Like ram_ckpt_new, but the cells are map (map_bytes, room for kv_rows
 * rows), which *c owns on success (0); on failure the caller keeps it. */
int ram_ckpt_wrap(ram_ckpt *c, const seq_state *seq, int32_t n, size_t kv_bytes, void *map, size_t map_bytes,
                  int32_t kv_rows, int64_t floor);
/* Puts a made checkpoint in the tier as the most recent one (*c is then
 * cleared): false, c untouched, when ram_tier_put would not keep it. */
bool ram_tier_add(ram_tier *t, ram_ckpt *c);

/* Takes checkpoint i out of the tier (counted as a hit): the caller owns
 * it and hands it back with ram_tier_return or frees it. */
void ram_tier_take(ram_tier *t, int32_t i, ram_ckpt *out);
/* Puts a taken checkpoint back as the most recent one (or frees it when
 * another holds its rows or it no longer fits); *c is cleared. */
void ram_tier_return(ram_tier *t, ram_ckpt *c);
void ram_ckpt_free(ram_ckpt *c);

#endif
