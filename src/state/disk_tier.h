/* The disk tier (docs/state-cache.md, Disk tier): a sequence's KV blocks
 * and resume points as records of the block store (state/block_store.h) in
 * a folder, so that a restarted server resumes a conversation, pictures
 * included, instead of reading it again, and a turn writes only what the
 * disk lacks.
 *
 * Records (docs/state-cache.md, Disk tier; On-disk formats, Block records):
 *  - a full block (BLOCK_KIND_KV), named by kv_block_name (state/kv_pool.h:
 *    a chained SHA-256 over the model_id, format tag and isolation domain,
 *    then every row's token, or picture embed_key, grid and offset, and
 *    position);
 *  - a resume point (BLOCK_KIND_RESUME) at row n, named by kv_resume_name:
 *    a sequence without recurrent layers has one at a checkpoint's end when
 *    that is not a block boundary; one with them (qwen35) at each row where
 *    their state is known (its snapshots and its end), and resumes only
 *    there (or at row 0). Its payload ends with that state.
 * A block on disk is a chain of pieces (disk_piece): the resume points
 * written while it filled, each holding the rows since the previous one
 * (its parent; the first's parent the previous block's name, or the
 * chain's root in block 0), then the full block's record with the rest
 * (its parent the last of them, or the previous block, all zero for block
 * 0): no row is written twice. A payload holds, for each part of the block
 * (K then V of each attention layer), its cells of the record's rows: a
 * block written whole is its bytes as the live cache holds them
 * (state/kv_block.h), written straight from the live table's block.
 * Both carry their rows' provenance: per row its token id (-1 for a
 * picture row) and position after it, per picture with rows in the record
 * its start, rows, grid, positions, image_id, embed_key and cond_hash, so a
 * kept picture keeps the cond_hash it was evaluated with.
 *
 * A lookup names the request's full blocks (kv_block_names, lookup), asks
 * the index how many of them from the first are stored and which resume
 * points follow them (block_store_prefix, block_store_children: no file
 * read), and picks the longest common prefix (never ending inside a
 * picture). A load reads each record into the live cells, checking its
 * provenance against the request; a record that fails is refused, logged
 * and counted, and the rows before it are kept (a block whose piece failed
 * is dropped, to be written again).
 *
 * Writes. disk_tier_save queues a sequence's checkpoint; a writer thread
 * of the tier's own hands the block store the records it does not hold:
 * the full blocks (a whole block's bytes read from the live cells: no
 * copy) and the resume points (their rows and the recurrent states
 * copied). The caller
 * keeps the cells unchanged, and their blocks held (a block given back to
 * the pool may be taken for other rows), until disk_tier_release_rows says
 * the store is done reading them. A checkpoint may be queued with a delay; a queued one
 * that a newer one of the same sequence extends is dropped unwritten, unless
 * it is to be kept (a prompt's end: where the next turn resumes when the
 * client sends the answer back in other words).
 *
 * Files written by earlier versions (DIR/<key>.phkv, DIR/index.sqlite) are
 * ignored and removed at open, never misread. Space, crash safety, modes
 * and sharing a folder are the block store's.
 *
 * Threads: the writer is the tier's own; every other call comes from one
 * thread (the inference worker). */
#ifndef PH_STATE_DISK_TIER_H
#define PH_STATE_DISK_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "state/kv_cache.h"
#include "state/seq_state.h"

#define DISK_NAME_LEN 65 /* a record's name: 64 hex + NUL */

typedef struct disk_tier disk_tier;

typedef struct disk_tier_stats {
    uint64_t hits;           /* lookups that restored rows */
    uint64_t misses;         /* lookups that found nothing usable */
    uint64_t saves;          /* records written */
    uint64_t skipped;        /* records not written: queued already, or no room, or an I/O error */
    uint64_t no_space;       /* of those, not written for want of room (budget or free-space floor) */
    uint64_t evictions;      /* records removed for space */
    uint64_t rejected;       /* records that failed a check (dropped) */
    uint64_t entries, bytes; /* records in the index now (all processes) */
    uint64_t queued;         /* checkpoints and records waiting for the writers (or being written) */
    uint64_t bytes_written, bytes_read;
    double write_s, read_s;  /* time spent writing (writer thread) and reading */
    uint64_t shared_records; /* records fetched from the shared tier into the folder */
} disk_tier_stats;

/* Opens (creating it) the folder's block store with budget bytes of
 * records (it recovers from a crash: state/block_store.h), removing what
 * earlier versions wrote; the writer thread starts with the first save. */
disk_tier *disk_tier_open(const char *dir, uint64_t budget, ph_err *err);
/* Writes what is queued, then closes. */
void disk_tier_close(disk_tier *t);
/* Also writes every record to the shared tier (from the writer thread, the
 * same bytes as in the folder), and has disk_tier_find fetch into the
 * folder what it lacks of a request's blocks and of the resume points after
 * them, each checked before it is kept (docs/cluster.md, Shared tier). */
