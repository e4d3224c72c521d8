/* The image-embedding cache (src/state/embed_cache): LRU order and bounds,
 * references that outlive eviction, the disabled cache, and the disk copy:
 * a round trip across a restart, and every kind of bad file refused,
 * removed and counted, never used; the modes of the folder and its files;
 * the temporary files of dead writes removed by their lock, not their pid;
 * the free-space floor and a full disk (simulated), where nothing is
 * removed for nothing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/cache_dir.h"
#include "base/fs_space.h"
#include "base/sha256.h"
#include "state/embed_cache.h"
#include "test.h"

#define HEADER 168

static char g_dir[64];

static void key_of(int i, uint8_t key[32]) {
    for (int j = 0; j < 32; j++) key[j] = (uint8_t)(i * 31 + j);
}

static size_t n_floats(int32_t gx, int32_t gy, int32_t w) { return (size_t)gx * (size_t)gy * (size_t)w; }

static float value(int seed, size_t i) { return (float)seed + (float)i * 0.25f; }

static float *rows_of(int32_t gx, int32_t gy, int32_t w, int seed) {
    size_t n = n_floats(gx, gy, w);
    float *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) r[i] = value(seed, i);
    return r;
}

/* Whether en holds the rows rows_of(..., seed) made. */
static int rows_are(const embed_entry *en, int seed) {
    size_t n = n_floats(en->grid_x, en->grid_y, en->width);
    for (size_t i = 0; i < n; i++)
        if (en->rows[i] != value(seed, i)) return 0;
    uint8_t h[32];
    embed_rows_hash(en->rows, n, h);
    return memcmp(h, en->cond_hash, 32) == 0;
}

/* Puts key i with a 2 x 2 grid of 8-float rows made from seed. */
static int put_i(embed_store *c, int i, int seed, const embed_entry **out) {
    uint8_t key[32];
    key_of(i, key);
    ph_err e = {0};
    int rc = embed_cache_put(c, key, 2, 2, 8, rows_of(2, 2, 8, seed), NULL, out, &e);
    if (rc) fprintf(stderr, "put %d: %s\n", i, e.msg);
    return rc;
}

/* get and release at once: whether key i is there. */
static int has(embed_store *c, int i) {
    uint8_t key[32];
    key_of(i, key);
    const embed_entry *en = embed_cache_get(c, key);
    embed_cache_release(c, en);
    return en != NULL;
}

static embed_cache_stats stats(const embed_store *c) {
    embed_cache_stats st;
    embed_cache_get_stats(c, &st);
    return st;
}

static void file_of(int i, char *path, size_t cap) {
    uint8_t key[32];
    char hex[65];
    key_of(i, key);
    hex_encode(key, 32, hex);
    snprintf(path, cap, "%s/%s.embd", g_dir, hex);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void clear_dir(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
        unlink(p);
    }
    closedir(d);
}

