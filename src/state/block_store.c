/* The block store: segment files of named records, their SQLite index, the
 * writer thread, recovery, eviction and compaction (docs/state-cache.md,
 * Block store). */
#include "state/block_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/atomic_file.h"
#include "base/cache_dir.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/test_hook.h"
#include "base/timeutil.h"

/* A record's header (docs/state-cache.md, Block store), little-endian:
 *    0  magic "PHBLKS01"           8  version (u32) = 1
 *   12  header bytes (u32) = 320  16  kind (u32)
 *   20  rows (u32)                24  provenance bytes P (u32)
 *   28  zero (u32)                32  payload bytes L (u64)
 *   40  created, unix seconds (i64)
 *   48  name (32)                 80  parent (32)
 *  112  model_id (32)            144  domain (32)
 *  176  format tag (128, NUL-padded)
 *  304  zero (8)                 312  XXH3-64 of bytes 0..311, the provenance and the payload
 *  320  provenance (P), then payload (L) */
#define MAGIC       "PHBLKS01"
#define VERSION     1
#define HDR         BLOCK_RECORD_HDR
#define SUM_AT      312
#define MAX_PROV    (1u << 26)
#define MAX_PAYLOAD (1ull << 34)
#define MAX_ROWS    (1u << 22)
#define CHUNK       (1u << 20) /* reads that only check go through a buffer of this */
#define SEG_PREFIX  "seg-"
#define SEG_SUFFIX  ".phbs"

/* Where a test asks the store to die (PINHOLE_TEST_BLOCK_KILL). */
typedef enum {
    FAULT_NONE,
    FAULT_MID_RECORD,
    FAULT_BEFORE_FSYNC,
    FAULT_BEFORE_INDEX,
    FAULT_IN_INDEX,
    FAULT_COMPACT_BEFORE_INDEX,
    FAULT_COMPACT_BEFORE_DELETE
} fault;

typedef struct job {
    block_put rec;
    block_release_fn release;
    void *ctx;
    bool skip; /* not to be written: stored meanwhile, or larger than the budget */
    struct job *next;
} job;

/* A record's header, decoded. */
typedef struct rec_hdr {
    uint8_t raw[HDR];
    block_key key;
    uint32_t n_rows, prov_bytes;
    uint64_t payload_bytes, len, sum;
    int64_t created;
} rec_hdr;

/* A record appended to the current segment and not yet indexed: a new one,
 * or (from_seg > 0) one moved there by a compaction. */
typedef struct pending {
    uint8_t name[BLOCK_NAME_BYTES], parent[BLOCK_NAME_BYTES];
    uint32_t kind, n_rows, prov_bytes;
    uint64_t payload_bytes, len, off;
    int64_t created, last_use;
    int64_t from_seg;
    uint64_t from_off;
} pending;

struct block_store {
    char *dir; /* DIR/blocks */
    uint64_t budget, seg_max;
    sqlite3 *db;
    pthread_mutex_t db_lock; /* the connection and the stats */
    pthread_mutex_t w_lock;  /* the current segment and the pending records: every append, eviction and compaction */
    pthread_mutex_t q_lock;  /* the queue */
    pthread_cond_t q_cv;
    job *head, *busy; /* queued records, oldest first; the batch being written */
    uint64_t n_queued;
    bool stop, started;
    pthread_t thread;
    int64_t cur_id; /* the segment this process appends to (0: none yet), flock held on cur_fd */
    int cur_fd;
    uint64_t cur_end, cur_committed; /* its length, and the part of it indexed */
    pending *pend;
    size_t n_pend, cap_pend;
    fault fault;
    int enospc_at;    /* a test's: the record (1: the first written) whose first try fails with ENOSPC */
    int n_writes;     /* records the writer has tried */
    bool warned_full; /* a shortage of space is logged once until a write succeeds */
    block_store_stats st;
};

/* ---- records ------------------------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The format tag as stored: its characters up to a NUL, zeros after. */
static void format_norm(char out[BLOCK_FORMAT_BYTES], const char *in) {
    memset(out, 0, BLOCK_FORMAT_BYTES);
    memcpy(out, in, strnlen(in, BLOCK_FORMAT_BYTES));
}

static bool meta_equal(const block_meta *a, const block_meta *b) {
    char fa[BLOCK_FORMAT_BYTES], fb[BLOCK_FORMAT_BYTES];
    format_norm(fa, a->format);
    format_norm(fb, b->format);
    return !memcmp(a->model_id, b->model_id, 32) && !memcmp(a->domain, b->domain, 32) &&
           !memcmp(fa, fb, BLOCK_FORMAT_BYTES);
}

static bool key_equal(const block_key *a, const block_key *b) {
    return !memcmp(a->name, b->name, BLOCK_NAME_BYTES) && !memcmp(a->parent, b->parent, BLOCK_NAME_BYTES) &&
           a->kind == b->kind && meta_equal(&a->meta, &b->meta);
}

static uint64_t rec_len(uint32_t prov_bytes, uint64_t payload_bytes) {
    return HDR + (uint64_t)prov_bytes + payload_bytes;
}

/* The header of r, created at created, its checksum included: 0, or -1
 * (out of memory). */
static int hdr_encode(const block_put *r, int64_t created, uint8_t b[HDR]) {
    memset(b, 0, HDR);
    memcpy(b, MAGIC, 8);
    put32(b + 8, VERSION);
    put32(b + 12, HDR);
    put32(b + 16, r->key.kind);
    put32(b + 20, r->n_rows);
    put32(b + 24, r->prov_bytes);
    put64(b + 32, r->payload_bytes);
    put64(b + 40, (uint64_t)created);
    memcpy(b + 48, r->key.name, 32);
    memcpy(b + 80, r->key.parent, 32);
    memcpy(b + 112, r->key.meta.model_id, 32);
    memcpy(b + 144, r->key.meta.domain, 32);
    format_norm((char *)b + 176, r->key.meta.format);
    XXH3_state_t *x = XXH3_createState();
    if (!x) return -1;
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, b, SUM_AT);
    if (r->prov_bytes) XXH3_64bits_update(x, r->prov, r->prov_bytes);
    if (r->payload_bytes) XXH3_64bits_update(x, r->payload, (size_t)r->payload_bytes);
    put64(b + SUM_AT, XXH3_64bits_digest(x));
    XXH3_freeState(x);
    return 0;
}

static int fail(char *why, size_t cap, const char *msg) {
    snprintf(why, cap, "%s", msg);
    return -1;
}

