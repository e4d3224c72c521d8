/* The disk tier (src/state/disk_tier.c) on hand-made sequences and KV
 * cells (no model): a checkpoint round trips, pictures and provenance
 * included, and serves longer and shorter requests; another model, format
 * or picture does not match; damaged, truncated, renamed and vanished files
 * are refused, removed and counted, never loaded; open recovers from dead
 * writers and lost index rows, and a damaged index is kept aside and built
 * again from the files; a kill -9 at each step of a write leaves
 * complete files only; the byte budget evicts the least recently used,
 * never a file open for a load; a held prefix is not written twice and a
 * longer checkpoint replaces its prefix, queued or stored; a temporary
 * file left under this pid blocks no write; release_rows lets the caller
 * change its cells; two processes share a folder; verify and prune; the
 * folder is 0700 and every file in it 0600; the free-space floor evicts
 * the least recently used and skips a checkpoint there is no room for,
 * removing nothing when removing cannot make room (after ENOSPC too);
 * isolation domains never find, hold or drop each other's files; a
 * checkpoint with recurrent states (version 3) round trips, is found,
 * held and replaced only at its state rows, is refused when its states are
 * damaged and survives a kill at each step; a file of a newer version is
 * left alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fs_space.h"
#include "base/log.h"
#include "state/disk_tier.h"
#include "state/kv_block.h"
#include "test.h"

#define NL    2    /* layers */
#define RB    64   /* bytes of one K (or V) cell */
#define NCTX  1024 /* cells per layer */
#define MODEL 7    /* model_id: 32 bytes of this */
#define FMT   "test-f16-l2-h2x16"
#define BIG   (1ull << 30)

static char g_root[64];

static void die(const char *what) {
    fprintf(stderr, "test_disk_tier: %s\n", what);
    exit(2);
}

/* ---- KV cells ------------------------------------------------------------ */

static void kv_make(kv_cache *c) {
    if (kv_cache_init_cells(c, NL, RB, NCTX)) die("out of memory");
}

static void kv_drop(kv_cache *c) { kv_cache_free(c); /* with its recurrent state and snapshots */ }

/* Cells of conversation seed: every byte a function of (seed, layer, K/V, row, byte). */
static void kv_fill(kv_cache *c, uint32_t seed, int32_t n) {
    for (int l = 0; l < NL; l++)
        for (int kvi = 0; kvi < 2; kvi++)
            for (size_t i = 0; i < (size_t)n * RB; i++) {
                uint32_t x = seed * 2654435761u ^ (uint32_t)(l * 2 + kvi + 1) * 40503u ^ (uint32_t)i * 2246822519u;
                x ^= x >> 15;
                x *= 3266489917u;
                x ^= x >> 13;
                kv_cache_cells(c, (int32_t)(i / RB), l, kvi)[i % RB] = (uint8_t)x;
            }
    c->rows.n_rows = n;
}

static bool kv_equal(const kv_cache *a, const kv_cache *b, int32_t n) {
    for (int l = 0; l < NL; l++)
        for (int kvi = 0; kvi < 2; kvi++)
            for (int32_t r = 0; r < n; r++)
                if (memcmp(kv_cache_cells(a, r, l, kvi), kv_cache_cells(b, r, l, kvi), RB)) return false;
    return true;
}

/* The block layout the tier reads and writes the cells in, and its RAM
 * copies (state/kv_cache.h): a copy of n rows is ceil(n / 64) blocks and
 * loads back any prefix of them; a trimmed mapping keeps its first rows and
 * gives back the pages of the blocks past them. */
static void kv_copies(void) {
    kv_cache a, b;
    kv_make(&a);
    kv_make(&b);
    kv_fill(&a, 11, 300); /* 4 whole blocks and 44 rows */
    const size_t block = (size_t)KV_BLOCK_ROWS * 2 * NL * RB;
    CHECK(kv_cache_bytes(&a, 0) == 0 && kv_cache_bytes(&a, 64) == block && kv_cache_bytes(&a, 200) == 4 * block);
    uint8_t *copy = malloc(kv_cache_bytes(&a, 200));
    if (!copy) die("out of memory");
    kv_cache_save(&a, 200, copy);
    kv_cache_load(&b, copy, 150);
    CHECK(b.rows.n_rows == 150 && kv_equal(&a, &b, 150));
    kv_cache_load(&b, a.map, 300); /* the mapping is a copy of all its rows */
    CHECK(b.rows.n_rows == 300 && kv_equal(&a, &b, 300));
    kv_cache_trim_map(&a, a.map, 100);
    bool zero = true; /* blocks 2 and up: whole pages, given back */
    for (size_t i = 2 * block; i < 5 * block; i++) zero &= ((const uint8_t *)a.map)[i] == 0;
    CHECK(kv_equal(&a, &b, 100) && zero);
    free(copy);
    kv_drop(&a);
    kv_drop(&b);
}

/* ---- sequences ------------------------------------------------------------- */

static int32_t tok_id(uint32_t conv, int32_t row) {
    return (int32_t)((conv * 7919u + (uint32_t)row * 31u) % 150000u);
}

static void seq_begin(seq_state *s, uint8_t model, const char *fmt) {
    seq_clear(s);
    memset(s->model_id, model, 32);
    snprintf(s->format, sizeof s->format, "%s", fmt);
}

/* n text rows of conversation conv (a token is a function of its row). */
static void add_text(seq_state *s, uint32_t conv, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (seq_push_token(s, tok_id(conv, s->n_rows), seq_pos_at(s, s->n_rows), NULL)) die("sequence full");
}

/* A gx x gy picture whose embed_key is 32 bytes of key (cond: its cond_hash is known). */
static void add_pic(seq_state *s, uint8_t key, int32_t gx, int32_t gy, bool cond) {
    seq_span sp = {.n_tokens = gx * gy, .grid_x = gx, .grid_y = gy, .n_pos = gx > gy ? gx : gy, .has_cond = cond};
    memset(sp.image_id, key ^ 0x55, 32);
    memset(sp.embed_key, key, 32);
    if (cond) memset(sp.cond_hash, key ^ 0xaa, 32);
    if (seq_push_span(s, &sp, seq_pos_at(s, s->n_rows), NULL)) die("sequence full");
}

/* The usual conversation: 70 tokens, an 8x8 picture (rows 70..133), 100
 * tokens, a 4x4 picture (rows 234..249), 50 tokens: 300 rows. */
#define CONV_ROWS  300
#define PIC1_START 70
static void conv_seq(seq_state *s, uint32_t conv, bool cond) {
    seq_begin(s, MODEL, FMT);
    add_text(s, conv, PIC1_START);
    add_pic(s, (uint8_t)(conv * 2 + 1), 8, 8, cond);
    add_text(s, conv, 100);
    add_pic(s, (uint8_t)(conv * 2 + 2), 4, 4, cond);
    add_text(s, conv, 50);
}

/* The size of a checkpoint file (the header's format). */
static uint64_t file_bytes(int32_t n_rows, int32_t n_pictures) {
    return 256 + (uint64_t)n_rows * 8 + (uint64_t)n_pictures * (5 * 4 + 3 * 32) + 2ull * NL * (uint64_t)n_rows * RB;
}

/* Provenance equal for the first n rows: tokens, positions, pictures with
 * their image_id, embed_key and cond_hash; model_id, format tag and domain. */
static bool same_prov(const seq_state *a, const seq_state *b, int32_t n) {
    if (a->n_rows < n || b->n_rows < n || memcmp(a->model_id, b->model_id, 32) || strcmp(a->format, b->format) ||
        memcmp(a->domain, b->domain, 32))
        return false;
    for (int32_t r = 0; r < n; r++)
        if (a->tok[r] != b->tok[r] || a->pos_after[r] != b->pos_after[r]) return false;
    int32_t na = 0, nb = 0;
    while (na < a->n_spans && a->spans[na].start < n) na++;
    while (nb < b->n_spans && b->spans[nb].start < n) nb++;
    if (na != nb) return false;
    for (int32_t i = 0; i < na; i++) {
        const seq_span *x = &a->spans[i], *y = &b->spans[i];
        if (x->start != y->start || x->n_tokens != y->n_tokens || x->grid_x != y->grid_x || x->grid_y != y->grid_y ||
            x->n_pos != y->n_pos || x->has_cond != y->has_cond || memcmp(x->image_id, y->image_id, 32) ||
            memcmp(x->embed_key, y->embed_key, 32) || memcmp(x->cond_hash, y->cond_hash, 32))
            return false;
    }
    return true;
}

/* ---- the tier -------------------------------------------------------------- */