static int count_files(void) {
    DIR *d = opendir(g_dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Rewrites bytes [off, off + n) of path. */
static void patch(const char *path, long off, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, off, SEEK_SET);
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static void read_bytes(const char *path, long off, void *bytes, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, off, SEEK_SET);
    if (fread(bytes, 1, n, f) != n) memset(bytes, 0, n);
    fclose(f);
}

/* Recomputes the header checksum after a patch, so only the later checks
 * can catch what was changed. */
static void reseal_header(const char *path) {
    uint8_t h[HEADER];
    read_bytes(path, 0, h, sizeof h);
    sha256_digest(h, 136, h + 136);
    patch(path, 0, h, sizeof h);
}

static void test_lru(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(3, 1 << 20, NULL, &e);
    CHECK(c != NULL);
    for (int i = 1; i <= 3; i++) CHECK(put_i(c, i, i, NULL) == 0);
    CHECK(stats(c).entries == 3);
    CHECK(has(c, 1));                 /* 1 becomes the most recent: order 1, 3, 2 */
    CHECK(put_i(c, 4, 4, NULL) == 0); /* evicts 2, the least recent */
    CHECK(!has(c, 2));
    CHECK(has(c, 3)); /* order 3, 1, 4... then 3 most recent: 3, 4, 1 */
    CHECK(has(c, 4));
    CHECK(put_i(c, 5, 5, NULL) == 0); /* evicts 1 */
    CHECK(!has(c, 1));
    CHECK(has(c, 3) && has(c, 4) && has(c, 5));
    embed_cache_stats st = stats(c);
    CHECK(st.evictions == 2);
    CHECK(st.entries == 3);

    /* the rows come back as put */
    uint8_t key[32];
    key_of(4, key);
    const embed_entry *en = embed_cache_get(c, key);
    CHECK(en && en->grid_x == 2 && en->grid_y == 2 && en->width == 8 && memcmp(en->key, key, 32) == 0);
    CHECK(en && rows_are(en, 4));
    embed_cache_release(c, en);
    embed_cache_free(c);
}

static void test_bytes_bound(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(100, 1 << 20, NULL, &e);
    CHECK(put_i(c, 1, 1, NULL) == 0);
    uint64_t one = stats(c).bytes;
    CHECK(one >= n_floats(2, 2, 8) * sizeof(float));
    embed_cache_free(c);

    c = embed_cache_new(100, (size_t)(one * 2 + one / 2), NULL, &e); /* room for two */
    for (int i = 1; i <= 3; i++) CHECK(put_i(c, i, i, NULL) == 0);
    embed_cache_stats st = stats(c);
    CHECK(st.entries == 2 && st.bytes == 2 * one && st.evictions == 1);
    CHECK(!has(c, 1) && has(c, 2) && has(c, 3));

    /* one bigger entry pushes out both */
    uint8_t key[32];
    key_of(9, key);
    CHECK(embed_cache_put(c, key, 2, 4, 8, rows_of(2, 4, 8, 9), NULL, NULL, &e) == 0);
    st = stats(c);
    CHECK(st.entries == 1 && st.evictions == 3);
    CHECK(has(c, 9) && !has(c, 2) && !has(c, 3));
    embed_cache_free(c);
}

static void test_referenced_eviction(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(1, 1 << 20, NULL, &e);
    const embed_entry *held = NULL, *again = NULL;
    CHECK(put_i(c, 1, 11, &held) == 0 && held);
    uint8_t key[32];
    key_of(1, key);
    again = embed_cache_get(c, key); /* a second reference */
    CHECK(again == held);
    CHECK(put_i(c, 2, 12, NULL) == 0); /* evicts 1 while held twice */
    CHECK(stats(c).evictions == 1 && !has(c, 1));
    CHECK(held && rows_are(held, 11));
    embed_cache_release(c, again);
    CHECK(held && rows_are(held, 11)); /* still one reference */
    embed_cache_release(c, held);      /* freed here (valgrind/ASan see it) */

    /* replacing a key: the old entry lives on while held */
    CHECK(put_i(c, 3, 30, &held) == 0);
    CHECK(put_i(c, 3, 31, NULL) == 0);
    CHECK(stats(c).entries == 1 && stats(c).evictions == 2);
    key_of(3, key);
    const embed_entry *now = embed_cache_get(c, key);
    CHECK(now && now != held && rows_are(now, 31));
    CHECK(rows_are(held, 30));
    embed_cache_release(c, now);
    embed_cache_release(c, held);

    /* retain adds a reference */
    CHECK(put_i(c, 4, 40, &held) == 0);
    embed_cache_retain(c, held);
    embed_cache_release(c, held);
    CHECK(put_i(c, 5, 50, NULL) == 0); /* evicts 4, still held once */
    CHECK(rows_are(held, 40));
    embed_cache_release(c, held);

    /* an entry held when the cache is freed outlives it */
    CHECK(put_i(c, 6, 60, &held) == 0);
    embed_cache_free(c);
    CHECK(rows_are(held, 60));
    embed_cache_release(NULL, held);
}

static void test_oversize_and_disabled(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(10, 64, g_dir, &e); /* 64 bytes: every entry is too big */
    CHECK(c != NULL);
    CHECK(put_i(c, 1, 1, NULL) == 0);
    const embed_entry *en = NULL;
    CHECK(put_i(c, 2, 2, &en) == 0);
    CHECK(en && rows_are(en, 2));
    embed_cache_release(c, en);
    embed_cache_stats st = stats(c);
    CHECK(st.entries == 0 && st.bytes == 0 && st.evictions == 0 && st.disk_writes == 2);
    uint8_t key[32];
    key_of(2, key);
    en = embed_cache_get(c, key); /* not in memory, but on disk */
    CHECK(en && rows_are(en, 2));
    embed_cache_release(c, en);
    st = stats(c);
    CHECK(st.disk_hits == 1 && st.hits == 1 && st.entries == 0);
    embed_cache_free(c);
    clear_dir();

    /* the memory cache off: nothing kept, puts still hand back entries */
    c = embed_cache_new(0, 1 << 20, NULL, &e);
    CHECK(put_i(c, 1, 1, &en) == 0);
    CHECK(en && rows_are(en, 1));
    CHECK(!has(c, 1));
    embed_cache_release(c, en);
    st = stats(c);
    CHECK(st.entries == 0 && st.hits == 0 && st.misses == 1);
    embed_cache_free(c);

    /* off, with a folder: gets are served from the disk only */
    c = embed_cache_new(-1, 1 << 20, g_dir, &e);
    CHECK(put_i(c, 1, 5, NULL) == 0);
    key_of(1, key);
    en = embed_cache_get(c, key);
    CHECK(en && rows_are(en, 5));
    embed_cache_release(c, en);
    st = stats(c);
    CHECK(st.disk_hits == 1 && st.entries == 0);
    embed_cache_free(c);
    clear_dir();
}

static void test_bad_put(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(4, 1 << 20, NULL, &e);
    uint8_t key[32], wrong[32] = {0};
    key_of(1, key);
    const embed_entry *en = (const embed_entry *)1;
    /* the rows are freed on failure too (valgrind would see a leak) */
    CHECK(embed_cache_put(c, key, 0, 2, 8, rows_of(1, 2, 8, 0), NULL, &en, &e) == -1 && en == NULL);
    CHECK(strstr(e.msg, "dimensions") != NULL);
    CHECK(embed_cache_put(c, key, 2, 2, 65537, malloc(16), NULL, NULL, &e) == -1);
    CHECK(embed_cache_put(c, key, 4097, 1, 1, malloc(16), NULL, NULL, &e) == -1);
    CHECK(embed_cache_put(c, key, 2, 2, 8, rows_of(2, 2, 8, 0), wrong, NULL, &e) == -1);
    CHECK(strstr(e.msg, "cond_hash") != NULL);
    CHECK(embed_cache_put(c, key, 2, 2, 8, NULL, NULL, NULL, &e) == -1);
    /* the right cond_hash is accepted */
    float *rows = rows_of(2, 2, 8, 3);
    uint8_t h[32];
    embed_rows_hash(rows, n_floats(2, 2, 8), h);
    CHECK(embed_cache_put(c, key, 2, 2, 8, rows, h, NULL, &e) == 0);
    CHECK(stats(c).entries == 1);
    embed_cache_free(c);
}

static void test_disk_round_trip(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(4, 1 << 20, g_dir, &e);
    uint8_t key[32];
    key_of(1, key);
    CHECK(embed_cache_put(c, key, 3, 5, 7, rows_of(3, 5, 7, 42), NULL, NULL, &e) == 0);
    CHECK(stats(c).disk_writes == 1);
    char path[512];
    file_of(1, path, sizeof path);
    CHECK(file_size(path) == HEADER + 3 * 5 * 7 * 4);
    CHECK(count_files() == 1); /* no temporary file left behind */
    embed_cache_free(c);

    /* a restart: a fresh cache on the same folder */
    c = embed_cache_new(4, 1 << 20, g_dir, &e);
    const embed_entry *en = embed_cache_get(c, key);
    CHECK(en && en->grid_x == 3 && en->grid_y == 5 && en->width == 7 && memcmp(en->key, key, 32) == 0);
    CHECK(en && rows_are(en, 42));
    embed_cache_release(c, en);
    embed_cache_stats st = stats(c);
    CHECK(st.disk_hits == 1 && st.hits == 1 && st.misses == 0 && st.entries == 1 && st.disk_rejects == 0);
    CHECK(has(c, 1)); /* now from memory */
    CHECK(stats(c).disk_hits == 1 && stats(c).hits == 2);
    CHECK(!has(c, 2)); /* no file: a plain miss */
    st = stats(c);
    CHECK(st.misses == 1 && st.disk_rejects == 0);
    embed_cache_free(c);
    clear_dir();
}

/* Writes key i's file through a cache, applies damage, and checks that a
 * fresh cache refuses the file, removes it and counts it. */
typedef void (*damage_fn)(const char *path);

static void expect_rejected(const char *what, damage_fn damage, int lookup_key) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(4, 1 << 20, g_dir, &e);
    CHECK(put_i(c, 1, 7, NULL) == 0);
    embed_cache_free(c);
    char path[512];
    file_of(lookup_key, path, sizeof path);
    if (lookup_key != 1) {
        char from[512];
        file_of(1, from, sizeof from);
        CHECK(rename(from, path) == 0);
    }
    if (damage) damage(path);
    c = embed_cache_new(4, 1 << 20, g_dir, &e);
    CHECKF(!has(c, lookup_key), "%s: the bad file was used", what);
    embed_cache_stats st = stats(c);
    CHECKF(st.disk_rejects == 1 && st.misses == 1 && st.hits == 0 && st.entries == 0, "%s: rejects %llu misses %llu",
           what, (unsigned long long)st.disk_rejects, (unsigned long long)st.misses);
    CHECKF(!exists(path), "%s: the bad file was not removed", what);
    CHECK(!has(c, lookup_key)); /* gone: a plain miss now */
    CHECK(stats(c).disk_rejects == 1);
    embed_cache_free(c);
    clear_dir();
}

