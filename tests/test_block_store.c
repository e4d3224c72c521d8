/* The block store (src/state/block_store.c) on hand-made records: records
 * round trip (provenance, payload, index fields) and each blob is released
 * once; a name stored or queued already is not written again (bytes
 * counted); prefix lookups count the leading stored names and renew their
 * last use; a read that asks for another parent, kind or meta, a flipped
 * payload or header byte and a truncated segment are refused, counted and
 * dropped, never returned; an unindexed tail is indexed up to its last
 * whole record and cut there; a kill -9 at each point of a write or a
 * compaction leaves whole records only, and the next open indexes or cuts
 * what the kill left; the budget evicts the least recently used chain ends
 * first; segments roll over, a dead one is deleted and a mostly dead one
 * compacted with every live record still readable; two processes write to
 * one folder at once; chain ends, verify and prune; a lost index is rebuilt
 * from the segments; the folder is 0700 and its files 0600; the free-space
 * floor skips a write there is no room for, removing nothing, and a write
 * that fails with ENOSPC makes room and is tried once more. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fs_space.h"
#include "base/log.h"
#include "base/sha256.h"
#include "state/block_store.h"
#include "test.h"

#define HDR_BYTES 320
#define PROV      24
#define PAYLOAD   4096
#define LEN       ((uint64_t)HDR_BYTES + PROV + PAYLOAD) /* one record in its segment */
#define BIG       (1ull << 30)
#define MAXR      16 /* records of one test chain at most */

static char g_root[64];

static void die(const char *what) {
    fprintf(stderr, "test_block_store: %s\n", what);
    exit(2);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void make_dir(char *out, size_t cap, const char *what) { snprintf(out, cap, "%s/%s", g_root, what); }

/* ---- records ---------------------------------------------------------------- */

static void noise(uint8_t *b, size_t n, uint32_t seed) {
    seed = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
        b[i] = (uint8_t)seed;
    }
}

static block_meta g_meta; /* the meta of every test record but where a test says otherwise */

/* A chain of records: the i-th named SHA-256(parent, seed, i, kind), its blobs
 * noise of (seed, i), the last one a resume point when resume is set. */
typedef struct chain {
    int n;
    block_put p[MAXR];
    uint8_t prov[MAXR][PROV];
    uint8_t payload[MAXR][PAYLOAD];
} chain;

static void chain_make(chain *c, int n, uint32_t seed, bool resume) {
    memset(c, 0, sizeof *c);
    c->n = n;
    for (int i = 0; i < n; i++) {
        block_put *p = &c->p[i];
        if (i) memcpy(p->key.parent, c->p[i - 1].key.name, 32);
        p->key.kind = resume && i == n - 1 ? BLOCK_KIND_RESUME : BLOCK_KIND_KV;
        uint8_t in[44];
        memcpy(in, p->key.parent, 32);
        memcpy(in + 32, &seed, 4);
        memcpy(in + 36, &i, 4);
        memcpy(in + 40, &p->key.kind, 4);
        sha256_digest(in, sizeof in, p->key.name);
        p->key.meta = g_meta;
        p->n_rows = p->key.kind == BLOCK_KIND_KV ? 64 : 17;
        noise(c->prov[i], PROV, seed * 131 + (uint32_t)i);
        noise(c->payload[i], PAYLOAD, seed * 977 + (uint32_t)i);
        p->prov = c->prov[i];
        p->prov_bytes = PROV;
        p->payload = c->payload[i];
        p->payload_bytes = PAYLOAD;
        p->ud = &c->p[i];
    }
}

static int g_released;
static void on_release(void *ctx, void *ud) {
    (void)ud;
    (*(int *)ctx)++;
}

/* Puts the chain's records from..to-1 in one call and waits for them. */
static int put_flush(block_store *s, const chain *c, int from, int to) {
    const int q = block_store_put(s, c->p + from, to - from, on_release, &g_released);
    block_store_flush(s);
    return q;
}

/* n chains of one record each (seeds seed, seed + 1, ...), each put and
 * written alone, a few ms apart (so that their last uses differ). */
static void put_singles(block_store *s, chain *r, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        chain_make(&r[i], 1, seed + (uint32_t)i, false);
        put_flush(s, &r[i], 0, 1);
        sleep_ms(3);
    }
}

static block_key key_of(const chain *c, int i) { return c->p[i].key; }

