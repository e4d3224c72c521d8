/* The disk tier (src/state/disk_tier.c) over the block store, on
 * hand-made sequences and KV cells (no model): a checkpoint round trips
 * through save, find and load, pictures and their stored cond_hash
 * included, and serves longer and shorter requests, and a request that
 * leaves its last partial block part way; a shared prefix is stored once
 * and a later save writes only the new blocks and its tail (bytes
 * counted); a damaged record is refused, counted, and the rows before it
 * kept; isolation domains, models and formats never find each other's
 * records; a model with recurrent layers resumes only at its resume points
 * (their state restored), never at a bare block boundary; a restarted tier
 * finds everything; files of earlier versions are removed at open; ls
 * lists conversation ends with their rows and pictures, verify and prune
 * work; release_rows waits for the store to read the cells; a tier over
 * the shared tier resumes from Redis and refuses forged records; the KV
 * cache's block table over a pool takes blocks as rows come, gives them
 * back on truncation, copies a shared block before writing it and refuses
 * what the pool cannot hold, as kv_cache.h says. (The store's
 * own crash, budget, floor and sharing cases are test_block_store's.) */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "base/log.h"
#include "state/block_store.h"
#include "state/disk_tier.h"
#include "state/kv_block.h"
#include "state/shared_tier.h"
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
    if (kv_cache_init_cells(c, NL, RB, NCTX, NULL)) die("out of memory");
}

static void kv_drop(kv_cache *c) { kv_cache_free(c); /* with its recurrent state and snapshots */ }

