/* The block store (docs/state-cache.md, Block store; issue 25, item 4): the
 * disk tier's records, each named by its content, written once.
 *
 * A record is a KV block of a sequence (kind 1: KV_BLOCK_ROWS rows of K and
 * V for every layer) or a resume point (kind 2: a recurrent state and the
 * partial block up to its row), with
 *  - its name: the chained SHA-256 of the stream up to its end (the caller
 *    computes it: model_id, format tag and isolation domain at the root,
 *    then the items), and its parent's name (all zero for a chain's first);
 *  - its rows, a provenance blob (the caller's encoding of its rows' token
 *    ids, picture identities and positions) and a payload blob (the KV
 *    bytes, or state and partial block): both opaque to the store;
 *  - the model_id, the format tag and the isolation domain it was made for.
 * Since the name covers the stream and its root, a record that is stored
 * never has to be written again: a turn writes only what the disk lacks.
 *
 * Files, in DIR/blocks/ (0700; files 0600): append-only segment files
 * seg-<id>.phbs of records (up to segment_bytes each, then a new one), and
 * index.sqlite (WAL), which maps a name to its segment, offset and length,
 * its parent, kind, rows and sizes, and its last use. A process appends
 * only to segments it made, holding an flock on the one it writes, so two
 * writers never interleave within a file; any process reads any segment,
 * and SQLite locks the index.
 *
 * Writes happen on a writer thread of the store's own: block_store_put
 * queues records whose blobs stay the caller's until the release callback
 * says the writer no longer reads them (no copy of multi-MiB payloads).
 * The writer takes what is queued together, appends it, fsyncs the
 * segment, then indexes it in one transaction, so that a kill -9 at any
 * point leaves whole records only: at open, a segment's unindexed tail is
 * checked record by record, whole ones indexed, a torn one cut off.
 *
 * Space: at most budget bytes of live records, the least recently used
 * removed first and a chain's end first (a record another one names as its
 * parent stays until that one goes); segments whose records are all gone
 * are deleted and mostly dead ones compacted; the file system's free space
 * is kept above its floor (base/cache_dir, base/fs_space).
 *
 * Threads: every function may be called from any thread. */
#ifndef PH_STATE_BLOCK_STORE_H
#define PH_STATE_BLOCK_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define BLOCK_NAME_BYTES   32
#define BLOCK_FORMAT_BYTES 128

/* Kinds of record; the store keeps any kind from 1 to BLOCK_KIND_MAX. */
enum { BLOCK_KIND_KV = 1, BLOCK_KIND_RESUME = 2, BLOCK_KIND_MAX = 0xffff };

typedef struct block_store block_store;

/* What a record was made for (and is only ever read back as). */
typedef struct block_meta {
    uint8_t model_id[32];
    char format[BLOCK_FORMAT_BYTES]; /* the format tag, NUL-ended or all 128 bytes; what follows a NUL is ignored */
    uint8_t domain[32];              /* the isolation domain (state/domain.h) */
} block_meta;

/* A record's identity: what a read asks for and must find exactly. */
typedef struct block_key {
    uint8_t name[BLOCK_NAME_BYTES];
    uint8_t parent[BLOCK_NAME_BYTES]; /* all zero: the first of a chain */
    uint32_t kind;
    block_meta meta;
} block_key;

/* A record to store. prov and payload are read by the writer until the
 * release callback is called for it. */
typedef struct block_put {
    block_key key;
    uint32_t n_rows;
    const void *prov;
    uint32_t prov_bytes;
    const void *payload;
    uint64_t payload_bytes;
    void *ud; /* handed to the release callback */
} block_put;

/* A stored record as the index knows it. */
typedef struct block_info {
    uint8_t name[BLOCK_NAME_BYTES], parent[BLOCK_NAME_BYTES];
    uint32_t kind, n_rows;
    uint32_t prov_bytes;
    uint64_t payload_bytes;
    uint64_t bytes;   /* the record in its segment: header, provenance, payload */
    int64_t last_use; /* ms since the epoch */
    int64_t created;  /* s since the epoch */
} block_info;

typedef struct block_store_opts {
    uint64_t budget;        /* bytes of live records at most */
    uint64_t segment_bytes; /* a segment is not appended to past this (0: BLOCK_SEGMENT_BYTES) */
} block_store_opts;

#define BLOCK_SEGMENT_BYTES (256ull << 20)

typedef struct block_store_stats {
    uint64_t records, bytes;          /* indexed now (all processes): records, their bytes */
    uint64_t segments, segment_bytes; /* segment files and their indexed length, live and dead */
    uint64_t dead_bytes;              /* of those, bytes of records no longer indexed */
    uint64_t written, bytes_written;  /* records this store appended, and their bytes */
    uint64_t held;                    /* records put but not written: already stored or queued */
    uint64_t no_space;                /* records not written for want of room (budget or free-space floor) */
    uint64_t failed;                  /* records not written for an I/O error */
    uint64_t hits, misses;            /* reads that returned a record, reads that found none */
    uint64_t bytes_read;
    uint64_t rejected;                   /* records that failed a check: dropped from the index */
    uint64_t evicted;                    /* records removed for space */
    uint64_t compacted, compacted_bytes; /* segments compacted, bytes copied doing it */
    uint64_t queued;                     /* records waiting for the writer (or being written) */
} block_store_stats;