static disk_tier *open_tier(const char *dir, uint64_t budget) {
    ph_err e = {0};
    disk_tier *t = disk_tier_open(dir, budget, &e);
    if (!t) {
        fprintf(stderr, "disk_tier_open(%s): %s\n", dir, e.msg);
        die("cannot open the tier");
    }
    return t;
}

static disk_tier_stats stats(disk_tier *t) {
    disk_tier_stats st;
    disk_tier_get_stats(t, &st);
    return st;
}

/* Saves and waits until it is written. */
static bool save_flush(disk_tier *t, const seq_state *s, int32_t n, const kv_cache *kv) {
    bool ok = disk_tier_save(t, s, n, kv, 0);
    disk_tier_flush(t);
    return ok;
}

typedef struct listing {
    int n;
    disk_entry v[32];
} listing;

static int on_entry(void *ud, const disk_entry *f) {
    listing *l = ud;
    if (l->n < 32) l->v[l->n] = *f;
    l->n++;
    return 0;
}

static listing list(disk_tier *t) {
    listing l = {0};
    ph_err e = {0};
    if (disk_tier_list(t, on_entry, &l, &e)) die("disk_tier_list failed");
    return l;
}

/* Files in dir: checkpoints (*.phkv not tmp.*) and temporary ones (tmp.*). */
static int count_files(const char *dir, int *n_tmp) {
    DIR *d = opendir(dir);
    int n = 0, nt = 0;
    if (!d) return -1;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (!strncmp(de->d_name, "tmp.", 4)) nt++;
        else if (len > 5 && !strcmp(de->d_name + len - 5, ".phkv")) n++;
    }
    closedir(d);
    if (n_tmp) *n_tmp = nt;
    return n;
}

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static bool exists(const char *dir, const char *name) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    return access(p, F_OK) == 0;
}

/* Finds want in t: expect rows of prefix (0: nothing found); when found,
 * its provenance must be saved's (all of the file's rows) and its cells,
 * loaded into a scratch cache, saved_kv's first prefix cells. */
static void restores_at(int line, disk_tier *t, const seq_state *want, const seq_state *saved,
                        const kv_cache *saved_kv, int32_t prefix) {
    disk_match m;
    int found = disk_tier_find(t, want, 0, &m);
    if (prefix == 0) {
        CHECKF(found == 0, "line %d: found %s (%d rows)", line, m.name, m.prefix);
        if (found) disk_match_free(t, &m);
        return;
    }
    CHECKF(found == 1 && m.prefix == prefix, "line %d: found %d, prefix %d, want %d", line, found, m.prefix, prefix);
    if (!found) return;
    CHECKF(m.seq.n_rows == saved->n_rows && same_prov(&m.seq, saved, saved->n_rows), "line %d: provenance", line);
    kv_cache got;
    kv_make(&got);
    kv_fill(&got, 0xdead, NCTX); /* nothing left over from a previous load */
    ph_err e = {0};
    int rc = disk_tier_load(t, &m, &got, m.prefix, &e);
    CHECKF(rc == 0 && got.rows.n_rows == prefix, "line %d: load %d (%s), %d rows", line, rc, e.msg, got.rows.n_rows);
    CHECKF(rc == 0 && kv_equal(&got, saved_kv, prefix), "line %d: loaded cells differ", line);
    kv_drop(&got);
    disk_match_free(t, &m);
}
#define RESTORES(t, want, saved, kv, prefix) restores_at(__LINE__, t, want, saved, kv, prefix)

/* The name of the file that holds s (found by its own rows). */
static void name_of(disk_tier *t, const seq_state *s, char name[DISK_NAME_LEN]) {
    disk_match m;
    name[0] = '\0';
    if (disk_tier_find(t, s, 0, &m)) {
        memcpy(name, m.name, DISK_NAME_LEN);
        disk_match_free(t, &m);
    }
}

static void flip_byte(const char *dir, const char *name, off_t off) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    int fd = open(p, O_RDWR);
    uint8_t b = 0;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) die("cannot read a byte to flip");
    b ^= 0x40;
    if (pwrite(fd, &b, 1, off) != 1) die("cannot flip a byte");
    close(fd);
}

static off_t file_size(const char *dir, const char *name) {
    char p[512];
    struct stat st;
    path_in(p, sizeof p, dir, name);
    return stat(p, &st) == 0 ? st.st_size : -1;
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void make_dir(char *out, size_t cap, const char *what) { snprintf(out, cap, "%s/%s", g_root, what); }

/* ---- the cases -------------------------------------------------------------- */

static seq_state A, B, R;      /* saved sequences, requests */
static kv_cache kvA, kvB, kvX; /* the cells of A and B, a spare */

/* 1. Round trips: pictures, a longer and a shorter request, text only. */
static void round_trip(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "round");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(A.n_rows == CONV_ROWS && A.n_spans == 2);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    disk_tier_stats st = stats(t);
    CHECK(st.saves == 1 && st.entries == 1 && st.bytes == file_bytes(CONV_ROWS, 2) && st.bytes_written == st.bytes);
    listing l = list(t);
    CHECK(l.n == 1 && l.v[0].n_rows == CONV_ROWS && l.v[0].n_pictures == 2 && !strcmp(l.v[0].format, FMT) &&
          l.v[0].model_id[0] == MODEL && l.v[0].bytes == file_bytes(CONV_ROWS, 2));
    CHECK(count_files(dir, NULL) == 1 && exists(dir, l.v[0].name));

    /* a request that goes on after the stored rows: all of them */
    seq_copy(&R, &A, A.n_rows, NULL);
    add_text(&R, 1, 40);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    /* the request's pictures have no cond_hash yet: they still match, and
     * the stored ones come back with theirs */
    conv_seq(&R, 1, false);
    add_text(&R, 1, 5);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    /* a request that ends inside the stored rows (between the pictures, not
     * at a key boundary) */
    seq_copy(&R, &A, 200, NULL);
    RESTORES(t, &R, &A, &kvA, 200);
    /* ... right after the second picture */
    seq_copy(&R, &A, 250, NULL);
    RESTORES(t, &R, &A, &kvA, 250);
    /* a request that differs from row 150 on */
    seq_copy(&R, &A, 150, NULL);
    add_text(&R, 99, 60);
    RESTORES(t, &R, &A, &kvA, 150);
    /* the same request exactly */
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    st = stats(t);
    CHECK(st.hits == 6 && st.misses == 0 && st.rejected == 0 && st.bytes_read > 0);

    /* text only */
    seq_begin(&B, MODEL, FMT);
    add_text(&B, 2, 150);
    kv_fill(&kvB, 2, 150);
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    seq_copy(&R, &B, B.n_rows, NULL);
    add_text(&R, 2, 10);
    RESTORES(t, &R, &B, &kvB, 150);
    seq_copy(&R, &B, 100, NULL);
    RESTORES(t, &R, &B, &kvB, 100);
    /* and both survive a restart */
    disk_tier_close(t);
    t = open_tier(dir, BIG);
    CHECK(list(t).n == 2 && stats(t).rejected == 0);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    RESTORES(t, &B, &B, &kvB, 150);
    disk_tier_close(t);
}

/* 2. What must not match. */
static void not_matched(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "nomatch");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    /* another model */
    seq_copy(&R, &A, A.n_rows, NULL);
    memset(R.model_id, MODEL + 1, 32);
    RESTORES(t, &R, &A, &kvA, 0);
    /* another format tag (say, another KV type) */
    seq_copy(&R, &A, A.n_rows, NULL);
    snprintf(R.format, sizeof R.format, "%s", "test-q8-l2-h2x16");
    RESTORES(t, &R, &A, &kvA, 0);
    /* another picture at the same place: the 70 tokens before it (past the
     * key boundary at 64) are kept, not a row of the picture */
    seq_begin(&R, MODEL, FMT);
    add_text(&R, 1, PIC1_START);
    add_pic(&R, 0xee, 8, 8, false);
    add_text(&R, 1, 100);
    RESTORES(t, &R, &A, &kvA, PIC1_START);
    /* the same picture with another grid */
    seq_begin(&R, MODEL, FMT);
    add_text(&R, 1, PIC1_START);
    add_pic(&R, 3, 16, 4, false);
    add_text(&R, 1, 100);
    RESTORES(t, &R, &A, &kvA, PIC1_START);
    /* the second picture replaced: everything before it */
    seq_copy(&R, &A, 234, NULL);
    add_pic(&R, 0xef, 4, 4, false);
    RESTORES(t, &R, &A, &kvA, 234);
    /* a picture where the file has text: up to the picture */
    seq_copy(&R, &A, 180, NULL);
    add_pic(&R, 0xef, 4, 4, false);
    RESTORES(t, &R, &A, &kvA, 180);
    /* another conversation altogether */
    conv_seq(&R, 5, false);
    RESTORES(t, &R, &A, &kvA, 0);
    disk_tier_stats st = stats(t);
    CHECK(st.misses == 3 && st.rejected == 0 && st.entries == 1);
    /* incomplete state is not saved: a picture cut, or without cond_hash */
    CHECK(!disk_tier_save(t, &A, 100, &kvA, 0));
    conv_seq(&R, 1, false);
    CHECK(!disk_tier_save(t, &R, R.n_rows, &kvA, 0));
    CHECK(!disk_tier_save(t, &A, 0, &kvA, 0));
    disk_tier_close(t);
}

