#include "state/embed_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/cache_dir.h"
#include "base/fs_space.h"
#include "base/grow.h"
#include "base/log.h"
#include "base/sha256.h"
#include "state/shared_tier.h"

#define EMBD_MAGIC         "PHEMBD01"
#define EMBD_VERSION       1u
#define EMBD_HEADER        168
#define EMBD_HEADER_HASHED 136 /* the header checksum covers bytes 0 .. 135 */
#define EMBD_SUFFIX        ".embd"

/* The public part first, so a const embed_entry * converts back to its entry. */
typedef struct entry {
    embed_entry pub;
    int refs;    /* references held by callers */
    bool cached; /* in the LRU list */
    struct entry *newer, *older;
    size_t bytes; /* what it counts against max_bytes */
} entry;

/* A file of dir, as far as this process knows: its key, size and when it
 * was last written or used (its mtime, which a hit renews, so the order
 * survives a restart). */
typedef struct disk_file {
    uint8_t key[32];
    uint64_t size;
    int64_t used_ns;
} disk_file;

struct embed_store {
    int max_entries; /* <= 0: nothing kept in memory */
    size_t max_bytes;
    char *dir;         /* NULL: memory only */
    uint64_t disk_max; /* bytes of files kept in dir */
    disk_file *files;  /* the index of dir's entry files */
    size_t n_files, cap_files;
    uint64_t disk_bytes;
    entry *newest, *oldest;
    size_t n, bytes;
    bool warned_full;     /* a shortage of space is logged once until a write succeeds */
    embed_write_fn write; /* cache_dir_write_file, or a test's */
    shared_tier *shared;  /* NULL: none */
    embed_cache_stats st; /* counters; entries and bytes are filled in by get_stats */
};

static void entry_free(entry *en) {
    free(en->pub.rows);
    free(en);
}

/* Takes en out of the LRU list (it stays allocated). */
static void unlist(embed_store *c, entry *en) {
    if (en->newer) en->newer->older = en->older;
    else c->newest = en->older;
    if (en->older) en->older->newer = en->newer;
    else c->oldest = en->newer;
    en->newer = en->older = NULL;
    en->cached = false;
    c->n--;
    c->bytes -= en->bytes;
}

/* Takes en out of the cache; frees it unless a caller still holds it. */
static void detach(embed_store *c, entry *en) {
    unlist(c, en);
    if (en->refs == 0) entry_free(en);
}

static void push_newest(embed_store *c, entry *en) {
    en->older = c->newest;
    en->newer = NULL;
    if (c->newest) c->newest->newer = en;
    else c->oldest = en;
    c->newest = en;
    en->cached = true;
    c->n++;
    c->bytes += en->bytes;
}

/* A linear scan: the count bound is small (default 32), and a scan of 32
 * keys costs far less than anything done with an embedding. */
static entry *find(const embed_store *c, const uint8_t key[32]) {
    for (entry *en = c->newest; en; en = en->older)
        if (memcmp(en->pub.key, key, 32) == 0) return en;
    return NULL;
}

/* Adds en (not in the list) as the most recent entry, evicting the least
 * recent ones until both bounds hold, if it can be kept at all. */
static void admit(embed_store *c, entry *en) {
    if (c->max_entries <= 0 || en->bytes > c->max_bytes) return;
    while (c->oldest && (c->n + 1 > (size_t)c->max_entries || en->bytes > c->max_bytes - c->bytes)) {
        detach(c, c->oldest);
        c->st.evictions++;
    }
    push_newest(c, en);
}

static bool dims_ok(int32_t gx, int32_t gy, int32_t w) {
    return gx >= 1 && gx <= PH_EMBED_MAX_GRID && gy >= 1 && gy <= PH_EMBED_MAX_GRID && w >= 1 &&
           w <= PH_EMBED_MAX_WIDTH;
}