/* 1 when record i of c reads back whole and equal; else what get said. */
static int reads(block_store *s, const chain *c, int i) {
    static uint8_t prov[PROV], payload[PAYLOAD];
    block_info info;
    const block_key k = key_of(c, i);
    const int rc = block_store_get(s, &k, prov, sizeof prov, payload, sizeof payload, &info);
    if (rc != 1) return rc;
    return !memcmp(prov, c->prov[i], PROV) && !memcmp(payload, c->payload[i], PAYLOAD) &&
                   info.n_rows == c->p[i].n_rows && info.kind == c->p[i].key.kind && info.prov_bytes == PROV &&
                   info.payload_bytes == PAYLOAD && info.bytes == LEN && !memcmp(info.parent, c->p[i].key.parent, 32)
               ? 1
               : 5;
}

/* How many of c's names the store holds as a prefix. */
static int prefix(block_store *s, const chain *c) {
    uint8_t names[MAXR][32];
    for (int i = 0; i < c->n; i++) memcpy(names[i], c->p[i].key.name, 32);
    return block_store_prefix(s, (const uint8_t(*)[32])names, c->n);
}

static block_store *open_store(const char *dir, uint64_t budget, uint64_t seg) {
    ph_err e = {0};
    block_store_opts o = {.budget = budget, .segment_bytes = seg};
    block_store *s = block_store_open(dir, &o, &e);
    if (!s) {
        fprintf(stderr, "block_store_open(%s): %s\n", dir, e.msg);
        die("cannot open the store");
    }
    return s;
}

static block_store_stats stats(block_store *s) {
    block_store_stats st;
    block_store_get_stats(s, &st);
    return st;
}

/* Segment files in dir/blocks: their count, their bytes in *bytes. */
static int segments(const char *dir, uint64_t *bytes) {
    char p[512];
    snprintf(p, sizeof p, "%s/blocks", dir);
    DIR *d = opendir(p);
    int n = 0;
    if (bytes) *bytes = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, "seg-", 4)) continue;
        char f[1024];
        struct stat st;
        snprintf(f, sizeof f, "%s/%s", p, de->d_name);
        if (stat(f, &st) == 0 && bytes) *bytes += (uint64_t)st.st_size;
        n++;
    }
    if (d) closedir(d);
    return n;
}

/* The path of segment id. */
static void seg_file(char *out, size_t cap, const char *dir, int id) {
    snprintf(out, cap, "%s/blocks/seg-%d.phbs", dir, id);
}

/* Flips bit 6 of the byte at off of segment id. */
static void flip(const char *dir, int id, off_t off) {
    char p[512];
    seg_file(p, sizeof p, dir, id);
    int fd = open(p, O_RDWR);
    uint8_t b;
    if (fd < 0 || pread(fd, &b, 1, off) != 1) die("cannot read a segment");
    b ^= 0x40;
    if (pwrite(fd, &b, 1, off) != 1) die("cannot write a segment");
    close(fd);
}

