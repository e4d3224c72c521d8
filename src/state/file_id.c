#include "state/file_id.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/log.h"
#include "base/sha256.h"

#define MEMO_NAME      "file-ids"
#define MEMO_MAX_BYTES (1u << 20) /* a larger memo is not ours: ignored, then replaced */
#define HASH_CHUNK     (4u << 20)
#define RACY_NS        2000000000LL /* 2 s: FAT's timestamp step; ext4 and tmpfs are far finer */

typedef struct memo_entry {
    uint64_t dev, ino, size;
    int64_t sec, nsec;   /* mtime */
    int64_t csec, cnsec; /* ctime */
    uint8_t id[32];
} memo_entry;

static memo_entry entry_of(const struct stat *st) {
    memo_entry m = {0};
    m.dev = (uint64_t)st->st_dev;
    m.ino = (uint64_t)st->st_ino;
    m.size = (uint64_t)st->st_size;
    m.sec = (int64_t)st->st_mtim.tv_sec;
    m.nsec = (int64_t)st->st_mtim.tv_nsec;
    m.csec = (int64_t)st->st_ctim.tv_sec;
    m.cnsec = (int64_t)st->st_ctim.tv_nsec;
    return m;
}

static bool same_file(const memo_entry *a, const memo_entry *b) { return a->dev == b->dev && a->ino == b->ino; }

static bool same_version(const memo_entry *a, const memo_entry *b) {
    return same_file(a, b) && a->size == b->size && a->sec == b->sec && a->nsec == b->nsec && a->csec == b->csec &&
           a->cnsec == b->cnsec;
}

/* A decimal number (with an optional '-' when neg_ok) then the separator
 * sep; advances *s past both. */
static bool parse_num(const char **s, bool neg_ok, char sep, uint64_t *mag, bool *neg) {
    const char *p = *s;
    *neg = false;
    if (neg_ok && *p == '-') {
        *neg = true;
        p++;
    }
    if (*p < '0' || *p > '9') return false;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p != sep) return false;
    *mag = v;
    *s = p + 1;
    return true;
}

/* A time (seconds, possibly negative, then nanoseconds), each followed by
 * a space. */
static bool parse_time(const char **s, int64_t *sec, int64_t *nsec) {
    uint64_t v, ns;
    bool neg, unused;
    if (!parse_num(s, true, ' ', &v, &neg) || !parse_num(s, false, ' ', &ns, &unused)) return false;
    if (v > (uint64_t)INT64_MAX || ns >= 1000000000u) return false;
    *sec = neg ? -(int64_t)v : (int64_t)v;
    *nsec = (int64_t)ns;
    return true;
}

/* One memo line, without its newline (NUL-ended). */
static bool parse_line(const char *s, memo_entry *m) {
    bool unused;
    if (!parse_num(&s, false, ' ', &m->dev, &unused) || !parse_num(&s, false, ' ', &m->ino, &unused) ||
        !parse_num(&s, false, ' ', &m->size, &unused) || !parse_time(&s, &m->sec, &m->nsec) ||
        !parse_time(&s, &m->csec, &m->cnsec))
        return false;
    if (m->size > (uint64_t)INT64_MAX) return false;
    return hex_decode(s, 32, m->id) && s[64] == '\0';
}

/* Reads the memo's valid lines (at most PH_FILE_ID_MEMO_MAX) into out;
 * returns how many. Anything wrong with the file only means fewer lines. */
static size_t memo_load(const char *memo_path, memo_entry *out) {
    void *data;
    size_t len, n = 0;
    ph_err e = {0};
    if (file_read_all(memo_path, MEMO_MAX_BYTES, &data, &len, &e) != 0) {
        if (errno != ENOENT) PH_DEBUG("file ids: memo not used: %s", e.msg);
        return 0;
    }
    char *s = data, *end = s + len;
    while (s < end && n < PH_FILE_ID_MEMO_MAX) {
        char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) break; /* an unfinished last line is garbage */
        *nl = '\0';
        if (parse_line(s, &out[n])) n++;
        s = nl + 1;
    }
    free(data);
    return n;
}

