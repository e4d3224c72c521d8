/* Identity of big files (src/state/file_id): the id is the SHA-256 of the
 * bytes; the memo answers for an unchanged file and never for a changed
 * one; a garbled, missing or unwritable memo costs a re-hash, never an
 * error. Also the helpers under it (base/sha256, base/atomic_file). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/sha256.h"
#include "state/file_id.h"
#include "test.h"

static char g_dir[64];

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

/* Writes n pseudo-random bytes (from seed) to path; the same content goes
 * into *copy if copy is not NULL (malloc'd). */
static void write_file(const char *path, size_t n, unsigned seed, uint8_t **copy) {
    uint8_t *b = malloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b[i] = (uint8_t)x;
    }
    FILE *f = fopen(path, "wb"); /* in place: the inode stays */
    fwrite(b, 1, n, f);
    fclose(f);
    if (copy) *copy = b;
    else free(b);
}

static void set_mtime(const char *path, long sec, long nsec) {
    struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

static char *read_text(const char *path) {
    void *d;
    size_t n;
    ph_err e = {0};
    return file_read_all(path, 1 << 20, &d, &n, &e) == 0 ? d : NULL;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void test_helpers(void) {
    /* FIPS 180-2 test vector */
    uint8_t h[32];
    char hex[65];
    sha256_digest("abc", 3, h);
    hex_encode(h, 32, hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    sha256_ctx c;
    CHECK(sha256_init(&c) == 0);
    sha256_update(&c, "a", 1);
    sha256_update(&c, "", 0);
    sha256_update(&c, "bc", 2);
    uint8_t h2[32];
    CHECK(sha256_final(&c, h2) == 0 && memcmp(h, h2, 32) == 0);
    CHECK(sha256_init(&c) == 0);
    sha256_discard(&c);

    char p[256], q[256];
    ph_err e = {0};
    path_in(p, sizeof p, "a/b/c");
    CHECK(mkdir_p(p, &e) == 0);
    CHECK(mkdir_p(p, &e) == 0); /* exists: fine */
    path_in(p, sizeof p, "a/b/c/f");
    const void *parts[3] = {"hello ", NULL, "world"};
    const size_t lens[3] = {6, 0, 5};
    CHECK(file_write_atomic(p, parts, lens, 3, &e) == 0);
    void *d = NULL;
    size_t n = 0;
    CHECK(file_read_all(p, 11, &d, &n, &e) == 0 && n == 11 && memcmp(d, "hello world", 12) == 0);
    free(d);
    errno = 0;
    CHECK(file_read_all(p, 10, &d, &n, &e) == -1 && errno == EFBIG && d == NULL);
    CHECK(mkdir_p(p, &e) == -1); /* a file, not a folder */
    path_in(q, sizeof q, "a/b/c/f/g");
    CHECK(mkdir_p(q, &e) == -1);
    /* a failed write leaves the old file as it was, and no temporary */
    CHECK(file_write_atomic(q, parts, lens, 3, &e) == -1 && e.msg[0]);
    path_in(q, sizeof q, "a/b/c");
    CHECK(file_write_atomic(q, parts, lens, 3, &e) == -1); /* rename over a folder fails */
    DIR *dir = opendir(q);
    int entries = 0;
    for (struct dirent *de; dir && (de = readdir(dir));) entries += de->d_name[0] != '.';
    if (dir) closedir(dir);
    CHECK(entries == 1);
    errno = 0;
    path_in(q, sizeof q, "missing");
    CHECK(file_read_all(q, 100, &d, &n, &e) == -1 && errno == ENOENT);
    path_in(q, sizeof q, "a");
    CHECK(file_read_all(q, 100, &d, &n, &e) == -1); /* a folder */
    path_in(q, sizeof q, "empty");
    CHECK(file_write_atomic(q, NULL, NULL, 0, &e) == 0);
    CHECK(file_read_all(q, 0, &d, &n, &e) == 0 && n == 0 && ((char *)d)[0] == '\0');
    free(d);
    unlink(q);
    path_in(q, sizeof q, "a");
    remove_tree(q);
}

typedef struct hashed {
    int n;
    bool rising;
    uint64_t done, total;
} hashed;

static void on_hashed(void *ud, uint64_t done, uint64_t total) {
    hashed *h = ud;
    h->rising = h->n == 0 || (h->rising && done > h->done && total == h->total);
    h->n++;
    h->done = done;
    h->total = total;
}

static void test_memo(void) {
    char file[256], file2[256], memo[256], memo_file[256], many[70][96];
    path_in(file, sizeof file, "model.gguf");
    path_in(file2, sizeof file2, "other.gguf");
    path_in(memo, sizeof memo, "cache/deeper"); /* made on first use */
    path_in(memo_file, sizeof memo_file, "cache/deeper/file-ids");
    uint8_t *bytes;
    const size_t size = (5u << 20) + 123; /* more than one read chunk */
    write_file(file, size, 1, &bytes);
    set_mtime(file, 1500000000, 123456789);
    uint8_t want[32], id[32], id2[32];
    sha256_digest(bytes, size, want);
    free(bytes);
    write_file(file2, 4096, 3, &bytes);
    set_mtime(file2, 1400000000, 0);
    sha256_digest(bytes, 4096, id2);
    free(bytes);
    for (int i = 0; i < 70; i++) {
        snprintf(many[i], sizeof many[i], "%s/many-%d", g_dir, i);
        write_file(many[i], 16, (unsigned)i + 10, NULL);
    }
    /* Files changed (ctime) in the last 2 s are not remembered: let these
     * age past that. */
    struct timespec nap = {2, 100000000};
    nanosleep(&nap, NULL);

    ph_err e = {0};
    bool memo_hit = true;
    /* hashed: the progress reports rise to the file's size, read by read */
    hashed h = {0};
    const file_id_progress prog = {on_hashed, &h};
    CHECK(file_id_of(file, memo, id, &memo_hit, &prog, &e) == 0);
    CHECK(memcmp(id, want, 32) == 0 && !memo_hit);
    CHECKF(h.n == 2 && h.rising && h.done == size && h.total == size, "%d reports, last %llu of %llu", h.n,
           (unsigned long long)h.done, (unsigned long long)h.total);
    CHECK(count_lines(memo_file) == 1);
    memset(id, 0, 32);
    memset(&h, 0, sizeof h);
    CHECK(file_id_of(file, memo, id, &memo_hit, &prog, &e) == 0);
    CHECK(memcmp(id, want, 32) == 0 && memo_hit);
    CHECK(h.n == 0); /* from the memo: nothing read */
    CHECK(file_id_of(file, memo, id, NULL, NULL, &e) == 0 && memcmp(id, want, 32) == 0); /* from_memo may be NULL */

    /* a second file: remembered first, the first one kept */
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, id2, 32) == 0);
    CHECK(count_lines(memo_file) == 2);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit && memcmp(id, want, 32) == 0);
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit && memcmp(id, id2, 32) == 0);

    /* a garbled memo: its bad lines are ignored, the good one is used, and
     * the rewrite keeps only good lines */
    char *text = read_text(memo_file);
    char *second = text ? strchr(text, '\n') : NULL; /* the line of file (file2 is first) */
    CHECK(second != NULL);
    if (second) {
        char garbled[4096];
        snprintf(garbled, sizeof garbled,
                 "hello\n1 2 3\n\n-1 2 3 4 5 6 7 %064d\n1 2 3 4 5 6 7 %063d\n1 2 3 4 1000000000 6 7 %064d\n"
                 "99999999999999999999 2 3 4 5 6 7 %064d\n1 2 3 4 5 6 7 %064dX\n1  2 3 4 5 6 7 %064d\n"
                 "1 2 3 4 5 6 7 %064X\n\xff\xfe garbage\n%s7 7 7 7 7 7 7 0000",
                 0, 0, 0, 0, 0, 0, 0xABCDEFu, second + 1);
        FILE *f = fopen(memo_file, "wb");
        fputs(garbled, f);
        fclose(f);
    }
    free(text);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit && memcmp(id, want, 32) == 0);
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, id2, 32) == 0);
    CHECK(count_lines(memo_file) == 2);
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);

    /* a memo that is pure garbage, or a folder */
    FILE *f = fopen(memo_file, "wb");
    for (int i = 0; i < 3000; i++) fputc(i * 37 & 0xff, f);
    fclose(f);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, want, 32) == 0);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);
    unlink(memo_file);
    CHECK(mkdir(memo_file, 0700) == 0); /* cannot be read, nor replaced (even by root) */
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, want, 32) == 0);
    rmdir(memo_file);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit);
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit);

    /* another mtime (only the nanoseconds): hashed again; the change is
     * fresh, so it is not remembered yet */
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);
    set_mtime(file, 1500000000, 123456790);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0);
    CHECK(memcmp(id, want, 32) == 0 && !memo_hit);
    CHECK(file_id_of(file, memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit);

    /* another size, the mtime put back: hashed again, the new id */
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);
    write_file(file2, 1000, 2, &bytes);
    sha256_digest(bytes, 1000, id2);
    free(bytes);
    set_mtime(file2, 1400000000, 0);
    CHECK(file_id_of(file2, memo, id, &memo_hit, NULL, &e) == 0);
    CHECK(memcmp(id, id2, 32) == 0 && !memo_hit);

    /* at most 64 lines: the oldest are dropped */
    for (int i = 0; i < 70; i++) CHECK(file_id_of(many[i], memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit);
    CHECK(count_lines(memo_file) == PH_FILE_ID_MEMO_MAX);
    CHECK(file_id_of(many[69], memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);
    CHECK(file_id_of(many[6], memo, id, &memo_hit, NULL, &e) == 0 && memo_hit);
    CHECK(file_id_of(many[5], memo, id, &memo_hit, NULL, &e) == 0 && !memo_hit); /* dropped */
    for (int i = 0; i < 70; i++) unlink(many[i]);

    /* NULL memo: always hashed */
    CHECK(file_id_of(file, NULL, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, want, 32) == 0);
    CHECK(file_id_of(file, "", id, &memo_hit, NULL, &e) == 0 && !memo_hit);

    /* a memo folder that cannot exist (under a file): still the id */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/sub", file);
    CHECK(file_id_of(file, bad, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, want, 32) == 0);
    /* ...or a read-only one (root writes anyway: for root, the memo that is
     * a folder above is the unwritable case) */
    if (geteuid() != 0) {
        char ro[256];
        path_in(ro, sizeof ro, "readonly");
        CHECK(mkdir(ro, 0500) == 0);
        CHECK(file_id_of(file, ro, id, &memo_hit, NULL, &e) == 0 && !memo_hit && memcmp(id, want, 32) == 0);
        chmod(ro, 0700);
        remove_tree(ro);
    }

    /* a file that is not there, or not a file */
    char missing[256];
    path_in(missing, sizeof missing, "missing.gguf");
    e.msg[0] = '\0';
    CHECK(file_id_of(missing, memo, id, &memo_hit, NULL, &e) == -1 && strstr(e.msg, "missing.gguf"));
    CHECK(file_id_of(g_dir, memo, id, &memo_hit, NULL, &e) == -1);

    /* an empty file */
    char empty[256];
    path_in(empty, sizeof empty, "empty.gguf");
    write_file(empty, 0, 0, NULL);
    sha256_digest("", 0, want);
    CHECK(file_id_of(empty, NULL, id, NULL, NULL, &e) == 0 && memcmp(id, want, 32) == 0);
    unlink(empty);
    unlink(file);
    unlink(file2);
    path_in(file, sizeof file, "cache");
    remove_tree(file);
}

static void test_default_dir(void) {
    char buf[256];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *save_xdg = xdg ? strdup(xdg) : NULL, *save_home = home ? strdup(home) : NULL;
    setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
    setenv("HOME", "/home/u", 1);
    const char *d = default_cache_dir(buf, sizeof buf);
    CHECK(d == buf && strcmp(d, "/xdg/cache/pinhole") == 0);
    CHECK(default_cache_dir(buf, 10) == NULL); /* does not fit */
    setenv("XDG_CACHE_HOME", "relative", 1);   /* ignored, as the XDG spec says */
    d = default_cache_dir(buf, sizeof buf);
    CHECK(d && strcmp(d, "/home/u/.cache/pinhole") == 0);
    unsetenv("XDG_CACHE_HOME");
    d = default_cache_dir(buf, sizeof buf);
    CHECK(d && strcmp(d, "/home/u/.cache/pinhole") == 0);
    unsetenv("HOME");
    CHECK(default_cache_dir(buf, sizeof buf) == NULL);
    if (save_xdg) setenv("XDG_CACHE_HOME", save_xdg, 1);
    if (save_home) setenv("HOME", save_home, 1);
    free(save_xdg);
    free(save_home);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/ph_file_id_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_helpers();
    test_memo();
    test_default_dir();
    DIR *d = opendir(g_dir);
    int left = 0;
    for (struct dirent *de; d && (de = readdir(d));) left += de->d_name[0] != '.';
    if (d) closedir(d);
    CHECKF(left == 0, "%d files left in %s", left, g_dir);
    CHECK(rmdir(g_dir) == 0);
    TEST_END();
}