/* Reads count bytes at off, going on after short reads: 0, or -1. */
static int read_at(int fd, void *dst, size_t count, uint64_t off) {
    for (size_t done = 0; done < count;) {
        const ssize_t r = pread(fd, (uint8_t *)dst + done, count - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static int hdr_parse(rec_hdr *h, uint64_t avail, char *why, size_t cap);

/* Reads and checks the header of the record at off, of which avail bytes
 * are in the file: 0, or -1 with why (torn, or not a record of this
 * version). */
static int hdr_read(int fd, uint64_t off, uint64_t avail, rec_hdr *h, char *why, size_t cap) {
    if (avail < HDR || read_at(fd, h->raw, HDR, off)) return fail(why, cap, "shorter than a record's header");
    return hdr_parse(h, avail, why, cap);
}

/* Checks and decodes the header in h->raw of a record of which avail
 * bytes are at hand: 0, or -1 with why. */
static int hdr_parse(rec_hdr *h, uint64_t avail, char *why, size_t cap) {
    const uint8_t *b = h->raw;
    if (memcmp(b, MAGIC, 8) || get32(b + 8) != VERSION || get32(b + 12) != HDR || get32(b + 28) != 0 ||
        get64(b + 304) != 0)
        return fail(why, cap, "not a record of this version");
    memset(&h->key, 0, sizeof h->key);
    h->key.kind = get32(b + 16);
    h->n_rows = get32(b + 20);
    h->prov_bytes = get32(b + 24);
    h->payload_bytes = get64(b + 32);
    h->created = (int64_t)get64(b + 40);
    memcpy(h->key.name, b + 48, 32);
    memcpy(h->key.parent, b + 80, 32);
    memcpy(h->key.meta.model_id, b + 112, 32);
    memcpy(h->key.meta.domain, b + 144, 32);
    memcpy(h->key.meta.format, b + 176, BLOCK_FORMAT_BYTES);
    h->sum = get64(b + SUM_AT);
    if (h->key.kind == 0 || h->key.kind > BLOCK_KIND_MAX || h->n_rows > MAX_ROWS || h->prov_bytes > MAX_PROV ||
        h->payload_bytes > MAX_PAYLOAD)
        return fail(why, cap, "header sizes do not hold together");
    h->len = rec_len(h->prov_bytes, h->payload_bytes);
    if (h->len > avail) return fail(why, cap, "cut short: longer than what its segment holds");
    return 0;
}

/* Reads the provenance and payload of the record at off (into prov and
 * payload, or through a buffer where they are NULL) and checks the
 * checksum: 0, or -1 with why. */
static int body_check(int fd, uint64_t off, const rec_hdr *h, void *prov, void *payload, char *why, size_t cap) {
    const bool through = (!prov && h->prov_bytes) || (!payload && h->payload_bytes);
    uint8_t *buf = through ? malloc(CHUNK) : NULL;
    XXH3_state_t *x = XXH3_createState();
    if ((through && !buf) || !x) {
        free(buf);
        XXH3_freeState(x);
        return fail(why, cap, "out of memory");
    }
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, h->raw, SUM_AT);
    const struct {
        void *dst;
        uint64_t n, at;
    } parts[2] = {{prov, h->prov_bytes, off + HDR}, {payload, h->payload_bytes, off + HDR + h->prov_bytes}};
    int rc = 0;
    for (int i = 0; rc == 0 && i < 2; i++)
        for (uint64_t done = 0; rc == 0 && done < parts[i].n;) {
            uint8_t *dst = parts[i].dst ? (uint8_t *)parts[i].dst + done : buf;
            const uint64_t left = parts[i].n - done;
            const size_t n = parts[i].dst ? (size_t)left : (size_t)(left < CHUNK ? left : CHUNK);
            if (read_at(fd, dst, n, parts[i].at + done)) rc = fail(why, cap, "cannot read it");
            else XXH3_64bits_update(x, dst, n);
            done += n;
        }
    free(buf);
    if (rc == 0 && XXH3_64bits_digest(x) != h->sum) rc = fail(why, cap, "checksum mismatch");
    XXH3_freeState(x);
    return rc;
}

/* ---- a record as one value (the shared tier) -------------------------------- */

int block_record_header(const block_put *r, uint8_t hdr[BLOCK_RECORD_HDR]) {
    return hdr_encode(r, (int64_t)time(NULL), hdr);
}

int block_record_parse(const void *buf, size_t len, block_put *r, char *why, size_t cap) {
    rec_hdr h;
    if (len < HDR) return fail(why, cap, "shorter than a record's header");
    memcpy(h.raw, buf, HDR);
    if (hdr_parse(&h, len, why, cap)) return -1;
    if (h.len != len) return fail(why, cap, "longer than its header says");
    const uint8_t *b = buf;
    XXH3_state_t *x = XXH3_createState();
    if (!x) return fail(why, cap, "out of memory");
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, b, SUM_AT);
    XXH3_64bits_update(x, b + HDR, (size_t)(len - HDR));
    const bool ok = XXH3_64bits_digest(x) == h.sum;
    XXH3_freeState(x);
    if (!ok) return fail(why, cap, "checksum mismatch");
    *r = (block_put){.key = h.key,
                     .n_rows = h.n_rows,
                     .prov = b + HDR,
                     .prov_bytes = h.prov_bytes,
                     .payload = b + HDR + h.prov_bytes,
                     .payload_bytes = h.payload_bytes};
    return 0;
}

static char *seg_path(const block_store *s, int64_t id) {
    const size_t n = strlen(s->dir) + 48;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/" SEG_PREFIX "%lld" SEG_SUFFIX, s->dir, (long long)id);
    return p;
}

/* The id of a segment file's name, or 0. */
static int64_t seg_id_of(const char *name) {
    const size_t np = strlen(SEG_PREFIX), ns = strlen(SEG_SUFFIX), n = strlen(name);
    if (n <= np + ns || n > np + ns + 19 || strncmp(name, SEG_PREFIX, np) || strcmp(name + n - ns, SEG_SUFFIX))
        return 0;
    int64_t id = 0;
    for (size_t i = np; i < n - ns; i++) {
        if (name[i] < '0' || name[i] > '9' || (i == np && name[i] == '0')) return 0;
        id = id * 10 + (name[i] - '0');
    }
    return id;
}

static int open_seg(const block_store *s, int64_t id, int flags) {
    char *p = seg_path(s, id);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    const int fd = open(p, flags | O_CLOEXEC | O_NOFOLLOW);
    const int e = errno;
    free(p);
    errno = e;
    return fd;
}

/* ---- index ------------------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void name_hex(const uint8_t name[BLOCK_NAME_BYTES], char out[65]) { hex_encode(name, BLOCK_NAME_BYTES, out); }

static int exec(block_store *s, const char *sql) {
    char *msg = NULL;
    const int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) PH_WARN("block store: index: %s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return rc == SQLITE_OK ? 0 : -1;
}

static sqlite3_stmt *prep(block_store *s, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        PH_WARN("block store: index: %s", sqlite3_errmsg(s->db));
        return NULL;
    }
    return st;
}

/* A statement with one 64-bit integer or name bound, stepped to its end
 * (db_lock held): 0, or -1. */
static int run_int(block_store *s, const char *sql, int64_t v) {
    sqlite3_stmt *st = prep(s, sql);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, v);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

static int64_t query_int(block_store *s, const char *sql, int64_t v) {
    sqlite3_stmt *st = prep(s, sql);
    int64_t r = 0;
    if (st) {
        sqlite3_bind_int64(st, 1, v);
        if (sqlite3_step(st) == SQLITE_ROW) r = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return r;
}

static void drop_name(block_store *s, const uint8_t name[BLOCK_NAME_BYTES]) {
    sqlite3_stmt *st = prep(s, "DELETE FROM blocks WHERE name = ?1");
    if (!st) return;
    sqlite3_bind_blob(st, 1, name, BLOCK_NAME_BYTES, SQLITE_STATIC);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

static bool indexed(block_store *s, const uint8_t name[BLOCK_NAME_BYTES]) {
    sqlite3_stmt *st = prep(s, "SELECT 1 FROM blocks WHERE name = ?1");
    if (!st) return false;
    sqlite3_bind_blob(st, 1, name, BLOCK_NAME_BYTES, SQLITE_STATIC);
    const bool yes = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return yes;
}

/* A record that failed a check: logged, dropped, counted (takes db_lock). */
static void reject(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], int64_t seg, uint64_t off, const char *why) {
    char hex[65];
    name_hex(name, hex);
    PH_WARN("block store: record %s in %s/" SEG_PREFIX "%lld" SEG_SUFFIX " at %llu is bad (%s): dropped", hex, s->dir,
            (long long)seg, (unsigned long long)off, why);
    pthread_mutex_lock(&s->db_lock);
    drop_name(s, name);
    s->st.rejected++;
    pthread_mutex_unlock(&s->db_lock);
}

/* Where a record is, from the index. */
typedef struct loc {
    block_info info;
    int64_t seg;
    uint64_t off;
} loc;

#define LOC_COLS "name, parent, kind, n_rows, prov_bytes, payload_bytes, len, last_use, created, seg, off"

static void loc_read(sqlite3_stmt *st, loc *l) {
    memset(l, 0, sizeof *l);
    if (sqlite3_column_bytes(st, 0) == 32) memcpy(l->info.name, sqlite3_column_blob(st, 0), 32);
    if (sqlite3_column_bytes(st, 1) == 32) memcpy(l->info.parent, sqlite3_column_blob(st, 1), 32);
    l->info.kind = (uint32_t)sqlite3_column_int64(st, 2);
    l->info.n_rows = (uint32_t)sqlite3_column_int64(st, 3);
    l->info.prov_bytes = (uint32_t)sqlite3_column_int64(st, 4);
    l->info.payload_bytes = (uint64_t)sqlite3_column_int64(st, 5);
    l->info.bytes = (uint64_t)sqlite3_column_int64(st, 6);
    l->info.last_use = sqlite3_column_int64(st, 7);
    l->info.created = sqlite3_column_int64(st, 8);
    l->seg = sqlite3_column_int64(st, 9);
    l->off = (uint64_t)sqlite3_column_int64(st, 10);
}

/* The index's row for name (db_lock held): 1, or 0. */
static int locate(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], loc *l) {
    sqlite3_stmt *st = prep(s, "SELECT " LOC_COLS " FROM blocks WHERE name = ?1");
    if (!st) return 0;
    sqlite3_bind_blob(st, 1, name, BLOCK_NAME_BYTES, SQLITE_STATIC);
    const int found = sqlite3_step(st) == SQLITE_ROW;
    if (found) loc_read(st, l);
    sqlite3_finalize(st);
    return found;
}

static void kill_here(const block_store *s, fault f) {
    if (s->fault == f) raise(SIGKILL);
}

/* Indexes the pending records in one transaction with the segment's new
 * indexed length (db_lock held): 0, or -1 (rolled back). */
static int index_pending(block_store *s, bool compaction) {
    if (exec(s, "BEGIN IMMEDIATE")) return -1;
    sqlite3_stmt *ins =
        prep(s, "INSERT OR IGNORE INTO blocks(name, parent, kind, n_rows, prov_bytes, payload_bytes, "
                "len, last_use, created, seg, off) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    sqlite3_stmt *mov = prep(s, "UPDATE blocks SET seg = ?2, off = ?3 WHERE name = ?1 AND seg = ?4 AND off = ?5");
    int rc = ins && mov ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < s->n_pend; i++) {
        const pending *p = &s->pend[i];
        sqlite3_stmt *st = p->from_seg ? mov : ins;
        sqlite3_reset(st);
        sqlite3_bind_blob(st, 1, p->name, 32, SQLITE_STATIC);
        if (p->from_seg) {
            sqlite3_bind_int64(st, 2, s->cur_id);
            sqlite3_bind_int64(st, 3, (sqlite3_int64)p->off);
            sqlite3_bind_int64(st, 4, p->from_seg);
            sqlite3_bind_int64(st, 5, (sqlite3_int64)p->from_off);
        } else {
            sqlite3_bind_blob(st, 2, p->parent, 32, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, p->kind);
            sqlite3_bind_int64(st, 4, p->n_rows);
            sqlite3_bind_int64(st, 5, p->prov_bytes);
            sqlite3_bind_int64(st, 6, (sqlite3_int64)p->payload_bytes);
            sqlite3_bind_int64(st, 7, (sqlite3_int64)p->len);
            sqlite3_bind_int64(st, 8, p->last_use);
            sqlite3_bind_int64(st, 9, p->created);
            sqlite3_bind_int64(st, 10, s->cur_id);
            sqlite3_bind_int64(st, 11, (sqlite3_int64)p->off);
        }
        if (sqlite3_step(st) != SQLITE_DONE) rc = -1;
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(mov);
    sqlite3_stmt *sz = rc == 0 ? prep(s, "UPDATE segments SET size = ?2 WHERE id = ?1") : NULL;
    if (sz) {
        sqlite3_bind_int64(sz, 1, s->cur_id);
        sqlite3_bind_int64(sz, 2, (sqlite3_int64)s->cur_end);
        if (sqlite3_step(sz) != SQLITE_DONE) rc = -1;
        sqlite3_finalize(sz);
    } else {
        rc = -1;
    }
    if (!compaction) kill_here(s, FAULT_IN_INDEX);
    return exec(s, rc == 0 ? "COMMIT" : "ROLLBACK") || rc ? -1 : 0;
}

/* ---- the current segment -------------------------------------------------------- */

/* Cuts the current segment back to its indexed length: what was appended
 * since is dropped (w_lock held). */
static void cut_back(block_store *s) {
    if (ftruncate(s->cur_fd, (off_t)s->cur_committed) != 0 || lseek(s->cur_fd, (off_t)s->cur_committed, SEEK_SET) < 0)
        PH_WARN("block store: cannot cut %s/" SEG_PREFIX "%lld" SEG_SUFFIX " back: %s", s->dir, (long long)s->cur_id,
                strerror(errno));
    s->cur_end = s->cur_committed;
    s->n_pend = 0;
}

/* Makes the pending records durable and indexed: fsync, then one index
 * transaction (w_lock held). On failure they are cut off again. */
static int commit_pending(block_store *s, bool compaction) {
    if (!s->n_pend) return 0;
    if (!compaction) kill_here(s, FAULT_BEFORE_FSYNC);
    if (fsync(s->cur_fd) != 0) {
        PH_WARN("block store: fsync of %s/" SEG_PREFIX "%lld" SEG_SUFFIX " failed: %s", s->dir, (long long)s->cur_id,
                strerror(errno));
        pthread_mutex_lock(&s->db_lock);
        if (!compaction) s->st.failed += s->n_pend;
        pthread_mutex_unlock(&s->db_lock);
        cut_back(s);
        return -1;
    }
    kill_here(s, compaction ? FAULT_COMPACT_BEFORE_INDEX : FAULT_BEFORE_INDEX);
    pthread_mutex_lock(&s->db_lock);
    const int rc = index_pending(s, compaction);
    if (rc == 0) {
        for (size_t i = 0; i < s->n_pend; i++) {
            if (compaction) {
                s->st.compacted_bytes += s->pend[i].len;
            } else {
                s->st.written++;
                s->st.bytes_written += s->pend[i].len;
            }
        }
        s->warned_full = false;
    } else if (!compaction) {
        s->st.failed += s->n_pend;
    }
    pthread_mutex_unlock(&s->db_lock);
    if (rc) {
        cut_back(s);
        return -1;
    }
    s->cur_committed = s->cur_end;
    s->n_pend = 0;
    return 0;
}

/* Stops appending to the current segment (its lock goes with the
 * descriptor): others may compact it from now on. */
static void seal(block_store *s) {
    if (s->cur_fd >= 0) close(s->cur_fd);
    s->cur_fd = -1;
    s->cur_id = 0;
    s->cur_end = s->cur_committed = 0;
}

/* Makes a new segment and locks it. Its id is taken and its file made in
 * one index transaction: a process that checks the folder against the
 * index (recovery) does so inside a transaction too, so it never sees a
 * segment half made. A file under the new id left by a dead process (an
 * id whose transaction was rolled back) is removed first. */
static int new_segment(block_store *s) {
    pthread_mutex_lock(&s->db_lock);
    int rc = exec(s, "BEGIN IMMEDIATE");
    int64_t id = 0;
    int fd = -1;
    if (rc == 0 && run_int(s, "INSERT INTO segments(size) VALUES(?1)", 0) == 0) {
        id = sqlite3_last_insert_rowid(s->db);
        char *p = seg_path(s, id);
        for (int tries = 0; p && fd < 0 && tries < 2; tries++) {
            fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (fd < 0 && errno == EEXIST) {
                const int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                const char *base = strrchr(p, '/') + 1;
                if (dfd >= 0 && cache_dir_tmp_stale(dfd, base)) unlink(p);
                if (dfd >= 0) close(dfd);
            }
        }
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            unlink(p);
            fd = -1;
        }
        if (fd < 0) PH_WARN("block store: cannot make a segment in %s: %s", s->dir, strerror(errno));
        free(p);
    }
    if (rc == 0) rc = exec(s, fd >= 0 ? "COMMIT" : "ROLLBACK");
    pthread_mutex_unlock(&s->db_lock);
    if (rc != 0 || fd < 0) {
        if (fd >= 0) {
            char *p = seg_path(s, id);
            if (p) unlink(p);
            free(p);
            close(fd);
        }
        return -1;
    }
    s->cur_fd = fd;
    s->cur_id = id;
    s->cur_end = s->cur_committed = 0;
    return 0;
}

/* A segment to append len bytes to: the current one while it has room (or
 * is empty), else a new one, the pending records indexed first. */
static int room_for(block_store *s, uint64_t len) {
    if (s->cur_fd >= 0 && (s->cur_end == 0 || s->cur_end + len <= s->seg_max)) return 0;
    if (s->cur_fd >= 0) {
        commit_pending(s, s->n_pend && s->pend[0].from_seg);
        seal(s);
    }
    return new_segment(s);
}

static int push_pending(block_store *s, const pending *p) {
    if (s->n_pend == s->cap_pend) {
        const size_t cap = s->cap_pend ? s->cap_pend * 2 : 16;
        void *v = realloc(s->pend, cap * sizeof *s->pend);
        if (!v) return -1;
        s->pend = v;
        s->cap_pend = cap;
    }
    s->pend[s->n_pend++] = *p;
    return 0;
}

/* Appends the parts of one record (w_lock held): 0 with p->off set and p
 * pending; -1 with errno and nothing appended. mid: the test's kill in the
 * middle of a record. */
static int append(block_store *s, const void *const *parts, const uint64_t *lens, int n_parts, pending *p, bool mid) {
    if (room_for(s, p->len)) return -1;
    p->off = s->cur_end;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n_parts; i++) {
        if (mid && s->fault == FAULT_MID_RECORD && i == n_parts - 1) {
            cache_dir_write_all(s->cur_fd, parts[i], (size_t)lens[i] / 2);
            raise(SIGKILL);
        }
        if (lens[i]) rc = cache_dir_write_all(s->cur_fd, parts[i], (size_t)lens[i]);
    }
    if (rc == 0 && push_pending(s, p) != 0) {
        errno = ENOMEM;
        rc = -1;
    }
    if (rc) {
        const int e = errno;
        if (ftruncate(s->cur_fd, (off_t)p->off) != 0 || lseek(s->cur_fd, (off_t)p->off, SEEK_SET) < 0)
            PH_WARN("block store: cannot cut %s/" SEG_PREFIX "%lld" SEG_SUFFIX " back: %s", s->dir,
                    (long long)s->cur_id, strerror(errno));
        errno = e;
        return -1;
    }
    s->cur_end += p->len;
    return 0;
}

