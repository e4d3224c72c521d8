/* A cache folder: the policy both disk caches (the picture embeddings,
 * state/embed_cache; the KV checkpoints, state/disk_tier) share for the
 * space their files take and for the temporary files of their writes
 * (docs/state-cache.md, Free space and Crash safety).
 *
 * Space. A store keeps its own index of its files (an array, SQLite) and
 * lends it through a cache_dir_files; the functions here decide how much
 * to remove, least recently used first, and never remove a file for
 * nothing:
 *  - cache_dir_fit: at most max bytes of files (a budget);
 *  - cache_dir_make_room: the file system's free space above its floor
 *    (base/fs_space) with a new file of need bytes written; when even
 *    removing every file that may go would not make that, none is removed
 *    (a disk that others filled must not empty the cache for nothing);
 *  - cache_dir_room_after_full: a write that failed with ENOSPC or EDQUOT
 *    (a quota, or others' writes since the check) once the file system had
 *    taken `written` of its `size` bytes: files worth the rest are removed,
 *    and the write may be tried once more, only when they can make that
 *    much; else none is removed.
 *
 * Temporary files. A write goes to a temporary file, created exclusively
 * and 0600, on which its writer holds an flock until the file is renamed
 * or removed. The kernel drops the lock when the writer dies, so a
 * temporary file that no one holds a lock on is a dead write's
 * (cache_dir_tmp_stale), whatever process has its writer's pid now (a
 * restarted container's server is pid 1 again). */
#ifndef PH_BASE_CACHE_DIR_H
#define PH_BASE_CACHE_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct cache_dir_files {
    void *ud;
    /* The bytes of the files that may be removed now (all but those in
     * use), returned, and of all of them (*total). */
    uint64_t (*removable)(void *ud, uint64_t *total);
    /* Removes the least recently used file that may go (from the folder
     * and from the store's index): its bytes (at least 1), or 0 when no
     * file may go. */
    uint64_t (*remove_oldest)(void *ud);
} cache_dir_files;

/* Removes files until at most max bytes remain (or none may go); returns
 * how many, adding their bytes to *bytes_removed (may be NULL). */
uint64_t cache_dir_fit(const cache_dir_files *f, uint64_t max, uint64_t *bytes_removed);

/* Makes room on dir's file system for need more bytes above its free-space
 * floor, removing files only when that can make enough: true when there is
 * room (or the free space is unknown: the write will tell), false with no
 * file removed when there is not. */
bool cache_dir_make_room(const char *dir, const cache_dir_files *f, uint64_t need);

/* After a write of size bytes failed for want of space once the file
 * system had taken written of them (0 when unknown): removes files worth
 * the rest when they can make it (true: write again, once), else none
 * (false). */
bool cache_dir_room_after_full(const cache_dir_files *f, uint64_t size, uint64_t written);

/* Creates dir/<prefix><pid>.<n><suffix> (a name taken already, by a dead
 * process that had this pid, is skipped), mode 0600, and takes an flock on
 * it that marks it as being written: its descriptor, with its path in
 * *path (malloc'd); -1 with errno and err set. */
int cache_dir_tmp_create(const char *dir, const char *prefix, const char *suffix, char **path, ph_err *err);

/* Whether the temporary file name in the folder dir_fd is a dead write's:
 * no one holds its lock. A file that cannot be opened is not. */
bool cache_dir_tmp_stale(int dir_fd, const char *name);

/* Writes all n bytes at fd's offset, going on after short writes and
 * signals: 0, or -1 with errno set. */
int cache_dir_write_all(int fd, const void *p, size_t n);

/* file_write_atomic (base/atomic_file) with its temporary file,
 * PATH.tmp.<pid>.<n>, made by cache_dir_tmp_create: locked while it is
 * written. On failure errno says why (ENOSPC, EDQUOT: no room), the
 * temporary file is gone and path is untouched. */
int cache_dir_write_file(const char *path, const void *const *parts, const size_t *lens, size_t n_parts, ph_err *err);

#endif
