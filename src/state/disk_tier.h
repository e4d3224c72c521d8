/* The disk tier (docs/state-cache.md, Disk tier): checkpoints of sequences as files in a folder,
 * indexed in SQLite, so that a restarted server resumes a conversation,
 * pictures included, instead of reading it again.
 *
 * A checkpoint is a complete sequence state (docs/state-cache.md, Reuse rules): the KV cells of
 * its first n rows and the provenance of every row (seq_state: token ids
 * and positions, per picture its start, rows, grid, positions, image_id,
 * embed_key and cond_hash), with the model_id and the format tag, which
 * names everything the KV bytes depend on (KV type, layers, heads, head
 * size, rope settings, the kernels' ISA family).
 *
 * Keys. The stream of a sequence is cut at its boundaries: the end of each
 * picture, every DISK_KEY_STRIDE rows (where that row is not inside a
 * picture) and its end. The key of a boundary is a chained SHA-256: it
 * starts from the model_id and the format tag with the sequence's isolation
 * domain folded in (state/domain.h; the default domain folds in nothing),
 * and each segment adds its items (a token as its id, a picture as its
 * embed_key and grid); so a domain's lookups never find another's files. A file
 * is named by the key of its end and indexed under the keys of all its
 * boundaries, so the longest stored prefix of a new prompt is found by
 * hashing the prompt's own boundaries and asking the index (no file read);
 * the match is then read, checked and extended row by row against the
 * request (tokens by id, pictures by embed_key and grid, never ending
 * inside a picture), so a checkpoint ending anywhere serves every prompt
 * that shares its rows. A kept picture keeps the cond_hash stored with it.
 *
 * File DIR/<64 hex of the end key>.phkv, little-endian; a checkpoint of
 * the default domain is version 1 (as written before domains existed, so
 * that older builds sharing the folder still read it), one of another
 * domain version 2, whose header holds the domain too, and one of a model
 * with recurrent layers (qwen35) version 3, whatever its domain, which
 * also holds their states:
 *    0  magic "PHKVCK01"            8  version (u32) = 1, 2 or 3
 *   12  header bytes (u32) H: 256 (version 1), 288 (version 2), 320 (3)
 *   16  model_id (32)              48  format tag (128, NUL-padded)
 *  176  key (32): the chained key of its end, the name of the file
 *  208  n_rows (i32)              212  n_pictures (i32)
 *  216  n_layer (i32)             220  bytes of one K (or V) cell (u32)
 *  224  KV bytes (u64)            232  created, unix seconds (i64)
 *  240  XXH3-64 of the KV bytes (version 3: then of the recurrent states)
 *  248  versions 2 and 3: the isolation domain (32)
 *  280  version 3: states S (u32, 1..5), floats of one state F (u32),
 *       then the rows after which they are (i32 each, S of 5 slots:
 *       increasing, the last at most n_rows), zeros up to H-8
 *  H-8  XXH3-64 of bytes 0..H-9 and the provenance
 *    H  provenance: per row its token id (or -1 for a picture row) and the
 *       position after it (i32 each); then per picture start, rows,
 *       grid_x, grid_y, positions (i32 each), image_id, embed_key,
 *       cond_hash (32 each)
 *  then the KV bytes: per layer its n K cells then its n V cells
 *       (read into and written from the live KV blocks, a block's run
 *       of cells at a time);
 *  version 3, then the recurrent states: S times F floats (f32), the
 *       state after each of those rows (kv_cache_save_recurrent's layout).
 * A version 3 file resumes only at one of its state rows: a lookup cuts
 * its match back to the last of them (as ram_ckpt_cut does), a load
 * restores the state there (its earlier ones as snapshots), and a file
 * holds, or is extended by, another only at a row where the one that
 * stands for both has a state. A queued checkpoint copies the states when
 * it is queued (the live ones change as rows come; S * F * 4 bytes each).
 * A file of a version newer than the reader knows (a newer build sharing
 * the folder) is left alone: not loaded, not removed, not indexed by a
 * recovery; builds before version 3 treat a version 3 file as bad and
 * remove it (they meet one only when recovering an unindexed file or
 * verifying the folder: they never look such a model's keys up).
 * A version 1 file is of the default domain. The domain is a digest (of a
 * salt or a key), never the salt or key itself.
 * A file is used only if everything checks out: magic, version, sizes
 * (header, provenance, KV and recurrent states add up to the file's
 * length), both checksums,
 * the key recomputed from the provenance equal to the header's and to the
 * file's name, pictures whole and in order, and the model_id, format tag,
 * layers and cell size those of the reader. One that fails is removed,
 * logged and counted (rejected), never loaded. The checksums catch damage
 * (torn writes, bit rot, stray files), not forgery: the folder must be the
 * user's own.
 *
 * Index DIR/index.sqlite (WAL): files(name, model_id, format, n_rows,
 * n_pictures, bytes, last_use, created) and keys(hash, name, row). It is a
 * cache of what the folder holds: one that is missing, or damaged (not a
 * database, or failing SQLite's quick check at open; kept aside as
 * index.sqlite.damaged, logged), is built again from the files' headers
 * and provenance (their payload is checked by the load that uses it).
 *
 * Writes. disk_tier_save queues a checkpoint; a writer thread of the tier's
 * own writes it from the live KV cells themselves (no copy; the recurrent
 * states are copied): the caller
 * keeps those cells unchanged until disk_tier_release_rows says the writer
 * is done reading them (which is as soon as the bytes are in the kernel,
 * before fsync). A checkpoint may be queued with a delay; a queued one
 * that a newer one of the same sequence extends is dropped unwritten; one that is a prefix of a file already
 * stored is not written (that file is made most recent); files that are
 * prefixes of a new one are removed once it is stored. Each write goes to
 * a temporary file (tmp.<pid>.<n>.phkv), is fsynced, renamed, the folder
 * fsynced, and only then indexed, so a kill at any moment leaves complete
 * files only: at open, temporary files of dead writers (a writer holds a
 * lock on its temporary file while it writes) are removed, index
 * rows without a file deleted, and files without a row indexed after a
 * full check (or removed).
 *
 * Space: at most budget bytes of files; after each write the least
 * recently used files go first (never one being read); a checkpoint larger
 * than the budget is not written. The file system's free space is kept
 * above a floor (base/fs_space: max(256 MiB, 5%)): before each write, and
 * at open, least recently used files are removed until the new file fits
 * above it, but only when that can make room: a checkpoint that would not
 * fit even if every file went is not written and no file is removed
 * (no_space, logged once). A write that fails with ENOSPC or EDQUOT (a
 * quota, or others' writes since the check) removes least recently used
 * files worth what the file system lacked (the file's bytes it did not
 * take) and is tried once more, if the files can make that much; else it
 * is not written and nothing is removed (no_space). (base/cache_dir: the
 * policy the embedding cache shares, and the temporary files' locks.)
 *
 * Modes: the folder is created 0700 (with its missing parents), the index
 * (and SQLite's -wal and -shm files, which take its mode) and every
 * checkpoint 0600; other users cannot read the conversations. A folder or
 * index that exists keeps its mode. Several processes may share a folder:
 * SQLite locks the index, temporary names are unique, and a file is only
 * ever replaced by rename with a complete one of the same content key.
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

#define DISK_KEY_STRIDE 64
#define DISK_NAME_LEN   70 /* 64 hex + ".phkv" + NUL */