/* ---- space ---------------------------------------------------------------------- */

/* Deletes segment id if no index row points into it and no process appends
 * to it: its file, then its row, in one index transaction. fd: the segment
 * open and locked already, or -1. */
static void seg_remove(block_store *s, int64_t id, int fd) {
    const int own = fd < 0 ? open_seg(s, id, O_RDONLY) : -1;
    if (fd < 0 && own < 0 && errno != ENOENT) return;
    if (own >= 0 && flock(own, LOCK_EX | LOCK_NB) != 0) { /* a process appends to it */
        close(own);
        return;
    }
    pthread_mutex_lock(&s->db_lock);
    if (exec(s, "BEGIN IMMEDIATE") == 0) {
        bool ok = query_int(s, "SELECT COUNT(*) FROM blocks WHERE seg = ?1", id) == 0;
        char *p = ok ? seg_path(s, id) : NULL;
        if (p && unlink(p) != 0 && errno != ENOENT) ok = false;
        free(p);
        if (ok) ok = run_int(s, "DELETE FROM segments WHERE id = ?1", id) == 0;
        exec(s, ok ? "COMMIT" : "ROLLBACK");
    }
    pthread_mutex_unlock(&s->db_lock);
    if (own >= 0) close(own);
}

/* The records as base/cache_dir sees them: all may go (a read in flight
 * keeps its descriptor of a segment deleted meanwhile). */