/* Bytes of the rows of sane dims: at most 4096 * 4096 * 65536 * 4 = 2^44. */
static uint64_t payload_bytes(int32_t gx, int32_t gy, int32_t w) {
    return (uint64_t)gx * (uint64_t)gy * (uint64_t)w * sizeof(float);
}

static entry *entry_new(const uint8_t key[32], int32_t gx, int32_t gy, int32_t w, float *rows,
                        const uint8_t cond_hash[32]) {
    entry *en = calloc(1, sizeof *en);
    if (!en) return NULL;
    memcpy(en->pub.key, key, 32);
    en->pub.grid_x = gx;
    en->pub.grid_y = gy;
    en->pub.width = w;
    memcpy(en->pub.cond_hash, cond_hash, 32);
    en->pub.rows = rows;
    en->bytes = sizeof *en + (size_t)payload_bytes(gx, gy, w);
    return en;
}

void embed_rows_hash(const float *rows, size_t n_floats, uint8_t out[32]) {
    sha256_digest(rows, n_floats * sizeof(float), out);
}

/* ---- files ----------------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* dir/<hex key>.embd, malloc'd. */
static char *file_path(const embed_store *c, const uint8_t key[32]) {
    size_t n = strlen(c->dir) + 1 + 64 + sizeof EMBD_SUFFIX;
    char *p = malloc(n);
    if (!p) return NULL;
    char hex[65];
    hex_encode(key, 32, hex);
    snprintf(p, n, "%s/%s%s", c->dir, hex, EMBD_SUFFIX);
    return p;
}

static void build_header(const embed_entry *en, uint64_t payload, uint8_t h[EMBD_HEADER]) {
    memset(h, 0, EMBD_HEADER);
    memcpy(h, EMBD_MAGIC, 8);
    put_le(h + 8, EMBD_VERSION, 4);
    memcpy(h + 16, en->key, 32);
    put_le(h + 48, (uint32_t)en->grid_x, 4);
    put_le(h + 52, (uint32_t)en->grid_y, 4);
    put_le(h + 56, (uint32_t)en->width, 4);
    memcpy(h + 64, en->cond_hash, 32);
    put_le(h + 96, payload, 8);
    /* The payload checksum is the rows' hash, which put has checked equals
     * cond_hash. */
    memcpy(h + 104, en->cond_hash, 32);
    sha256_digest(h, EMBD_HEADER_HASHED, h + EMBD_HEADER_HASHED);
}

/* ---- the index of the folder: sizes and use, for the space budget ---- */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static disk_file *index_find(const embed_store *c, const uint8_t key[32]) {
    for (size_t i = 0; i < c->n_files; i++)
        if (!memcmp(c->files[i].key, key, 32)) return &c->files[i];
    return NULL;
}

/* Adds a file the index does not hold; NULL when the index cannot grow
 * (the file still serves lookups, it is only not counted). */
static disk_file *index_append(embed_store *c, const uint8_t key[32]) {
    disk_file *v = grow_array(c->files, &c->cap_files, c->n_files, sizeof *v, 64);
    if (!v) return NULL;
    c->files = v;
    disk_file *f = &c->files[c->n_files++];
    memcpy(f->key, key, 32);
    f->size = 0;
    return f;
}

/* Records key's file: size bytes, used at used_ns. */
static void index_set(embed_store *c, const uint8_t key[32], uint64_t size, int64_t used_ns, bool known_new) {
    disk_file *f = known_new ? NULL : index_find(c, key);
    if (!f && !(f = index_append(c, key))) return;
    c->disk_bytes = c->disk_bytes - f->size + size;
    f->size = size;
    f->used_ns = used_ns;
}

static void index_remove(embed_store *c, const uint8_t key[32]) {
    disk_file *f = index_find(c, key);
    if (!f) return;
    c->disk_bytes -= f->size;
    *f = c->files[--c->n_files];
}

/* The folder's files as base/cache_dir sees them: any may be removed (a
 * loaded entry lives in memory), least recently used first. */
static uint64_t removable_files(void *ud, uint64_t *total) {
    const embed_store *c = ud;
    return *total = c->disk_bytes;
}

