/* The image-embedding cache (docs/state-cache.md, Embedding cache): an LRU of picture
 * embeddings keyed by their 32-byte embed_key (docs/state-cache.md, Identity), bounded
 * by entry count and by bytes, optionally persisted in a folder so that a
 * restart does not encode the same pictures again.
 *
 * Threads: the cache has no locks. It belongs to the one inference worker;
 * every call on one cache, and every release of its entries, must come from
 * one thread at a time.
 *
 * Entries are reference counted: get and put hand out a referenced entry
 * that stays valid (rows included) until it is released, even if the cache
 * evicts or replaces it meanwhile, or is freed (release does not touch the
 * cache, so it may come after embed_cache_free).
 *
 * Disk (dir not NULL): each entry is one file dir/<64 hex of key>.embd,
 * written atomically (base/cache_dir.h, cache_dir_write_file). Little-endian
 * layout, 168 bytes of header then the payload:
 *    0  magic "PHEMBD01"         8  version (u32) = 1    12  reserved (u32) = 0
 *   16  key (32)                48  grid_x, grid_y, width (i32 each), reserved (i32) = 0
 *   64  cond_hash (32)          96  payload bytes (u64)
 *  104  SHA-256 of the payload 136  SHA-256 of header bytes 0..135
 *  168  payload: grid_x * grid_y * width floats
 * A file is used only if every field checks out: magic, version, reserved
 * words, header checksum, key equal to the key its name says, dims sane,
 * payload size equal to rows * width * 4 and to what is left of the file,
 * payload checksum, and cond_hash equal to the hash of the rows. A file that
 * fails any check is removed and logged, counted in disk_rejects, and the
 * lookup is a miss. The checksums catch damage (torn writes, bit rot,
 * stray files), not forgery: the folder must be the user's own.
 *
 * The folder is created 0700 (with its missing parents) and every file in
 * it 0600: other users cannot read the pictures' embeddings. A folder that
 * exists keeps its mode.
 *
 * The folder's space is bounded (embed_cache_set_disk_budget; unbounded
 * until set): the cache indexes the entry files it finds when it opens the
 * folder and those it writes or loads, and after each write removes the
 * least recently used ones (by mtime, which a disk hit renews) until the
 * total fits. An entry larger than the whole budget is not written.
 * The file system's free space is kept above a floor too (base/fs_space:
 * max(256 MiB, 5%)): before each write, and when the budget is set, the
 * least recently used files are removed until the new file fits above it,
 * only when that can make room: if even removing them all would not, none
 * is removed and the entry is not written (it stays in memory; counted in
 * disk_full, logged once). A write that fails for want of space (ENOSPC,
 * EDQUOT) removes least recently used files worth the new one, when they
 * can make that much, and is tried once more (base/cache_dir: the policy
 * the disk tier shares).
 * A write's temporary file (NAME.embd.tmp.PID.N) is locked while it is
 * written; those that no one holds a lock on (their writer died: a crash
 * or kill during a write, whatever process has its pid now) are removed
 * when the folder is opened; other names are left alone. */
#ifndef PH_STATE_EMBED_CACHE_H
#define PH_STATE_EMBED_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define PH_EMBED_MAX_GRID  4096  /* grid_x, grid_y: 1 .. this */
#define PH_EMBED_MAX_WIDTH 65536 /* floats per row: 1 .. this */

typedef struct embed_entry {
    uint8_t key[32];        /* embed_key */
    int32_t grid_x, grid_y; /* rows = grid_x * grid_y */
    int32_t width;          /* floats per row */
    uint8_t cond_hash[32];  /* embed_rows_hash of the rows */
    float *rows;            /* rows * width floats */
} embed_entry;

typedef struct embed_store embed_store;
struct shared_tier;