static void truncate_payload(const char *path) { CHECK(truncate(path, file_size(path) - 4) == 0); }
static void truncate_header(const char *path) { CHECK(truncate(path, 100) == 0); }
static void truncate_empty(const char *path) { CHECK(truncate(path, 0) == 0); }
static void append_byte(const char *path) {
    FILE *f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
}
static void flip_payload(const char *path) {
    uint8_t b;
    long off = file_size(path) - 3;
    read_bytes(path, off, &b, 1);
    b ^= 0x10;
    patch(path, off, &b, 1);
}
static void bad_magic(const char *path) { patch(path, 0, "PHEMBD02", 8); }
static void bad_version(const char *path) {
    patch(path, 8, "\x02\0\0\0", 4);
    reseal_header(path);
}
static void garbage_dims(const char *path) { patch(path, 48, "\x13\x37\xbe\xef\x01\x02\x03\x04", 8); }
static void resealed_dims(const char *path) { /* 3 x 2 instead of 2 x 2, header checksum right */
    patch(path, 48, "\x03\0\0\0\x02\0\0\0", 8);
    reseal_header(path);
}
static void resealed_huge_width(const char *path) {
    patch(path, 56, "\x01\0\x01\0", 4); /* 65537 */
    reseal_header(path);
}
static void resealed_payload_count(const char *path) {
    patch(path, 96, "\x84\0\0\0\0\0\0\0", 8); /* 132 instead of 128 */
    reseal_header(path);
}
static void resealed_reserved(const char *path) {
    patch(path, 12, "\x01", 1);
    reseal_header(path);
}
static void resealed_cond_hash(const char *path) { /* payload sum right, cond_hash not */
    uint8_t b;
    read_bytes(path, 64, &b, 1);
    b ^= 1;
    patch(path, 64, &b, 1);
    reseal_header(path);
}
static void resealed_payload(const char *path) { /* payload changed, its sum updated: cond_hash catches it */
    float v = 1234.5f;
    uint8_t sum[32];
    patch(path, HEADER, &v, sizeof v);
    float rows[32];
    read_bytes(path, HEADER, rows, sizeof rows);
    sha256_digest(rows, sizeof rows, sum);
    patch(path, 104, sum, 32);
    reseal_header(path);
}
static void all_garbage(const char *path) {
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < HEADER + 128; i++) fputc((i * 7919) & 0xff, f);
    fclose(f);
}