/* Saves A (conversation 1) in a fresh folder; its file's name. */
static void one_file(const char *dir, char name[DISK_NAME_LEN]) {
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    name_of(t, &A, name);
    CHECK(name[0] != '\0');
    disk_tier_close(t);
}

/* After damage to dir/name: a find (and a load, if the find still gets
 * that far) refuses it, it is removed and counted. */
static void refused_at(int line, const char *dir, const char *name, bool find_ok) {
    disk_tier *t = open_tier(dir, BIG);
    disk_match m;
    int found = disk_tier_find(t, &A, 0, &m);
    CHECKF(found == find_ok, "line %d: find %d", line, found);
    if (found) {
        kv_cache got;
        kv_make(&got);
        ph_err e = {0};
        CHECKF(disk_tier_load(t, &m, &got, m.prefix, &e) == -1, "line %d: a bad file loaded", line);
        kv_drop(&got);
        disk_match_free(t, &m);
    }
    disk_tier_stats st = stats(t);
    CHECKF(st.rejected == 1 && st.entries == 0 && st.hits == 0, "line %d: rejected %llu, entries %llu", line,
           (unsigned long long)st.rejected, (unsigned long long)st.entries);
    CHECKF(!exists(dir, name) && count_files(dir, NULL) == 0 && list(t).n == 0, "line %d: still there", line);
    RESTORES(t, &A, &A, &kvA, 0); /* gone for good */
    disk_tier_close(t);
}
#define REFUSED(dir, name, find_ok) refused_at(__LINE__, dir, name, find_ok)

/* 3. Damage. */
static void damage(void) {
    char dir[128], name[DISK_NAME_LEN], nameB[DISK_NAME_LEN], p[512], q[512];
    const off_t kv_at = 256 + CONV_ROWS * 8 + 2 * 116;
    /* a KV byte: the find (header and provenance only) passes, the load not */
    make_dir(dir, sizeof dir, "dmg-kv");
    one_file(dir, name);
    flip_byte(dir, name, kv_at + 12345);
    REFUSED(dir, name, true);
    /* a header byte (in the model_id), the padding of the format tag, the
     * row count, a provenance byte (a token), a picture record */
    const off_t spots[] = {20, 100, 208, 256 + 5 * 8, 256 + CONV_ROWS * 8 + 116 + 60};
    for (size_t i = 0; i < sizeof spots / sizeof *spots; i++) {
        char what[32];
        snprintf(what, sizeof what, "dmg-%d", (int)spots[i]);
        make_dir(dir, sizeof dir, what);
        one_file(dir, name);
        flip_byte(dir, name, spots[i]);
        REFUSED(dir, name, false);
    }
    /* truncated (a torn copy), and one byte too long */
    make_dir(dir, sizeof dir, "dmg-trunc");
    one_file(dir, name);
    path_in(p, sizeof p, dir, name);
    CHECK(truncate(p, file_size(dir, name) - 1000) == 0);
    REFUSED(dir, name, false);
    make_dir(dir, sizeof dir, "dmg-long");
    one_file(dir, name);
    path_in(p, sizeof p, dir, name);
    CHECK(truncate(p, file_size(dir, name) + 1) == 0);
    REFUSED(dir, name, false);

    /* A's file renamed over B's: found under B's keys, refused by its name */
    make_dir(dir, sizeof dir, "dmg-rename");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    conv_seq(&B, 3, true);
    kv_fill(&kvB, 3, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA) && save_flush(t, &B, B.n_rows, &kvB));
    name_of(t, &A, name);
    name_of(t, &B, nameB);
    CHECK(list(t).n == 2 && strcmp(name, nameB));
    disk_tier_close(t);
    path_in(p, sizeof p, dir, name);
    path_in(q, sizeof q, dir, nameB);
    CHECK(rename(p, q) == 0);
    t = open_tier(dir, BIG);
    RESTORES(t, &B, &B, &kvB, 0);
    RESTORES(t, &A, &A, &kvA, 0);
    disk_tier_stats st = stats(t);
    CHECK(st.rejected == 1 && st.entries == 0 && count_files(dir, NULL) == 0 && list(t).n == 0);
    disk_tier_close(t);

    /* an index row whose file was deleted (with the tier open) */
    make_dir(dir, sizeof dir, "dmg-gone");
    one_file(dir, name);
    t = open_tier(dir, BIG);
    CHECK(list(t).n == 1);
    path_in(p, sizeof p, dir, name);
    CHECK(unlink(p) == 0);
    RESTORES(t, &A, &A, &kvA, 0);
    CHECK(list(t).n == 0 && stats(t).entries == 0);
    disk_tier_close(t);
}

/* Deletes every index row (files and keys), as if the index were lost. */
static void forget_index(const char *dir) {
    char p[512];
    path_in(p, sizeof p, dir, "index.sqlite");
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(p, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "DELETE FROM files; DELETE FROM keys", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
}

static pid_t dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status;
    waitpid(pid, &status, 0);
    return pid;
}

static void write_file(const char *dir, const char *name, size_t n) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) die("cannot write a file");
    for (size_t i = 0; i < n; i++) fputc((int)(i * 7 % 251), f);
    fclose(f);
}

/* 4. Recovery at open. */
static void recovery(void) {
    char dir[128], name[DISK_NAME_LEN], stale[64], live[64], junk[DISK_NAME_LEN];
    make_dir(dir, sizeof dir, "recover");
    one_file(dir, name);
    snprintf(stale, sizeof stale, "tmp.%ld.1.phkv", (long)dead_pid());
    snprintf(live, sizeof live, "tmp.%ld.77.phkv", (long)getpid()); /* a live writer's (locked): kept */
    write_file(dir, stale, 5000);
    write_file(dir, live, 5000);
    /* a dead write whose pid is ours now (a restarted container's server): removed */
    char same_pid[64];
    snprintf(same_pid, sizeof same_pid, "tmp.%ld.78.phkv", (long)getpid());
    write_file(dir, same_pid, 5000);
    char lp[512];
    path_in(lp, sizeof lp, dir, live);
    int live_fd = open(lp, O_RDONLY);
    CHECK(live_fd >= 0 && flock(live_fd, LOCK_EX) == 0);
    memset(junk, 'a', 64);
    snprintf(junk + 64, sizeof junk - 64, ".phkv");
    write_file(dir, junk, 70000);
    forget_index(dir);
    disk_tier *t = open_tier(dir, BIG);
    CHECK(!exists(dir, stale) && exists(dir, live) && !exists(dir, same_pid));
    close(live_fd);
    CHECK(!exists(dir, junk) && stats(t).rejected == 1);
    listing l = list(t);
    CHECK(l.n == 1 && !strcmp(l.v[0].name, name) && l.v[0].n_rows == CONV_ROWS && l.v[0].n_pictures == 2);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);
    /* the index files themselves gone */
    char p[512];
    const char *idx[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"};
    for (int i = 0; i < 3; i++) {
        path_in(p, sizeof p, dir, idx[i]);
        unlink(p);
    }
    t = open_tier(dir, BIG);
    CHECK(list(t).n == 1 && stats(t).rejected == 0);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);
    path_in(p, sizeof p, dir, live);
    unlink(p);
}

/* n bytes of noise of seed (n <= 512). */
static void noise(uint8_t *b, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
        b[i] = (uint8_t)seed;
    }
}

/* Overwrites n bytes of dir/name at off with noise of seed. */
static void scribble(const char *dir, const char *name, off_t off, size_t n, uint32_t seed) {
    char p[512];
    uint8_t b[512];
    path_in(p, sizeof p, dir, name);
    noise(b, n, seed);
    int fd = open(p, O_WRONLY);
    if (fd < 0 || pwrite(fd, b, n, off) != (ssize_t)n) die("cannot overwrite a file");
    close(fd);
}

/* Whether dir/name holds the noise of seed at off. */
static bool scribbled(const char *dir, const char *name, off_t off, size_t n, uint32_t seed) {
    char p[512];
    uint8_t want[512], got[512];
    path_in(p, sizeof p, dir, name);
    noise(want, n, seed);
    int fd = open(p, O_RDONLY);
    bool ok = fd >= 0 && pread(fd, got, n, off) == (ssize_t)n && !memcmp(got, want, n);
    if (fd >= 0) close(fd);
    return ok;
}