/* Runs sql on dir's index. */
static void index_sql(const char *dir, const char *sql) {
    char p[512];
    snprintf(p, sizeof p, "%s/blocks/index.sqlite", dir);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(p, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    char *msg = NULL;
    CHECKF(sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close(db);
}

/* Drops record i of c from dir's index, as an eviction by another process would. */
static void unindex(const char *dir, const chain *c, int i) {
    char hex[65], sql[256];
    hex_encode(c->p[i].key.name, 32, hex);
    snprintf(sql, sizeof sql, "DELETE FROM blocks WHERE name = x'%s'", hex);
    index_sql(dir, sql);
}

/* ---- tests ------------------------------------------------------------------- */

/* 1. Round trips; each record released once; a second put writes nothing. */
static void round_trip(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "round");
    block_store *s = open_store(dir, BIG, 0);
    static chain a;
    chain_make(&a, 4, 1, true);
    g_released = 0;
    CHECK(put_flush(s, &a, 0, 4) == 4 && g_released == 4);
    block_store_stats st = stats(s);
    CHECKF(st.written == 4 && st.bytes_written == 4 * LEN && st.records == 4 && st.bytes == 4 * LEN &&
               st.segments == 1 && st.segment_bytes == 4 * LEN && st.dead_bytes == 0 && st.queued == 0,
           "written %llu bytes %llu", (unsigned long long)st.written, (unsigned long long)st.bytes_written);
    for (int i = 0; i < 4; i++) CHECKF(reads(s, &a, i) == 1, "record %d", i);
    block_info info;
    CHECK(block_store_find(s, a.p[3].key.name, &info) == 1 && info.kind == BLOCK_KIND_RESUME && info.n_rows == 17);
    /* the same names again, alone or with a new one after them: only the new one is written */
    g_released = 0;
    CHECK(put_flush(s, &a, 0, 4) == 0 && g_released == 4);
    static chain b;
    chain_make(&b, 5, 1, false); /* the same first three, then two of its own */
    CHECK(put_flush(s, &b, 0, 5) == 2 && g_released == 9);
    st = stats(s);
    CHECKF(st.written == 6 && st.bytes_written == 6 * LEN && st.held == 7 && st.records == 6,
           "written %llu held %llu", (unsigned long long)st.written, (unsigned long long)st.held);
    /* a name twice in one call is queued once */
    static chain c;
    chain_make(&c, 2, 3, false);
    block_put twice[3] = {c.p[0], c.p[1], c.p[0]};
    g_released = 0;
    CHECK(block_store_put(s, twice, 3, on_release, &g_released) == 2);
    block_store_flush(s);
    CHECK(g_released == 3 && stats(s).written == 8);
    /* invalid records are released, not queued */
    block_put bad = c.p[0];
    bad.key.kind = 0;
    g_released = 0;
    CHECK(block_store_put(s, &bad, 1, on_release, &g_released) == 0 && g_released == 1);
    block_store_close(s);
    /* they are there after a restart */
    s = open_store(dir, BIG, 0);
    for (int i = 0; i < 5; i++) CHECKF(reads(s, &b, i) == 1, "after reopen, record %d", i);
    CHECK(reads(s, &a, 3) == 1 && stats(s).rejected == 0 && stats(s).records == 8);
    block_store_close(s);
}

/* 2. Prefix lookups, from the index; their last use renewed. */
static void lookups(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "lookups");
    block_store *s = open_store(dir, BIG, 0);
    static chain a, b;
    chain_make(&a, 6, 7, false);
    put_flush(s, &a, 0, 4);
    CHECK(prefix(s, &a) == 4);
    chain_make(&b, 3, 8, false);
    CHECK(prefix(s, &b) == 0);
    /* a gap: only the leading run counts */
    uint8_t names[3][32];
    memcpy(names[0], a.p[0].key.name, 32);
    memcpy(names[1], b.p[0].key.name, 32);
    memcpy(names[2], a.p[1].key.name, 32);
    CHECK(block_store_prefix(s, (const uint8_t(*)[32])names, 3) == 1);
    CHECK(block_store_prefix(s, (const uint8_t(*)[32])names, 0) == 0);
    block_info before, after;
    CHECK(block_store_find(s, a.p[2].key.name, &before) == 1);
    sleep_ms(5);
    CHECK(prefix(s, &a) == 4);
    CHECK(block_store_find(s, a.p[2].key.name, &after) == 1 && after.last_use > before.last_use);
    CHECK(block_store_find(s, b.p[0].key.name, &after) == 0);
    /* a read of a name not stored is a miss */
    const block_key k = key_of(&b, 0);
    uint8_t buf[PAYLOAD];
    CHECK(block_store_get(s, &k, buf, PROV, buf, sizeof buf, NULL) == 0 && stats(s).misses == 1);
    /* buffers too small: nothing read, nothing dropped */
    const block_key ka = key_of(&a, 0);
    CHECK(block_store_get(s, &ka, buf, PROV - 1, buf, sizeof buf, NULL) == -2);
    CHECK(block_store_get(s, &ka, buf, PROV, buf, PAYLOAD - 1, NULL) == -2 && reads(s, &a, 0) == 1);
    block_store_close(s);
}