typedef struct disk_tier disk_tier;

typedef struct disk_tier_stats {
    uint64_t hits;           /* lookups that restored rows */
    uint64_t misses;         /* lookups that found nothing usable */
    uint64_t saves;          /* files written */
    uint64_t skipped;        /* checkpoints not written: held already, larger than the budget, or no room */
    uint64_t no_space;       /* of those, not written for want of room above the file system's free-space floor */
    uint64_t evictions;      /* files removed for space or as prefixes of newer ones */
    uint64_t rejected;       /* files that failed a check (removed) */
    uint64_t entries, bytes; /* files in the index now (all processes) */
    uint64_t queued;         /* checkpoints waiting for the writer (or being written) */
    uint64_t bytes_written, bytes_read;
    double write_s, read_s; /* time spent writing (writer thread) and reading */
} disk_tier_stats;

/* Opens (creating it) the folder and its index and recovers from a crash
 * (see above); the writer thread starts with the first save. */
disk_tier *disk_tier_open(const char *dir, uint64_t budget, ph_err *err);
/* Writes what is queued, then closes. */
void disk_tier_close(disk_tier *t);

/* Queues a checkpoint of seq's first n rows, whose KV cells are kv's
 * first n, to be written after delay_s seconds (0: at once) unless a newer
 * checkpoint that extends it is queued meanwhile (then it is dropped
 * unwritten): a prompt's checkpoint waits a little for its turn's. false
 * when nothing is queued: the rows are not complete (a picture cut or
 * without cond_hash) or n is 0. */