/* 4b. A damaged index (its header, then a page inside it, overwritten):
 * the tier opens all the same, keeps the damaged file aside as
 * index.sqlite.damaged (the latest one) and finds every checkpoint again
 * from the files. */
static void damaged_index(void) {
    char dir[128], name[DISK_NAME_LEN];
    make_dir(dir, sizeof dir, "badindex");
    one_file(dir, name); /* A */
    disk_tier *t = open_tier(dir, BIG);
    seq_begin(&B, MODEL, FMT);
    add_text(&B, 2, 150);
    kv_fill(&kvB, 2, 150);
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    disk_tier_close(t);
    const off_t size = file_size(dir, "index.sqlite");
    CHECK(size >= 3 * 4096 && !exists(dir, "index.sqlite-wal"));
    const struct {
        off_t at;
        size_t n;
    } hits[2] = {{0, 100}, {4096 + 8, 200}}; /* the file header; the second page, past its own header */
    for (int i = 0; i < 2; i++) {
        const uint32_t seed = 99 + (uint32_t)i;
        scribble(dir, "index.sqlite", hits[i].at, hits[i].n, seed);
        ph_err e = {0};
        t = disk_tier_open(dir, BIG, &e);
        CHECKF(t != NULL, "damage %d: %s", i, e.msg);
        if (!t) continue;
        listing l = list(t);
        CHECKF(l.n == 2 && stats(t).rejected == 0, "damage %d: %d files listed", i, l.n);
        RESTORES(t, &A, &A, &kvA, CONV_ROWS);
        RESTORES(t, &B, &B, &kvB, 150);
        disk_tier_close(t);
        /* the damaged file is kept aside as it was */
        CHECK(file_size(dir, "index.sqlite.damaged") == size && count_files(dir, NULL) == 2);
        CHECK(scribbled(dir, "index.sqlite.damaged", hits[i].at, hits[i].n, seed));
        /* the new index is sound: opened again, nothing is set aside */
        t = open_tier(dir, BIG);
        CHECK(list(t).n == 2);
        disk_tier_close(t);
        CHECK(scribbled(dir, "index.sqlite.damaged", hits[i].at, hits[i].n, seed));
    }
}

/* A child process that saves s (cells kv) in dir is killed at mode. */
static void killed_writing(const char *dir, const char *mode, const seq_state *s, const kv_cache *kv) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        setenv("PINHOLE_TEST_DISK_KILL", mode, 1);
        ph_err e = {0};
        disk_tier *c = disk_tier_open(dir, BIG, &e);
        if (!c) _exit(2);
        disk_tier_save(c, s, s->n_rows, kv, 0);
        disk_tier_flush(c);
        disk_tier_close(c);
        _exit(3); /* not killed */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s: status %#x", mode, status);
}

/* 5. kill -9 at each step of a write. */
static void killed(void) {
    const char *modes[] = {"before-fsync", "before-rename", "before-index", "in-index"};
    for (int i = 0; i < 4; i++) {
        char dir[128];
        make_dir(dir, sizeof dir, modes[i]);
        disk_tier *t = open_tier(dir, BIG);
        conv_seq(&A, 1, true);
        kv_fill(&kvA, 1, CONV_ROWS);
        CHECK(save_flush(t, &A, A.n_rows, &kvA));
        disk_tier_close(t);
        conv_seq(&B, 3, true);
        kv_fill(&kvB, 3, CONV_ROWS);
        killed_writing(dir, modes[i], &B, &kvB);
        t = open_tier(dir, BIG);
        RESTORES(t, &A, &A, &kvA, CONV_ROWS);
        /* renamed complete: indexed at open; else never there */
        const bool renamed = i >= 2;
        RESTORES(t, &B, &B, &kvB, renamed ? CONV_ROWS : 0);
        int n_tmp = -1;
        CHECKF(count_files(dir, &n_tmp) == (renamed ? 2 : 1) && n_tmp == 0, "%s: %d tmp files", modes[i], n_tmp);
        CHECKF(list(t).n == (renamed ? 2 : 1) && stats(t).rejected == 0, "%s", modes[i]);
        disk_tier_close(t);
    }
}

/* 6. The byte budget; held prefixes; longer checkpoints replace theirs. */
static void budget(void) {
    char dir[128];
    const uint64_t one = file_bytes(CONV_ROWS, 2);
    make_dir(dir, sizeof dir, "budget");
    disk_tier *t = open_tier(dir, one * 5 / 2);
    seq_state c[3];
    kv_cache kv[3];
    char names[3][DISK_NAME_LEN];
    for (int i = 0; i < 3; i++) {
        seq_init(&c[i], NCTX, NULL);
        conv_seq(&c[i], 11 + (uint32_t)i, true);
        kv_make(&kv[i]);
        kv_fill(&kv[i], 11 + (uint32_t)i, CONV_ROWS);
    }
    CHECK(save_flush(t, &c[0], CONV_ROWS, &kv[0]));
    name_of(t, &c[0], names[0]);
    sleep_ms(5);
    CHECK(save_flush(t, &c[1], CONV_ROWS, &kv[1]));
    name_of(t, &c[1], names[1]);
    sleep_ms(5);
    RESTORES(t, &c[0], &c[0], &kv[0], CONV_ROWS); /* the first is used (found, loaded): most recent now */
    sleep_ms(5);
    CHECK(save_flush(t, &c[2], CONV_ROWS, &kv[2]));
    name_of(t, &c[2], names[2]);
    disk_tier_stats st = stats(t);
    listing l = list(t);
    CHECK(st.saves == 3 && st.evictions == 1 && st.entries == 2 && st.bytes == 2 * one && st.bytes <= one * 5 / 2);
    CHECK(l.n == 2 && !strcmp(l.v[0].name, names[2]) && !strcmp(l.v[1].name, names[0]));
    CHECK(!exists(dir, names[1]) && exists(dir, names[0]) && exists(dir, names[2]) && count_files(dir, NULL) == 2);
    RESTORES(t, &c[1], &c[1], &kv[1], 0);
    RESTORES(t, &c[0], &c[0], &kv[0], CONV_ROWS);
    /* larger than the whole budget: not written, nothing evicted */
    seq_begin(&B, MODEL, FMT);
    add_text(&B, 21, 3 * CONV_ROWS);
    kv_fill(&kvB, 21, B.n_rows);
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    st = stats(t);
    CHECK(st.skipped == 1 && st.saves == 3 && st.evictions == 1 && list(t).n == 2 && count_files(dir, NULL) == 2);
    RESTORES(t, &B, &B, &kvB, 0);
    /* a file open for a load is never evicted: c[2] is the least recently
     * used now, but held by a match, so c[0] goes for a new one */
    disk_match m;
    CHECK(disk_tier_find(t, &c[2], 0, &m) == 1);
    sleep_ms(5);
    conv_seq(&B, 14, true);
    kv_fill(&kvB, 14, CONV_ROWS);
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    CHECK(exists(dir, names[2]) && !exists(dir, names[0]) && list(t).n == 2 && stats(t).evictions == 2);
    kv_cache got;
    kv_make(&got);
    ph_err e = {0};
    CHECK(disk_tier_load(t, &m, &got, m.prefix, &e) == 0 && kv_equal(&got, &kv[2], CONV_ROWS));
    kv_drop(&got);
    disk_match_free(t, &m);
    disk_tier_close(t);
    for (int i = 0; i < 3; i++) {
        seq_free(&c[i]);
        kv_drop(&kv[i]);
    }

    /* a prefix of a stored checkpoint is not written again, wherever it
     * ends: at a key boundary (192), at a picture's end (250 and 134),
     * between boundaries (200) */
    make_dir(dir, sizeof dir, "held");
    t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    const int32_t cuts[] = {192, 250, 200, 134};
    for (int i = 0; i < 4; i++) {
        CHECK(save_flush(t, &A, cuts[i], &kvA));
        st = stats(t);
        CHECKF(st.skipped == (uint64_t)i + 1 && st.saves == 1 && st.entries == 1,
               "prefix of %d rows: skipped %llu, %llu files", cuts[i], (unsigned long long)st.skipped,
               (unsigned long long)st.entries);
    }
    CHECK(list(t).n == 1 && list(t).v[0].n_rows == CONV_ROWS && count_files(dir, NULL) == 1);
    disk_tier_close(t);

    /* a short conversation (no key boundary yet): its prompt's file is
     * replaced by its turn's, which the writer knows extends it */
    make_dir(dir, sizeof dir, "short");
    t = open_tier(dir, BIG);
    seq_state sh;
    if (seq_init(&sh, 64, NULL)) die("out of memory");
    seq_begin(&sh, MODEL, FMT);
    add_text(&sh, 9, 34);
    kv_fill(&kvA, 9, 34);
    CHECK(save_flush(t, &sh, 30, &kvA));
    CHECK(save_flush(t, &sh, 34, &kvA));
    CHECKF(list(t).n == 1 && list(t).v[0].n_rows == 34 && count_files(dir, NULL) == 1, "short conversation: %d files",
           list(t).n);
    RESTORES(t, &sh, &sh, &kvA, 34);
    seq_free(&sh);
    disk_tier_close(t);

    /* a delayed checkpoint (a prompt's) that a newer one extends before
     * its time is never written; one left alone is written when due */
    make_dir(dir, sizeof dir, "delayed");
    t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(disk_tier_save(t, &A, 200, &kvA, 30.0));
    CHECK(disk_tier_save(t, &A, CONV_ROWS, &kvA, 0));
    disk_tier_flush(t);
    st = stats(t);
    CHECKF(st.saves == 1 && st.evictions == 0 && list(t).n == 1 && list(t).v[0].n_rows == CONV_ROWS,
           "superseded delayed checkpoint: %llu saves, %llu evictions", (unsigned long long)st.saves,
           (unsigned long long)st.evictions);
    conv_seq(&B, 2, true);
    kv_fill(&kvB, 2, CONV_ROWS);
    CHECK(disk_tier_save(t, &B, CONV_ROWS, &kvB, 0.2));
    CHECK(stats(t).queued == 1 && stats(t).saves == 1); /* not yet */
    for (int i = 0; i < 200 && (stats(t).saves < 2 || stats(t).queued > 0); i++) sleep_ms(10);
    CHECKF(stats(t).saves == 2 && stats(t).queued == 0, "delayed checkpoint written when due: %llu saves",
           (unsigned long long)stats(t).saves);
    RESTORES(t, &B, &B, &kvB, CONV_ROWS);
    disk_tier_close(t);

    /* a longer checkpoint replaces the stored prefix, wherever it ends */
    const int32_t firsts[] = {200, 192, 250, 134};
    for (int i = 0; i < 4; i++) {
        char what[32];
        snprintf(what, sizeof what, "extend-%d", firsts[i]);
        make_dir(dir, sizeof dir, what);
        t = open_tier(dir, BIG);
        char first[DISK_NAME_LEN];
        seq_copy(&R, &A, firsts[i], NULL);
        CHECK(save_flush(t, &A, firsts[i], &kvA));
        name_of(t, &R, first);
        CHECK(list(t).n == 1 && exists(dir, first));
        CHECK(save_flush(t, &A, A.n_rows, &kvA));
        st = stats(t);
        listing ls = list(t);
        CHECKF(st.saves == 2 && st.evictions == 1 && ls.n == 1 && ls.v[0].n_rows == CONV_ROWS &&
                   !exists(dir, first) && count_files(dir, NULL) == 1,
               "extending %d rows: %d files, %llu evictions", firsts[i], ls.n, (unsigned long long)st.evictions);
        RESTORES(t, &R, &A, &kvA, firsts[i]);
        disk_tier_close(t);
    }
}