/* Cells of conversation seed: every byte a function of (seed, layer, K/V, row, byte). */
static void kv_fill(kv_cache *c, uint32_t seed, int32_t n) {
    kv_cache_truncate(c, 0);
    if (kv_cache_reserve(c, n, NULL)) die("no room in the pool");
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

/* The block table over a pool (state/kv_cache.h): rows get blocks as they
 * come, truncation gives back the blocks past the rows kept, a shared
 * block is copied (its rows in use only) before a row is written into it,
 * and a pool without room refuses with nothing changed. */
static void kv_blocks(void) {
    kv_cache a, b;
    kv_make(&a); /* a pool of NCTX rows' blocks of its own */
    if (kv_cache_init_cells(&b, NL, RB, NCTX, a.pool)) die("out of memory");
    kv_fill(&a, 11, 300); /* 4 whole blocks and 44 rows */
    kv_pool_stats st;
    kv_pool_get_stats(a.pool, &st);
    CHECK(a.n_held == 5 && st.in_use == 5 && st.total == NCTX / KV_BLOCK_ROWS);
    kv_cache_truncate(&a, 150);
    kv_pool_get_stats(a.pool, &st);
    CHECK(a.n_held == 3 && st.in_use == 3 && st.free == st.total - 3);
    const int32_t shared = a.ids[2];
    kv_pool_ref(a.pool, shared); /* another holder of the last block */
    CHECK(kv_cache_blocks_needed(&a, 151) == 1 && kv_cache_blocks_needed(&a, 200) == 2);
    CHECK(kv_cache_reserve(&a, 200, NULL) == 0 && a.ids[2] != shared && a.n_held == 4);
    bool same = true;
    for (int l = 0; l < NL; l++)
        for (int kvi = 0; kvi < 2; kvi++)
            same &= !memcmp(kv_cache_cells(&a, 128, l, kvi),
                            kv_pool_data(a.pool, shared) + (size_t)(2 * l + kvi) * KV_BLOCK_ROWS * RB, 22 * RB);
    kv_pool_get_stats(a.pool, &st);
    CHECK(same && st.bytes_copied == 22 * 2 * NL * RB);
    kv_pool_unref(a.pool, shared);
    kv_pool_get_stats(a.pool, &st);
    CHECK(kv_cache_reserve(&b, NCTX, NULL) == -1 && b.n_held == 0); /* 16 blocks, 12 free */
    kv_pool_stats st2;
    kv_pool_get_stats(a.pool, &st2);
    CHECK(st2.in_use == st.in_use && st2.free == st.free);
    kv_cache_free(&b);
    kv_drop(&a);
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

/* ---- the tier -------------------------------------------------------------- */

/* A block record's bytes: header, provenance (header, rows, pictures), payload. */
#define BLOCK_REC(pics) (320 + 16 + 64 * 8 + (pics) * (5 * 4 + 3 * 32) + 64 * 2 * NL * RB)

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
    bool ok = disk_tier_save(t, s, n, kv, 0, false);
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

static void make_dir(char *out, size_t cap, const char *what) { snprintf(out, cap, "%s/%s", g_root, what); }

/* Finds want in t: expect prefix rows (0: nothing found); when found, loads
 * them into a scratch cache: its cells must be saved_kv's and its
 * provenance saved's (the stored cond_hash taken). */
static void restores_at(int line, disk_tier *t, const seq_state *want, const seq_state *saved,
                        const kv_cache *saved_kv, int32_t prefix) {
    disk_match m;
    int found = disk_tier_find(t, want, 0, &m);
    if (prefix == 0) {
        CHECKF(found == 0, "line %d: found %d rows", line, found ? m.prefix : 0);
        if (found) disk_match_free(&m);
        return;
    }
    CHECKF(found == 1 && m.prefix == prefix, "line %d: found %d, prefix %d, want %d", line, found,
           found ? m.prefix : 0, prefix);
    if (!found) return;
    kv_cache got;
    kv_make(&got);
    kv_fill(&got, 0xdead, NCTX); /* nothing left over from a previous load */
    int32_t rows = disk_tier_load(t, &m, &got, m.prefix);
    CHECKF(rows == prefix && got.rows.n_rows == prefix, "line %d: load gave %d rows", line, rows);
    CHECKF(rows == prefix && kv_equal(&got, saved_kv, prefix), "line %d: loaded cells differ", line);
    CHECKF(m.seq.n_rows == prefix && same_prov(&m.seq, saved, prefix), "line %d: provenance", line);
    kv_drop(&got);
    disk_match_free(&m);
}
#define RESTORES(t, want, saved, kv, prefix) restores_at(__LINE__, t, want, saved, kv, prefix)

/* The offset of the k-th record (0: the first) of the folder's first
 * segment, or -1. */
static off_t record_at(const char *dir, int k, char *seg, size_t cap) {
    char sub[256];
    snprintf(sub, sizeof sub, "%s/blocks", dir);
    DIR *d = opendir(sub);
    seg[0] = '\0';
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "seg-", 4)) snprintf(seg, cap, "%s/%s", sub, de->d_name);
    if (d) closedir(d);
    FILE *f = seg[0] ? fopen(seg, "rb") : NULL;
    if (!f) return -1;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t i = 0; i + 8 <= n; i++)
        if (!memcmp(buf + i, "PHBLKS01", 8) && k-- == 0) return (off_t)i;
    return -1;
}

static void flip_byte(const char *path, off_t off) {
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) die("cannot read a byte to flip");
    b ^= 0x40;
    if (pwrite(fd, &b, 1, off) != 1) die("cannot flip a byte");
    close(fd);
}

/* ---- the cases -------------------------------------------------------------- */

static seq_state A, B, R;      /* saved sequences, requests */
static kv_cache kvA, kvB, kvX; /* the cells of A and B, a spare */

/* R: the first n rows of s, then m rows of conversation conv. */
static void request(const seq_state *s, int32_t n, uint32_t conv, int32_t m) {
    seq_copy(&R, s, n, NULL);
    add_text(&R, conv, m);
    for (int32_t i = 0; i < R.n_spans; i++) R.spans[i].has_cond = false; /* a request's pictures: no cond_hash yet */
}