static uint64_t removable_records(void *ud, uint64_t *total) {
    block_store *s = ud;
    pthread_mutex_lock(&s->db_lock);
    *total = (uint64_t)query_int(s, "SELECT COALESCE(SUM(len), 0) FROM blocks", 0);
    pthread_mutex_unlock(&s->db_lock);
    return *total;
}

/* Removes the least recently used chain end (a record no record names as
 * its parent); its segment goes with it when that was its last record. */
static uint64_t remove_oldest_record(void *ud) {
    block_store *s = ud;
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *st = prep(s, "SELECT " LOC_COLS " FROM blocks b WHERE NOT EXISTS "
                               "(SELECT 1 FROM blocks c WHERE c.parent = b.name) ORDER BY last_use, created LIMIT 1");
    loc l;
    const bool found = st && sqlite3_step(st) == SQLITE_ROW;
    if (found) loc_read(st, &l);
    sqlite3_finalize(st);
    int64_t left = 1;
    if (found) {
        drop_name(s, l.info.name);
        s->st.evicted++;
        left = query_int(s, "SELECT COUNT(*) FROM blocks WHERE seg = ?1", l.seg);
    }
    pthread_mutex_unlock(&s->db_lock);
    if (!found) return 0;
    if (left == 0 && l.seg != s->cur_id) seg_remove(s, l.seg, -1);
    return l.info.bytes ? l.info.bytes : 1;
}

static cache_dir_files files_of(block_store *s) {
    return (cache_dir_files){.ud = s, .removable = removable_records, .remove_oldest = remove_oldest_record};
}

/* Copies the live records of segment id (which no process appends to) into
 * the current segment, points the index at the copies, then deletes it. A
 * record that fails its check is dropped, not copied. */
static void compact(block_store *s, int64_t id) {
    const int fd = open_seg(s, id, O_RDONLY);
    if (fd < 0) return;
    struct stat st;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *q = prep(s, "SELECT " LOC_COLS " FROM blocks WHERE seg = ?1 ORDER BY off");
    loc *v = NULL;
    size_t n = 0, cap = 0;
    if (q) sqlite3_bind_int64(q, 1, id);
    while (q && sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            void *g = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
            if (!g) break;
            v = g;
        }
        loc_read(q, &v[n++]);
    }
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_lock);
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        rec_hdr h;
        char why[128];
        const uint64_t avail = (uint64_t)st.st_size > v[i].off ? (uint64_t)st.st_size - v[i].off : 0;
        uint8_t *buf = NULL;
        int rc = hdr_read(fd, v[i].off, avail, &h, why, sizeof why);
        if (rc == 0 && (memcmp(h.key.name, v[i].info.name, 32) || h.len != v[i].info.bytes))
            rc = fail(why, sizeof why, "not the record its index row names");
        if (rc == 0 && !(buf = malloc((size_t)h.len))) {
            ok = false;
            break;
        }
        if (rc == 0) {
            memcpy(buf, h.raw, HDR);
            rc = body_check(fd, v[i].off, &h, buf + HDR, buf + HDR + h.prov_bytes, why, sizeof why);
        }
        if (rc) {
            reject(s, v[i].info.name, id, v[i].off, why);
        } else {
            pending p = {.len = h.len, .from_seg = id, .from_off = v[i].off};
            memcpy(p.name, h.key.name, 32);
            const void *parts[1] = {buf};
            const uint64_t lens[1] = {h.len};
            ok = append(s, parts, lens, 1, &p, false) == 0;
        }
        free(buf);
    }
    free(v);
    if (ok && commit_pending(s, true) == 0) {
        kill_here(s, FAULT_COMPACT_BEFORE_DELETE);
        pthread_mutex_lock(&s->db_lock);
        s->st.compacted++;
        pthread_mutex_unlock(&s->db_lock);
        PH_DEBUG("block store: compacted %s/" SEG_PREFIX "%lld" SEG_SUFFIX, s->dir, (long long)id);
        seg_remove(s, id, fd);
    } else if (s->n_pend) {
        cut_back(s); /* the copies are not indexed: the old segment keeps serving */
    }
    close(fd);
}

/* Deletes the segments no index row points into and compacts those mostly
 * dead (all: any with a dead byte), but never the current one or one that
 * another process appends to (w_lock held). */
static void collect(block_store *s, bool all) {
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *q = prep(s, "SELECT g.id, g.size, COALESCE((SELECT SUM(len) FROM blocks b WHERE b.seg = g.id), 0) "
                              "FROM segments g WHERE g.id != ?1 ORDER BY g.id");
    int64_t(*v)[3] = NULL;
    size_t n = 0, cap = 0;
    if (q) sqlite3_bind_int64(q, 1, s->cur_id);
    while (q && sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            void *g = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof *v);
            if (!g) break;
            v = g;
        }
        for (int c = 0; c < 3; c++) v[n][c] = sqlite3_column_int64(q, c);
        n++;
    }
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_lock);
    for (size_t i = 0; i < n; i++) {
        const int64_t id = v[i][0], size = v[i][1], live = v[i][2], dead = size - live;
        if (live == 0) seg_remove(s, id, -1);
        else if (dead > 0 && (all || dead * 2 >= size)) compact(s, id);
    }
    free(v);
}

/* A batch not written for want of room: counted, logged once until a write
 * succeeds. */
static void short_of_space(block_store *s, uint64_t n, const char *why) {
    pthread_mutex_lock(&s->db_lock);
    s->st.no_space += n;
    if (!s->warned_full)
        PH_WARN("block store: %s: %s and removing the store's own records would not make room; blocks are not "
                "written until there is room (the stored ones are kept)",
                s->dir, why);
    s->warned_full = true;
    pthread_mutex_unlock(&s->db_lock);
}

/* ---- the writer ----------------------------------------------------------------- */

static void release_job(job *j) {
    if (j->release) j->release(j->ctx, j->rec.ud);
}

/* Whether a job of list before end (NULL: any) has name. */
static bool queued_name(const job *list, const job *end, const uint8_t name[BLOCK_NAME_BYTES]) {
    for (const job *j = list; j != end; j = j->next)
        if (!memcmp(j->rec.key.name, name, BLOCK_NAME_BYTES)) return true;
    return false;
}