/* 3. Records that fail a check are refused, counted, dropped, never returned. */
static void damage(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "damage");
    block_store *s = open_store(dir, BIG, 0);
    static chain a;
    chain_make(&a, 6, 11, false);
    put_flush(s, &a, 0, 6);
    /* asked with another parent, kind or meta */
    block_key k = key_of(&a, 0);
    uint8_t prov[PROV], payload[PAYLOAD];
    k.parent[0] ^= 1;
    CHECK(block_store_get(s, &k, prov, PROV, payload, PAYLOAD, NULL) == -1);
    CHECK(stats(s).rejected == 1 && block_store_find(s, a.p[0].key.name, NULL) == 0);
    CHECK(block_store_get(s, &k, prov, PROV, payload, PAYLOAD, NULL) == 0);
    k = key_of(&a, 1);
    k.kind = BLOCK_KIND_RESUME;
    CHECK(block_store_get(s, &k, prov, PROV, payload, PAYLOAD, NULL) == -1 && stats(s).rejected == 2);
    k = key_of(&a, 2);
    k.meta.domain[5] ^= 1;
    CHECK(block_store_get(s, &k, prov, PROV, payload, PAYLOAD, NULL) == -1 && stats(s).rejected == 3);
    /* a byte of the payload, then of the header, flipped */
    flip(dir, 1, (off_t)(3 * LEN + HDR_BYTES + PROV + 100));
    CHECK(reads(s, &a, 3) == -1 && stats(s).rejected == 4 && reads(s, &a, 3) == 0);
    flip(dir, 1, (off_t)(4 * LEN + 60));
    CHECK(reads(s, &a, 4) == -1 && stats(s).rejected == 5 && reads(s, &a, 4) == 0);
    CHECK(reads(s, &a, 5) == 1);
    block_store_close(s);
    /* the segment cut inside its last record: its row is dropped at open */
    char p[512];
    seg_file(p, sizeof p, dir, 1);
    CHECK(truncate(p, (off_t)(6 * LEN - 10)) == 0);
    s = open_store(dir, BIG, 0);
    CHECK(stats(s).rejected == 1 && block_store_find(s, a.p[5].key.name, NULL) == 0 && reads(s, &a, 5) == 0);
    block_store_stats st = stats(s);
    /* no live record was left in it: the segment is gone */
    CHECKF(st.records == 0 && st.segment_bytes == 0 && segments(dir, NULL) == 0, "records %llu segment bytes %llu",
           (unsigned long long)st.records, (unsigned long long)st.segment_bytes);
    /* written again: read back whole */
    put_flush(s, &a, 0, 6);
    for (int i = 0; i < 6; i++) CHECKF(reads(s, &a, i) == 1, "record %d", i);
    uint64_t ok = 0, bad = 0;
    ph_err e = {0};
    CHECK(block_store_verify(s, NULL, NULL, &ok, &bad, &e) == 0 && ok == 6 && bad == 0);
    /* the segment removed under the store: a miss (its rows dropped), not a damaged record */
    CHECK(segments(dir, NULL) == 1);
    seg_file(p, sizeof p, dir, 2);
    CHECK(unlink(p) == 0);
    const uint64_t rejected = stats(s).rejected;
    CHECK(reads(s, &a, 0) == 0 && block_store_find(s, a.p[0].key.name, NULL) == 0 && stats(s).rejected == rejected);
    block_store_close(s);
    s = open_store(dir, BIG, 0);
    CHECK(stats(s).records == 0 && stats(s).segments == 0 && prefix(s, &a) == 0);
    block_store_close(s);
}

/* 3b. A segment's tail past its indexed length, as a crash leaves it:
 * whole records indexed, a bad last record and bytes that are no record
 * cut off. */
static void tails(void) {
    char dir[128], p[512];
    make_dir(dir, sizeof dir, "tails");
    block_store *s = open_store(dir, BIG, 0);
    static chain a;
    chain_make(&a, 4, 15, false);
    put_flush(s, &a, 0, 4);
    block_store_close(s);
    /* only a0 indexed; a3's payload damaged; junk after it */
    unindex(dir, &a, 3);
    unindex(dir, &a, 2);
    unindex(dir, &a, 1);
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE segments SET size = %llu", (unsigned long long)LEN);
    index_sql(dir, sql);
    flip(dir, 1, (off_t)(3 * LEN + HDR_BYTES + PROV + 9));
    seg_file(p, sizeof p, dir, 1);
    FILE *f = fopen(p, "ab");
    CHECK(f && fwrite("not a record", 1, 12, f) == 12);
    if (f) fclose(f);
    s = open_store(dir, BIG, 0);
    CHECK(prefix(s, &a) == 3 && reads(s, &a, 1) == 1 && reads(s, &a, 2) == 1 && reads(s, &a, 3) == 0);
    uint64_t bytes = 0;
    segments(dir, &bytes);
    CHECKF(bytes == 3 * LEN && stats(s).segment_bytes == 3 * LEN, "%llu bytes", (unsigned long long)bytes);
    block_store_close(s);
}

/* A child that opens dir with PINHOLE_TEST_BLOCK_KILL=mode and puts c (or,
 * with c NULL, prunes to BIG, which compacts) is killed there. */
static void killed_at(const char *dir, const char *mode, const chain *c, uint64_t seg) {
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        setenv("PINHOLE_TEST_BLOCK_KILL", mode, 1);
        ph_err e = {0};
        block_store_opts o = {.budget = BIG, .segment_bytes = seg};
        block_store *s = block_store_open(dir, &o, &e);
        if (!s) _exit(2);
        if (c) {
            block_store_put(s, c->p, c->n, NULL, NULL);
            block_store_flush(s);
        } else {
            uint64_t n, b;
            block_store_prune(s, BIG, &n, &b, &e);
        }
        block_store_close(s);
        _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s: status %#x", mode, status);
}

/* After a kill: every indexed record whole, the segments as long as their
 * indexed records (nothing torn left), verify clean. */
static void whole_only(int line, block_store *s, const char *dir) {
    uint64_t ok = 0, bad = 0, bytes = 0;
    ph_err e = {0};
    CHECKF(block_store_verify(s, NULL, NULL, &ok, &bad, &e) == 0 && bad == 0, "line %d: %llu bad", line,
           (unsigned long long)bad);
    segments(dir, &bytes);
    const block_store_stats st = stats(s);
    CHECKF(st.segment_bytes == bytes && bytes % LEN == 0 && st.rejected == 0,
           "line %d: index says %llu bytes, files %llu, rejected %llu", line, (unsigned long long)st.segment_bytes,
           (unsigned long long)bytes, (unsigned long long)st.rejected);
}