static void test_bad_files(void) {
    expect_rejected("truncated payload", truncate_payload, 1);
    expect_rejected("truncated header", truncate_header, 1);
    expect_rejected("empty file", truncate_empty, 1);
    expect_rejected("a byte too many", append_byte, 1);
    expect_rejected("flipped payload byte", flip_payload, 1);
    expect_rejected("wrong key (renamed file)", NULL, 2);
    expect_rejected("bad magic", bad_magic, 1);
    expect_rejected("version 2", bad_version, 1);
    expect_rejected("garbage dims", garbage_dims, 1);
    expect_rejected("other dims, resealed", resealed_dims, 1);
    expect_rejected("insane width, resealed", resealed_huge_width, 1);
    expect_rejected("payload count, resealed", resealed_payload_count, 1);
    expect_rejected("reserved word, resealed", resealed_reserved, 1);
    expect_rejected("cond_hash, resealed", resealed_cond_hash, 1);
    expect_rejected("payload and its sum changed", resealed_payload, 1);
    expect_rejected("all garbage", all_garbage, 1);

    /* a folder where a file should be is refused too */
    char path[512];
    file_of(3, path, sizeof path);
    CHECK(mkdir(path, 0700) == 0);
    ph_err e = {0};
    embed_store *c = embed_cache_new(4, 1 << 20, g_dir, &e);
    CHECK(!has(c, 3));
    CHECK(stats(c).disk_rejects == 1);
    embed_cache_free(c);
    rmdir(path);
}