/* Checkpoints of one growing sequence queued back to back: one file stays,
 * the longest. */
static void queued(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "queued");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    const int32_t ends[] = {134, 192, 200, 250, CONV_ROWS};
    for (int i = 0; i < 5; i++) CHECK(disk_tier_save(t, &A, ends[i], &kvA, 0));
    disk_tier_flush(t);
    listing l = list(t);
    CHECK(l.n == 1 && l.v[0].n_rows == CONV_ROWS && count_files(dir, NULL) == 1);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);
    /* a temporary file that a process with this very pid left (a restarted
     * container's server has the same pid) blocks no write */
    make_dir(dir, sizeof dir, "samepid");
    t = open_tier(dir, BIG);
    for (int i = 1; i <= 3; i++) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "tmp.%ld.%d.phkv", (long)getpid(), i);
        write_file(dir, tmp, 100);
    }
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    CHECK(stats(t).saves == 1 && list(t).n == 1);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);
}

/* 7. release_rows(0) returns once the writer has read the cells. */
static void release(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "release");
    disk_tier *t = open_tier(dir, BIG);
    for (int round = 0; round < 3; round++) {
        conv_seq(&A, 30 + (uint32_t)round, true);
        kv_fill(&kvA, 30 + (uint32_t)round, CONV_ROWS);
        kv_fill(&kvX, 30 + (uint32_t)round, CONV_ROWS); /* the live cells */
        CHECK(disk_tier_save(t, &A, A.n_rows, &kvX, 0));
        disk_tier_release_rows(t, 0);
        kv_fill(&kvX, 0xbad, NCTX); /* the next prompt overwrites them */
        disk_tier_flush(t);
        RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    }
    /* releasing rows past the queued ones does not wait for the write */
    conv_seq(&A, 40, true);
    kv_fill(&kvX, 40, CONV_ROWS);
    CHECK(disk_tier_save(t, &A, A.n_rows, &kvX, 0));
    disk_tier_release_rows(t, CONV_ROWS);
    disk_tier_flush(t);
    kv_fill(&kvA, 40, CONV_ROWS);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);
}

/* The conversations of the two-process case: ~200 rows, one picture. */
static void conv2_seq(seq_state *s, uint32_t conv) {
    seq_begin(s, MODEL, FMT);
    add_text(s, conv, 10 + (int32_t)(conv % 50));
    add_pic(s, (uint8_t)conv, 8, 8, true);
    add_text(s, conv, 80 + (int32_t)(conv % 30));
}

/* The k-th checkpoint of a child: even ones the same in both children, odd ones its own. */
static uint32_t conv2_id(int child, int k) {
    return k % 2 == 0 ? 100 + (uint32_t)k / 2 : 200 + 10 * (uint32_t)child + (uint32_t)k / 2;
}

/* 8. Two processes write to one folder at once. */
static void two_processes(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "shared");
    pid_t pids[2];
    fflush(NULL);
    for (int c = 0; c < 2; c++) {
        if ((pids[c] = fork()) < 0) die("fork");
        if (pids[c] == 0) {
            ph_err e = {0};
            disk_tier *t = disk_tier_open(dir, BIG, &e);
            if (!t) {
                fprintf(stderr, "child %d: %s\n", c, e.msg);
                _exit(2);
            }
            int bad = 0;
            for (int k = 0; k < 10; k++) {
                disk_tier_release_rows(t, 0); /* the writer is done with the cells */
                conv2_seq(&A, conv2_id(c, k));
                kv_fill(&kvX, conv2_id(c, k), A.n_rows);
                bad |= !disk_tier_save(t, &A, A.n_rows, &kvX, 0);
            }
            disk_tier_flush(t);
            disk_tier_close(t);
            _exit(bad ? 4 : 0);
        }
    }
    for (int c = 0; c < 2; c++) {
        int status = 0;
        waitpid(pids[c], &status, 0);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %#x", c, status);
    }
    disk_tier *t = open_tier(dir, BIG);
    uint64_t ok = 0, bad = 0;
    ph_err e = {0};
    CHECK(disk_tier_verify(t, NULL, NULL, &ok, &bad, &e) == 0);
    CHECKF(ok == 15 && bad == 0, "verify: %llu ok, %llu bad", (unsigned long long)ok, (unsigned long long)bad);
    int n_tmp = -1;
    CHECK(list(t).n == 15 && count_files(dir, &n_tmp) == 15 && n_tmp == 0);
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 10; k++) {
            conv2_seq(&A, conv2_id(c, k));
            kv_fill(&kvA, conv2_id(c, k), A.n_rows);
            RESTORES(t, &A, &A, &kvA, A.n_rows);
        }
    CHECK(stats(t).rejected == 0);
    disk_tier_close(t);
}

typedef struct bad_report {
    int n;
    char name[DISK_NAME_LEN];
    char why[128];
} bad_report;

static void on_bad(void *ud, const char *name, const char *why) {
    bad_report *r = ud;
    r->n++;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->why, sizeof r->why, "%s", why);
}