bool disk_tier_save(disk_tier *t, const seq_state *seq, int32_t n, const kv_cache *kv, double delay_s);
/* Waits until no queued or running write still has to read KV cells at or
 * past row n (call it before those cells change; 0: before any change).
 * Every queued checkpoint is due at once from then on. */
void disk_tier_release_rows(disk_tier *t, int32_t n);
/* Writes everything queued (delays end) and waits for it. */
void disk_tier_flush(disk_tier *t);

/* A stored checkpoint that matches a request, open for reading. */
typedef struct disk_match {
    char name[DISK_NAME_LEN];
    int fd;
    seq_state seq;  /* its provenance (seq.n_rows: its rows) */
    int32_t prefix; /* rows it shares with the request */
    uint64_t kv_bytes, kv_sum;
    int32_t n_layer;
    uint32_t row_bytes;
    uint32_t hdr_bytes;                 /* where its provenance starts */
    int32_t rec_rows[KV_SNAPSHOTS + 1]; /* with recurrent layers, the rows after which it holds their state */
    int n_rec;
    uint32_t rec_floats;
} disk_match;

/* The stored checkpoint with the longest common prefix with want (same
 * model_id, format tag and domain; with recurrent layers cut to the last
 * row where it holds their state), read and checked: 1 with *m filled (release
 * it with disk_match_free), 0 when none shares more than beat rows (what
 * the caller has already; files no longer than that are not even opened).
 * Bad files met on the way are removed and counted. */
int disk_tier_find(disk_tier *t, const seq_state *want, int32_t beat, disk_match *m);
/* The most of m's first n rows that it can resume at: n, or with
 * recurrent layers the last row at or before n after which it holds their
 * state (0: none). m->prefix is one already. */
int32_t disk_match_cut(const disk_match *m, int32_t n);
/* Reads m's KV cells into kv (which holds the model's layers and at least
 * m->seq.n_rows cells) and keeps the first n (n <= m->seq.n_rows; with
 * recurrent layers one that disk_match_cut gives, their state then the
 * file's after row n, its states up to n the snapshots), after checking
 * the checksum: 0; -1 when the file is bad (it is removed and
 * counted; kv's cells are then undefined and the caller resets them). The
 * read and its time are counted. */
int disk_tier_load(disk_tier *t, disk_match *m, kv_cache *kv, int32_t n, ph_err *err);
void disk_match_free(disk_tier *t, disk_match *m);

void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st);

/* ---- administration (pinhole cache) -------------------------------------- */
typedef struct disk_entry {
    char name[DISK_NAME_LEN];
    uint8_t model_id[32];
    char format[128];
    int32_t n_rows, n_pictures;
    uint64_t bytes;
    int64_t last_use, created;
} disk_entry;

/* Every indexed file, most recently used first; cb returns non-zero to stop. */
int disk_tier_list(disk_tier *t, int (*cb)(void *ud, const disk_entry *f), void *ud, ph_err *err);
/* Checks every file in full; bad ones are reported through bad (may be
 * NULL), removed and counted. */
int disk_tier_verify(disk_tier *t, void (*bad)(void *ud, const char *name, const char *why), void *ud, uint64_t *n_ok,
                     uint64_t *n_bad, ph_err *err);
/* Removes the least recently used files until at most max_bytes remain. */
int disk_tier_prune(disk_tier *t, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err);

#endif
