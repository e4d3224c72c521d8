/* The KV block pool (docs/state-cache.md, Blocks and the pool; issue 25):
 * one memory budget cut into blocks of KV_BLOCK_ROWS rows (state/kv_block.h),
 * shared by every sequence and by the RAM tier, with full blocks named by
 * their content so that equal prefixes are equal blocks.
 *
 * A sequence is a block table (the ids of its blocks, in row order) plus
 * its provenance (state/seq_state.h). Its full blocks are published under
 * their names (kv_block_names, below) and may be shared by reference count
 * with every sequence whose stream agrees with it up to their end; its
 * last, partial block is unnamed and its own, copied before a write when
 * it is shared (kv_pool_cow).
 *
 * States of a block:
 *   free     on the free list, no name, no reference;
 *   in use   held by references (refs > 0), not pinned; named or not;
 *   pinned   held by pins (pins > 0: a parked conversation's blocks,
 *            docs/state-cache.md, Parking), referenced or not;
 *   cached   named, with neither references nor pins: the RAM tier, found
 *            by name (kv_pool_find) until eviction takes it.
 * An unnamed block that loses its last reference and pin is free again: no
 * one could find it.
 *
 * Eviction takes only cached blocks, the least recently released first,
 * and never a block that is the parent of another block in the pool
 * (cached or held): a chain shrinks from its end, so a prefix of it stays
 * findable as long as any of it is. A block's parent is resolved by name
 * when it is published (a parent not in the pool then counts for nothing).
 *
 * Memory: one arena (base/bigbuf, big_alloc) of whole blocks, each at a
 * multiple of 64 bytes (of the page size when a block is a page or more),
 * whose pages the kernel backs only when first written; the pool itself
 * never writes a block's bytes except to copy one (kv_pool_cow). The bytes
 * are opaque here: the caller lays the rows out as state/kv_block.h says
 * (n_parts parts of KV_BLOCK_ROWS cells: per attention layer, K then V).
 *
 * Threads: no locks. Every call comes from the inference worker. (A disk
 * writer that reads blocks will hold references taken and dropped for it
 * on that thread.) */
#ifndef PH_STATE_KV_POOL_H
#define PH_STATE_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "state/kv_block.h"
#include "state/seq_state.h"

#define KV_NAME_LEN 32

struct kv_pool_block; /* the pool's own bookkeeping of one block */

/* The fields are the pool's own: callers may read the arena's geometry
 * (base, stride, block_bytes, row_bytes, n_parts, n_blocks) and change
 * nothing. */
typedef struct kv_pool {
    uint8_t *base;      /* the arena: n_blocks blocks, stride bytes apart */
    size_t arena_bytes; /* n_blocks * stride */
    size_t stride;
    size_t block_bytes; /* KV_BLOCK_ROWS * row_bytes: what a block holds */
    size_t row_bytes;   /* one row in every part */
    int32_t n_parts;    /* parts of a block, each KV_BLOCK_ROWS cells of row_bytes / n_parts */
    int32_t n_blocks;
    struct kv_pool_block *blk;
    int32_t *bucket; /* the name table: chains of blocks by the first bytes of their name */
    uint32_t bucket_mask;
    int32_t free_head;          /* free list */
    int32_t lru_head, lru_tail; /* evictable blocks, least recently released first */
    uint64_t clock;             /* release stamps */
    uint32_t epoch;             /* kv_pool_available's marks */
    int32_t n_free, n_in_use, n_pinned, n_cached;
    uint64_t evictions, hits, lookups, bytes_copied;
} kv_pool;

/* What the pool says of itself (/metrics: pinhole_kv_blocks{state=...},
 * pinhole_kv_bytes_copied_total, ...). total = in_use + pinned + cached +
 * free. */
typedef struct kv_pool_stats {
    int32_t total, in_use, pinned, cached, free;
    uint64_t evictions;    /* cached blocks taken for new ones */
    uint64_t lookups;      /* kv_pool_find calls */
    uint64_t hits;         /* ... that found their block */
    uint64_t bytes_copied; /* by copies on write: rows * row_bytes each */
    size_t block_bytes;
} kv_pool_stats;

