/* The RAM tier (docs/state-cache.md, RAM tier): what lets a conversation
 * displaced from the live state by another one (an interleaved chat, an
 * agent's side call, an edit) resume from memory instead of being
 * prefilled again, without a copy of its KV.
 *
 * Its KV is the KV pool's (state/kv_pool.h): a displaced sequence's full
 * blocks stay in the pool under their names, cached until eviction takes
 * them (a chain from its end). What the names cannot find is kept here, in
 * a small table of resume points: per displaced sequence, the provenance
 * of all its rows (seq_state: token ids, picture spans with their
 * embed_key and cond_hash, model_id, format tag and domain), so that it is
 * matched against a new request exactly as the live state is
 * (seq_common_prefix) and a kept picture keeps the cond_hash it was
 * evaluated with; a hold on its last, partial block (the rows past its
 * last full block: unnamed, so found only here); and with recurrent
 * layers (qwen35), their states at its snapshots and at its end
 * (kv_cache_save_recurrent), where alone it can resume (ram_point_cut).
 * A point of a parked conversation (docs/state-cache.md, Parking) pins
 * all its blocks instead, so that nothing of it is evicted.
 *
 * Only complete state is kept (docs/state-cache.md, Reuse rules): a point
 * is not made of rows with a picture cut or without cond_hash. The tier is
 * bounded by bytes, a point counting the KV of all its rows (the blocks it
 * resumes, wherever the pool holds them) and its own memory, and by
 * RAM_POINTS points; it evicts the least recently used point first (its
 * tail block's hold dropped: an unnamed block is free again; its full
 * blocks stay cached until the pool needs them), and
 * never keeps two points of which one is a prefix of the other that
 * resumes at its end (the longer one serves both).
 *
 * Threads: none of its own; it belongs to the inference worker. */
#ifndef PH_STATE_RAM_TIER_H
#define PH_STATE_RAM_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state/kv_cache.h"
#include "state/kv_pool.h"
#include "state/seq_state.h"

#define RAM_POINTS 32

typedef struct ram_point {
    seq_state seq;   /* provenance of its rows; seq.n_rows is its frontier */
    int32_t tail;    /* the block of the rows past its last full block, held by a reference, or -1 */
    int32_t *pinned; /* a parked point: the ids of all its blocks, in row order, each pinned (else NULL) */
    int32_t n_pinned;
    float *rec; /* with recurrent layers, their states after rec_rows (kv_cache_save_recurrent), or NULL */
    int32_t rec_rows[KV_SNAPSHOTS + 1];
    int n_rec;
    size_t bytes;  /* the KV of its rows and its own memory */
    uint64_t used; /* LRU clock */
} ram_point;

typedef struct ram_tier {
    kv_pool *pool;
    ram_point v[RAM_POINTS];
    int32_t n;
    size_t budget, bytes;
    uint64_t clock;
    uint64_t saves, hits, evictions;
    uint64_t refused; /* not made: out of memory */
} ram_tier;

/* A tier of budget bytes (0: it keeps nothing) over pool. */
void ram_tier_init(ram_tier *t, kv_pool *pool, size_t budget);
void ram_tier_free(ram_tier *t);

/* Makes p a point of seq, whose KV is kv's (seq->n_rows = kv's rows): a
 * hold on kv's block of the rows past its last full block (a reference;
 * with pin, a pin on each of kv's blocks instead), its provenance and
 * recurrent states copied. 0; 1 when the rows are not complete or there
 * are none; -1 when memory ran out. *p is cleared on failure. */
int ram_point_make(ram_point *p, kv_pool *pool, const seq_state *seq, const kv_cache *kv, bool pin);
/* Drops p's holds and frees it (a zeroed p too). */
void ram_point_free(ram_point *p, kv_pool *pool);
/* The most of p's first n rows that it can resume at: n, or with
 * recurrent layers the last row at or before n after which it holds their
 * state (0: none). */
int32_t ram_point_cut(const ram_point *p, int32_t n);
/* The first row of p's tail block (its rows past its last full block). */
int32_t ram_point_tail_start(const ram_point *p);

/* Puts a made point in the tier as the most recent one (*p is then
 * cleared): false, p untouched, when it is parked, larger than the budget,
 * or a point already holds its rows (that one is made most recent). Points
 * that are prefixes of it are dropped, then the least recently used until
 * it fits. */
bool ram_tier_add(ram_tier *t, ram_point *p);

/* The point with the longest common prefix with want, at most limit rows,
 * and at most pool_rows rows unless its tail block holds the rest (the
 * request's full blocks found in the pool, from the first, times
 * KV_BLOCK_ROWS), cut to where it can resume (ram_point_cut) (same
 * model_id and format tag; ties go to the most recent), its length in
 * *prefix; -1 when none has a row to give. */
int32_t ram_tier_find(const ram_tier *t, const seq_state *want, int32_t limit, int32_t pool_rows, int32_t *prefix);

/* Takes point i out of the tier (counted as a hit): the caller owns it
 * and hands it back with ram_tier_return or frees it. */
void ram_tier_take(ram_tier *t, int32_t i, ram_point *out);
/* Puts a taken point back as the most recent one (or frees it when
 * another holds its rows or it no longer fits); *p is cleared. */
void ram_tier_return(ram_tier *t, ram_point *p);

/* The cond_hash of picture span sp (start, embed_key, grid) as some point
 * holds it: true with it in cond. */
bool ram_tier_cond(const ram_tier *t, const seq_span *sp, uint8_t cond[32]);

#endif