/* Opens (creating them) DIR/blocks and its index and recovers from a crash:
 * unindexed segment tails checked, whole records indexed, torn ones cut
 * off; index rows past a segment's end dropped; the budget enforced. */
block_store *block_store_open(const char *dir, const block_store_opts *opts, ph_err *err);
/* Writes what is queued, then closes. */
void block_store_close(block_store *s);

/* Called once for each record given to block_store_put, when the store no
 * longer reads its blobs: from the writer thread for a record queued, from
 * block_store_put itself for one that is not (stored or queued already,
 * or invalid). */
typedef void (*block_release_fn)(void *ctx, void *ud);

/* Queues n records to be written together (one fsync, one index
 * transaction), in order; a record whose name is stored or queued already
 * is not written again. Returns how many were queued. */
int block_store_put(block_store *s, const block_put *recs, int n, block_release_fn release, void *ctx);
/* Waits until everything queued is written and indexed (or given up). */
void block_store_flush(block_store *s);

/* How many of names[0..n-1] (a prompt's block boundaries, in order) are
 * stored, counted from the first up to the first missing one: from the
 * index alone, no file read. Their last use is renewed. */
int block_store_prefix(block_store *s, const uint8_t (*names)[BLOCK_NAME_BYTES], int n);
/* The index's entry for name: 1 with *info filled, 0 when it is not stored. */
int block_store_find(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], block_info *info);
/* Reads the record want->name into prov (prov_cap bytes) and payload
 * (payload_cap), checking everything: the header's magic, version and
 * sizes, the checksum, and the name, parent, kind and meta equal to want's.
 * 1 with *info filled (may be NULL; its last use renewed); 0 when it is
 * not stored; -1 when it failed a check (logged, counted as rejected,
 * dropped from the index: never returned); -2 when it does not fit the
 * buffers (nothing read). */
int block_store_get(block_store *s, const block_key *want, void *prov, size_t prov_cap, void *payload,
                    size_t payload_cap, block_info *info);

/* Drops name from the index (its bytes become dead): for a record that is
 * whole but of no use, such as one whose parent is gone, so that it is
 * written again. Counted as rejected. */
void block_store_forget(block_store *s, const uint8_t name[BLOCK_NAME_BYTES]);
/* The stored records of a kind whose parent is parent, most recently used
 * first, from the index alone (no file read): how many (at most max) into
 * out. The disk tier finds a chain's resume points this way. */
int block_store_children(block_store *s, const uint8_t parent[BLOCK_NAME_BYTES], uint32_t kind, block_info *out,
                         int max);
/* What record name was made for, and its provenance blob (up to prov_cap
 * bytes into prov, its length in *prov_bytes), read from its segment
 * without checking the checksum (a listing's, never a load's): 1; 0 when
 * it is not stored; -1 when its header does not hold together. */
int block_store_peek(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], block_meta *meta, void *prov,
                     size_t prov_cap, uint32_t *prov_bytes);

void block_store_get_stats(block_store *s, block_store_stats *st);

/* ---- a record as one value (the shared tier, state/shared_tier.h) ------- */

/* A record's bytes as one value are its header, then its provenance, then
 * its payload: what a segment holds (docs/state-cache.md, Block records). */
#define BLOCK_RECORD_HDR 320

/* The header of r (made now), its checksum over the provenance and
 * payload included: 0, or -1 (out of memory). */
int block_record_header(const block_put *r, uint8_t hdr[BLOCK_RECORD_HDR]);
/* Checks a value of len bytes as block_record_header's header, provenance
 * and payload (magic, version, sizes, length, checksum) and fills *r
 * (prov and payload point into buf, ud NULL): 0, or -1 with why. */
int block_record_parse(const void *buf, size_t len, block_put *r, char *why, size_t cap);

/* ---- administration (pinhole cache) -------------------------------------- */

/* The end of a chain: a record no stored record names as its parent. */
typedef struct block_end {
    block_info last;
    uint32_t records;     /* records from it back to the first stored one of its chain */
    uint64_t rows, bytes; /* theirs */
    bool whole;           /* the walk back reached a chain's first record (parent all zero) */
} block_end;

/* Every chain end, most recently used first; cb returns non-zero to stop. */
int block_store_ends(block_store *s, int (*cb)(void *ud, const block_end *e), void *ud, ph_err *err);
/* Checks every record in full; bad ones are reported through bad (may be
 * NULL), dropped from the index and counted. */
int block_store_verify(block_store *s, void (*bad)(void *ud, const uint8_t name[BLOCK_NAME_BYTES], const char *why),
                       void *ud, uint64_t *n_ok, uint64_t *n_bad, ph_err *err);
/* Removes records (least recently used, chain ends first) until at most
 * max_bytes of them remain, then deletes or compacts every segment with
 * dead bytes that no process is writing. */
int block_store_prune(block_store *s, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err);

#endif