/* 4. kill -9 at each point of a write. */
static void killed(void) {
    const char *modes[] = {"mid-record", "before-fsync", "before-index", "in-index"};
    for (int m = 0; m < 4; m++) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/kill-%s", g_root, modes[m]);
        static chain a, b;
        chain_make(&a, 3, 21, false);
        chain_make(&b, 4, 22, true);
        block_store *s = open_store(dir, BIG, 0);
        put_flush(s, &a, 0, 3);
        block_store_close(s);
        killed_at(dir, modes[m], &b, 0);
        s = open_store(dir, BIG, 0);
        for (int i = 0; i < 3; i++) CHECKF(reads(s, &a, i) == 1, "%s: a %d", modes[m], i);
        /* appended whole but not indexed: checked and indexed at open; cut
         * in the middle of its first record: cut off */
        const int want = m == 0 ? 0 : 4;
        CHECKF(prefix(s, &b) == want, "%s: %d of b", modes[m], prefix(s, &b));
        for (int i = 0; i < want; i++) CHECKF(reads(s, &b, i) == 1, "%s: b %d", modes[m], i);
        whole_only(__LINE__, s, dir);
        CHECK(stats(s).records == (uint64_t)(3 + want));
        /* writes go on */
        put_flush(s, &b, 0, 4);
        CHECK(prefix(s, &b) == 4 && reads(s, &b, 3) == 1);
        block_store_close(s);
    }
}

/* 5. The budget: least recently used chain ends first. */
static void budget(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "budget");
    block_store *s = open_store(dir, LEN * 11 / 2, 0);
    static chain x, y, z;
    chain_make(&x, 3, 31, false);
    chain_make(&y, 3, 32, false);
    chain_make(&z, 1, 33, false);
    put_flush(s, &x, 0, 3);
    sleep_ms(5);
    put_flush(s, &y, 0, 3); /* 6 would not fit: x's end goes, not its start */
    CHECK(stats(s).evicted == 1);
    CHECK(block_store_find(s, x.p[2].key.name, NULL) == 0 && prefix(&*s, &x) == 2 && prefix(s, &y) == 3);
    /* x used again (the lookup above renewed it last): y's end is now the oldest end */
    sleep_ms(5);
    CHECK(prefix(s, &x) == 2);
    put_flush(s, &z, 0, 1);
    CHECK(stats(s).evicted == 2 && prefix(s, &y) == 2 && prefix(s, &x) == 2 && prefix(s, &z) == 1);
    for (int i = 0; i < 2; i++) CHECK(reads(s, &x, i) == 1 && reads(s, &y, i) == 1);
    CHECK(stats(s).bytes <= LEN * 11 / 2);
    /* larger than the budget: not written */
    block_store_close(s);
    s = open_store(dir, LEN - 1, 0);
    CHECK(stats(s).records == 0); /* opened under a smaller budget: all went */
    put_flush(s, &z, 0, 1);
    CHECK(stats(s).written == 0 && stats(s).no_space == 1 && prefix(s, &z) == 0);
    /* the segments whose records all went are deleted */
    CHECK(segments(dir, NULL) == 0 && stats(s).segments == 0);
    block_store_close(s);
}

/* 6. Segments roll over; a mostly dead one is compacted, a dead one deleted;
 * a kill during a compaction loses nothing. */