/* 1. Round trips: pictures, longer and shorter requests, a tail left part way. */
static void round_trip(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "round");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    /* 4 full blocks (the first picture in blocks 1 and 2, the second in 3) and the tail of 44 rows */
    disk_tier_stats st = stats(t);
    CHECKF(st.saves == 5 && st.entries == 5, "records: %llu written, %llu stored", (unsigned long long)st.saves,
           (unsigned long long)st.entries);
    const uint64_t tail = 320 + 16 + 44 * 8 + 2 * NL * 44 * RB;
    const uint64_t want_bytes = 2 * (uint64_t)BLOCK_REC(0) + BLOCK_REC(1) + BLOCK_REC(2) + tail;
    CHECKF(st.bytes_written == want_bytes, "bytes written %llu, want %llu", (unsigned long long)st.bytes_written,
           (unsigned long long)want_bytes);
    request(&A, A.n_rows, 9, 20); /* longer: all of A */
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    request(&A, 280, 9, 30); /* leaves the tail part way: the rows before */
    RESTORES(t, &R, &A, &kvA, 280);
    request(&A, 200, 9, 30); /* leaves block 3 part way: its record's rows before */
    RESTORES(t, &R, &A, &kvA, 200);
    request(&A, 100, 9, 300); /* another first picture (row 70 on, in block 1): the rows before it */
    R.spans[0].embed_key[0] ^= 1;
    RESTORES(t, &R, &A, &kvA, 70);
    request(&A, 30, 9, 300); /* within block 0: nothing (no resume point there) */
    RESTORES(t, &R, &A, &kvA, 0);
    disk_tier_close(t);
    /* restart: the same */
    t = open_tier(dir, BIG);
    request(&A, A.n_rows, 9, 20);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    listing l = list(t);
    CHECKF(l.n == 1 && l.v[0].n_rows == CONV_ROWS && l.v[0].n_pictures == 2 && l.v[0].model_id[0] == MODEL &&
               !strcmp(l.v[0].format, FMT),
           "ls: %d ends, %d rows, %d pictures", l.n, l.n ? l.v[0].n_rows : 0, l.n ? l.v[0].n_pictures : 0);
    disk_tier_close(t);
}

/* 2. A shared prefix is stored once; a later save writes only what is new. */
static void only_new(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "new");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, 256, &kvA)); /* 4 blocks, no tail */
    disk_tier_stats a = stats(t);
    CHECK(a.saves == 4);
    /* A grows: the 4 blocks are held, block 4 and the tail are written */
    seq_truncate(&A, 256);
    add_text(&A, 1, 100);
    kv_fill(&kvA, 1, A.n_rows);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    disk_tier_stats b = stats(t);
    const uint64_t tail = 320 + 16 + 36 * 8 + 2 * NL * 36 * RB;
    CHECKF(b.saves - a.saves == 2 && b.bytes_written - a.bytes_written == BLOCK_REC(0) + tail,
           "a later save wrote %llu records, %llu bytes", (unsigned long long)(b.saves - a.saves),
           (unsigned long long)(b.bytes_written - a.bytes_written));
    /* B shares A's first 256 rows: only its own block and tail */
    seq_copy(&B, &A, 256, NULL);
    add_text(&B, 2, 100);
    kv_fill(&kvB, 2, B.n_rows);
    for (int32_t r = 0; r < 256; r++)
        for (int l = 0; l < NL; l++)
            for (int kvi = 0; kvi < 2; kvi++)
                memcpy(kv_cache_cells(&kvB, r, l, kvi), kv_cache_cells(&kvA, r, l, kvi), RB);
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    disk_tier_stats c = stats(t);
    CHECKF(c.saves - b.saves == 2 && c.bytes_written - b.bytes_written == BLOCK_REC(0) + tail,
           "a sharing save wrote %llu records", (unsigned long long)(c.saves - b.saves));
    CHECK(c.entries == 4 + 2 + 2);
    request(&B, B.n_rows, 9, 5);
    RESTORES(t, &R, &B, &kvB, B.n_rows);
    request(&A, A.n_rows, 9, 5);
    RESTORES(t, &R, &A, &kvA, A.n_rows);
    /* the same save again writes nothing */
    CHECK(save_flush(t, &B, B.n_rows, &kvB));
    CHECK(stats(t).saves == c.saves);
    /* A grows past its tail's block: that block's record holds only the
     * rows after the tail (its parent), then a new tail: no row twice */
    add_text(&A, 1, 44);
    kv_fill(&kvA, 1, A.n_rows);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    disk_tier_stats d = stats(t);
    const uint64_t rest = 320 + 16 + 28 * 8 + 2 * NL * 28 * RB, tail2 = 320 + 16 + 16 * 8 + 2 * NL * 16 * RB;
    CHECKF(d.saves - c.saves == 2 && d.bytes_written - c.bytes_written == rest + tail2,
           "a save past a tail wrote %llu records, %llu bytes", (unsigned long long)(d.saves - c.saves),
           (unsigned long long)(d.bytes_written - c.bytes_written));
    request(&A, A.n_rows, 9, 5);
    RESTORES(t, &R, &A, &kvA, A.n_rows);
    request(&A, 390, 9, 5); /* within the block after it */
    RESTORES(t, &R, &A, &kvA, 390);
    request(&A, 370, 9, 5); /* within the block made of a tail and the rest: all its rows before */
    RESTORES(t, &R, &A, &kvA, 370);
    request(&A, 340, 9, 5); /* leaves the tail part way */
    RESTORES(t, &R, &A, &kvA, 340);
    /* the tail that block 5 follows damaged: the block is refused with it
     * (the rows before it are kept) and written whole by the next save */
    char seg[512];
    const off_t after_tail = record_at(dir, 6, seg, sizeof seg); /* B0-B3, B4, then A's tail */
    CHECK(after_tail > 0);
    flip_byte(seg, after_tail - 10);
    request(&A, A.n_rows, 9, 5);
    disk_match m;
    CHECK(disk_tier_find(t, &R, 0, &m) == 1 && m.prefix == A.n_rows);
    kv_cache got;
    kv_make(&got);
    const int32_t rows = disk_tier_load(t, &m, &got, m.prefix);
    CHECKF(rows == 320 && kv_equal(&got, &kvA, 320), "a block whose piece is damaged: %d rows restored", rows);
    disk_match_free(&m);
    kv_drop(&got);
    const uint64_t before = stats(t).bytes_written;
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    CHECKF(stats(t).bytes_written - before == BLOCK_REC(0), "the block written again: %llu bytes",
           (unsigned long long)(stats(t).bytes_written - before));
    RESTORES(t, &R, &A, &kvA, A.n_rows);
    listing l = list(t);
    CHECKF(l.n == 2, "ls: %d ends", l.n);
    disk_tier_close(t);
}