/* Writes one batch (w_lock held): records stored meanwhile are skipped,
 * room is made for the rest, each is appended and released, then all are
 * made durable and indexed together. */
static void write_batch(block_store *s, job *batch) {
    uint64_t need = 0, n_new = 0;
    pthread_mutex_lock(&s->db_lock);
    for (job *j = batch; j; j = j->next) {
        const uint64_t len = rec_len(j->rec.prov_bytes, j->rec.payload_bytes);
        if (indexed(s, j->rec.key.name) || queued_name(batch, j, j->rec.key.name)) { /* (two threads' puts) */
            s->st.held++;
            j->skip = true;
        } else if (len > s->budget) {
            s->st.no_space++;
            j->skip = true;
        } else {
            need += len;
            n_new++;
        }
    }
    pthread_mutex_unlock(&s->db_lock);
    const cache_dir_files f = files_of(s);
    bool room = true;
    if (n_new) {
        cache_dir_fit(&f, s->budget > need ? s->budget - need : 0, NULL);
        room = cache_dir_make_room(s->dir, &f, need);
        if (!room)
            short_of_space(s, n_new,
                           "the file system is short of space (the store keeps max(256 MiB, 5%) of it free)");
    }
    const int64_t now = now_ms(), created = (int64_t)time(NULL);
    for (job *j = batch; j; j = j->next) {
        const block_put *r = &j->rec;
        if (j->skip || !room) {
            release_job(j);
            continue;
        }
        uint8_t hdr[HDR];
        if (hdr_encode(r, created, hdr)) {
            pthread_mutex_lock(&s->db_lock);
            s->st.failed++;
            pthread_mutex_unlock(&s->db_lock);
            release_job(j);
            continue;
        }
        pending p = {.kind = r->key.kind,
                     .n_rows = r->n_rows,
                     .prov_bytes = r->prov_bytes,
                     .payload_bytes = r->payload_bytes,
                     .len = rec_len(r->prov_bytes, r->payload_bytes),
                     .created = created,
                     .last_use = now};
        memcpy(p.name, r->key.name, 32);
        memcpy(p.parent, r->key.parent, 32);
        const void *parts[3] = {hdr, r->prov, r->payload};
        const uint64_t lens[3] = {HDR, r->prov_bytes, r->payload_bytes};
        int rc = -1;
        if (++s->n_writes == s->enospc_at) errno = ENOSPC; /* a test's full disk: not a byte goes in */
        else rc = append(s, parts, lens, 3, &p, true);
        if (rc && (errno == ENOSPC || errno == EDQUOT)) {
            /* The file system is fuller than statvfs said (a quota, or
             * others' writes since): records worth this one go when they
             * can make its room, and it is written once more. */
            if (cache_dir_room_after_full(&f, p.len, 0)) rc = append(s, parts, lens, 3, &p, true);
            if (rc && (errno == ENOSPC || errno == EDQUOT)) {
                short_of_space(s, 1, errno == EDQUOT ? "over the disk quota" : "the file system is full");
                release_job(j);
                continue;
            }
        }
        if (rc) {
            PH_WARN("block store: cannot write a record to %s: %s", s->dir, strerror(errno));
            pthread_mutex_lock(&s->db_lock);
            s->st.failed++;
            pthread_mutex_unlock(&s->db_lock);
        }
        release_job(j); /* the bytes are in the kernel's hands */
    }
    commit_pending(s, false);
    cache_dir_fit(&f, s->budget, NULL);
    collect(s, false);
}

/* Writes what is queued as one batch (q_lock held, let go while writing). */
static void run_queue(block_store *s) {
    job *batch = s->head;
    s->head = NULL;
    s->busy = batch;
    pthread_mutex_unlock(&s->q_lock);
    pthread_mutex_lock(&s->w_lock);
    write_batch(s, batch);
    pthread_mutex_unlock(&s->w_lock);
    pthread_mutex_lock(&s->q_lock);
    s->busy = NULL;
    for (job *j = batch, *next; j; j = next) {
        next = j->next;
        free(j);
        s->n_queued--;
    }
    pthread_cond_broadcast(&s->q_cv);
}

static void *writer(void *arg) {
    block_store *s = arg;
    pthread_mutex_lock(&s->q_lock);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->q_cv, &s->q_lock);
        if (!s->head) break;
        run_queue(s);
    }
    pthread_mutex_unlock(&s->q_lock);
    return NULL;
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

int block_store_put(block_store *s, const block_put *recs, int n, block_release_fn release, void *ctx) {
    int queued = 0;
    job *first = NULL, **tail = &first;
    for (int i = 0; i < n; i++) {
        const block_put *r = &recs[i];
        const bool valid = r->key.kind >= 1 && r->key.kind <= BLOCK_KIND_MAX && r->n_rows <= MAX_ROWS &&
                           r->prov_bytes <= MAX_PROV && r->payload_bytes <= MAX_PAYLOAD &&
                           (r->prov || !r->prov_bytes) && (r->payload || !r->payload_bytes) &&
                           !all_zero(r->key.name, 32) && memcmp(r->key.name, r->key.parent, 32);
        pthread_mutex_lock(&s->db_lock);
        const bool held = valid && indexed(s, r->key.name);
        if (held) s->st.held++;
        pthread_mutex_unlock(&s->db_lock);
        job *j = valid && !held ? calloc(1, sizeof *j) : NULL;
        if (j) {
            pthread_mutex_lock(&s->q_lock);
            const bool dup = queued_name(s->head, NULL, r->key.name) || queued_name(s->busy, NULL, r->key.name) ||
                             queued_name(first, NULL, r->key.name);
            pthread_mutex_unlock(&s->q_lock);
            if (dup) {
                pthread_mutex_lock(&s->db_lock);
                s->st.held++;
                pthread_mutex_unlock(&s->db_lock);
                free(j);
                j = NULL;
            }
        }
        if (!j) {
            if (release) release(ctx, r->ud);
            continue;
        }
        j->rec = *r;
        j->release = release;
        j->ctx = ctx;
        *tail = j;
        tail = &j->next;
        queued++;
    }
    if (!first) return 0;
    pthread_mutex_lock(&s->q_lock);
    job **pp = &s->head;
    while (*pp) pp = &(*pp)->next;
    *pp = first;
    s->n_queued += (uint64_t)queued;
    if (!s->started) s->started = pthread_create(&s->thread, NULL, writer, s) == 0;
    if (!s->started) run_queue(s); /* no thread: written here */
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_lock);
    return queued;
}

void block_store_flush(block_store *s) {
    pthread_mutex_lock(&s->q_lock);
    while (s->n_queued) pthread_cond_wait(&s->q_cv, &s->q_lock);
    pthread_mutex_unlock(&s->q_lock);
}

/* ---- open and recovery -------------------------------------------------------------- */

/* A record found in an unindexed tail, to index. */
typedef struct found {
    rec_hdr h;
    uint64_t off;
} found;

/* Checks the tail of segment id past its indexed length from: whole records
 * are indexed (a name stored already leaves its copy dead); what follows
 * the last whole one (a torn record, bad ones, a header that does not
 * parse and all after it) is cut off; a bad record between whole ones is
 * left as dead bytes. fd is locked. */
