/* Free space on the file system of a cache folder. The caches on disk (the
 * picture embeddings, the KV checkpoints) keep it above a floor by removing
 * their least recently used files, so that they never fill a disk and a
 * full disk does not stop them. */
#ifndef PH_BASE_FS_SPACE_H
#define PH_BASE_FS_SPACE_H

#include <stdint.h>

#define PH_FS_FLOOR_MIN (256ull << 20) /* bytes */

/* The bytes an unprivileged writer may still use on the file system that
 * holds dir (*avail) and the file system's size (*total), by statvfs.
 * Returns 0, or -1 with errno set (then the caller does not know). */
int fs_space_get(const char *dir, uint64_t *avail, uint64_t *total);

/* The free space a cache leaves on a file system of total bytes:
 * max(256 MiB, 5% of it), but at most a quarter of it (so that a small file
 * system still holds a cache). */
uint64_t fs_floor(uint64_t total);

/* Whether a cache may write need more bytes on a file system with avail
 * bytes free out of total and still leave its floor. */
static inline int fs_room(uint64_t avail, uint64_t total, uint64_t need) {
    uint64_t floor = fs_floor(total);
    return avail >= floor && avail - floor >= need;
}

/* A test hook, for tests only (a full disk is hard to make): fn replaces
 * statvfs in fs_space_get; NULL restores statvfs. Set it while no cache is
 * in use. */
void fs_space_set_test_hook(int (*fn)(const char *dir, uint64_t *avail, uint64_t *total));

#endif