/* 3. A damaged record is refused and counted; the rows before it are kept. */
static void damage(void) {
    char dir[128], seg[512];
    make_dir(dir, sizeof dir, "damage");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    const off_t r2 = record_at(dir, 2, seg, sizeof seg);
    CHECK(r2 > 0);
    flip_byte(seg, r2 - 10); /* in block 1's payload */
    request(&A, A.n_rows, 9, 20);
    disk_match m;
    CHECK(disk_tier_find(t, &R, 0, &m) == 1 && m.prefix == CONV_ROWS);
    kv_cache got;
    kv_make(&got);
    const int32_t rows = disk_tier_load(t, &m, &got, m.prefix);
    CHECKF(rows == 64 && kv_equal(&got, &kvA, 64), "a damaged block 1: %d rows restored", rows);
    CHECKF(stats(t).rejected == 1, "rejected %llu", (unsigned long long)stats(t).rejected);
    disk_match_free(&m);
    kv_drop(&got);
    /* block 1 is gone from the index: a lookup finds block 0 only */
    RESTORES(t, &R, &A, &kvA, 64);
    /* verify finds nothing more wrong; prune empties the folder */
    uint64_t ok = 0, bad = 0, n_removed = 0, bytes_removed = 0;
    ph_err e = {0};
    CHECK(disk_tier_verify(t, NULL, NULL, &ok, &bad, &e) == 0 && ok == 4 && bad == 0);
    CHECK(disk_tier_prune(t, 0, &n_removed, &bytes_removed, &e) == 0 && n_removed == 4);
    RESTORES(t, &R, &A, &kvA, 0);
    disk_tier_close(t);
}

