#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_ulong g_tmp_counter;

/* Writes all n bytes, going on after short writes and signals. */
static int write_full(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int fsync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? 0 : -1;
}

int file_write_atomic(const char *path, const void *const *parts, const size_t *lens, size_t n_parts, ph_err *err) {
    if (!path || !*path) return err_set(err, "atomic write: no path given");
    if (n_parts && (!parts || !lens)) return err_set(err, "%s: atomic write: no data given", path);
    size_t cap = strlen(path) + 64;
    char *tmp = malloc(cap);
    if (!tmp) return err_set(err, "%s: out of memory", path);
    snprintf(tmp, cap, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)atomic_fetch_add(&g_tmp_counter, 1));

    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        err_set(err, "%s: cannot create the temporary file %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    const char *what = "write";
    for (size_t i = 0; i < n_parts; i++) {
        if (lens[i] && !parts[i]) {
            errno = EINVAL;
            goto fail;
        }
        if (lens[i] && write_full(fd, parts[i], lens[i]) != 0) goto fail;
    }
    what = "fsync";
    if (fsync(fd) != 0) goto fail;
    what = "close";
    int rc = close(fd);
    fd = -1;
    if (rc != 0) goto fail;
    what = "rename";
    if (rename(tmp, path) != 0) goto fail;
    fsync_parent_dir(path); /* best effort: the data itself is safe already */
    free(tmp);
    return 0;

fail:;
    int errnum = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    err_set(err, "%s: %s of the temporary file %s failed: %s", path, what, tmp, strerror(errnum));
    free(tmp);
    errno = errnum;
    return -1;
}

int file_read_all(const char *path, size_t max_bytes, void **data, size_t *len, ph_err *err) {
    *data = NULL;
    *len = 0;
    if (max_bytes > SIZE_MAX - 2) max_bytes = SIZE_MAX - 2;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int errnum = errno;
        err_set(err, "%s: cannot open: %s", path, strerror(errnum));
        errno = errnum;
        return -1;
    }
    int errnum = 0;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        errnum = errno;
        err_set(err, "%s: cannot stat: %s", path, strerror(errnum));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        errnum = EINVAL;
        err_set(err, "%s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)st.st_size > max_bytes) goto too_big;
    /* The size stat gave, one byte to notice a file that grew since, and
     * the NUL: a file read as stat said takes no realloc. */
    size_t cap = (size_t)st.st_size + 2, n = 0;
    buf = malloc(cap);
    if (!buf) goto oom;
    for (;;) {
        if (n == cap - 1) {
            if (n > max_bytes) goto too_big;
            size_t ncap = cap > (max_bytes + 2) / 2 ? max_bytes + 2 : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) goto oom;
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            errnum = errno;
            err_set(err, "%s: read failed: %s", path, strerror(errnum));
            goto fail;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > max_bytes) goto too_big;
    close(fd);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;

too_big:
    errnum = EFBIG;
    err_set(err, "%s: larger than the %zu bytes allowed", path, max_bytes);
    goto fail;
oom:
    errnum = ENOMEM;
    err_set(err, "%s: out of memory", path);
fail:
    free(buf);
    close(fd);
    errno = errnum;
    return -1;
}

int mkdir_p(const char *path, ph_err *err) {
    if (!path || !*path) return err_set(err, "cannot create a folder with an empty name");
    char *p = strdup(path);
    if (!p) return err_set(err, "%s: out of memory", path);
    /* Every prefix that ends before a slash, then the whole path. */
    for (char *s = p + 1;; s++) {
        int last = *s == '\0';
        if (!last && *s != '/') continue;
        if (!last && s[-1] == '/') continue; /* "a//b" */
        char c = *s;
        *s = '\0';
        int rc = mkdir(p, 0700);
        int errnum = errno;
        *s = c;
        if (rc != 0 && errnum != EEXIST) {
            err_set(err, "%s: cannot create the folder %.*s: %s", path, (int)(s - p), p, strerror(errnum));
            free(p);
            errno = errnum;
            return -1;
        }
        if (last) break;
    }
    free(p);
    struct stat st;
    if (stat(path, &st) != 0) {
        int errnum = errno;
        err_set(err, "%s: cannot stat the folder: %s", path, strerror(errnum));
        errno = errnum;
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return err_set(err, "%s: exists and is not a folder", path);
    }
    return 0;
}