static void test_stats(void) {
    ph_err e = {0};
    embed_store *c = embed_cache_new(2, 1 << 20, g_dir, &e);
    CHECK(put_i(c, 1, 1, NULL) == 0);
    CHECK(put_i(c, 2, 2, NULL) == 0);
    CHECK(put_i(c, 3, 3, NULL) == 0); /* evicts 1 from memory; its file stays */
    CHECK(has(c, 3));                 /* memory hit */
    CHECK(has(c, 1));                 /* disk hit, admitted: evicts 2 */
    CHECK(!has(c, 4));                /* miss */
    embed_cache_stats st = stats(c);
    CHECK(st.hits == 2 && st.disk_hits == 1 && st.misses == 1);
    CHECK(st.evictions == 2 && st.disk_writes == 3 && st.disk_rejects == 0);
    CHECK(st.entries == 2);
    embed_cache_free(c);
    clear_dir();

    /* a folder that cannot be made is an error */
    char bad[256];
    snprintf(bad, sizeof bad, "%s/file", g_dir);
    FILE *f = fopen(bad, "wb");
    fclose(f);
    snprintf(bad, sizeof bad, "%s/file/sub", g_dir);
    CHECK(embed_cache_new(2, 1 << 20, bad, &e) == NULL);
    CHECK(e.msg[0] != '\0');
    clear_dir();
}

/* The folder's space budget: least recently used files go first (a disk
 * hit renews a file, and the order survives a restart), an entry larger
 * than the budget is not written, writes cut short by a dead writer are
 * cleaned up, and files of other names are left alone. */