/* 4. Domains, models and formats never find each other's records. */
static void isolated(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "domains");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    request(&A, A.n_rows, 9, 20);
    R.domain[0] = 1;
    RESTORES(t, &R, &A, &kvA, 0);
    request(&A, A.n_rows, 9, 20);
    R.model_id[0] ^= 1;
    RESTORES(t, &R, &A, &kvA, 0);
    request(&A, A.n_rows, 9, 20);
    R.format[0] ^= 1;
    RESTORES(t, &R, &A, &kvA, 0);
    /* the same rows in another domain are stored apart */
    seq_copy(&B, &A, A.n_rows, NULL);
    B.domain[0] = 1;
    const uint64_t before = stats(t).saves;
    CHECK(save_flush(t, &B, B.n_rows, &kvA));
    CHECK(stats(t).saves == before + 5);
    request(&B, B.n_rows, 9, 20);
    RESTORES(t, &R, &B, &kvA, CONV_ROWS);
    disk_tier_close(t);
}

/* 5. Files of earlier versions are removed at open, never read. */
static void earlier(void) {
    char dir[128], p[256];
    make_dir(dir, sizeof dir, "earlier");
    mkdir(dir, 0700);
    const char *names[] = {"0123.phkv", "tmp.1.2.phkv", "index.sqlite", "index.sqlite-wal"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "w");
        if (!f) die("cannot write a file");
        fputs("old", f);
        fclose(f);
    }
    disk_tier *t = open_tier(dir, BIG);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        CHECKF(access(p, F_OK) != 0, "%s is still there", names[i]);
    }
    CHECK(list(t).n == 0);
    disk_tier_close(t);
}

/* 6. release_rows waits until the store has read the cells; a queued
 * checkpoint that a later one extends is not written. */
static void queued(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "queued");
    disk_tier *t = open_tier(dir, BIG);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(disk_tier_save(t, &A, 200, &kvA, 60, false)); /* waits for the next */
    CHECK(disk_tier_save(t, &A, A.n_rows, &kvA, 0, false));
    disk_tier_release_rows(t, 0);
    kv_fill(&kvX, 3, CONV_ROWS); /* the cells may change now */
    disk_tier_flush(t);
    disk_tier_stats st = stats(t);
    CHECKF(st.saves == 5 && st.queued == 0, "%llu records written", (unsigned long long)st.saves);
    request(&A, A.n_rows, 9, 20);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    disk_tier_close(t);

    /* a kept one (a prompt's end) is written although the next extends it,
     * and the next then holds only the rows after it: one record's headers
     * more, no row twice */
    make_dir(dir, sizeof dir, "kept");
    t = open_tier(dir, BIG);
    CHECK(disk_tier_save(t, &A, 200, &kvA, 60, true));
    CHECK(disk_tier_save(t, &A, A.n_rows, &kvA, 0, false));
    disk_tier_flush(t);
    disk_tier_stats k = stats(t);
    CHECKF(k.saves == 6 && k.bytes_written == st.bytes_written + 320 + 16,
           "kept: %llu records, %llu bytes (%llu without)", (unsigned long long)k.saves,
           (unsigned long long)k.bytes_written, (unsigned long long)st.bytes_written);
    request(&A, 200, 9, 20); /* the next turn leaves at the prompt's end */
    RESTORES(t, &R, &A, &kvA, 200);
    disk_tier_close(t);
}

/* A request's REC_RESTORES: found at prefix, the load gives the cells and
 * the state stored at prefix. */
static void rec_restores_at(int line, disk_tier *t, const seq_state *want, const kv_cache *saved_kv, int32_t prefix) {
    disk_match m;
    int found = disk_tier_find(t, want, 0, &m);
    CHECKF(found == (prefix > 0) && (!found || m.prefix == prefix), "line %d: found %d, prefix %d, want %d", line,
           found, found ? m.prefix : 0, prefix);
    if (!found) return;
    CHECKF(disk_match_cut(&m, prefix + 1) == prefix && disk_match_cut(&m, prefix - 1) == 0,
           "line %d: the match cuts to %d", line, disk_match_cut(&m, prefix + 1));
    kv_cache got;
    rec_make(&got);
    kv_fill(&got, 0xdead, NCTX);
    int32_t rows = disk_tier_load(t, &m, &got, m.prefix);
    CHECKF(rows == prefix && got.rows.n_rows == prefix && kv_equal(&got, saved_kv, prefix), "line %d: load gave %d",
           line, rows);
    CHECKF(rows == prefix && rec_is(got.recurrent, prefix) && got.n_snap == 1 && got.snap_rows[0] == prefix,
           "line %d: recurrent state after the load (%d rows, %d snapshots, the last after row %d)", line, rows,
           got.n_snap, got.n_snap ? got.snap_rows[got.n_snap - 1] : -1);
    kv_drop(&got);
    disk_match_free(&m);
}
#define REC_RESTORES(t, want, kv, prefix) rec_restores_at(__LINE__, t, want, kv, prefix)