/* 9. verify and prune. */
static void verify_prune(void) {
    char dir[128];
    const uint64_t one = file_bytes(CONV_ROWS, 2);
    make_dir(dir, sizeof dir, "verify");
    disk_tier *t = open_tier(dir, BIG);
    char names[3][DISK_NAME_LEN];
    for (int i = 0; i < 3; i++) {
        conv_seq(&A, 50 + (uint32_t)i, true);
        kv_fill(&kvA, 50 + (uint32_t)i, CONV_ROWS);
        CHECK(save_flush(t, &A, A.n_rows, &kvA));
        name_of(t, &A, names[i]);
        sleep_ms(5);
    }
    flip_byte(dir, names[1], (off_t)one - 3);
    bad_report r = {0};
    uint64_t ok = 0, bad = 0, n_rm = 0, b_rm = 0;
    ph_err e = {0};
    CHECK(disk_tier_verify(t, on_bad, &r, &ok, &bad, &e) == 0);
    CHECKF(ok == 2 && bad == 1 && r.n == 1 && !strcmp(r.name, names[1]), "verify: %llu ok, %llu bad, %s (%s)",
           (unsigned long long)ok, (unsigned long long)bad, r.name, r.why);
    CHECK(!exists(dir, names[1]) && list(t).n == 2 && stats(t).rejected == 1);
    r.n = 0;
    CHECK(disk_tier_verify(t, on_bad, &r, &ok, &bad, &e) == 0 && ok == 2 && bad == 0 && r.n == 0);
    /* the oldest is used: the other one is now the least recently used */
    conv_seq(&A, 50, true);
    kv_fill(&kvA, 50, CONV_ROWS);
    RESTORES(t, &A, &A, &kvA, CONV_ROWS);
    CHECK(disk_tier_prune(t, one, &n_rm, &b_rm, &e) == 0 && n_rm == 1 && b_rm == one);
    listing l = list(t);
    CHECK(l.n == 1 && !strcmp(l.v[0].name, names[0]) && !exists(dir, names[2]) && count_files(dir, NULL) == 1);
    CHECK(disk_tier_prune(t, one, &n_rm, &b_rm, &e) == 0 && n_rm == 0 && b_rm == 0);
    CHECK(disk_tier_prune(t, 0, &n_rm, &b_rm, &e) == 0 && n_rm == 1 && list(t).n == 0 && count_files(dir, NULL) == 0);
    disk_tier_close(t);
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

/* The folder (and its missing parents) 0700; the index, SQLite's -wal and
 * -shm files and every checkpoint 0600. */
static void modes(void) {
    char top[128], dir[160], p[512];
    make_dir(top, sizeof top, "modes");
    snprintf(dir, sizeof dir, "%s/kv", top);
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 41, true);
    kv_fill(&kvA, 41, CONV_ROWS);
    CHECK(save_flush(t, &A, CONV_ROWS, &kvA));
    add_text(&A, 41, 20); /* a longer one: a second write, a prefix removed */
    kv_fill(&kvA, 41, A.n_rows);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    CHECKF(mode_of(top) == 0700 && mode_of(dir) == 0700, "folders %o %o", mode_of(top), mode_of(dir));
    int n = 0, n_wal = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        path_in(p, sizeof p, dir, de->d_name);
        CHECKF(mode_of(p) == 0600, "%s: mode %o", de->d_name, mode_of(p));
        n++;
        n_wal += strstr(de->d_name, "-wal") != NULL;
    }
    if (d) closedir(d);
    CHECKF(n >= 2 && n_wal == 1 && count_files(dir, NULL) == 1, "%d files, %d -wal", n, n_wal);
    disk_tier_close(t);

    /* a folder the user made keeps its mode */
    make_dir(dir, sizeof dir, "modes-mine");
    CHECK(mkdir(dir, 0750) == 0 && chmod(dir, 0750) == 0);
    t = open_tier(dir, BIG);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    path_in(p, sizeof p, dir, "index.sqlite");
    CHECK(mode_of(dir) == 0750 && mode_of(p) == 0600);
    disk_tier_close(t);
}

/* A simulated file system of 1 GiB (floor 256 MiB): g_other bytes used by
 * others, the rest by the checkpoints in g_floor_dir. */
static char g_floor_dir[128];
static uint64_t g_other;

static int fake_space(const char *dir, uint64_t *avail, uint64_t *total) {
    (void)dir;
    uint64_t used = g_other;
    DIR *d = opendir(g_floor_dir);
    char p[512];
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".phkv")) continue;
        path_in(p, sizeof p, g_floor_dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0) used += (uint64_t)st.st_size;
    }
    if (d) closedir(d);
    *total = 1ull << 30;
    *avail = used < *total ? *total - used : 0;
    return 0;
}

static void floor_space(void) {
    const uint64_t one = file_bytes(CONV_ROWS, 2);
    make_dir(g_floor_dir, sizeof g_floor_dir, "floor");
    g_other = (1ull << 30) - PH_FS_FLOOR_MIN - 2 * one - one / 2; /* room for 2 and a half */
    fs_space_set_test_hook(fake_space);
    disk_tier *t = open_tier(g_floor_dir, BIG);
    seq_state c[4];
    kv_cache kv[4];
    char names[4][DISK_NAME_LEN];
    for (int i = 0; i < 4; i++) {
        seq_init(&c[i], NCTX, NULL);
        conv_seq(&c[i], 51 + (uint32_t)i, true);
        kv_make(&kv[i]);
        kv_fill(&kv[i], 51 + (uint32_t)i, CONV_ROWS);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(save_flush(t, &c[i], CONV_ROWS, &kv[i]));
        name_of(t, &c[i], names[i]);
        CHECK(names[i][0]);
        sleep_ms(5);
    }
    disk_tier_stats st = stats(t);
    CHECKF(st.saves == 3 && st.evictions == 1 && st.no_space == 0, "saves %llu evictions %llu no_space %llu",
           (unsigned long long)st.saves, (unsigned long long)st.evictions, (unsigned long long)st.no_space);
    CHECK(!exists(g_floor_dir, names[0]) && exists(g_floor_dir, names[1]) && exists(g_floor_dir, names[2]));
    RESTORES(t, &c[2], &c[2], &kv[2], CONV_ROWS);

    /* others fill the disk so that removing every checkpoint would not make
     * room: none is removed, the new one is not written */
    g_other += 3 * one;
    CHECK(save_flush(t, &c[3], CONV_ROWS, &kv[3]));
    st = stats(t);
    CHECKF(st.saves == 3 && st.no_space == 1 && st.skipped == 1 && st.evictions == 1 &&
               count_files(g_floor_dir, NULL) == 2 && st.entries == 2,
           "saves %llu no_space %llu files %d", (unsigned long long)st.saves, (unsigned long long)st.no_space,
           count_files(g_floor_dir, NULL));
    RESTORES(t, &c[3], &c[3], &kv[3], 0);
    RESTORES(t, &c[1], &c[1], &kv[1], CONV_ROWS);
    RESTORES(t, &c[2], &c[2], &kv[2], CONV_ROWS);
    /* nor when the tier is opened there */
    disk_tier_close(t);
    t = open_tier(g_floor_dir, BIG);
    CHECK(stats(t).entries == 2 && stats(t).evictions == 0 && count_files(g_floor_dir, NULL) == 2);
    /* room again: writes resume */
    g_other -= 3 * one;
    CHECK(save_flush(t, &c[0], CONV_ROWS, &kv[0]));
    sleep_ms(5);
    CHECK(save_flush(t, &c[1], CONV_ROWS, &kv[1]));
    CHECK(stats(t).saves == 2 && count_files(g_floor_dir, NULL) == 2);
    disk_tier_close(t);
    /* opened under its floor: the least recently used goes */
    g_other += one;
    t = open_tier(g_floor_dir, BIG);
    CHECK(!exists(g_floor_dir, names[0]) && exists(g_floor_dir, names[1]) && stats(t).entries == 1);
    RESTORES(t, &c[1], &c[1], &kv[1], CONV_ROWS);
    disk_tier_close(t);
    fs_space_set_test_hook(NULL);
    for (int i = 0; i < 4; i++) {
        seq_free(&c[i]);
        kv_drop(&kv[i]);
    }
}

/* 13. Isolation domains: a checkpoint is found by the requests of its own
 * domain only; the default domain's file is version 1 (as written before
 * domains), another's version 2 with the domain in its header; a file
 * holding a request's rows, or a prefix of it, in another domain is neither
 * taken for it nor removed by it; a lost index finds each file again in its
 * domain; a damaged domain is refused. */