/* One block as the pool sees it (the disk writer needs its name and
 * parent; tests the rest). */
typedef struct kv_block_info {
    bool free, named;
    int32_t refs, pins;
    int32_t children;                               /* blocks in the pool published with this one as their parent */
    uint8_t name[KV_NAME_LEN], parent[KV_NAME_LEN]; /* when named */
} kv_block_info;

/* A pool of as many blocks of KV_BLOCK_ROWS * row_bytes as budget bytes
 * hold (whole strides), all free. row_bytes is one row of every attention
 * layer's K and V (kv_cache_row_bytes), n_parts the parts it is cut into
 * (2 * attention layers), which must divide it. -1 with err set when the
 * budget holds no block, the sizes make no sense or memory ran out. */
int kv_pool_init(kv_pool *p, size_t budget, size_t row_bytes, int32_t n_parts, ph_err *err);
/* The bytes a block of KV_BLOCK_ROWS * row_bytes takes in the arena (its
 * stride): a budget of n strides holds n blocks. */
size_t kv_pool_stride(size_t row_bytes);
/* Frees the arena and the bookkeeping, whatever is still held. */
void kv_pool_free(kv_pool *p);
/* Backs the pages of blocks [first, first + n) now, as a first write would
 * (base/bigbuf, big_populate), keeping every byte already written: the one
 * call that may come from a thread other than the worker's, at any time
 * while the pool lives (it reads only the arena's geometry). 0, or -1 when
 * the kernel cannot (nothing done). */
int kv_pool_populate(const kv_pool *p, int32_t first, int32_t n);

/* Where block id's bytes are (block_bytes of them). */
static inline uint8_t *kv_pool_data(const kv_pool *p, int32_t id) { return p->base + (size_t)id * p->stride; }

/* A fresh, unnamed block with one reference: a free one, else the
 * evictable cached block released longest ago (its name is forgotten; a
 * parent it leaves childless becomes evictable). Its bytes are whatever
 * they were (zero if never written). -1, with nothing changed, when every
 * block is held (or cached under a held block). */
int32_t kv_pool_alloc(kv_pool *p);

/* The block named name, with one more reference taken (a cached block
 * becomes in use), or -1. Counted in lookups and hits. */
int32_t kv_pool_find(kv_pool *p, const uint8_t name[KV_NAME_LEN]);

/* Whether a block named name is in the pool (nothing taken or counted). */
bool kv_pool_contains(const kv_pool *p, const uint8_t name[KV_NAME_LEN]);

/* Publishes block id (unnamed, full, held by the caller) under name, its
 * parent being the block named parent (the previous block of its chain;
 * for a chain's first block, kv_block_root). Returns the block the caller's
 * table must hold from now on: id, now named; or, when another block has
 * that name already (two sequences computed the same rows), that block:
 * the caller's reference moves to it from id (which is freed when that was
 * its last reference or pin). */
int32_t kv_pool_publish(kv_pool *p, int32_t id, const uint8_t name[KV_NAME_LEN], const uint8_t parent[KV_NAME_LEN]);

/* One more / one less reference on a block that is not free (unref: one
 * the caller holds). A named block left without references and pins is
 * cached, the most recently released; an unnamed one is free. */
void kv_pool_ref(kv_pool *p, int32_t id);
void kv_pool_unref(kv_pool *p, int32_t id);
/* Pins / unpins a block that is not free (unpin: one the caller pinned).
 * A pin holds a block as a reference does (never evicted, a cached block
 * is taken off the LRU list) but is counted apart: parking a conversation
 * pins its blocks and drops its references; restoring it does the
 * reverse. */
void kv_pool_pin(kv_pool *p, int32_t id);
void kv_pool_unpin(kv_pool *p, int32_t id);

/* Whether the caller, holding a reference on block id, may write it as it
 * is: unnamed, and that reference its only hold (kv_pool_cow returns it). */
bool kv_pool_writable(const kv_pool *p, int32_t id);