static uint64_t remove_oldest_file(void *ud) {
    embed_store *c = ud;
    if (c->n_files == 0) return 0;
    size_t k = 0;
    for (size_t i = 1; i < c->n_files; i++)
        if (c->files[i].used_ns < c->files[k].used_ns) k = i;
    char *path = file_path(c, c->files[k].key);
    if (path && unlink(path) != 0 && errno != ENOENT)
        PH_WARN("embedding cache: %s: cannot remove it: %s", path, strerror(errno));
    free(path);
    const uint64_t bytes = c->files[k].size;
    c->disk_bytes -= bytes;
    c->files[k] = c->files[--c->n_files];
    c->st.disk_evictions++;
    return bytes ? bytes : 1;
}

static cache_dir_files files_of(embed_store *c) {
    return (cache_dir_files){.ud = c, .removable = removable_files, .remove_oldest = remove_oldest_file};
}

/* Removes the least recently used files until the folder fits its budget
 * (the file just written is the most recent one, and fits by itself). */
static void disk_enforce(embed_store *c) {
    const cache_dir_files f = files_of(c);
    cache_dir_fit(&f, c->disk_max, NULL);
}

/* Room for need more bytes above the file system's free-space floor,
 * removing least recently used files only when that can make it
 * (base/cache_dir). */
static bool space_for(embed_store *c, uint64_t need) {
    const cache_dir_files f = files_of(c);
    return cache_dir_make_room(c->dir, &f, need);
}

/* Logs that a picture's embedding is not saved for want of space: once,
 * until a write succeeds again. */
static void short_of_space(embed_store *c, const char *why) {
    c->st.disk_full++;
    if (!c->warned_full)
        PH_WARN("embedding cache: %s: %s; new embeddings stay in memory only until there is room", c->dir, why);
    c->warned_full = true;
}

/* Reads the folder into the index: every <64 hex>.embd regular file, and
 * removes the temporary files of writers that died. Unknown names are
 * left alone. */