/* Rewrites the memo: first, then the old lines about other files. */
static void memo_store(const char *memo_dir, const char *memo_path, const memo_entry *first, const memo_entry *old,
                       size_t n_old) {
    char text[PH_FILE_ID_MEMO_MAX * 200];
    size_t at = 0, lines = 0;
    for (size_t i = 0; i <= n_old && lines < PH_FILE_ID_MEMO_MAX; i++) {
        const memo_entry *m = i == 0 ? first : &old[i - 1];
        if (i > 0 && same_file(m, first)) continue; /* a stale version of this file */
        char hex[65];
        hex_encode(m->id, 32, hex);
        int k = snprintf(text + at, sizeof text - at,
                         "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %s\n",
                         m->dev, m->ino, m->size, m->sec, m->nsec, m->csec, m->cnsec, hex);
        if (k < 0 || (size_t)k >= sizeof text - at) break; /* cannot happen: a line is under 200 bytes */
        at += (size_t)k;
        lines++;
    }
    ph_err e = {0};
    const void *parts[1] = {text};
    if (mkdir_p(memo_dir, &e) != 0 || file_write_atomic(memo_path, parts, &at, 1, &e) != 0)
        PH_WARN("file ids: cannot remember the id (it will be computed again next time): %s", e.msg);
}

/* SHA-256 of everything fd reads; *n_read gets the byte count. */
static int hash_fd(int fd, const char *path, uint64_t size, const file_id_progress *prog, uint8_t id[32],
                   uint64_t *n_read, ph_err *err) {
    uint8_t *buf = malloc(HASH_CHUNK);
    if (!buf) return err_set(err, "%s: out of memory", path);
    sha256_ctx ctx;
    if (sha256_init(&ctx) != 0) {
        free(buf);
        return err_set(err, "%s: libcrypto cannot start a SHA-256 digest", path);
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    *n_read = 0;
    for (;;) {
        ssize_t r = read(fd, buf, HASH_CHUNK);
        if (r < 0) {
            if (errno == EINTR) continue;
            int errnum = errno;
            sha256_discard(&ctx);
            free(buf);
            return err_set(err, "%s: read failed: %s", path, strerror(errnum));
        }
        if (r == 0) break;
        sha256_update(&ctx, buf, (size_t)r);
        *n_read += (uint64_t)r;
        if (prog && prog->fn) prog->fn(prog->ud, *n_read, size);
    }
    free(buf);
    if (sha256_final(&ctx, id) != 0) return err_set(err, "%s: libcrypto failed to compute a SHA-256 digest", path);
    return 0;
}

int file_id_of(const char *path, const char *memo_dir, uint8_t id[32], bool *from_memo, const file_id_progress *prog,
               ph_err *err) {
    if (from_memo) *from_memo = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int errnum = errno;
        close(fd);
        return err_set(err, "%s: cannot stat: %s", path, strerror(errnum));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, "%s: not a regular file", path);
    }
    memo_entry me = entry_of(&st);

    char memo_path[4096];
    memo_entry *old = NULL;
    size_t n_old = 0;
    if (memo_dir && *memo_dir) {
        int k = snprintf(memo_path, sizeof memo_path, "%s/%s", memo_dir, MEMO_NAME);
        if (k < 0 || (size_t)k >= sizeof memo_path) {
            PH_WARN("file ids: the memo folder name is too long; not remembering ids: %s", memo_dir);
            memo_dir = NULL;
        } else if (!(old = malloc(PH_FILE_ID_MEMO_MAX * sizeof *old))) {
            memo_dir = NULL; /* no memo is never an error */
        } else {
            n_old = memo_load(memo_path, old);
        }
    } else {
        memo_dir = NULL;
    }
    for (size_t i = 0; i < n_old; i++) {
        if (same_version(&old[i], &me)) {
            memcpy(id, old[i].id, 32);
            if (from_memo) *from_memo = true;
            free(old);
            close(fd);
            return 0;
        }
    }

    struct timespec started;
    clock_gettime(CLOCK_REALTIME, &started);
    uint64_t n_read = 0;
    int rc = hash_fd(fd, path, (uint64_t)st.st_size, prog, me.id, &n_read, err);
    struct stat st2;
    bool stable = rc == 0 && fstat(fd, &st2) == 0 && n_read == me.size;
    close(fd);
    if (rc != 0) {
        free(old);
        return -1;
    }
    memcpy(id, me.id, 32);
    if (stable) {
        memo_entry after = entry_of(&st2);
        stable = same_version(&after, &me);
    }
    if (!stable) PH_WARN("file ids: %s changed while it was read; its id is not remembered", path);
    /* ctime moves with every change of the file (and cannot be set back),
     * so it bounds when the bytes last changed. */
    bool racy =
        me.csec * 1000000000LL + me.cnsec + RACY_NS > (int64_t)started.tv_sec * 1000000000LL + started.tv_nsec;
    if (memo_dir && stable && !racy) memo_store(memo_dir, memo_path, &me, old, n_old);
    free(old);
    return 0;
}

const char *default_cache_dir(char *buf, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && xdg[0] == '/') k = snprintf(buf, cap, "%s/pinhole", xdg);
    else if (home && *home) k = snprintf(buf, cap, "%s/.cache/pinhole", home);
    else return NULL;
    return k >= 0 && (size_t)k < cap ? buf : NULL;
}