static void scan_tail(block_store *s, int64_t id, int fd, uint64_t from, uint64_t size, int64_t mtime_ms) {
    found *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t off = from, good_end = from;
    char why[128] = "";
    while (off < size) {
        found x = {.off = off};
        if (hdr_read(fd, off, size - off, &x.h, why, sizeof why)) break;
        if (body_check(fd, off, &x.h, NULL, NULL, why, sizeof why) == 0) {
            if (n == cap) {
                void *g = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof *v);
                if (!g) break;
                v = g;
            }
            v[n++] = x;
            good_end = off + x.h.len;
        } else {
            PH_WARN("block store: %s/" SEG_PREFIX "%lld" SEG_SUFFIX ": the record at %llu is bad (%s): not indexed",
                    s->dir, (long long)id, (unsigned long long)off, why);
        }
        off += x.h.len;
    }
    off = good_end;
    if (off < size) {
        PH_INFO("block store: %s/" SEG_PREFIX "%lld" SEG_SUFFIX ": cut off %llu bytes at %llu (%s), left by a write "
                "that died",
                s->dir, (long long)id, (unsigned long long)(size - off), (unsigned long long)off, why);
        if (ftruncate(fd, (off_t)off) != 0) {
            PH_WARN("block store: cannot cut %s/" SEG_PREFIX "%lld" SEG_SUFFIX ": %s", s->dir, (long long)id,
                    strerror(errno));
            free(v);
            return;
        }
        fsync(fd);
    }
    pthread_mutex_lock(&s->db_lock);
    if (exec(s, "BEGIN IMMEDIATE") == 0) {
        sqlite3_stmt *ins = prep(s, "INSERT OR IGNORE INTO blocks(name, parent, kind, n_rows, prov_bytes, "
                                    "payload_bytes, len, last_use, created, seg, off) "
                                    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
        int rc = ins ? 0 : -1;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const rec_hdr *h = &v[i].h;
            sqlite3_reset(ins);
            sqlite3_bind_blob(ins, 1, h->key.name, 32, SQLITE_STATIC);
            sqlite3_bind_blob(ins, 2, h->key.parent, 32, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 3, h->key.kind);
            sqlite3_bind_int64(ins, 4, h->n_rows);
            sqlite3_bind_int64(ins, 5, h->prov_bytes);
            sqlite3_bind_int64(ins, 6, (sqlite3_int64)h->payload_bytes);
            sqlite3_bind_int64(ins, 7, (sqlite3_int64)h->len);
            sqlite3_bind_int64(ins, 8, mtime_ms);
            sqlite3_bind_int64(ins, 9, h->created);
            sqlite3_bind_int64(ins, 10, id);
            sqlite3_bind_int64(ins, 11, (sqlite3_int64)v[i].off);
            if (sqlite3_step(ins) != SQLITE_DONE) rc = -1;
        }
        sqlite3_finalize(ins);
        sqlite3_stmt *sz = rc == 0 ? prep(s, "UPDATE segments SET size = ?2 WHERE id = ?1") : NULL;
        if (sz) {
            sqlite3_bind_int64(sz, 1, id);
            sqlite3_bind_int64(sz, 2, (sqlite3_int64)off);
            if (sqlite3_step(sz) != SQLITE_DONE) rc = -1;
            sqlite3_finalize(sz);
        } else {
            rc = -1;
        }
        exec(s, rc == 0 ? "COMMIT" : "ROLLBACK");
        if (rc == 0 && n)
            PH_INFO("block store: %s/" SEG_PREFIX "%lld" SEG_SUFFIX ": %zu records written but not indexed: checked "
                    "and indexed",
                    s->dir, (long long)id, n);
    }
    pthread_mutex_unlock(&s->db_lock);
    free(v);
}

/* Brings the index and the segment files together. Inside one index
 * transaction (no process is making a segment meanwhile): a segment file
 * without a row is adopted (indexed from its first byte below; an empty
 * one removed), a row without a file deleted with its records. Then each
 * segment no process appends to (its flock free) is checked: index rows
 * past its end dropped, its tail past its indexed length scanned. */
static void recover(block_store *s) {
    pthread_mutex_lock(&s->db_lock);
    if (exec(s, "BEGIN IMMEDIATE") == 0) {
        DIR *d = opendir(s->dir);
        for (struct dirent *de; d && (de = readdir(d));) {
            const int64_t id = seg_id_of(de->d_name);
            if (!id || query_int(s, "SELECT COUNT(*) FROM segments WHERE id = ?1", id)) continue;
            const int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            struct stat st;
            if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0) {
                if (st.st_size == 0) unlinkat(dirfd(d), de->d_name, 0);
                else if (run_int(s, "INSERT INTO segments(id, size) VALUES(?1, 0)", id) == 0)
                    PH_INFO("block store: %s/%s was not indexed: its records are checked", s->dir, de->d_name);
            }
            if (fd >= 0) close(fd);
        }
        if (d) closedir(d);
        sqlite3_stmt *q = prep(s, "SELECT id FROM segments");
        int64_t *gone = NULL;
        size_t n_gone = 0;
        while (q && sqlite3_step(q) == SQLITE_ROW) {
            const int64_t id = sqlite3_column_int64(q, 0);
            char *p = seg_path(s, id);
            struct stat st;
            if (p && stat(p, &st) != 0 && errno == ENOENT) {
                void *g = realloc(gone, (n_gone + 1) * sizeof *gone);
                if (g) (gone = g)[n_gone++] = id;
            }
            free(p);
        }
        sqlite3_finalize(q);
        for (size_t i = 0; i < n_gone; i++) {
            const int64_t lost = query_int(s, "SELECT COUNT(*) FROM blocks WHERE seg = ?1", gone[i]);
            if (lost)
                PH_WARN("block store: %s/" SEG_PREFIX "%lld" SEG_SUFFIX " is gone: its %lld records dropped", s->dir,
                        (long long)gone[i], (long long)lost);
            run_int(s, "DELETE FROM blocks WHERE seg = ?1", gone[i]);
            run_int(s, "DELETE FROM segments WHERE id = ?1", gone[i]);
        }
        free(gone);
        exec(s, "COMMIT");
    }
    sqlite3_stmt *q = prep(s, "SELECT id, size FROM segments ORDER BY id");
    int64_t(*segs)[2] = NULL;
    size_t n = 0, cap = 0;
    while (q && sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            void *g = realloc(segs, (cap = cap ? cap * 2 : 16) * sizeof *segs);
            if (!g) break;
            segs = g;
        }
        segs[n][0] = sqlite3_column_int64(q, 0);
        segs[n][1] = sqlite3_column_int64(q, 1);
        n++;
    }
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_lock);
    for (size_t i = 0; i < n; i++) {
        const int64_t id = segs[i][0];
        const int fd = open_seg(s, id, O_RDWR);
        struct stat st;
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &st) != 0) { /* being written: its owner's */
            if (fd >= 0) close(fd);
            continue;
        }
        const uint64_t size = (uint64_t)st.st_size;
        uint64_t from = (uint64_t)segs[i][1];
        pthread_mutex_lock(&s->db_lock);
        sqlite3_stmt *past = prep(s, "DELETE FROM blocks WHERE seg = ?1 AND off + len > ?2");
        if (past) {
            sqlite3_bind_int64(past, 1, id);
            sqlite3_bind_int64(past, 2, (sqlite3_int64)size);
            if (sqlite3_step(past) == SQLITE_DONE && sqlite3_changes(s->db) > 0) {
                PH_WARN("block store: %s/" SEG_PREFIX "%lld" SEG_SUFFIX " is shorter than its index says: %d records "
                        "dropped",
                        s->dir, (long long)id, sqlite3_changes(s->db));
                s->st.rejected += (uint64_t)sqlite3_changes(s->db);
            }
            sqlite3_finalize(past);
        }
        pthread_mutex_unlock(&s->db_lock);
        if (from > size) from = size;
        if (from < size || from != (uint64_t)segs[i][1])
            scan_tail(s, id, fd, from, size, (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
        close(fd);
    }
    free(segs);
}

/* WAL mode and the tables: SQLITE_OK or SQLite's code. Switching to WAL
 * needs the database to itself: another process setting up the same new
 * folder at the same moment makes it fail with SQLITE_BUSY, so the setup
 * is tried again for up to 10 s. */
static int setup_index(block_store *s) {
    static const char sql[] =
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS segments(id INTEGER PRIMARY KEY AUTOINCREMENT, size INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS blocks(name BLOB PRIMARY KEY, parent BLOB NOT NULL, kind INTEGER, "
        "n_rows INTEGER, prov_bytes INTEGER, payload_bytes INTEGER, len INTEGER, last_use INTEGER, "
        "created INTEGER, seg INTEGER, off INTEGER) WITHOUT ROWID;"
        "CREATE INDEX IF NOT EXISTS blocks_parent ON blocks(parent);"
        "CREATE INDEX IF NOT EXISTS blocks_seg ON blocks(seg, off);"
        "CREATE INDEX IF NOT EXISTS blocks_used ON blocks(last_use);";
    const double t_end = time_now_s() + 10.0;
    for (;;) {
        int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK) return rc;
        rc &= 0xff;
        if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || time_now_s() > t_end) return rc;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Opens the index at path (made first, 0600: its -wal and -shm files take
 * its mode), sets it up and runs SQLite's quick check: 0; 1 when it is
 * damaged (closed); -1 with err set. */
static int index_open(block_store *s, const char *path, ph_err *err) {
    const int ifd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (ifd >= 0) close(ifd);
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK)
        return err_set(err, "%s: cannot open the block index: %s", s->dir,
                       s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    sqlite3_busy_timeout(s->db, 10000);
    rc = setup_index(s);
    if (rc == SQLITE_OK) {
        sqlite3_stmt *q = NULL;
        rc = sqlite3_prepare_v2(s->db, "PRAGMA quick_check(1)", -1, &q, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
            const char *r = (const char *)sqlite3_column_text(q, 0);
            rc = r && !strcmp(r, "ok") ? SQLITE_OK : SQLITE_CORRUPT;
        }
        sqlite3_finalize(q);
        if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) rc = SQLITE_OK; /* in use: taken as sound */
    }
    if (rc == SQLITE_OK) return 0;
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
        sqlite3_close(s->db);
        s->db = NULL;
        return 1;
    }
    return err_set(err, "%s: cannot set up the block index: %s", s->dir, sqlite3_errmsg(s->db));
}