/* 7. Recurrent layers: resume points only. */
static void recurrent(void) {
    char dir[128], seg[512];
    make_dir(dir, sizeof dir, "rec");
    disk_tier *t = open_tier(dir, BIG);
    kv_cache kv;
    rec_make(&kv);
    conv_seq(&A, 1, true);
    snprintf(A.format, sizeof A.format, "%s;rec=1:4:8:2:4", FMT);
    kv_fill(&kv, 1, CONV_ROWS);
    const int32_t pic_end = PIC1_START + 64;
    rec_set(&kv, (const int32_t[]){pic_end, 192}, 2, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kv));
    /* 4 blocks and 3 resume points (134, 192 at a block boundary, 300) */
    CHECKF(stats(t).saves == 7, "%llu records", (unsigned long long)stats(t).saves);
    request(&A, A.n_rows, 9, 20);
    REC_RESTORES(t, &R, &kv, CONV_ROWS);
    request(&A, A.n_rows, 9, 0); /* the whole of A: the last row is evaluated again, so the point before */
    REC_RESTORES(t, &R, &kv, 192);
    request(&A, 250, 9, 20);
    REC_RESTORES(t, &R, &kv, 192);
    request(&A, 180, 9, 20); /* between points: the one before, not the block boundary 128 */
    REC_RESTORES(t, &R, &kv, pic_end);
    request(&A, 100, 9, 20);
    REC_RESTORES(t, &R, &kv, 0);
    disk_tier_close(t);
    t = open_tier(dir, BIG); /* restart */
    request(&A, A.n_rows, 9, 20);
    REC_RESTORES(t, &R, &kv, CONV_ROWS);
    /* a damaged state: refused, and nothing is resumed there */
    const off_t last = record_at(dir, 6, seg, sizeof seg);
    CHECK(last > 0);
    struct stat sb;
    CHECK(stat(seg, &sb) == 0);
    flip_byte(seg, sb.st_size - 8); /* in the last record's state */
    disk_match m;
    CHECK(disk_tier_find(t, &R, 0, &m) == 1 && m.prefix == CONV_ROWS);
    kv_cache got;
    rec_make(&got);
    CHECKF(disk_tier_load(t, &m, &got, m.prefix) == 0, "a damaged resume point restored rows");
    disk_match_free(&m);
    kv_drop(&got);
    REC_RESTORES(t, &R, &kv, 192);
    disk_tier_close(t);
    kv_drop(&kv);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* 8. The shared tier (state/shared_tier.h) on a redis-server of the
 * test's own (skipped, saying so, without one): a tier with an empty
 * folder resumes another's conversation from Redis, whole; records forged
 * with the right name and a valid checksum but another model or another
 * isolation domain are refused, counted and never used (the rows before
 * them are). */
static pid_t redis_start(int *port) {
    if (system("command -v redis-server >/dev/null 2>&1") != 0) return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &alen))
        die("no free port");
    close(fd);
    *port = ntohs(a.sin_port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", *port);
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--save", "", "--appendonly",
               "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* until it accepts, 10 s at most */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        const int up = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (up) return pid;
        usleep(50 * 1000);
    }
    die("redis-server did not start");
    return 0;
}

/* Replaces name's record in Redis by the same record made for another
 * model (what 0) or domain (what 1), its header and checksum valid. */
