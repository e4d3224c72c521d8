#include "base/cache_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/fs_space.h"

static atomic_uint g_tmp_counter;

/* Removes least recently used files until *left is at most keep (*left
 * counted down by each removal) or none may go; returns how many, adding
 * their bytes to *bytes_removed (may be NULL). */
static uint64_t remove_until(const cache_dir_files *f, uint64_t *left, uint64_t keep, uint64_t *bytes_removed) {
    uint64_t n = 0;
    while (*left > keep) {
        const uint64_t b = f->remove_oldest(f->ud);
        if (b == 0) break;
        *left -= b < *left ? b : *left;
        if (bytes_removed) *bytes_removed += b;
        n++;
    }
    return n;
}

uint64_t cache_dir_fit(const cache_dir_files *f, uint64_t max, uint64_t *bytes_removed) {
    uint64_t total = 0;
    f->removable(f->ud, &total);
    return remove_until(f, &total, max, bytes_removed);
}

/* Removes files worth at least lack bytes when those that may go can make
 * it: true; else none, false. */
static bool free_bytes(const cache_dir_files *f, uint64_t lack) {
    uint64_t total = 0;
    if (f->removable(f->ud, &total) < lack) return false;
    uint64_t freed = 0, left = lack;
    remove_until(f, &left, 0, &freed);
    return freed >= lack;
}

bool cache_dir_make_room(const char *dir, const cache_dir_files *f, uint64_t need) {
    uint64_t avail, total;
    if (fs_space_get(dir, &avail, &total) != 0 || fs_room(avail, total, need)) return true;
    const uint64_t floor = fs_floor(total), want = floor + need < floor ? UINT64_MAX : floor + need;
    return free_bytes(f, want - avail); /* want > avail: fs_room said no */
}

bool cache_dir_room_after_full(const cache_dir_files *f, uint64_t size, uint64_t written) {
    return free_bytes(f, written < size ? size - written : 0);
}

int cache_dir_tmp_create(const char *dir, const char *prefix, const char *suffix, char **path, ph_err *err) {
    const size_t cap = strlen(dir) + strlen(prefix) + strlen(suffix) + 48;
    char *p = malloc(cap);
    *path = p;
    if (!p) {
        errno = ENOMEM;
        return err_set(err, "%s: out of memory", dir);
    }
    for (int tries = 0; tries < 1000; tries++) {
        snprintf(p, cap, "%s/%s%ld.%u%s", dir, prefix, (long)getpid(), atomic_fetch_add(&g_tmp_counter, 1) + 1,
                 suffix);
        const int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) break;
        /* "being written". Another process's stale check may have locked
         * the new file before this one did, and removed it: the lock then
         * waits for it (it holds it only for that), and a file no longer
         * in the folder is given up for a new name. */
        struct stat st;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 && st.st_nlink > 0) return fd;
        close(fd);
    }
    const int e = errno;
    err_set(err, "cannot create the temporary file %s: %s", p, strerror(e));
    errno = e;
    return -1;
}

bool cache_dir_tmp_stale(int dir_fd, const char *name) {
    const int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    const bool stale = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return stale;
}

int cache_dir_write_all(int fd, const void *p, size_t n) {
    for (const uint8_t *b = p; n;) {
        const ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int cache_dir_write_file(const char *path, const void *const *parts, const size_t *lens, size_t n_parts,
                         ph_err *err) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const size_t np = strlen(base) + sizeof ".tmp.";
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup("."), *prefix = malloc(np), *tmp = NULL;
    int fd = -1;
    if (!dir || !prefix) {
        errno = ENOMEM;
        err_set(err, "%s: out of memory", path);
    } else {
        snprintf(prefix, np, "%s.tmp.", base);
        fd = cache_dir_tmp_create(dir, prefix, "", &tmp, err);
    }
    int e = errno;
    free(dir);
    free(prefix);
    if (fd < 0) {
        free(tmp);
        errno = e;
        return -1;
    }
    const char *step = "write";
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n_parts; i++)
        if (lens[i]) rc = cache_dir_write_all(fd, parts[i], lens[i]);
    if (rc == 0) {
        step = "fsync";
        rc = fsync(fd);
    }
    e = errno;
    if (close(fd) != 0 && rc == 0) {
        step = "close";
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        step = "rename";
        rc = -1;
        e = errno;
    }
    if (rc == 0) {
        fsync_parent_dir(path); /* best effort: the data is safe already */
    } else {
        unlink(tmp);
        err_set(err, "%s: %s of the temporary file %s failed: %s", path, step, tmp, strerror(e));
    }
    free(tmp);
    errno = e;
    return rc;
}