struct shared_tier;
void disk_tier_set_shared(disk_tier *t, struct shared_tier *shared);

/* Queues a checkpoint of seq's first n rows, whose KV cells are kv's
 * first n, to be written after delay_s seconds (0: at once) unless a newer
 * checkpoint that extends it is queued meanwhile and it is not to be kept
 * (then it is dropped unwritten: a checkpoint in the middle of a long
 * prompt waits a little for the next). A kept one and the one extending it
 * cost no row twice: the second record holds only the rows after the
 * first. false when nothing is queued: the rows are not complete (a
 * picture cut or without cond_hash) or n is 0. */
bool disk_tier_save(disk_tier *t, const seq_state *seq, int32_t n, const kv_cache *kv, double delay_s, bool keep);
/* Waits until no queued or running write still has to read KV cells at or
 * past row n (call it before those cells change; 0: before any change).
 * Every queued checkpoint is due at once from then on. */
void disk_tier_release_rows(disk_tier *t, int32_t n);
/* Writes everything queued (delays end) and waits for it. */
void disk_tier_flush(disk_tier *t);

/* A record as part of one block's rows: rows [from, to) of the block
 * (offsets in it). A block on disk is a chain of pieces: the resume points
 * written while it filled, each holding the rows since the one before,
 * then the full block's record with the rest, so no row is written twice. */
typedef struct disk_piece {
    uint8_t name[32], parent[32];
    int32_t from, to;
    uint32_t kind; /* a resume point's (BLOCK_KIND_RESUME), or the block's last record (BLOCK_KIND_KV) */
} disk_piece;

/* A block's resume points: each holds a row more than the one before, or
 * is its first. */
#define DISK_PIECES (64 + 1)

/* What a lookup found for a request: the request's stored full blocks
 * and the resume points after them it resumes at. */
typedef struct disk_match {
    seq_state seq;        /* the request's first prefix rows; a load puts the stored cond_hash of their pictures in */
    int32_t prefix;       /* rows it shares with the request */
    int32_t n_full;       /* the request's full blocks stored, from its first */
    uint8_t (*names)[32]; /* their names */
    bool recurrent;       /* the model has recurrent layers: it resumes only at res_row (or 0) */
    int32_t res_block;    /* the block of the resume points */
    int32_t res_row;      /* the last one's row (0: none) */
    int n_path;           /* the resume points from the block's start to res_row */
    disk_piece path[DISK_PIECES];
} disk_match;

/* The longest common prefix of want with what the folder holds (same
 * model_id, format tag and domain: the names say so; with recurrent
 * layers a resume point before want's last row): 1 with *m filled
 * (release it with disk_match_free), 0 when none shares more than beat
 * rows (what the caller has already). Only the index is read. */
int disk_tier_find(disk_tier *t, const seq_state *want, int32_t beat, disk_match *m);
/* The most of m's first n rows that it can resume at: n, or with
 * recurrent layers m->res_row when n reaches it (0: none). m->prefix is
 * one already. */
int32_t disk_match_cut(const disk_match *m, int32_t n);
/* Reads m's records into kv's cells (kv holds the model's layers and room
 * for at least n rows; its rows are dropped and blocks for n rows taken
 * from its pool: none restored when the pool has too few) and keeps the
 * first n rows (one that disk_match_cut
 * gives; with recurrent layers their state then the one stored at n),
 * checking each record and its provenance against m->seq: the rows
 * restored, n, or fewer when a record failed (it is refused, logged and
 * counted: the rows before it, backed off to a picture's start, or 0 with
 * recurrent layers); m->seq then holds their stored cond_hash. kv's cells
 * past them are undefined. The read and its time are counted. */
int32_t disk_tier_load(disk_tier *t, disk_match *m, kv_cache *kv, int32_t n);
/* Frees what m holds (a zeroed m too). */
void disk_match_free(disk_match *m);

void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st);

/* ---- administration (pinhole cache) -------------------------------------- */
/* A conversation end: a record no stored record names as its parent, and
 * its chain back to the first. */
typedef struct disk_entry {
    char name[DISK_NAME_LEN]; /* the end record's name, hex */
    uint8_t model_id[32];
    char format[128];
    int32_t n_rows, n_pictures; /* of the chain */
    uint64_t bytes;             /* the chain's records (a shared prefix counts in each of its ends) */
    int64_t last_use, created;  /* the end record's */
} disk_entry;

/* Every conversation end, most recently used first; cb returns non-zero to stop. */
int disk_tier_list(disk_tier *t, int (*cb)(void *ud, const disk_entry *f), void *ud, ph_err *err);
/* Checks every record in full; bad ones are reported through bad (may be
 * NULL; name: 64 hex), dropped and counted. */
int disk_tier_verify(disk_tier *t, void (*bad)(void *ud, const char *name, const char *why), void *ud, uint64_t *n_ok,
                     uint64_t *n_bad, ph_err *err);
/* Removes records, least recently used and chain ends first, until at
 * most max_bytes remain. */
int disk_tier_prune(disk_tier *t, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err);

#endif