/* Keeps a damaged index aside as index.sqlite.damaged (its log as
 * index.sqlite.damaged-wal) so that a new one is built from the segments. */
static int set_index_aside(const char *path, ph_err *err) {
    const size_t n = strlen(path) + 32;
    char *a = malloc(n), *b = malloc(n);
    int rc = a && b ? 0 : -1;
    static const char *from[3] = {"", "-wal", "-shm"}, *to[3] = {".damaged", ".damaged-wal", NULL};
    for (int i = 0; rc == 0 && i < 3; i++) {
        snprintf(a, n, "%s%s", path, from[i]);
        if (to[i]) snprintf(b, n, "%s%s", path, to[i]);
        if ((to[i] ? rename(a, b) : unlink(a)) != 0 && errno != ENOENT) rc = -1;
    }
    free(a);
    free(b);
    if (rc) return err_set(err, "%s: the block index is damaged and cannot be set aside: %s", path, strerror(errno));
    PH_WARN("block store: %s is damaged: kept aside as %s.damaged; the index is rebuilt from the segments", path,
            path);
    return 0;
}

block_store *block_store_open(const char *dir, const block_store_opts *opts, ph_err *err) {
    block_store *s = calloc(1, sizeof *s);
    const size_t n = strlen(dir) + sizeof "/blocks";
    if (!s || !(s->dir = malloc(n))) {
        free(s);
        err_set(err, "out of memory");
        return NULL;
    }
    snprintf(s->dir, n, "%s/blocks", dir);
    s->budget = opts->budget;
    s->seg_max = opts->segment_bytes ? opts->segment_bytes : BLOCK_SEGMENT_BYTES;
    s->cur_fd = -1;
    pthread_mutex_init(&s->db_lock, NULL);
    pthread_mutex_init(&s->w_lock, NULL);
    pthread_mutex_init(&s->q_lock, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    const char *full = test_hook("PINHOLE_TEST_BLOCK_ENOSPC");
    if (full && *full) s->enospc_at = atoi(full);
    const char *f = test_hook("PINHOLE_TEST_BLOCK_KILL");
    if (f && *f) {
        static const struct {
            const char *name;
            fault f;
        } points[] = {{"mid-record", FAULT_MID_RECORD},
                      {"before-fsync", FAULT_BEFORE_FSYNC},
                      {"before-index", FAULT_BEFORE_INDEX},
                      {"in-index", FAULT_IN_INDEX},
                      {"compact-before-index", FAULT_COMPACT_BEFORE_INDEX},
                      {"compact-before-delete", FAULT_COMPACT_BEFORE_DELETE}};
        for (size_t i = 0; i < sizeof points / sizeof *points; i++)
            if (!strcmp(f, points[i].name)) s->fault = points[i].f;
    }
    const size_t np = n + sizeof "/index.sqlite";
    char *path = malloc(np);
    int rc = path && mkdir_p(s->dir, err) == 0 ? 0 : -1;
    if (path && rc == 0) {
        snprintf(path, np, "%s/index.sqlite", s->dir);
        rc = index_open(s, path, err);
        if (rc == 1 && (rc = set_index_aside(path, err)) == 0 && index_open(s, path, err) == 1)
            rc = err_set(err, "%s: the new block index is damaged too", s->dir);
    } else if (!path) {
        err_set(err, "out of memory");
    }
    free(path);
    if (rc != 0) {
        block_store_close(s);
        return NULL;
    }
    recover(s);
    const cache_dir_files fl = files_of(s);
    pthread_mutex_lock(&s->w_lock);
    cache_dir_fit(&fl, s->budget, NULL);
    cache_dir_make_room(s->dir, &fl, 0);
    collect(s, false);
    pthread_mutex_unlock(&s->w_lock);
    return s;
}

void block_store_close(block_store *s) {
    if (!s) return;
    pthread_mutex_lock(&s->q_lock);
    s->stop = true;
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_lock);
    if (s->started) pthread_join(s->thread, NULL);
    seal(s);
    if (s->db) sqlite3_close(s->db);
    pthread_mutex_destroy(&s->db_lock);
    pthread_mutex_destroy(&s->w_lock);
    pthread_mutex_destroy(&s->q_lock);
    pthread_cond_destroy(&s->q_cv);
    free(s->pend);
    free(s->dir);
    free(s);
}

/* ---- lookups and reads ---------------------------------------------------------------- */