static void compaction(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "compact");
    block_store *s = open_store(dir, BIG, 4 * LEN);
    static chain r[8];
    put_singles(s, r, 8, 40);
    uint64_t bytes = 0;
    CHECK(segments(dir, &bytes) == 2 && bytes == 8 * LEN && stats(s).segments == 2);
    /* the first segment's records the oldest: evicted first */
    for (int i = 0; i < 3; i++) {
        sleep_ms(2);
        CHECK(prefix(s, &r[7 - i]) == 1); /* the newest three used; r0..r3 the oldest */
    }
    block_store_close(s);
    /* opened under 6 records: r0, r1 go, and segment 1, half dead, is
     * compacted (r2, r3 copied to a new segment) */
    s = open_store(dir, 6 * LEN, 4 * LEN);
    block_store_stats st = stats(s);
    CHECK(st.evicted == 2 && st.records == 6 && st.compacted == 1 && st.compacted_bytes == 2 * LEN);
    CHECK(st.segments == 2 && st.dead_bytes == 0);
    static chain extra;
    chain_make(&extra, 1, 50, false);
    put_flush(s, &extra, 0, 1); /* r2, the oldest, goes */
    st = stats(s);
    CHECKF(st.evicted == 3 && st.compacted == 1 && st.compacted_bytes == 2 * LEN && st.records == 6,
           "evicted %llu compacted %llu (%llu bytes) records %llu", (unsigned long long)st.evicted,
           (unsigned long long)st.compacted, (unsigned long long)st.compacted_bytes, (unsigned long long)st.records);
    char p[512];
    seg_file(p, sizeof p, dir, 1);
    CHECK(access(p, F_OK) != 0);
    for (int i = 3; i < 8; i++) CHECKF(reads(s, &r[i], 0) == 1, "r%d", i);
    CHECK(reads(s, &extra, 0) == 1 && reads(s, &r[2], 0) == 0);
    block_store_close(s);

    /* killed before the copies are indexed, and after but before the old
     * segment is deleted: every live record still reads, nothing torn */
    const char *modes[] = {"compact-before-index", "compact-before-delete"};
    for (int m = 0; m < 2; m++) {
        s = open_store(dir, BIG, 4 * LEN);
        block_store_close(s);
        uint64_t before = 0;
        segments(dir, &before);
        /* a dead record in the oldest segment, as another process's eviction leaves it */
        static chain victim;
        chain_make(&victim, 2, 60 + (uint32_t)m, false);
        s = open_store(dir, BIG, 4 * LEN);
        put_flush(s, &victim, 0, 2);
        block_store_close(s);
        unindex(dir, &victim, 1); /* half its segment dead: compacted when the child opens it */
        killed_at(dir, modes[m], NULL, 4 * LEN);
        s = open_store(dir, BIG, 4 * LEN);
        for (int i = 3; i < 8; i++) CHECKF(reads(s, &r[i], 0) == 1, "%s: r%d", modes[m], i);
        CHECK(reads(s, &extra, 0) == 1 && reads(s, &victim, 0) == 1 && reads(s, &victim, 1) == 0);
        whole_only(__LINE__, s, dir);
        CHECK(stats(s).records == (uint64_t)(7 + m));
        uint64_t n, b;
        ph_err e = {0};
        CHECK(block_store_prune(s, BIG, &n, &b, &e) == 0 && n == 0);
        st = stats(s);
        CHECKF(st.dead_bytes == 0 && st.segment_bytes == (uint64_t)(7 + m) * LEN, "%s: dead %llu", modes[m],
               (unsigned long long)st.dead_bytes);
        for (int i = 3; i < 8; i++) CHECKF(reads(s, &r[i], 0) == 1, "%s: r%d after prune", modes[m], i);
        block_store_close(s);
    }
}

/* 7. Two processes write to one folder at once. */
static void two_processes(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "shared");
    static chain c[2][10];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++) /* even ones the same in both, odd ones each its own */
            chain_make(&c[k][i], 3, i % 2 == 0 ? 100 + (uint32_t)i : 200 + 10 * (uint32_t)k + (uint32_t)i, false);
    pid_t pids[2];
    fflush(NULL);
    for (int k = 0; k < 2; k++) {
        if ((pids[k] = fork()) < 0) die("fork");
        if (pids[k] == 0) {
            ph_err e = {0};
            block_store_opts o = {.budget = BIG, .segment_bytes = 8 * LEN};
            block_store *s = block_store_open(dir, &o, &e);
            if (!s) _exit(2);
            for (int i = 0; i < 10; i++) block_store_put(s, c[k][i].p, 3, NULL, NULL);
            block_store_flush(s);
            block_store_close(s);
            _exit(0);
        }
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        waitpid(pids[k], &status, 0);
        CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %#x", k, status);
    }
    block_store *s = open_store(dir, BIG, 0);
    uint64_t ok = 0, bad = 0;
    ph_err e = {0};
    CHECK(block_store_verify(s, NULL, NULL, &ok, &bad, &e) == 0 && ok == 45 && bad == 0);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++)
            for (int j = 0; j < 3; j++) CHECKF(reads(s, &c[k][i], j) == 1, "child %d chain %d record %d", k, i, j);
    CHECK(segments(dir, NULL) >= 2 && stats(s).rejected == 0);
    block_store_close(s);
}

typedef struct ends_seen {
    int n;
    block_end v[8];
} ends_seen;

static int on_end(void *ud, const block_end *e) {
    ends_seen *s = ud;
    if (s->n < 8) s->v[s->n++] = *e;
    return 0;
}

static int on_bad_n;
static void on_bad(void *ud, const uint8_t name[32], const char *why) {
    (void)why;
    if (!memcmp(ud, name, 32)) on_bad_n++;
}