static void disk_scan(embed_store *c) {
    DIR *d = opendir(c->dir);
    if (!d) {
        PH_WARN("embedding cache: %s: cannot list it: %s", c->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        struct stat st;
        if (strstr(name, EMBD_SUFFIX ".tmp.") && cache_dir_tmp_stale(dirfd(d), name)) {
            if (unlinkat(dirfd(d), name, 0) == 0)
                PH_INFO("embedding cache: removed %s, left by a write that died", name);
            continue;
        }
        uint8_t key[32];
        if (strlen(name) != 64 + strlen(EMBD_SUFFIX) || strcmp(name + 64, EMBD_SUFFIX) || !hex_decode(name, 32, key))
            continue;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        /* names in a folder are unique: no lookup (a folder may hold many files) */
        index_set(c, key, (uint64_t)st.st_size, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, true);
    }
    closedir(d);
}

static void disk_write(embed_store *c, const embed_entry *en) {
    char *path = file_path(c, en->key);
    if (!path) {
        PH_WARN("embedding cache: out of memory; an embedding is not saved");
        return;
    }
    uint64_t payload = payload_bytes(en->grid_x, en->grid_y, en->width);
    if (EMBD_HEADER + payload > c->disk_max) { /* it could never be kept */
        free(path);
        return;
    }
    const uint64_t size = EMBD_HEADER + payload;
    if (!space_for(c, size)) {
        short_of_space(c, "the file system is short of space (the cache keeps max(256 MiB, 5%) of it free) and "
                          "removing the cache's own files would not make room");
        free(path);
        return;
    }
    uint8_t h[EMBD_HEADER];
    build_header(en, payload, h);
    const void *parts[2] = {h, en->rows};
    const size_t lens[2] = {sizeof h, (size_t)payload};
    ph_err e = {0};
    int rc = c->write(path, parts, lens, 2, &e), why = rc ? errno : 0;
    const cache_dir_files f = files_of(c);
    if (rc != 0 && (why == ENOSPC || why == EDQUOT) && cache_dir_room_after_full(&f, size, 0)) {
        /* full after all (a quota, other writers): the least recently used
         * files made room for this one (a failed write leaves none of its
         * bytes); once more */
        e = (ph_err){0};
        rc = c->write(path, parts, lens, 2, &e);
        why = rc ? errno : 0;
    }
    if (rc == 0) {
        c->st.disk_writes++;
        c->warned_full = false;
        index_set(c, en->key, size, now_ns(), false);
        disk_enforce(c);
    } else if (why == ENOSPC || why == EDQUOT) {
        short_of_space(c, e.msg);
    } else {
        PH_WARN("embedding cache: cannot save an embedding (it stays in memory): %s", e.msg);
    }
    free(path);
}

/* Reads up to n bytes at off; returns how many (fewer at the end of the
 * file), or -1. */
static ssize_t read_at(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *b = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

static void reject(embed_store *c, const uint8_t key[32], const char *path, const char *why) {
    PH_WARN("embedding cache: %s: %s; the file is removed and not used", path, why);
    if (unlink(path) != 0 && errno != ENOENT)
        PH_WARN("embedding cache: %s: cannot remove it: %s", path, strerror(errno));
    index_remove(c, key);
    c->st.disk_rejects++;
}

/* Checks an entry's header h (of a file or value of len bytes in all) as
 * key's, and gives its dimensions and payload bytes: NULL, or why not. */
static const char *header_check(const uint8_t h[EMBD_HEADER], const uint8_t key[32], uint64_t len, int32_t *gx,
                                int32_t *gy, int32_t *w, uint64_t *payload) {
    uint8_t sum[32];
    sha256_digest(h, EMBD_HEADER_HASHED, sum);
    *gx = (int32_t)get_le(h + 48, 4), *gy = (int32_t)get_le(h + 52, 4), *w = (int32_t)get_le(h + 56, 4);
    *payload = get_le(h + 96, 8);
    if (memcmp(h, EMBD_MAGIC, 8) != 0) return "not an embedding file (bad magic)";
    if (get_le(h + 8, 4) != EMBD_VERSION) return "an unknown format version";
    if (memcmp(sum, h + EMBD_HEADER_HASHED, 32) != 0) return "a corrupt header (checksum mismatch)";
    if (get_le(h + 12, 4) != 0 || get_le(h + 60, 4) != 0) return "nonzero reserved header fields";
    if (memcmp(h + 16, key, 32) != 0) return "its key differs from its name";
    if (!dims_ok(*gx, *gy, *w)) return "insane dimensions";
    if (*payload != payload_bytes(*gx, *gy, *w)) return "a payload size that disagrees with its dimensions";
    if (len != EMBD_HEADER + *payload) return "a length that disagrees with its header (truncated?)";
    if (*payload > SIZE_MAX) return "too large for memory";
    return NULL;
}

/* Checks the rows (payload bytes) against header_check's header h; their
 * hash into sum: NULL, or why not. */
static const char *rows_check(const uint8_t h[EMBD_HEADER], const float *rows, uint64_t payload, uint8_t sum[32]) {
    embed_rows_hash(rows, (size_t)payload / sizeof(float), sum);
    if (memcmp(sum, h + 104, 32) != 0) return "a corrupt payload (checksum mismatch)";
    if (memcmp(sum, h + 64, 32) != 0) return "a cond_hash that does not match its rows";
    return NULL;
}

/* key's value in the shared tier, checked as a file is: NULL when there is
 * none or it is refused (counted there). The entry is returned
 * unreferenced, not cached. */
static entry *shared_load(embed_store *c, const uint8_t key[32]) {
    void *v;
    size_t len;
    if (shared_tier_get(c->shared, SHARED_EMBED, key, &v, &len) != 1) return NULL;
    int32_t gx, gy, w;
    uint64_t payload;
    uint8_t sum[32];
    float *rows = NULL;
    const char *why =
        len < EMBD_HEADER ? "shorter than its header" : header_check(v, key, len, &gx, &gy, &w, &payload);
    if (!why && !(rows = malloc((size_t)payload))) why = "out of memory";
    if (!why) {
        memcpy(rows, (const uint8_t *)v + EMBD_HEADER, (size_t)payload);
        why = rows_check(v, rows, payload, sum);
    }
    free(v);
    entry *en = why ? NULL : entry_new(key, gx, gy, w, rows, sum);
    if (!en) {
        free(rows);
        if (why) shared_tier_refused(c->shared, SHARED_EMBED, key, why);
        return NULL;
    }
    if (c->dir) disk_write(c, &en->pub);
    return en;
}

/* Loads key's file, checking everything; NULL when there is none or it is
 * bad (then it is removed). The entry is returned unreferenced, not cached. */
static entry *disk_load(embed_store *c, const uint8_t key[32]) {
    char *path = file_path(c, key);
    if (!path) return NULL;
    entry *en = NULL;
    float *rows = NULL;
    const char *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ELOOP) why = "a symbolic link";
        else if (errno != ENOENT) PH_WARN("embedding cache: %s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    uint8_t h[EMBD_HEADER], sum[32];
    if (fstat(fd, &st) != 0) {
        PH_WARN("embedding cache: %s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
        goto out;
    }
    ssize_t r = read_at(fd, h, sizeof h, 0);
    if (r < 0) {
        PH_WARN("embedding cache: %s: read failed: %s", path, strerror(errno));
        goto out;
    }
    if (r < (ssize_t)sizeof h) {
        why = "shorter than its header (truncated)";
        goto out;
    }
    int32_t gx, gy, w;
    uint64_t payload;
    if ((why = header_check(h, key, (uint64_t)st.st_size, &gx, &gy, &w, &payload))) goto out;
    rows = malloc((size_t)payload);
    if (!rows) {
        PH_WARN("embedding cache: %s: out of memory for %llu bytes", path, (unsigned long long)payload);
        goto out;
    }
    r = read_at(fd, rows, (size_t)payload, EMBD_HEADER);
    if (r < 0) {
        PH_WARN("embedding cache: %s: read failed: %s", path, strerror(errno));
        goto out;
    }
    if ((uint64_t)r != payload) {
        why = "shorter than its header says (truncated)";
        goto out;
    }
    if ((why = rows_check(h, rows, payload, sum))) goto out;
    en = entry_new(key, gx, gy, w, rows, sum);
    if (!en) {
        PH_WARN("embedding cache: %s: out of memory", path);
    } else {
        rows = NULL;
        /* used now: renew its mtime, so the order of use survives a restart */
        if (futimens(fd, NULL) != 0) PH_DEBUG("embedding cache: %s: cannot touch it: %s", path, strerror(errno));
        index_set(c, key, (uint64_t)st.st_size, now_ns(), false);
    }
out:
    if (why) reject(c, key, path, why);
    if (fd >= 0) close(fd);
    free(rows);
    free(path);
    return en;
}

/* ---- the cache ------------------------------------------------------------- */

embed_store *embed_cache_new(int max_entries, size_t max_bytes, const char *dir, ph_err *err) {
    embed_store *c = calloc(1, sizeof *c);
    if (!c) {
        err_set(err, "embedding cache: out of memory");
        return NULL;
    }
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    c->write = cache_dir_write_file;
    if (dir) {
        if (mkdir_p(dir, err) != 0) {
            err_prefix(err, "embedding cache");
            free(c);
            return NULL;
        }
        if (!(c->dir = strdup(dir))) {
            err_set(err, "embedding cache: out of memory");
            free(c);
            return NULL;
        }
        disk_scan(c);
    }
    c->disk_max = UINT64_MAX;
    return c;
}

void embed_cache_set_disk_budget(embed_store *c, uint64_t bytes) {
    c->disk_max = bytes;
    if (!c->dir) return;
    disk_enforce(c);
    space_for(c, 0);
}

void embed_cache_set_shared(embed_store *c, shared_tier *shared) { c->shared = shared; }

void embed_cache_set_write_hook(embed_store *c, embed_write_fn write) {
    c->write = write ? write : cache_dir_write_file;
}

void embed_cache_free(embed_store *c) {
    if (!c) return;
    /* detach frees each entry no caller holds; a held one lives on until
     * its release, which does not touch the cache. */
    while (c->newest) detach(c, c->newest);
    free(c->files);
    free(c->dir);
    free(c);
}

static const embed_entry *lookup(embed_store *c, const uint8_t key[32], bool count_miss) {
    entry *en = find(c, key);
    if (en) {
        unlist(c, en);
        push_newest(c, en);
    } else if (c->dir && (en = disk_load(c, key))) {
        c->st.disk_hits++;
        admit(c, en);
    } else if (c->shared && (en = shared_load(c, key))) {
        c->st.shared_hits++;
        admit(c, en);
    } else {
        if (count_miss) c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    en->refs++;
    return &en->pub;
}

const embed_entry *embed_cache_get(embed_store *c, const uint8_t key[32]) { return lookup(c, key, true); }

const embed_entry *embed_cache_recheck(embed_store *c, const uint8_t key[32]) { return lookup(c, key, false); }

void embed_cache_retain(embed_store *c, const embed_entry *pub) {
    (void)c;
    ((entry *)pub)->refs++;
}

void embed_cache_release(embed_store *c, const embed_entry *pub) {
    (void)c; /* entries outlive their cache if held: see embed_cache_free */
    if (!pub) return;
    entry *en = (entry *)pub;
    if (--en->refs == 0 && !en->cached) entry_free(en);
}

int embed_cache_put(embed_store *c, const uint8_t key[32], int32_t grid_x, int32_t grid_y, int32_t width, float *rows,
                    const uint8_t cond_hash[32], const embed_entry **out, ph_err *err) {
    if (out) *out = NULL;
    if (!rows) return err_set(err, "embedding cache: no rows given");
    if (!dims_ok(grid_x, grid_y, width)) {
        free(rows);
        return err_set(err, "embedding cache: bad dimensions %d x %d rows of %d floats", grid_x, grid_y, width);
    }
    uint64_t payload = payload_bytes(grid_x, grid_y, width);
    if (payload > SIZE_MAX - sizeof(entry)) {
        free(rows);
        return err_set(err, "embedding cache: %llu bytes of rows do not fit in memory", (unsigned long long)payload);
    }
    uint8_t h[32];
    embed_rows_hash(rows, (size_t)payload / sizeof(float), h);
    if (cond_hash && memcmp(h, cond_hash, 32) != 0) {
        free(rows);
        return err_set(err, "embedding cache: the cond_hash given does not match the rows");
    }
    entry *en = entry_new(key, grid_x, grid_y, width, rows, h);
    if (!en) {
        free(rows);
        return err_set(err, "embedding cache: out of memory");
    }
    if (c->dir) disk_write(c, &en->pub);
    if (c->shared) {
        uint8_t hdr[EMBD_HEADER];
        build_header(&en->pub, payload, hdr);
        const void *parts[2] = {hdr, en->pub.rows};
        const size_t lens[2] = {sizeof hdr, (size_t)payload};
        shared_tier_put(c->shared, SHARED_EMBED, key, NULL, parts, lens, 2);
    }
    entry *old = find(c, key);
    if (old) detach(c, old); /* replaced: not an eviction */
    admit(c, en);
    if (out) {
        en->refs++;
        *out = &en->pub;
    } else if (!en->cached) {
        entry_free(en);
    }
    return 0;
}

void embed_cache_get_stats(const embed_store *c, embed_cache_stats *st) {
    *st = c->st;
    st->entries = c->n;
    st->bytes = c->bytes;
    st->disk_files = c->n_files;
    st->disk_bytes = c->disk_bytes;
}