static void test_disk_budget(void) {
    const long one = HEADER + 2 * 2 * 8 * 4; /* a put_i file */
    char p1[512], p2[512], p3[512], p4[512], other[512], dead[600], alive[600], same_pid[600];
    file_of(1, p1, sizeof p1);
    file_of(2, p2, sizeof p2);
    file_of(3, p3, sizeof p3);
    file_of(4, p4, sizeof p4);
    snprintf(other, sizeof other, "%s/notes.txt", g_dir);
    FILE *f = fopen(other, "w");
    CHECK(f && fputs("not ours", f) >= 0 && fclose(f) == 0);
    ph_err e = {0};
    embed_store *c = embed_cache_new(0, 1 << 20, g_dir, &e); /* nothing in memory: every get reads a file */
    embed_cache_set_disk_budget(c, 3 * (uint64_t)one);
    for (int i = 1; i <= 3; i++) {
        CHECK(put_i(c, i, i, NULL) == 0);
        usleep(20000); /* file times are coarse */
    }
    CHECK(has(c, 1)); /* 1 is used again: 2 is now the least recent */
    usleep(20000);
    CHECK(put_i(c, 4, 4, NULL) == 0);
    embed_cache_stats st = stats(c);
    CHECKF(st.disk_evictions == 1 && st.disk_files == 3 && st.disk_bytes == 3 * (uint64_t)one,
           "budget of 3 files: evictions %llu, files %llu, bytes %llu", (unsigned long long)st.disk_evictions,
           (unsigned long long)st.disk_files, (unsigned long long)st.disk_bytes);
    CHECK(exists(p1) && !exists(p2) && exists(p3) && exists(p4) && exists(other));
    embed_cache_free(c);

    /* a restart with room for two: the order of use was kept in the files */
    c = embed_cache_new(0, 1 << 20, g_dir, &e);
    CHECK(stats(c).disk_files == 3);
    embed_cache_set_disk_budget(c, 2 * (uint64_t)one);
    CHECK(exists(p1) && !exists(p3) && exists(p4) && exists(other));
    CHECK(stats(c).disk_evictions == 1 && has(c, 1) && has(c, 4));
    /* an entry larger than the whole budget is not written */
    uint8_t key[32];
    key_of(5, key);
    CHECK(embed_cache_put(c, key, 4, 4, 8, rows_of(4, 4, 8, 5), NULL, NULL, &e) == 0);
    CHECK(stats(c).disk_writes == 0 && stats(c).disk_files == 2);
    embed_cache_free(c);

    /* temporary files: a dead writer's is removed, whatever process has
     * its pid now (a restarted container's server is pid 1 again); one
     * that a live writer holds the lock of is kept */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    snprintf(dead, sizeof dead, "%s.tmp.%ld.0", p2, (long)child);
    snprintf(same_pid, sizeof same_pid, "%s.tmp.%ld.1", p2, (long)getpid());
    snprintf(alive, sizeof alive, "%s.tmp.%ld.0", p3, (long)getpid());
    CHECK((f = fopen(dead, "w")) && fclose(f) == 0);
    CHECK((f = fopen(same_pid, "w")) && fclose(f) == 0);
    const int live_fd = open(alive, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(live_fd >= 0 && flock(live_fd, LOCK_EX) == 0);
    c = embed_cache_new(4, 1 << 20, g_dir, &e);
    CHECK(!exists(dead) && !exists(same_pid) && exists(alive) && exists(other) && stats(c).disk_files == 2);
    embed_cache_free(c);
    close(live_fd);
    /* the temporary files of the cache's writes (base/cache_dir) hold that
     * lock while they are open */
    char *tmp = NULL;
    const int fd = cache_dir_tmp_create(g_dir, "x.embd.tmp.", "", &tmp, &e);
    const char *slash = tmp ? strrchr(tmp, '/') : NULL;
    DIR *d = opendir(g_dir);
    CHECK(fd >= 0 && slash && d && !cache_dir_tmp_stale(dirfd(d), slash + 1));
    if (fd >= 0) close(fd);
    CHECK(slash && d && cache_dir_tmp_stale(dirfd(d), slash + 1));
    if (d) closedir(d);
    if (tmp) unlink(tmp);
    free(tmp);
    clear_dir();
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

/* Folders the cache creates are 0700, its files 0600 (whatever the umask
 * lets through); a folder that exists keeps its mode. */
static void test_modes(void) {
    char top[128], dir[160], mine[160], p[512];
    snprintf(top, sizeof top, "%s/new", g_dir);
    snprintf(dir, sizeof dir, "%s/new/embeddings", g_dir);
    ph_err e = {0};
    embed_store *c = embed_cache_new(4, 1 << 20, dir, &e);
    CHECK(c != NULL);
    CHECKF(mode_of(top) == 0700 && mode_of(dir) == 0700, "created folders: %o %o", mode_of(top), mode_of(dir));
    uint8_t key[32];
    key_of(1, key);
    CHECK(embed_cache_put(c, key, 2, 2, 8, rows_of(2, 2, 8, 1), NULL, NULL, &e) == 0);
    char hex[65];
    hex_encode(key, 32, hex);
    snprintf(p, sizeof p, "%s/%s.embd", dir, hex);
    CHECKF(mode_of(p) == 0600, "an entry file: %o", mode_of(p));
    embed_cache_free(c);
    CHECK(unlink(p) == 0 && rmdir(dir) == 0 && rmdir(top) == 0);

    /* the user's own folder keeps its mode; the files in it are 0600 */
    snprintf(mine, sizeof mine, "%s/mine", g_dir);
    CHECK(mkdir(mine, 0755) == 0 && chmod(mine, 0755) == 0);
    c = embed_cache_new(4, 1 << 20, mine, &e);
    CHECK(c && embed_cache_put(c, key, 2, 2, 8, rows_of(2, 2, 8, 1), NULL, NULL, &e) == 0);
    snprintf(p, sizeof p, "%s/%s.embd", mine, hex);
    CHECKF(mode_of(mine) == 0755 && mode_of(p) == 0600, "folder %o, file %o", mode_of(mine), mode_of(p));
    embed_cache_free(c);
    CHECK(unlink(p) == 0 && rmdir(mine) == 0);

    /* base/atomic_file itself: temporary and final files 0600, folders 0700 */
    snprintf(top, sizeof top, "%s/x/y", g_dir);
    CHECK(mkdir_p(top, &e) == 0 && mode_of(top) == 0700);
    snprintf(p, sizeof p, "%s/f", top);
    const void *parts[1] = {"abc"};
    const size_t lens[1] = {3};
    CHECK(file_write_atomic(p, parts, lens, 1, &e) == 0 && mode_of(p) == 0600);
    CHECK(unlink(p) == 0 && rmdir(top) == 0);
    snprintf(top, sizeof top, "%s/x", g_dir);
    CHECK(mode_of(top) == 0700 && rmdir(top) == 0);
}

/* A simulated file system: g_fs_total bytes, of which g_fs_other are used
 * by others and the rest by the files in g_dir; writes past g_fs_quota
 * bytes in g_dir fail with ENOSPC even though statvfs says otherwise (a
 * quota, or space statvfs does not show). */
static uint64_t g_fs_total, g_fs_other, g_fs_quota = UINT64_MAX;
static int g_fs_calls, g_write_calls;

static uint64_t dir_bytes(void) {
    DIR *d = opendir(g_dir);
    uint64_t n = 0;
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
        long sz = file_size(p);
        if (sz > 0) n += (uint64_t)sz;
    }
    if (d) closedir(d);
    return n;
}

static int fake_space(const char *dir, uint64_t *avail, uint64_t *total) {
    (void)dir;
    g_fs_calls++;
    uint64_t used = g_fs_other + dir_bytes();
    *total = g_fs_total;
    *avail = used < g_fs_total ? g_fs_total - used : 0;
    return 0;
}

static int fake_write(const char *path, const void *const *parts, const size_t *lens, size_t n, ph_err *err) {
    g_write_calls++;
    uint64_t size = 0;
    for (size_t i = 0; i < n; i++) size += lens[i];
    if (dir_bytes() + size > g_fs_quota) {
        errno = ENOSPC;
        return err_set(err, "%s: write of the temporary file failed: %s", path, strerror(ENOSPC));
    }
    return file_write_atomic(path, parts, lens, n, err);
}

/* The free-space floor: the least recently used files make room for a new
 * one; on a disk that others filled, where they could not, none is removed
 * and the entry stays in memory only; a write that fails with ENOSPC makes
 * room and is tried once more, if the files can. */
static void test_disk_full(void) {
    const uint64_t one = HEADER + 2 * 2 * 8 * 4;
    char p[7][512];
    for (int i = 1; i <= 6; i++) file_of(i, p[i], sizeof p[i]);
    CHECK(fs_floor(1ull << 40) == (1ull << 40) / 20);              /* 5% of 1 TiB */
    CHECK(fs_floor(4ull << 30) == PH_FS_FLOOR_MIN);                /* 256 MiB of 4 GiB */
    CHECK(fs_floor(512ull << 20) == 128ull << 20);                 /* a quarter of a small one */
    g_fs_total = 1ull << 30;                                       /* floor: 256 MiB */
    g_fs_other = g_fs_total - PH_FS_FLOOR_MIN - 3 * one - one / 2; /* room for 3 files above the floor */
    fs_space_set_test_hook(fake_space);
    ph_err e = {0};
    embed_store *c = embed_cache_new(0, 1 << 20, g_dir, &e);
    embed_cache_set_write_hook(c, fake_write);
    for (int i = 1; i <= 3; i++) {
        CHECK(put_i(c, i, i, NULL) == 0);
        usleep(20000); /* file times are coarse */
    }
    CHECK(has(c, 1)); /* 2 is now the least recent */
    usleep(20000);
    const embed_entry *en = NULL;
    CHECK(put_i(c, 4, 4, &en) == 0 && en && rows_are(en, 4));
    embed_cache_release(c, en);
    embed_cache_stats st = stats(c);
    CHECKF(st.disk_writes == 4 && st.disk_evictions == 1 && st.disk_full == 0 && st.disk_files == 3,
           "writes %llu evictions %llu full %llu files %llu", (unsigned long long)st.disk_writes,
           (unsigned long long)st.disk_evictions, (unsigned long long)st.disk_full,
           (unsigned long long)st.disk_files);
    CHECK(exists(p[1]) && !exists(p[2]) && exists(p[3]) && exists(p[4]));
    CHECK(g_fs_calls > 0);

    /* others fill the disk so that removing every file of the cache would
     * not make room: none is removed, the entry works from memory */
    g_fs_other += 4 * one;
    CHECK(put_i(c, 5, 5, &en) == 0 && en && rows_are(en, 5));
    embed_cache_release(c, en);
    st = stats(c);
    CHECKF(st.disk_writes == 4 && st.disk_evictions == 1 && st.disk_full == 1 && st.disk_files == 3 &&
               count_files() == 3,
           "writes %llu evictions %llu full %llu files %llu", (unsigned long long)st.disk_writes,
           (unsigned long long)st.disk_evictions, (unsigned long long)st.disk_full,
           (unsigned long long)st.disk_files);
    CHECK(exists(p[1]) && exists(p[3]) && exists(p[4]) && !exists(p[5]));
    /* they free it again: writes resume, the least recently used (3) making
     * room */
    g_fs_other -= 4 * one;
    CHECK(put_i(c, 5, 5, NULL) == 0 && exists(p[5]) && !exists(p[3]) && stats(c).disk_writes == 5);
    /* an entry that would not fit even if every file went: nothing is
     * removed for it (the floor itself holds) */
    g_fs_other += one + one / 2; /* a file under the floor, 3 files of the cache; the entry needs 2.3 */
    uint8_t big[32];
    key_of(9, big);
    CHECK(embed_cache_put(c, big, 4, 4, 8, rows_of(4, 4, 8, 9), NULL, NULL, &e) == 0);
    st = stats(c);
    CHECK(st.disk_full == 2 && st.disk_writes == 5 && st.disk_evictions == 2 && st.disk_files == 3);
    CHECK(exists(p[1]) && exists(p[4]) && exists(p[5]));
    g_fs_other -= one + one / 2;
    embed_cache_free(c);

    /* opening a folder on a file system under its floor (with a budget set,
     * as the server does) removes least recently used files until it is
     * above it again */
    usleep(20000);
    c = embed_cache_new(0, 1 << 20, g_dir, &e);
    CHECK(put_i(c, 6, 6, NULL) == 0 && exists(p[6]) && !exists(p[1]) && count_files() == 3);
    embed_cache_free(c);
    g_fs_other += 2 * one; /* the floor is now a file and a half short: the older files (4, 5) go */
    c = embed_cache_new(0, 1 << 20, g_dir, &e);
    embed_cache_set_disk_budget(c, UINT64_MAX);
    CHECK(!exists(p[4]) && !exists(p[5]) && exists(p[6]) && stats(c).disk_evictions == 2);
    embed_cache_free(c);
    /* and one so far under it that every file would not make room keeps
     * them */
    g_fs_other += 2 * one;
    c = embed_cache_new(0, 1 << 20, g_dir, &e);
    embed_cache_set_disk_budget(c, UINT64_MAX);
    CHECK(exists(p[6]) && stats(c).disk_evictions == 0);
    embed_cache_free(c);
    clear_dir();

    /* ENOSPC though statvfs shows room: the least recently used file goes
     * and the write is tried again, once */
    g_fs_other = 0;
    g_fs_quota = 2 * one + one / 2;
    c = embed_cache_new(0, 1 << 20, g_dir, &e);
    embed_cache_set_write_hook(c, fake_write);
    CHECK(put_i(c, 1, 1, NULL) == 0);
    usleep(20000);
    CHECK(put_i(c, 2, 2, NULL) == 0);
    usleep(20000);
    g_write_calls = 0;
    CHECK(put_i(c, 3, 3, NULL) == 0);
    st = stats(c);
    CHECKF(g_write_calls == 2 && st.disk_writes == 3 && st.disk_evictions == 1 && st.disk_full == 0,
           "calls %d writes %llu evictions %llu", g_write_calls, (unsigned long long)st.disk_writes,
           (unsigned long long)st.disk_evictions);
    CHECK(!exists(p[1]) && exists(p[2]) && exists(p[3]) && has(c, 3) && has(c, 2));
    /* no room at all: one more try after a removal, then given up, counted */
    g_fs_quota = one / 2;
    g_write_calls = 0;
    CHECK(put_i(c, 4, 4, &en) == 0 && en && rows_are(en, 4));
    embed_cache_release(c, en);
    st = stats(c);
    CHECKF(g_write_calls == 2 && st.disk_full == 1 && !exists(p[4]), "calls %d full %llu", g_write_calls,
           (unsigned long long)st.disk_full);
    /* an entry larger than every file left: none is removed for it, it is
     * not tried again */
    CHECK(st.disk_files == 1 && st.disk_evictions == 2 && exists(p[2]));
    g_write_calls = 0;
    CHECK(embed_cache_put(c, big, 4, 4, 8, rows_of(4, 4, 8, 9), NULL, NULL, &e) == 0);
    st = stats(c);
    CHECKF(g_write_calls == 1 && st.disk_full == 2 && st.disk_evictions == 2 && st.disk_files == 1 && exists(p[2]),
           "calls %d full %llu evictions %llu", g_write_calls, (unsigned long long)st.disk_full,
           (unsigned long long)st.disk_evictions);
    embed_cache_free(c);
    g_fs_quota = UINT64_MAX;
    fs_space_set_test_hook(NULL);
    clear_dir();
}

int main(void) {
    umask(022); /* the usual one: the cache must not rely on a stricter umask */
    snprintf(g_dir, sizeof g_dir, "/tmp/ph_embed_cache_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_lru();
    test_bytes_bound();
    test_referenced_eviction();
    test_oversize_and_disabled();
    test_bad_put();
    test_disk_round_trip();
    test_bad_files();
    test_disk_budget();
    test_stats();
    test_modes();
    test_disk_full();
    clear_dir();
    CHECK(rmdir(g_dir) == 0);
    TEST_END();
}