/* 8. Chain ends, verify, prune; a lost index rebuilt from the segments. */
static void admin(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "admin");
    block_store *s = open_store(dir, BIG, 0);
    static chain a, b, br;
    chain_make(&a, 4, 70, false);
    chain_make(&b, 2, 71, false);
    chain_make(&br, 3, 70, false); /* a's first two, then a branch of its own */
    memcpy(br.p[2].key.name, "branch-of-a-at-row-128-----------", 32);
    put_flush(s, &a, 0, 4);
    sleep_ms(3);
    put_flush(s, &b, 0, 2);
    sleep_ms(3);
    put_flush(s, &br, 0, 3);
    ends_seen es = {0};
    ph_err e = {0};
    CHECK(block_store_ends(s, on_end, &es, &e) == 0 && es.n == 3);
    /* most recent first: the branch (3 records), b (2), a (4) */
    CHECK(es.n == 3 && !memcmp(es.v[0].last.name, br.p[2].key.name, 32) && es.v[0].records == 3 &&
          es.v[0].rows == 192 && es.v[0].bytes == 3 * LEN && es.v[0].whole);
    CHECK(es.n == 3 && !memcmp(es.v[1].last.name, b.p[1].key.name, 32) && es.v[1].records == 2);
    CHECK(es.n == 3 && !memcmp(es.v[2].last.name, a.p[3].key.name, 32) && es.v[2].records == 4);
    /* a chain whose first record is gone is not whole */
    unindex(dir, &b, 0);
    es.n = 0;
    CHECK(block_store_ends(s, on_end, &es, &e) == 0 && es.n == 3 && es.v[1].records == 1 && !es.v[1].whole);
    /* verify: a flipped payload byte of a's third record */
    flip(dir, 1, (off_t)(2 * LEN + HDR_BYTES + 7));
    uint64_t ok = 0, bad = 0;
    on_bad_n = 0;
    CHECK(block_store_verify(s, on_bad, a.p[2].key.name, &ok, &bad, &e) == 0 && ok == 5 && bad == 1 &&
          on_bad_n == 1 && stats(s).rejected == 1);
    CHECK(block_store_verify(s, NULL, NULL, &ok, &bad, &e) == 0 && ok == 5 && bad == 0);
    block_store_close(s);
    /* the index lost: rebuilt from the segments, every whole record found again (the flipped one refused) */
    char p[512];
    const char *idx[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/blocks/%s", dir, idx[i]);
        unlink(p);
    }
    s = open_store(dir, BIG, 0);
    block_store_stats st = stats(s);
    CHECKF(st.records == 6 && st.rejected == 0, "rebuilt: %llu records", (unsigned long long)st.records);
    CHECK(prefix(s, &a) == 2 && reads(s, &a, 3) == 1 && prefix(s, &br) == 3 && prefix(s, &b) == 2);
    /* a damaged index: set aside and rebuilt */
    block_store_close(s);
    snprintf(p, sizeof p, "%s/blocks/index.sqlite", dir);
    FILE *f = fopen(p, "r+b");
    CHECK(f && fwrite("this is not a database at all!!", 1, 32, f) == 32);
    if (f) fclose(f);
    s = open_store(dir, BIG, 0);
    CHECK(stats(s).records == 6 && reads(s, &br, 2) == 1);
    snprintf(p, sizeof p, "%s/blocks/index.sqlite.damaged", dir);
    CHECK(access(p, F_OK) == 0);
    /* prune: the least recently used ends first, then all; the segments go with them */
    uint64_t n = 0, bytes = 0;
    CHECK(prefix(s, &br) == 3); /* br's and a's shared start the newest */
    CHECK(block_store_prune(s, 5 * LEN, &n, &bytes, &e) == 0 && n == 1 && bytes == LEN);
    CHECK(prefix(s, &br) == 3 && stats(s).records == 5 && stats(s).dead_bytes == 0);
    CHECK(block_store_prune(s, 0, &n, &bytes, &e) == 0 && n == 5 && stats(s).records == 0);
    CHECK(segments(dir, NULL) == 0 && stats(s).segments == 0 && stats(s).segment_bytes == 0);
    block_store_close(s);
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

/* 9. The folders 0700 (with missing parents), every file 0600. */
static void modes(void) {
    char top[128], dir[160], p[512];
    make_dir(top, sizeof top, "modes");
    snprintf(dir, sizeof dir, "%s/kv", top);
    block_store *s = open_store(dir, BIG, 0);
    static chain a;
    chain_make(&a, 2, 80, false);
    put_flush(s, &a, 0, 2);
    snprintf(p, sizeof p, "%s/blocks", dir);
    CHECK(mode_of(top) == 0700 && mode_of(dir) == 0700 && mode_of(p) == 0700);
    int n = 0;
    DIR *d = opendir(p);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char f[1024];
        snprintf(f, sizeof f, "%s/%s", p, de->d_name);
        CHECKF(mode_of(f) == 0600, "%s: mode %o", de->d_name, mode_of(f));
        n++;
    }
    if (d) closedir(d);
    CHECK(n >= 3); /* a segment, the index and its -wal */
    block_store_close(s);
}