/* Renews the last use of names (db_lock held). */
static void touch(block_store *s, const uint8_t (*names)[BLOCK_NAME_BYTES], int n) {
    if (n <= 0 || exec(s, "BEGIN IMMEDIATE")) return;
    sqlite3_stmt *st = prep(s, "UPDATE blocks SET last_use = ?2 WHERE name = ?1");
    const int64_t now = now_ms();
    for (int i = 0; st && i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_blob(st, 1, names[i], BLOCK_NAME_BYTES, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    exec(s, "COMMIT");
}

int block_store_prefix(block_store *s, const uint8_t (*names)[BLOCK_NAME_BYTES], int n) {
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *st = prep(s, "SELECT 1 FROM blocks WHERE name = ?1");
    int k = 0;
    while (st && k < n) {
        sqlite3_reset(st);
        sqlite3_bind_blob(st, 1, names[k], BLOCK_NAME_BYTES, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW) break;
        k++;
    }
    sqlite3_finalize(st);
    touch(s, names, k);
    pthread_mutex_unlock(&s->db_lock);
    return k;
}

int block_store_find(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], block_info *info) {
    loc l;
    pthread_mutex_lock(&s->db_lock);
    const int found = locate(s, name, &l);
    pthread_mutex_unlock(&s->db_lock);
    if (found && info) *info = l.info;
    return found;
}

/* Opens the record the index row l names and checks its header against
 * l: the segment's descriptor, or -1 with *rc: 0 when its segment is gone,
 * -1 with why when it is bad. */
static int open_record(block_store *s, const loc *l, rec_hdr *h, int *rc, char *why, size_t cap) {
    *rc = 0;
    const int fd = open_seg(s, l->seg, O_RDONLY);
    if (fd < 0) {
        if (errno != ENOENT) *rc = fail(why, cap, strerror(errno));
        return -1;
    }
    struct stat st;
    const uint64_t avail = fstat(fd, &st) == 0 && (uint64_t)st.st_size > l->off ? (uint64_t)st.st_size - l->off : 0;
    *rc = hdr_read(fd, l->off, avail, h, why, cap);
    if (*rc == 0 && (memcmp(h->key.name, l->info.name, 32) || memcmp(h->key.parent, l->info.parent, 32) ||
                     h->key.kind != l->info.kind || h->n_rows != l->info.n_rows ||
                     h->prov_bytes != l->info.prov_bytes || h->payload_bytes != l->info.payload_bytes))
        *rc = fail(why, cap, "its header is not what the index says");
    if (*rc == 0) return fd;
    close(fd);
    return -1;
}

int block_store_get(block_store *s, const block_key *want, void *prov, size_t prov_cap, void *payload,
                    size_t payload_cap, block_info *info) {
    for (int attempt = 0;; attempt++) {
        loc l;
        pthread_mutex_lock(&s->db_lock);
        const int found = locate(s, want->name, &l);
        if (!found) s->st.misses++;
        pthread_mutex_unlock(&s->db_lock);
        if (!found) return 0;
        if (l.info.prov_bytes > prov_cap || l.info.payload_bytes > payload_cap) return -2;
        rec_hdr h;
        char why[128];
        int rc;
        const int fd = open_record(s, &l, &h, &rc, why, sizeof why);
        if (fd < 0 && rc == 0) {
            /* Its segment is gone: compacted by another process since the
             * lookup (then the index points at the copy), or lost. */
            pthread_mutex_lock(&s->db_lock);
            loc again;
            const bool moved = locate(s, want->name, &again) && (again.seg != l.seg || again.off != l.off);
            if (!moved && attempt > 0) {
                drop_name(s, want->name);
                s->st.misses++;
            }
            pthread_mutex_unlock(&s->db_lock);
            if (moved || attempt == 0) continue;
            return 0;
        }
        if (rc == 0 && !key_equal(&h.key, want)) rc = fail(why, sizeof why, "not the record asked for");
        if (rc == 0) rc = body_check(fd, l.off, &h, prov, payload, why, sizeof why);
        if (fd >= 0) close(fd);
        if (rc) {
            reject(s, want->name, l.seg, l.off, why);
            return -1;
        }
        pthread_mutex_lock(&s->db_lock);
        s->st.hits++;
        s->st.bytes_read += h.len;
        touch(s, &want->name, 1);
        pthread_mutex_unlock(&s->db_lock);
        if (info) {
            *info = l.info;
            info->last_use = now_ms();
        }
        return 1;
    }
}

void block_store_forget(block_store *s, const uint8_t name[BLOCK_NAME_BYTES]) {
    pthread_mutex_lock(&s->db_lock);
    if (indexed(s, name)) {
        drop_name(s, name);
        s->st.rejected++;
    }
    pthread_mutex_unlock(&s->db_lock);
}

int block_store_children(block_store *s, const uint8_t parent[BLOCK_NAME_BYTES], uint32_t kind, block_info *out,
                         int max) {
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *st = prep(s, "SELECT " LOC_COLS " FROM blocks WHERE parent = ?1 AND kind = ?2 "
                               "ORDER BY last_use DESC, created DESC LIMIT ?3");
    int n = 0;
    if (st) {
        sqlite3_bind_blob(st, 1, parent, BLOCK_NAME_BYTES, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, kind);
        sqlite3_bind_int64(st, 3, max);
        loc l;
        while (n < max && sqlite3_step(st) == SQLITE_ROW) {
            loc_read(st, &l);
            out[n++] = l.info;
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->db_lock);
    return n;
}

int block_store_peek(block_store *s, const uint8_t name[BLOCK_NAME_BYTES], block_meta *meta, void *prov,
                     size_t prov_cap, uint32_t *prov_bytes) {
    loc l;
    pthread_mutex_lock(&s->db_lock);
    const int found = locate(s, name, &l);
    pthread_mutex_unlock(&s->db_lock);
    if (!found) return 0;
    rec_hdr h;
    char why[128];
    int rc;
    const int fd = open_record(s, &l, &h, &rc, why, sizeof why);
    if (fd < 0) return rc ? -1 : 0;
    *meta = h.key.meta;
    *prov_bytes = h.prov_bytes;
    const size_t n = h.prov_bytes < prov_cap ? h.prov_bytes : prov_cap;
    rc = read_at(fd, prov, n, l.off + HDR) ? -1 : 1;
    close(fd);
    return rc;
}

void block_store_get_stats(block_store *s, block_store_stats *st) {
    pthread_mutex_lock(&s->db_lock);
    *st = s->st;
    sqlite3_stmt *q = prep(s, "SELECT (SELECT COUNT(*) FROM blocks), (SELECT COALESCE(SUM(len), 0) FROM blocks), "
                              "(SELECT COUNT(*) FROM segments), (SELECT COALESCE(SUM(size), 0) FROM segments)");
    if (q && sqlite3_step(q) == SQLITE_ROW) {
        st->records = (uint64_t)sqlite3_column_int64(q, 0);
        st->bytes = (uint64_t)sqlite3_column_int64(q, 1);
        st->segments = (uint64_t)sqlite3_column_int64(q, 2);
        st->segment_bytes = (uint64_t)sqlite3_column_int64(q, 3);
    }
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_lock);
    st->dead_bytes = st->segment_bytes > st->bytes ? st->segment_bytes - st->bytes : 0;
    pthread_mutex_lock(&s->q_lock);
    st->queued = s->n_queued;
    pthread_mutex_unlock(&s->q_lock);
}

/* ---- administration ------------------------------------------------------------------- */

/* Every index row (where: a condition), in *v (malloc'd): their count, or
 * -1 with err set. */
static long rows_where(block_store *s, const char *where, loc **v, ph_err *err) {
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT " LOC_COLS " FROM blocks b %s", where);
    *v = NULL;
    pthread_mutex_lock(&s->db_lock);
    sqlite3_stmt *q = prep(s, sql);
    long n = 0, cap = 0;
    int rc = q ? 0 : -1;
    while (rc == 0 && sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            void *g = realloc(*v, (size_t)(cap = cap ? cap * 2 : 64) * sizeof **v);
            if (!g) {
                rc = -1;
                break;
            }
            *v = g;
        }
        loc_read(q, &(*v)[n++]);
    }
    sqlite3_finalize(q);
    if (rc) err_set(err, "%s: cannot read the index: %s", s->dir, sqlite3_errmsg(s->db));
    pthread_mutex_unlock(&s->db_lock);
    if (rc) {
        free(*v);
        *v = NULL;
        return -1;
    }
    return n;
}

int block_store_ends(block_store *s, int (*cb)(void *ud, const block_end *e), void *ud, ph_err *err) {
    loc *v;
    const long n = rows_where(s,
                              "WHERE NOT EXISTS (SELECT 1 FROM blocks c WHERE c.parent = b.name) "
                              "ORDER BY last_use DESC, created DESC",
                              &v, err);
    if (n < 0) return -1;
    for (long i = 0; i < n; i++) {
        block_end e = {.last = v[i].info};
        pthread_mutex_lock(&s->db_lock);
        sqlite3_stmt *q = prep(s, "WITH RECURSIVE ch(name, parent, n_rows, len, d) AS ("
                                  "SELECT name, parent, n_rows, len, 1 FROM blocks WHERE name = ?1 UNION ALL "
                                  "SELECT b.name, b.parent, b.n_rows, b.len, ch.d + 1 FROM blocks b "
                                  "JOIN ch ON b.name = ch.parent WHERE ch.d < 4194304) "
                                  "SELECT COUNT(*), SUM(n_rows), SUM(len), "
                                  "(SELECT parent FROM ch ORDER BY d DESC LIMIT 1) FROM ch");
        if (q) sqlite3_bind_blob(q, 1, v[i].info.name, 32, SQLITE_STATIC);
        if (q && sqlite3_step(q) == SQLITE_ROW) {
            e.records = (uint32_t)sqlite3_column_int64(q, 0);
            e.rows = (uint64_t)sqlite3_column_int64(q, 1);
            e.bytes = (uint64_t)sqlite3_column_int64(q, 2);
            e.whole = sqlite3_column_bytes(q, 3) == 32 && all_zero(sqlite3_column_blob(q, 3), 32);
        }
        sqlite3_finalize(q);
        pthread_mutex_unlock(&s->db_lock);
        if (cb(ud, &e)) break;
    }
    free(v);
    return 0;
}

int block_store_verify(block_store *s, void (*bad)(void *ud, const uint8_t name[BLOCK_NAME_BYTES], const char *why),
                       void *ud, uint64_t *n_ok, uint64_t *n_bad, ph_err *err) {
    *n_ok = *n_bad = 0;
    loc *v;
    const long n = rows_where(s, "ORDER BY seg, off", &v, err);
    if (n < 0) return -1;
    for (long i = 0; i < n; i++) {
        rec_hdr h;
        char why[128];
        int rc;
        const int fd = open_record(s, &v[i], &h, &rc, why, sizeof why);
        if (fd < 0 && rc == 0) rc = fail(why, sizeof why, "its segment is missing");
        if (fd >= 0) {
            rc = body_check(fd, v[i].off, &h, NULL, NULL, why, sizeof why);
            close(fd);
        }
        if (rc == 0) {
            (*n_ok)++;
            continue;
        }
        (*n_bad)++;
        if (bad) bad(ud, v[i].info.name, why);
        reject(s, v[i].info.name, v[i].seg, v[i].off, why);
    }
    free(v);
    return 0;
}

int block_store_prune(block_store *s, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err) {
    (void)err;
    *bytes_removed = 0;
    const cache_dir_files f = files_of(s);
    pthread_mutex_lock(&s->w_lock);
    *n_removed = cache_dir_fit(&f, max_bytes, bytes_removed);
    seal(s); /* so that its dead bytes go too */
    collect(s, true);
    pthread_mutex_unlock(&s->w_lock);
    return 0;
}