static void domains(void) {
    char dir[128], name_a[DISK_NAME_LEN], name_b[DISK_NAME_LEN], name_c[DISK_NAME_LEN];
    make_dir(dir, sizeof dir, "domains");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    seq_copy(&B, &A, 150, NULL); /* A's first 150 rows, in domain 0x11 */
    memset(B.domain, 0x11, 32);
    CHECK(save_flush(t, &B, B.n_rows, &kvA));
    CHECK(save_flush(t, &A, A.n_rows, &kvA)); /* extends B's rows, in another domain: B stays */
    name_of(t, &A, name_a);
    name_of(t, &B, name_b);
    CHECK(name_a[0] && name_b[0] && strcmp(name_a, name_b) && list(t).n == 2 && stats(t).evictions == 0);
    CHECK(file_size(dir, name_a) == (off_t)file_bytes(CONV_ROWS, 2)); /* version 1 */
    CHECK(file_size(dir, name_b) == (off_t)file_bytes(150, 1) + 32);  /* version 2: and the domain */
    /* the same rows asked for in each domain */
    seq_copy(&R, &A, A.n_rows, NULL);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    memset(R.domain, 0x11, 32);
    RESTORES(t, &R, &B, &kvA, 150);
    memset(R.domain, 0x22, 32);
    RESTORES(t, &R, &A, &kvA, 0);
    /* held by a file of another domain is not held: written in its own */
    const uint64_t saves = stats(t).saves;
    CHECK(save_flush(t, &R, R.n_rows, &kvA) && stats(t).saves == saves + 1 && list(t).n == 3);
    name_of(t, &R, name_c);
    CHECK(name_c[0] && strcmp(name_c, name_a) && strcmp(name_c, name_b));
    disk_tier_close(t);
    /* a lost index: every file indexed again, under its own domain's keys */
    forget_index(dir);
    t = open_tier(dir, BIG);
    CHECK(list(t).n == 3 && stats(t).rejected == 0);
    seq_copy(&R, &A, A.n_rows, NULL);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    memset(R.domain, 0x11, 32);
    RESTORES(t, &R, &B, &kvA, 150);
    disk_tier_close(t);
    /* a byte of B's domain flipped: refused and removed, never taken for another domain's */
    flip_byte(dir, name_b, 256);
    t = open_tier(dir, BIG);
    RESTORES(t, &R, &B, &kvA, 0);
    CHECK(stats(t).rejected == 1 && !exists(dir, name_b) && list(t).n == 2);
    disk_tier_close(t);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* 14. Writes that fail for want of space though statvfs showed room (a
 * quota, or others' writes since). One that removing every stored
 * checkpoint would not make room for is not written, and none is removed
 * (counted as no_space); one that the least recently used checkpoint makes
 * room for is written once more, whole, after it is removed. */
static void full_write(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "enospc");
    setenv("PINHOLE_TEST_DISK_ENOSPC", "3", 1); /* the third checkpoint's first try fails */
    disk_tier *t = open_tier(dir, BIG);
    unsetenv("PINHOLE_TEST_DISK_ENOSPC");
    seq_state c[4];
    kv_cache kv[4];
    char names[4][DISK_NAME_LEN];
    for (int i = 0; i < 4; i++) {
        seq_init(&c[i], NCTX, NULL);
        kv_make(&kv[i]);
        if (i == 2) { /* larger than the other two together */
            seq_begin(&c[i], MODEL, FMT);
            add_text(&c[i], 90, 900);
        } else {
            conv_seq(&c[i], 71 + (uint32_t)i, true);
        }
        kv_fill(&kv[i], 71 + (uint32_t)i, c[i].n_rows);
    }
    CHECK(file_bytes(900, 0) > 2 * file_bytes(CONV_ROWS, 2));
    for (int i = 0; i < 3; i++) {
        CHECK(save_flush(t, &c[i], c[i].n_rows, &kv[i]));
        name_of(t, &c[i], names[i]);
        sleep_ms(5);
    }
    disk_tier_stats st = stats(t);
    CHECKF(st.saves == 2 && st.evictions == 0 && st.no_space == 1 && st.skipped == 1 && st.entries == 2,
           "saves %llu evictions %llu no_space %llu entries %llu", (unsigned long long)st.saves,
           (unsigned long long)st.evictions, (unsigned long long)st.no_space, (unsigned long long)st.entries);
    CHECK(names[0][0] && exists(dir, names[0]) && names[1][0] && exists(dir, names[1]) && !names[2][0]);
    int n_tmp = -1;
    CHECK(count_files(dir, &n_tmp) == 2 && n_tmp == 0);
    RESTORES(t, &c[0], &c[0], &kv[0], CONV_ROWS);
    RESTORES(t, &c[1], &c[1], &kv[1], CONV_ROWS); /* c[0] is now the least recently used */
    disk_tier_close(t);

    setenv("PINHOLE_TEST_DISK_ENOSPC", "1", 1);
    t = open_tier(dir, BIG);
    unsetenv("PINHOLE_TEST_DISK_ENOSPC");
    CHECK(save_flush(t, &c[3], CONV_ROWS, &kv[3]));
    name_of(t, &c[3], names[3]);
    st = stats(t);
    CHECKF(st.saves == 1 && st.evictions == 1 && st.no_space == 0, "saves %llu evictions %llu",
           (unsigned long long)st.saves, (unsigned long long)st.evictions);
    CHECK(!exists(dir, names[0]) && exists(dir, names[1]) && names[3][0] && exists(dir, names[3]));
    CHECK(count_files(dir, &n_tmp) == 2 && n_tmp == 0);
    RESTORES(t, &c[3], &c[3], &kv[3], CONV_ROWS);
    RESTORES(t, &c[1], &c[1], &kv[1], CONV_ROWS);
    disk_tier_close(t);
    for (int i = 0; i < 4; i++) {
        seq_free(&c[i]);
        kv_drop(&kv[i]);
    }
}

/* ---- recurrent states ----------------------------------------------------------- */

#define RF 100 /* floats of one recurrent state */

static float rec_value(int32_t row, int i) { return (float)row * 0.25f + (float)i * 0.001f; }

static void rec_make(kv_cache *c) {
    kv_make(c);
    c->recurrent_floats = RF;
    if (!(c->recurrent = calloc(RF, sizeof(float)))) die("out of memory");
}

static void rec_fill(float *dst, int32_t row) {
    for (int i = 0; i < RF; i++) dst[i] = rec_value(row, i);
}

/* kv's recurrent state: snapshots after rows[0..n) and the state after end
 * (its rows in use), each rec_fill of its row. */
static void rec_set(kv_cache *c, const int32_t *rows, int n, int32_t end) {
    c->n_snap = 0;
    for (int i = 0; i < n; i++) {
        if (!c->snap[i] && !(c->snap[i] = malloc(RF * sizeof(float)))) die("out of memory");
        rec_fill(c->snap[i], rows[i]);
        c->snap_rows[i] = rows[i];
        c->n_snap++;
    }
    rec_fill(c->recurrent, end);
    c->rows.n_rows = end;
}

static bool rec_is(const float *got, int32_t row) {
    for (int i = 0; i < RF; i++)
        if (got[i] != rec_value(row, i)) return false;
    return true;
}

/* Finds want: expect prefix (0: nothing); when found, loads it into a
 * fresh recurrent cache and checks the cells, the state after prefix and
 * the snapshots up to it (snaps of them, the last at prefix). */
static void rec_restores_at(int line, disk_tier *t, const seq_state *want, const kv_cache *saved_kv, int32_t prefix,
                            int snaps) {
    disk_match m;
    int found = disk_tier_find(t, want, 0, &m);
    CHECKF(found == (prefix > 0) && (!found || m.prefix == prefix), "line %d: found %d, prefix %d, want %d", line,
           found, found ? m.prefix : 0, prefix);
    if (!found) return;
    CHECKF(disk_match_cut(&m, prefix + 1) == prefix, "line %d: the match cuts to %d", line,
           disk_match_cut(&m, prefix + 1));
    kv_cache got;
    rec_make(&got);
    kv_fill(&got, 0xdead, NCTX);
    ph_err e = {0};
    int rc = disk_tier_load(t, &m, &got, m.prefix, &e);
    CHECKF(rc == 0 && got.rows.n_rows == prefix && kv_equal(&got, saved_kv, prefix), "line %d: load %d (%s)", line,
           rc, e.msg);
    CHECKF(rc == 0 && rec_is(got.recurrent, prefix) && got.n_snap == snaps &&
               got.snap_rows[got.n_snap - 1] == prefix && rec_is(got.snap[got.n_snap - 1], prefix),
           "line %d: recurrent state after the load (%d snapshots)", line, got.n_snap);
    for (int i = 0; rc == 0 && i < got.n_snap; i++)
        CHECKF(rec_is(got.snap[i], got.snap_rows[i]), "line %d: snapshot %d", line, i);
    kv_drop(&got);
    disk_match_free(t, &m);
}
#define REC_RESTORES(t, want, kv, prefix, snaps) rec_restores_at(__LINE__, t, want, kv, prefix, snaps)

static uint32_t file_u32(const char *dir, const char *name, off_t off) {
    char p[512];
    path_in(p, sizeof p, dir, name);
    int fd = open(p, O_RDONLY);
    uint8_t b[4] = {0};
    if (fd < 0 || pread(fd, b, 4, off) != 4) die("cannot read a file");
    close(fd);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

#define REC_PIC_END                (PIC1_START + 64)
#define REC_FILE(n_rows, n_states) (file_bytes(n_rows, 2) + 64 + (uint64_t)(n_states)*RF * 4)

/* A in a fresh folder, with states after the first picture, row 200 and
 * its end; its file's name. */
static void rec_file(const char *dir, kv_cache *kv, char name[DISK_NAME_LEN]) {
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(kv, 1, CONV_ROWS);
    rec_set(kv, (const int32_t[]){REC_PIC_END, 200}, 2, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, kv));
    name_of(t, &A, name);
    CHECK(name[0] != '\0');
    disk_tier_close(t);
}

/* 15. Recurrent states (version 3). */
static void recurrent(void) {
    char dir[128], name[DISK_NAME_LEN];
    kv_cache kv;
    rec_make(&kv);
    make_dir(dir, sizeof dir, "rec");
    rec_file(dir, &kv, name);
    CHECKF(file_u32(dir, name, 8) == 3 && file_u32(dir, name, 12) == 320 &&
               (uint64_t)file_size(dir, name) == REC_FILE(CONV_ROWS, 3),
           "version %u, %lld bytes", file_u32(dir, name, 8), (long long)file_size(dir, name));
    /* the states change after the save was queued: the file has the old ones */
    disk_tier *t = open_tier(dir, BIG);
    rec_set(&kv, (const int32_t[]){1, 2}, 2, 3);
    kv.rows.n_rows = CONV_ROWS;
    /* found only at its state rows: its end, row 200, the picture's end, none */
    REC_RESTORES(t, &A, &kv, CONV_ROWS, 3);
    seq_copy(&R, &A, 250, NULL);
    REC_RESTORES(t, &R, &kv, 200, 2);
    seq_copy(&R, &A, 150, NULL);
    add_text(&R, 9, 30);
    REC_RESTORES(t, &R, &kv, REC_PIC_END, 1);
    seq_copy(&R, &A, PIC1_START, NULL);
    add_pic(&R, 99, 8, 8, true);
    REC_RESTORES(t, &R, &kv, 0, 0);
    /* its first 200 rows are held by it (a state there); not 250 rows,
     * which it holds no state after: that is a file of its own */
    rec_set(&kv, (const int32_t[]){REC_PIC_END, 200}, 2, CONV_ROWS);
    CHECK(!save_flush(t, &A, 200, &kv) || (stats(t).skipped == 1 && count_files(dir, NULL) == 1));
    CHECK(save_flush(t, &A, 250, &kv) && stats(t).saves == 1 && count_files(dir, NULL) == 2);
    disk_tier_close(t);

    /* a file is replaced only by one with a state at its end */
    make_dir(dir, sizeof dir, "rec-drop");
    rec_file(dir, &kv, name);
    t = open_tier(dir, BIG);
    conv_seq(&B, 1, true);
    memcpy(B.domain, A.domain, sizeof B.domain); /* (domains() left another in B) */
    add_text(&B, 1, 20);
    kv_cache kvC;
    rec_make(&kvC);
    kv_fill(&kvC, 1, CONV_ROWS + 20);
    rec_set(&kvC, (const int32_t[]){REC_PIC_END, 200}, 2, CONV_ROWS + 20);
    CHECK(save_flush(t, &B, B.n_rows, &kvC));
    CHECKF(exists(dir, name) && count_files(dir, NULL) == 2, "a longer file with no state at A's end dropped A's");
    add_text(&B, 1, 20);
    kv_fill(&kvC, 1, CONV_ROWS + 40);
    rec_set(&kvC, (const int32_t[]){REC_PIC_END, 200, CONV_ROWS}, 3, CONV_ROWS + 40);
    CHECK(save_flush(t, &B, B.n_rows, &kvC));
    CHECKF(!exists(dir, name) && count_files(dir, NULL) == 2 && stats(t).evictions == 1,
           "one with a state there: A's gone (%d files, A %d, evictions %llu)", count_files(dir, NULL),
           exists(dir, name), (unsigned long long)stats(t).evictions);
    REC_RESTORES(t, &A, &kvC, CONV_ROWS, 3);
    disk_tier_close(t);
    kv_drop(&kvC);

    /* a damaged state, a damaged state row: refused, removed */
    const off_t states_at = (off_t)REC_FILE(CONV_ROWS, 3) - 3 * RF * 4;
    const off_t spots[] = {states_at + 5, states_at + 2 * RF * 4 + 17, 288 + 4, 280};
    for (size_t i = 0; i < sizeof spots / sizeof *spots; i++) {
        char what[32];
        snprintf(what, sizeof what, "rec-dmg-%d", (int)i);
        make_dir(dir, sizeof dir, what);
        rec_file(dir, &kv, name);
        flip_byte(dir, name, spots[i]);
        t = open_tier(dir, BIG);
        disk_match m;
        int found = disk_tier_find(t, &A, 0, &m);
        CHECKF(found == (i < 2), "damage %zu: found %d", i, found);
        if (found) {
            kv_cache got;
            rec_make(&got);
            ph_err e = {0};
            CHECKF(disk_tier_load(t, &m, &got, m.prefix, &e) == -1, "damage %zu: loaded", i);
            kv_drop(&got);
            disk_match_free(t, &m);
        }
        CHECKF(stats(t).rejected == 1 && !exists(dir, name) && list(t).n == 0, "damage %zu: kept", i);
        disk_tier_close(t);
    }

    /* kill -9 at each step of a write: complete files only */
    const char *modes[] = {"before-fsync", "before-rename", "before-index", "in-index"};
    for (int i = 0; i < 4; i++) {
        char what[32];
        snprintf(what, sizeof what, "rec-%s", modes[i]);
        make_dir(dir, sizeof dir, what);
        rec_file(dir, &kv, name);
        conv_seq(&B, 3, true);
        kv_fill(&kvB, 3, CONV_ROWS);
        kv_cache kvD;
        rec_make(&kvD);
        kv_fill(&kvD, 3, CONV_ROWS);
        rec_set(&kvD, (const int32_t[]){REC_PIC_END}, 1, CONV_ROWS);
        killed_writing(dir, modes[i], &B, &kvD);
        t = open_tier(dir, BIG);
        kv_fill(&kv, 1, CONV_ROWS);
        REC_RESTORES(t, &A, &kv, CONV_ROWS, 3);
        const bool renamed = i >= 2;
        REC_RESTORES(t, &B, &kvB, renamed ? CONV_ROWS : 0, 2);
        int n_tmp = -1;
        CHECKF(count_files(dir, &n_tmp) == (renamed ? 2 : 1) && n_tmp == 0 && stats(t).rejected == 0, "%s", modes[i]);
        disk_tier_close(t);
        kv_drop(&kvD);
    }

    /* a newer version's file (an unindexed one at open): left alone */
    make_dir(dir, sizeof dir, "rec-newer");
    rec_file(dir, &kv, name);
    forget_index(dir);
    char p[512];
    path_in(p, sizeof p, dir, name);
    int fd = open(p, O_RDWR);
    const uint8_t v4[4] = {4, 0, 0, 0};
    CHECK(fd >= 0 && pwrite(fd, v4, 4, 8) == 4);
    if (fd >= 0) close(fd);
    t = open_tier(dir, BIG);
    CHECKF(exists(dir, name) && list(t).n == 0 && stats(t).rejected == 0, "a newer file: removed or indexed");
    REC_RESTORES(t, &A, &kv, 0, 0);
    uint64_t ok = 9, bad = 9;
    ph_err e = {0};
    CHECK(disk_tier_verify(t, NULL, NULL, &ok, &bad, &e) == 0 && ok == 0 && bad == 0 && exists(dir, name));
    disk_tier_close(t);
    kv_drop(&kv);
}

int main(void) {
    log_set_level(LOG_ERROR); /* rejections are expected here */
    umask(022);               /* the usual one: the tier must not rely on a stricter umask */
    snprintf(g_root, sizeof g_root, "/tmp/ph_disk_tier.XXXXXX");
    if (!mkdtemp(g_root)) die("mkdtemp");
    seq_init(&A, NCTX, NULL);
    seq_init(&B, NCTX, NULL);
    seq_init(&R, NCTX, NULL);
    kv_make(&kvA);
    kv_make(&kvB);
    kv_make(&kvX);

    kv_copies();
    round_trip();
    not_matched();
    damage();
    recovery();
    damaged_index();
    killed();
    budget();
    queued();
    release();
    two_processes();
    verify_prune();
    modes();
    floor_space();
    domains();
    full_write();
    recurrent();

    seq_free(&A);
    seq_free(&B);
    seq_free(&R);
    kv_drop(&kvA);
    kv_drop(&kvB);
    kv_drop(&kvX);
    nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_END();
}