/* A file system of 1 GiB (floor 256 MiB) of which g_other bytes are others'. */
static uint64_t g_other;
static char g_floor_dir[128];

static int fake_space(const char *dir, uint64_t *avail, uint64_t *total) {
    (void)dir;
    uint64_t ours = 0;
    segments(g_floor_dir, &ours);
    *total = 1ull << 30;
    *avail = *total - g_other - ours;
    return 0;
}

/* 10. The free-space floor: least recently used records make room when
 * they can; when even all of them could not, nothing is removed and the
 * write is skipped. */
static void floor_space(void) {
    make_dir(g_floor_dir, sizeof g_floor_dir, "floor");
    g_other = (1ull << 30) - PH_FS_FLOOR_MIN - 3 * LEN; /* room for 3 records */
    fs_space_set_test_hook(fake_space);
    block_store *s = open_store(g_floor_dir, BIG, LEN); /* a segment a record */
    static chain r[4];
    put_singles(s, r, 4, 90);
    block_store_stats st = stats(s);
    CHECKF(st.written == 4 && st.evicted == 1 && st.records == 3 && st.no_space == 0, "written %llu evicted %llu",
           (unsigned long long)st.written, (unsigned long long)st.evicted);
    CHECK(prefix(s, &r[0]) == 0 && reads(s, &r[3], 0) == 1);
    /* others fill the disk: nothing can make room, nothing is removed */
    g_other += 4 * LEN;
    static chain more;
    chain_make(&more, 1, 99, false);
    put_flush(s, &more, 0, 1);
    st = stats(s);
    CHECKF(st.written == 4 && st.no_space == 1 && st.records == 3 && st.evicted == 1, "no_space %llu records %llu",
           (unsigned long long)st.no_space, (unsigned long long)st.records);
    for (int i = 1; i < 4; i++) CHECK(reads(s, &r[i], 0) == 1);
    block_store_close(s);
    fs_space_set_test_hook(NULL);
}

/* 11. A write that fails for want of space though statvfs showed room (a
 * quota, or others' writes since): the least recently used record goes
 * and it is written once more; when the store holds nothing that could
 * make room, it is not written. */
static void full_write(void) {
    char dir[128];
    make_dir(dir, sizeof dir, "enospc");
    setenv("PINHOLE_TEST_BLOCK_ENOSPC", "3", 1); /* the third record's first try fails */
    block_store *s = open_store(dir, BIG, LEN);
    unsetenv("PINHOLE_TEST_BLOCK_ENOSPC");
    static chain r[3];
    put_singles(s, r, 3, 110);
    block_store_stats st = stats(s);
    CHECKF(st.written == 3 && st.evicted == 1 && st.no_space == 0 && st.records == 2, "written %llu evicted %llu",
           (unsigned long long)st.written, (unsigned long long)st.evicted);
    CHECK(prefix(s, &r[0]) == 0 && reads(s, &r[1], 0) == 1 && reads(s, &r[2], 0) == 1);
    whole_only(__LINE__, s, dir);
    block_store_close(s);
    make_dir(dir, sizeof dir, "enospc-empty");
    setenv("PINHOLE_TEST_BLOCK_ENOSPC", "1", 1);
    s = open_store(dir, BIG, 0);
    unsetenv("PINHOLE_TEST_BLOCK_ENOSPC");
    put_flush(s, &r[0], 0, 1);
    st = stats(s);
    CHECK(st.written == 0 && st.no_space == 1 && st.records == 0 && prefix(s, &r[0]) == 0);
    put_flush(s, &r[0], 0, 1); /* room again */
    CHECK(stats(s).written == 1 && reads(s, &r[0], 0) == 1);
    block_store_close(s);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

int main(void) {
    log_set_level(LOG_ERROR); /* rejections are expected here */
    umask(022);               /* the usual one: the store must not rely on a stricter umask */
    snprintf(g_root, sizeof g_root, "/tmp/ph_block_store.XXXXXX");
    if (!mkdtemp(g_root)) die("mkdtemp");
    memset(g_meta.model_id, 7, 32);
    snprintf(g_meta.format, sizeof g_meta.format, "test-f16-l2-h2x16");
    memset(g_meta.domain, 0x11, 32);

    round_trip();
    lookups();
    damage();
    tails();
    killed();
    budget();
    compaction();
    two_processes();
    admin();
    modes();
    floor_space();
    full_write();

    nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_END();
}