static void forge(shared_tier *sh, const uint8_t name[32], int what) {
    void *v;
    size_t len;
    block_put r;
    char why[128];
    uint8_t hdr[BLOCK_RECORD_HDR];
    if (shared_tier_get(sh, SHARED_RECORD, name, &v, &len) != 1) die("a record missing from Redis");
    if (block_record_parse(v, len, &r, why, sizeof why)) die(why);
    if (what == 0) r.key.meta.model_id[0] ^= 1;
    else r.key.meta.domain[0] ^= 1;
    if (block_record_header(&r, hdr)) die("out of memory");
    const void *parts[3] = {hdr, r.prov, r.payload};
    const size_t lens[3] = {sizeof hdr, r.prov_bytes, (size_t)r.payload_bytes};
    CHECK(shared_tier_put(sh, SHARED_RECORD, name, NULL, parts, lens, 3));
    shared_tier_flush(sh);
    free(v);
}

static void shared(void) {
    int port = 0;
    const pid_t redis = redis_start(&port);
    if (!redis) {
        printf("test_disk_tier: the shared tier's case skipped: no redis-server (scripts/setup.sh installs it)\n");
        return;
    }
    char url[64], dir[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    ph_err e = {0};
    shared_tier *sh = shared_tier_open(url, NULL, 5000, 64 << 20, &e);
    if (!sh) die(e.msg);
    make_dir(dir, sizeof dir, "shared-a");
    disk_tier *t = open_tier(dir, BIG);
    disk_tier_set_shared(t, sh);
    conv_seq(&A, 1, true);
    kv_fill(&kvA, 1, CONV_ROWS);
    CHECK(save_flush(t, &A, A.n_rows, &kvA));
    shared_tier_flush(sh);
    disk_tier_close(t);
    shared_tier_stats ss;
    shared_tier_get_stats(sh, &ss);
    CHECKF(ss.written >= 5 && ss.dropped == 0, "values written %llu, dropped %llu", (unsigned long long)ss.written,
           (unsigned long long)ss.dropped);
    /* another tier, an empty folder: all of A from Redis */
    make_dir(dir, sizeof dir, "shared-b");
    t = open_tier(dir, BIG);
    disk_tier_set_shared(t, sh);
    request(&A, A.n_rows, 9, 20);
    RESTORES(t, &R, &A, &kvA, CONV_ROWS);
    CHECKF(stats(t).shared_records == 5, "records from Redis: %llu", (unsigned long long)stats(t).shared_records);
    disk_tier_close(t);
    /* block 3's record made for another domain, then block 0's for another model */
    uint8_t names[CONV_ROWS / KV_BLOCK_ROWS][32];
    CHECK(kv_block_names(&A, A.n_rows, false, names) == CONV_ROWS / KV_BLOCK_ROWS);
    const int32_t expect[2] = {3 * KV_BLOCK_ROWS, 0};
    for (int k = 0; k < 2; k++) {
        forge(sh, names[k ? 0 : 3], k ? 0 : 1);
        shared_tier_get_stats(sh, &ss);
        const uint64_t refused = ss.refused;
        make_dir(dir, sizeof dir, k ? "shared-d" : "shared-c");
        t = open_tier(dir, BIG);
        disk_tier_set_shared(t, sh);
        request(&A, A.n_rows, 9, 20);
        RESTORES(t, &R, &A, &kvA, expect[k]);
        shared_tier_get_stats(sh, &ss);
        CHECKF(ss.refused > refused, "forged %s: refused %llu", k ? "model" : "domain",
               (unsigned long long)(ss.refused - refused));
        disk_tier_close(t);
    }
    shared_tier_close(sh);
    kill(redis, SIGKILL);
    waitpid(redis, NULL, 0);
}

int main(void) {
    log_set_level(LOG_ERROR); /* refusals are expected here */
    snprintf(g_root, sizeof g_root, "/tmp/ph_disk_tier.XXXXXX");
    if (!mkdtemp(g_root)) die("mkdtemp");
    seq_init(&A, NCTX, NULL);
    seq_init(&B, NCTX, NULL);
    seq_init(&R, NCTX, NULL);
    kv_make(&kvA);
    kv_make(&kvB);
    kv_make(&kvX);

    kv_blocks();
    round_trip();
    only_new();
    damage();
    isolated();
    earlier();
    queued();
    recurrent();
    shared();

    seq_free(&A);
    seq_free(&B);
    seq_free(&R);
    kv_drop(&kvA);
    kv_drop(&kvB);
    kv_drop(&kvX);
    nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_END();
}