/* Makes block id, whose first rows rows (0 to KV_BLOCK_ROWS) the caller
 * holds and is about to write after, writable by the caller alone: id
 * itself when it is unnamed and the caller's reference is its only hold;
 * otherwise (shared, pinned, or named: a named block's rows are what its
 * name says and others may find it) a fresh block with those rows copied
 * (rows * row_bytes bytes, counted in bytes_copied), the caller's
 * reference moved to it from id. -1, with nothing changed, when no block
 * can be had. */
int32_t kv_pool_cow(kv_pool *p, int32_t id, int32_t rows);

/* How many blocks kv_pool_alloc could hand out one after another now: the
 * free ones and every cached one that is not the ancestor of a held block.
 * For admission (docs/state-cache.md, Blocks and the pool: a request that
 * needs more is refused before work starts); changes nothing. */
int32_t kv_pool_available(kv_pool *p);

void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st);
void kv_pool_get_block(const kv_pool *p, int32_t id, kv_block_info *out);

/* ---- block names (docs/state-cache.md, Blocks and the pool) ----
 *
 * The name of a full block is a chained SHA-256 over what decides its KV
 * bytes: the rows up to its end and the sequence's identity. Integers are
 * little-endian, u32 or i32 (4 bytes):
 *
 *   root   = SHA-256 of 196 bytes: "pinhole-kv-block-1" NUL-padded to 32,
 *            KV_BLOCK_ROWS (u32), model_id (32), the format tag
 *            NUL-padded to 128; then, outside the default domain,
 *            SHA-256(root, domain) (domain_fold, as every key that finds
 *            saved state: docs/state-cache.md, Isolation domains);
 *   name i = SHA-256 of the name of block i - 1 (the root for block 0),
 *            then, for each of its KV_BLOCK_ROWS rows in order,
 *              a token row:   its id (u32), pos_after (i32)          8 bytes
 *              a picture row: 0xFFFFFFFF, the picture's embed_key (32),
 *                             grid_x, grid_y (u32), the row's offset in
 *                             the picture (u32), pos_after (i32)    52 bytes
 *
 * Two sequences therefore share block i's name exactly when they have the
 * same model, format tag and domain and agree on every row of blocks 0..i.
 * A block may end inside a picture: its rows are fixed by the picture's
 * embed_key and grid, whatever comes after. The name does not hold the
 * picture's cond_hash (a request's pictures have none before they are
 * resolved, and looking up must not need the encoder): the cond_hash a
 * found picture keeps (docs/state-cache.md, Reuse rules, 2) comes from the
 * provenance kept with the blocks, not from their names. What is published
 * must have complete provenance (Reuse rules, 4): unless lookup is set, a
 * block holding a row of a picture without cond_hash is not named, and
 * neither is any block after it. */

/* The root of s's chain: the parent name of its block 0. */
void kv_block_root(const seq_state *s, uint8_t root[KV_NAME_LEN]);
/* The name of s's block i (rows i * KV_BLOCK_ROWS onwards) after prev, the
 * name of block i - 1 (or the root), into name (which may be prev): true;
 * false when the block is not within s's rows, or (without lookup) holds a
 * picture row without cond_hash. */
bool kv_block_name(const seq_state *s, int32_t i, const uint8_t prev[KV_NAME_LEN], bool lookup,
                   uint8_t name[KV_NAME_LEN]);
/* The name of the resume point at s's row n (docs/state-cache.md, Resume
 * points): the SHA-256 of prev, the name of the last full block before n
 * (block n / KV_BLOCK_ROWS - 1; the root when n < KV_BLOCK_ROWS), then the
 * bytes "resume", then the rows of n's block before n (none when n is a
 * multiple of KV_BLOCK_ROWS) encoded as in a name: true; false as
 * kv_block_name (n past s's rows, or a picture row without cond_hash
 * without lookup). n may cut a picture. */
bool kv_resume_name(const seq_state *s, int32_t n, const uint8_t prev[KV_NAME_LEN], bool lookup,
                    uint8_t name[KV_NAME_LEN]);
/* The names of the full blocks of s's first n rows, up to the first that
 * cannot be named (above), into names (n / KV_BLOCK_ROWS of room): how
 * many. n may cut a picture. */
int32_t kv_block_names(const seq_state *s, int32_t n, bool lookup, uint8_t (*names)[KV_NAME_LEN]);

#endif