typedef struct embed_cache_stats {
    uint64_t hits;         /* gets that returned an entry (disk_hits included) */
    uint64_t misses;       /* gets that returned NULL */
    uint64_t evictions;    /* entries pushed out of memory by the bounds */
    uint64_t disk_hits;    /* hits served from dir */
    uint64_t shared_hits;  /* hits served from the shared tier */
    uint64_t disk_writes;  /* files written */
    uint64_t disk_rejects; /* files found bad, removed and not used */
    uint64_t
        disk_evictions; /* files removed to keep the folder within its budget or the free space above its floor */
    uint64_t disk_full; /* entries not saved for want of space on the file system */
    uint64_t disk_files, disk_bytes; /* entry files in the folder now, as far as it knows */
    uint64_t entries;                /* entries in memory now */
    uint64_t bytes;                  /* their bytes now (rows plus bookkeeping) */
} embed_cache_stats;

/* A cache of at most max_entries entries and max_bytes bytes in memory
 * (max_entries <= 0: nothing is kept in memory). With dir (created if
 * missing), entries are also written there and looked up there on a memory
 * miss. Returns NULL with e set if dir cannot be created or memory is out. */
embed_store *embed_cache_new(int max_entries, size_t max_bytes, const char *dir, ph_err *err);
/* Bounds the folder's entry files to bytes, removing the least recently
 * used ones now if needed. */
void embed_cache_set_disk_budget(embed_store *c, uint64_t bytes);
/* Also looks entries up in the shared tier (after memory and dir) and
 * queues every entry put there (the value: the file's bytes, checked as a
 * file is); NULL: none. */
void embed_cache_set_shared(embed_store *c, struct shared_tier *shared);
/* Frees the cache and the entries no caller holds; NULL is allowed. */
void embed_cache_free(embed_store *c);

/* Looks key up: memory first, then dir, then the shared tier. A hit
 * becomes the most recent entry and is returned referenced (release it); a
 * miss returns NULL. A disk or shared hit is added to memory (within the
 * bounds), a shared one to dir too. */
const embed_entry *embed_cache_get(embed_store *c, const uint8_t key[32]);
/* embed_cache_get again for a key whose miss was counted (another request
 * may have put it since): a miss counts nothing. */
const embed_entry *embed_cache_recheck(embed_store *c, const uint8_t key[32]);
/* Takes one more reference on an entry the caller holds (each needs its own
 * release). */
void embed_cache_retain(embed_store *c, const embed_entry *en);
/* Drops a reference taken by get, put or retain; NULL is allowed. */
void embed_cache_release(embed_store *c, const embed_entry *en);

/* Inserts an entry, taking ownership of rows (malloc'd, rows * width
 * floats) whatever the outcome: on failure they are freed. cond_hash must
 * equal embed_rows_hash(rows) (it is checked: -1 if not); NULL computes
 * it. An existing entry with the same key is replaced. Least recent entries
 * are evicted until count and bytes fit; an entry larger than max_bytes is
 * not kept in memory. With dir, the entry is written to its file as well; a
 * failed write is logged, not an error (the entry still works from
 * memory). On success returns 0 and, if out is not NULL, a referenced entry
 * in *out (usable even when nothing is kept in memory). Returns -1 with e
 * set for bad dims, a wrong cond_hash or no memory. */
int embed_cache_put(embed_store *c, const uint8_t key[32], int32_t grid_x, int32_t grid_y, int32_t width, float *rows,
                    const uint8_t cond_hash[32], const embed_entry **out, ph_err *err);

void embed_cache_get_stats(const embed_store *c, embed_cache_stats *st);

/* For tests only (a full disk is hard to make): write replaces
 * cache_dir_write_file for the cache's files (it must set errno on
 * failure, as that does); NULL restores it. */
typedef int (*embed_write_fn)(const char *path, const void *const *parts, const size_t *lens, size_t n_parts,
                              ph_err *err);
void embed_cache_set_write_hook(embed_store *c, embed_write_fn write);

/* cond_hash of embedding rows: SHA-256 of their bytes as stored in memory
 * (little-endian IEEE floats). */
void embed_rows_hash(const float *rows, size_t n_floats, uint8_t out[32]);

#endif
