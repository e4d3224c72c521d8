/* The disk tier: checkpoint files, their SQLite index, the writer thread. */
#include "state/disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/atomic_file.h"
#include "base/cache_dir.h"
#include "base/fs_space.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/test_hook.h"
#include "base/timeutil.h"
#include "state/domain.h"
#include "state/kv_block.h"

#define HDR_V1         256 /* version 1: the default domain */
#define HDR_V2         288 /* version 2: the domain in the header */
#define HDR_V3         320 /* version 3: the domain and the recurrent states' rows */
#define HDR_MAX        HDR_V3
#define DOMAIN_AT      248
#define REC_AT         280
#define REC_MAX        (KV_SNAPSHOTS + 1)
#define MAX_REC_FLOATS ((uint32_t)1 << 28)
#define MAGIC          "PHKVCK01"
#define SPAN_REC       (5 * 4 + 3 * 32)
#define SUFFIX         ".phkv"
#define MAX_CANDIDATES 4

typedef struct job {
    seq_state seq;      /* provenance of its rows (seq.n_rows = n) */
    const kv_cache *kv; /* the live cells it reads */
    float *rec;         /* with recurrent layers, copies of their states after rec_rows (taken when queued) */
    int32_t rec_rows[REC_MAX];
    int n_rec;
    uint32_t rec_floats; /* floats of one state */
    bool reading;        /* taken by the writer, KV not yet read */
    double due;          /* not written before this (time_now_s); 0: at once */
    struct job *next;
} job;

typedef struct key_point {
    int32_t row;
    uint8_t h[32];
} key_point;

/* Where a test asks the writer to die (PINHOLE_TEST_DISK_KILL). */
typedef enum { FAULT_NONE, FAULT_BEFORE_FSYNC, FAULT_BEFORE_RENAME, FAULT_BEFORE_INDEX, FAULT_IN_INDEX } fault;

struct disk_tier {
    char *dir;
    uint64_t budget;
    sqlite3 *db;
    pthread_mutex_t db_lock; /* the connection, the reading set, the stats */
    pthread_mutex_t q_lock;  /* the queue */
    pthread_cond_t q_cv;
    job *head; /* queued checkpoints, oldest first; head may be in flight */
    job *busy; /* the one being written */
    bool stop, started;
    pthread_t thread;
    char (*reading)[DISK_NAME_LEN]; /* files open for a load: never evicted */
    int n_reading, cap_reading;
    seq_state last; /* the writer's last file (its provenance), named last_name */
    char last_name[DISK_NAME_LEN];
    fault fault;
    int enospc_at;    /* a test's: the checkpoint (1: the first written) whose first try fails */
    int n_writes;     /* checkpoints the writer has tried */
    bool warned_full; /* a shortage of space is logged once until a write succeeds */
    disk_tier_stats st;
};

/* ---- keys -------------------------------------------------------------------- */

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

/* The span starting at row r, or NULL. */
static const seq_span *span_starting(const seq_state *s, int32_t r, int32_t *from) {
    while (*from < s->n_spans && s->spans[*from].start < r) (*from)++;
    return *from < s->n_spans && s->spans[*from].start == r ? &s->spans[*from] : NULL;
}

/* The boundary keys of s's first n rows (n must not cut a span): natural
 * boundaries (picture ends, multiples of DISK_KEY_STRIDE outside pictures)
 * and n itself. *n_natural: how many of them are natural. */
static key_point *seq_keys(const seq_state *s, int32_t n, int32_t *n_keys, int32_t *n_natural) {
    int32_t cap = n / DISK_KEY_STRIDE + s->n_spans + 2, nk = 0, nat = 0;
    key_point *k = malloc((size_t)cap * sizeof *k);
    if (!k) return NULL;
    uint8_t h[32], buf[32 + 128];
    memcpy(buf, s->model_id, 32);
    memset(buf + 32, 0, 128);
    memcpy(buf + 32, s->format, strnlen(s->format, sizeof s->format));
    sha256_digest(buf, sizeof buf, h);
    domain_fold(h, s->domain);
    sha256_ctx c;
    bool open = false;
    int32_t span = 0;
    for (int32_t r = 0; r < n;) {
        if (!open) {
            if (sha256_init(&c)) {
                free(k);
                return NULL;
            }
            sha256_update(&c, h, 32);
            open = true;
        }
        const seq_span *sp = s->tok[r] == SEQ_ROW_PICTURE ? span_starting(s, r, &span) : NULL;
        uint8_t item[4 + 32 + 8];
        if (sp) {
            put32(item, 0xffffffffu);
            memcpy(item + 4, sp->embed_key, 32);
            put32(item + 36, (uint32_t)sp->grid_x);
            put32(item + 40, (uint32_t)sp->grid_y);
            sha256_update(&c, item, sizeof item);
            r += sp->n_tokens;
        } else {
            put32(item, (uint32_t)s->tok[r]);
            sha256_update(&c, item, 4);
            r++;
        }
        bool natural = sp || r % DISK_KEY_STRIDE == 0;
        if (natural || r == n) {
            if (sha256_final(&c, h)) {
                free(k);
                return NULL;
            }
            open = false;
            k[nk].row = r;
            memcpy(k[nk].h, h, 32);
            nk++;
            if (natural) nat = nk;
        }
    }
    if (open) sha256_discard(&c);
    *n_keys = nk;
    *n_natural = nat;
    return k;
}

/* The key of the file: the one of its end. */
static void key_name(const uint8_t h[32], char name[DISK_NAME_LEN]) {
    hex_encode(h, 32, name);
    memcpy(name + 64, SUFFIX, sizeof SUFFIX);
}

/* ---- files ------------------------------------------------------------------- */

typedef struct header {
    uint32_t version, hdr_bytes;
    uint8_t model_id[32];
    char format[129];
    uint8_t domain[DOMAIN_LEN];
    uint8_t key[32];
    int32_t n_rows, n_spans, n_layer;
    uint32_t row_bytes;
    uint64_t kv_bytes, kv_sum, hdr_sum;
    int64_t created;
    int32_t rec_rows[REC_MAX]; /* version 3: the rows after which it holds the recurrent state */
    int n_rec;                 /* 0 before version 3 */
    uint32_t rec_floats;
} header;

/* The bytes of a file's recurrent section. */
static uint64_t rec_bytes(const header *h) { return (uint64_t)h->n_rec * h->rec_floats * sizeof(float); }

/* The most of a file's first n rows it can resume at: n, or with recurrent
 * states the last of their rows at or before n (0: none). */
static int32_t rec_cut(const int32_t *rows, int n_rec, int32_t n) {
    return n_rec ? kv_rows_at_most(rows, n_rec, n) : n;
}

/* Copies a file name (shorter than DISK_NAME_LEN, or cut). */
static void copy_name(char dst[DISK_NAME_LEN], const char *src) {
    size_t n = strnlen(src, DISK_NAME_LEN - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static char *path_of(const disk_tier *t, const char *name) {
    size_t n = strlen(t->dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", t->dir, name);
    return p;
}

static size_t prov_bytes(int32_t n_rows, int32_t n_spans) { return (size_t)n_rows * 8 + (size_t)n_spans * SPAN_REC; }

static uint8_t *prov_encode(const seq_state *s, int32_t n, int32_t n_spans) {
    uint8_t *p = malloc(prov_bytes(n, n_spans) + 1), *q = p;
    if (!p) return NULL;
    for (int32_t r = 0; r < n; r++, q += 8) {
        put32(q, (uint32_t)s->tok[r]);
        put32(q + 4, (uint32_t)s->pos_after[r]);
    }
    for (int32_t i = 0; i < n_spans; i++, q += SPAN_REC) {
        const seq_span *sp = &s->spans[i];
        put32(q, (uint32_t)sp->start);
        put32(q + 4, (uint32_t)sp->n_tokens);
        put32(q + 8, (uint32_t)sp->grid_x);
        put32(q + 12, (uint32_t)sp->grid_y);
        put32(q + 16, (uint32_t)sp->n_pos);
        memcpy(q + 20, sp->image_id, 32);
        memcpy(q + 52, sp->embed_key, 32);
        memcpy(q + 84, sp->cond_hash, 32);
    }
    return p;
}

/* Rebuilds the sequence from a provenance section; -1 if it does not hold
 * together (pictures out of order, overlapping, rows not marked). */
static int prov_decode(const header *h, const uint8_t *p, seq_state *s) {
    if (seq_init(s, h->n_rows > 0 ? h->n_rows : 1, NULL)) return -1;
    memcpy(s->model_id, h->model_id, 32);
    memcpy(s->format, h->format, sizeof s->format - 1);
    s->format[sizeof s->format - 1] = '\0';
    memcpy(s->domain, h->domain, sizeof s->domain);
    const uint8_t *sp = p + (size_t)h->n_rows * 8;
    int32_t r = 0;
    for (int32_t i = 0; i <= h->n_spans; i++) {
        int32_t end = i < h->n_spans ? (int32_t)get32(sp + (size_t)i * SPAN_REC) : h->n_rows;
        if (end < r || end > h->n_rows) return -1;
        for (; r < end; r++) {
            int32_t tok = (int32_t)get32(p + (size_t)r * 8), pos = (int32_t)get32(p + (size_t)r * 8 + 4);
            if (tok < 0 || seq_push_token(s, tok, pos - 1, NULL)) return -1;
        }
        if (i == h->n_spans) break;
        const uint8_t *q = sp + (size_t)i * SPAN_REC;
        seq_span x = {0};
        x.n_tokens = (int32_t)get32(q + 4);
        x.grid_x = (int32_t)get32(q + 8);
        x.grid_y = (int32_t)get32(q + 12);
        x.n_pos = (int32_t)get32(q + 16);
        memcpy(x.image_id, q + 20, 32);
        memcpy(x.embed_key, q + 52, 32);
        memcpy(x.cond_hash, q + 84, 32);
        x.has_cond = true;
        if (x.grid_x <= 0 || x.grid_y <= 0 || x.n_tokens != x.grid_x * x.grid_y || x.n_tokens > h->n_rows - r)
            return -1;
        int32_t pos_after = (int32_t)get32(p + (size_t)r * 8 + 4);
        for (int32_t j = 0; j < x.n_tokens; j++) {
            const uint8_t *row = p + (size_t)(r + j) * 8;
            if ((int32_t)get32(row) != SEQ_ROW_PICTURE || (int32_t)get32(row + 4) != pos_after) return -1;
        }
        if (seq_push_span(s, &x, pos_after - x.n_pos, NULL)) return -1;
        r += x.n_tokens;
    }
    return 0;
}

static uint32_t header_bytes(uint32_t version) { return version == 1 ? HDR_V1 : version == 2 ? HDR_V2 : HDR_V3; }

/* The version (and header size) of a checkpoint of domain: 3 with
 * recurrent states (h->n_rec set), else 1 for the default domain, 2 with
 * the domain in the header. */
static void header_layout(header *h, const uint8_t domain[DOMAIN_LEN]) {
    h->version = h->n_rec ? 3 : domain_is_default(domain) ? 1 : 2;
    h->hdr_bytes = header_bytes(h->version);
    memcpy(h->domain, domain, DOMAIN_LEN);
}

/* The header's h->hdr_bytes bytes, but its checksum. */
static void header_encode(const header *h, uint8_t b[HDR_MAX]) {
    memset(b, 0, HDR_MAX);
    memcpy(b, MAGIC, 8);
    put32(b + 8, h->version);
    put32(b + 12, h->hdr_bytes);
    memcpy(b + 16, h->model_id, 32);
    memcpy(b + 48, h->format, strnlen(h->format, 128));
    memcpy(b + 176, h->key, 32);
    put32(b + 208, (uint32_t)h->n_rows);
    put32(b + 212, (uint32_t)h->n_spans);
    put32(b + 216, (uint32_t)h->n_layer);
    put32(b + 220, h->row_bytes);
    put64(b + 224, h->kv_bytes);
    put64(b + 232, (uint64_t)h->created);
    put64(b + 240, h->kv_sum);
    if (h->version >= 2) memcpy(b + DOMAIN_AT, h->domain, DOMAIN_LEN);
    if (h->version == 3) {
        put32(b + REC_AT, (uint32_t)h->n_rec);
        put32(b + REC_AT + 4, h->rec_floats);
        for (int i = 0; i < h->n_rec; i++) put32(b + REC_AT + 8 + 4 * i, (uint32_t)h->rec_rows[i]);
    }
}

/* The checksum of a header of hdr_bytes and the provenance. */
static uint64_t header_sum(const uint8_t *b, uint32_t hdr_bytes, const uint8_t *prov, size_t n_prov) {
    XXH3_state_t *x = XXH3_createState();
    if (!x) return 0;
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, b, hdr_bytes - 8);
    XXH3_64bits_update(x, prov, n_prov);
    uint64_t v = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    return v;
}

/* A file opened and checked up to its KV bytes (which only load and
 * verify read). */
typedef struct opened {
    int fd;
    header h;
    seq_state seq;
} opened;

static int fail(char *why, size_t cap, const char *msg) {
    snprintf(why, cap, "%s", msg);
    return -1;
}

/* Opens t->dir/name and checks everything but the payload checksum: 0; -1
 * with why set (the file is bad), -2 when it does not exist (gone
 * meanwhile), -3 when it is of a newer version than this build knows (a
 * newer build's: left alone, never loaded). */
static int open_checked(const disk_tier *t, const char *name, opened *o, char *why, size_t cap) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    char *path = path_of(t, name);
    if (!path) return fail(why, cap, "out of memory");
    o->fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (o->fd < 0) return errno == ENOENT ? -2 : fail(why, cap, strerror(errno));
    uint8_t b[HDR_MAX];
    struct stat st;
    if (fstat(o->fd, &st) || pread(o->fd, b, HDR_V1, 0) != HDR_V1) return fail(why, cap, "shorter than its header");
    header *h = &o->h;
    h->version = get32(b + 8);
    h->hdr_bytes = get32(b + 12);
    if (!memcmp(b, MAGIC, 8) && h->version > 3) {
        snprintf(why, cap, "version %u, newer than this build's", h->version);
        return -3;
    }
    if (memcmp(b, MAGIC, 8) || h->version < 1 || h->hdr_bytes != header_bytes(h->version))
        return fail(why, cap, "not a pinhole checkpoint of this version");
    if (h->version >= 2) {
        const ssize_t more = (ssize_t)h->hdr_bytes - HDR_V1;
        if (pread(o->fd, b + HDR_V1, (size_t)more, HDR_V1) != more) return fail(why, cap, "shorter than its header");
        memcpy(h->domain, b + DOMAIN_AT, DOMAIN_LEN);
    }
    if (h->version == 3) {
        const uint32_t n_rec = get32(b + REC_AT);
        h->rec_floats = get32(b + REC_AT + 4);
        if (n_rec < 1 || n_rec > REC_MAX || h->rec_floats == 0 || h->rec_floats > MAX_REC_FLOATS)
            return fail(why, cap, "recurrent section sizes do not hold together");
        h->n_rec = (int)n_rec;
        for (int i = 0; i < h->n_rec; i++) h->rec_rows[i] = (int32_t)get32(b + REC_AT + 8 + 4 * i);
    }
    memcpy(h->model_id, b + 16, 32);
    memcpy(h->format, b + 48, 128);
    h->format[128] = '\0';
    memcpy(h->key, b + 176, 32);
    h->n_rows = (int32_t)get32(b + 208);
    h->n_spans = (int32_t)get32(b + 212);
    h->n_layer = (int32_t)get32(b + 216);
    h->row_bytes = get32(b + 220);
    h->kv_bytes = get64(b + 224);
    h->created = (int64_t)get64(b + 232);
    h->kv_sum = get64(b + 240);
    h->hdr_sum = get64(b + h->hdr_bytes - 8);
    if (h->n_rows <= 0 || h->n_rows > (1 << 22) || h->n_spans < 0 || h->n_spans > h->n_rows || h->n_layer <= 0 ||
        h->n_layer > 1024 || h->row_bytes == 0 || h->row_bytes > (1u << 20) ||
        h->kv_bytes != 2 * (uint64_t)h->n_layer * (uint64_t)h->n_rows * h->row_bytes)
        return fail(why, cap, "header sizes do not hold together");
    for (int i = 0; i < h->n_rec; i++)
        if (h->rec_rows[i] <= (i ? h->rec_rows[i - 1] : 0) || h->rec_rows[i] > h->n_rows)
            return fail(why, cap, "recurrent state rows do not hold together");
    const size_t np = prov_bytes(h->n_rows, h->n_spans);
    if ((uint64_t)st.st_size != h->hdr_bytes + np + h->kv_bytes + rec_bytes(h))
        return fail(why, cap, "its length is not what its header says");
    uint8_t *prov = malloc(np + 1);
    if (!prov) return fail(why, cap, "out of memory");
    int rc = 0;
    if (pread(o->fd, prov, np, h->hdr_bytes) != (ssize_t)np) rc = fail(why, cap, "cannot read its provenance");
    else if (header_sum(b, h->hdr_bytes, prov, np) != h->hdr_sum) rc = fail(why, cap, "header checksum mismatch");
    else if (prov_decode(h, prov, &o->seq)) rc = fail(why, cap, "provenance does not hold together");
    free(prov);
    if (rc) return rc;
    int32_t nk, nat;
    key_point *k = seq_keys(&o->seq, h->n_rows, &nk, &nat);
    if (!k) return fail(why, cap, "out of memory");
    char want_name[DISK_NAME_LEN];
    key_name(k[nk - 1].h, want_name);
    bool same = !memcmp(k[nk - 1].h, h->key, 32);
    free(k);
    if (!same) return fail(why, cap, "its key does not match its provenance");
    if (strcmp(want_name, name)) return fail(why, cap, "its name is not its key (renamed?)");
    return 0;
}

static void opened_close(opened *o) {
    if (o->fd >= 0) close(o->fd);
    seq_free(&o->seq);
    o->fd = -1;
}

/* Reads count bytes at off into dst, adding them to the checksum x. */
static int read_at(int fd, uint8_t *dst, size_t count, off_t off, XXH3_state_t *x) {
    for (size_t done = 0; done < count;) {
        ssize_t r = pread(fd, dst + done, count - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    XXH3_64bits_update(x, dst, count);
    return 0;
}

/* Reads the payload, the KV bytes (into the cells of kv when given, else
 * through a buffer) and the recurrent states (into *rec, a malloc of
 * rec_bytes that the caller frees, when rec is given, else through a
 * buffer), and checks its checksum. */
static int read_kv(int fd, const header *h, kv_cache *kv, float **rec, double *secs, char *why, size_t cap) {
    XXH3_state_t *x = XXH3_createState();
    const size_t part = (size_t)h->n_rows * h->row_bytes, one = (size_t)h->rec_floats * sizeof(float);
    uint8_t *buf = kv && (!h->n_rec || rec) ? NULL : malloc(part > one ? part : one);
    float *states = rec && h->n_rec ? malloc((size_t)rec_bytes(h)) : NULL;
    if (rec) *rec = NULL;
    if (!x || (!(kv && (!h->n_rec || rec)) && !buf) || (rec && h->n_rec && !states)) {
        XXH3_freeState(x);
        free(buf);
        free(states);
        return fail(why, cap, "out of memory");
    }
    XXH3_64bits_reset(x);
    const double t0 = time_now_s();
    off_t off = (off_t)h->hdr_bytes + (off_t)prov_bytes(h->n_rows, h->n_spans);
    int rc = 0;
    for (int l = 0; rc == 0 && l < h->n_layer; l++)
        for (int kvi = 0; rc == 0 && kvi < 2; kvi++) {
            if (!kv) {
                if (read_at(fd, buf, part, off, x)) rc = fail(why, cap, "cannot read its KV bytes");
                off += (off_t)part;
                continue;
            }
            /* into the cells, one block's run of them at a time */
            for (int32_t r = 0; rc == 0 && r < h->n_rows; r += KV_BLOCK_ROWS) {
                const size_t run =
                    (size_t)(h->n_rows - r < KV_BLOCK_ROWS ? h->n_rows - r : KV_BLOCK_ROWS) * h->row_bytes;
                if (read_at(fd, kv_cache_cells(kv, r, l, kvi), run, off, x))
                    rc = fail(why, cap, "cannot read its KV bytes");
                off += (off_t)run;
            }
        }
    for (int i = 0; rc == 0 && i < h->n_rec; i++, off += (off_t)one)
        if (read_at(fd, states ? (uint8_t *)states + (size_t)i * one : buf, one, off, x))
            rc = fail(why, cap, "cannot read its recurrent states");
    if (rc == 0 && XXH3_64bits_digest(x) != h->kv_sum) rc = fail(why, cap, "KV checksum mismatch");
    if (secs) *secs = time_now_s() - t0;
    XXH3_freeState(x);
    free(buf);
    if (rc == 0 && rec) *rec = states;
    else free(states);
    return rc;
}

/* ---- index ------------------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int exec(disk_tier *t, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(t->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) PH_WARN("disk cache: index: %s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return rc == SQLITE_OK ? 0 : -1;
}

static sqlite3_stmt *prep(disk_tier *t, const char *sql) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(t->db, sql, -1, &s, NULL) != SQLITE_OK) {
        PH_WARN("disk cache: index: %s", sqlite3_errmsg(t->db));
        return NULL;
    }
    return s;
}

static void index_delete(disk_tier *t, const char *name) {
    sqlite3_stmt *s = prep(t, "DELETE FROM files WHERE name = ?1; ");
    if (s) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        sqlite3_step(s);
        sqlite3_finalize(s);
    }
    if ((s = prep(t, "DELETE FROM keys WHERE name = ?1"))) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        sqlite3_step(s);
        sqlite3_finalize(s);
    }
}

static void kill_here(const disk_tier *t, fault f) {
    if (t->fault == f) raise(SIGKILL);
}

/* Indexes a file (in one transaction): its row and its keys, last used at
 * last_use (ms). */
static int index_insert(disk_tier *t, const char *name, const header *h, const seq_state *seq, uint64_t bytes,
                        int64_t last_use) {
    int32_t nk, nat;
    key_point *k = seq_keys(seq, h->n_rows, &nk, &nat);
    if (!k) return -1;
    int rc = exec(t, "BEGIN IMMEDIATE");
    if (rc == 0) {
        index_delete(t, name);
        sqlite3_stmt *s = prep(t, "INSERT INTO files(name, model_id, format, n_rows, n_pictures, bytes, last_use, "
                                  "created) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
        if (s) {
            sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
            sqlite3_bind_blob(s, 2, h->model_id, 32, SQLITE_STATIC);
            sqlite3_bind_text(s, 3, h->format, -1, SQLITE_STATIC);
            sqlite3_bind_int(s, 4, h->n_rows);
            sqlite3_bind_int(s, 5, h->n_spans);
            sqlite3_bind_int64(s, 6, (sqlite3_int64)bytes);
            sqlite3_bind_int64(s, 7, last_use);
            sqlite3_bind_int64(s, 8, h->created);
            if (sqlite3_step(s) != SQLITE_DONE) rc = -1;
            sqlite3_finalize(s);
        } else {
            rc = -1;
        }
        /* tail: the file's last natural boundary (or its end when it has
         * none), by which a newer checkpoint finds the files it extends */
        const int32_t tail = nat > 0 ? nat - 1 : nk - 1;
        if (rc == 0 && (s = prep(t, "INSERT INTO keys(hash, name, row, tail) VALUES(?1, ?2, ?3, ?4)"))) {
            for (int32_t i = 0; rc == 0 && i < nk; i++) {
                sqlite3_reset(s);
                sqlite3_bind_blob(s, 1, k[i].h, 32, SQLITE_STATIC);
                sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
                sqlite3_bind_int(s, 3, k[i].row);
                sqlite3_bind_int(s, 4, i == tail);
                if (sqlite3_step(s) != SQLITE_DONE) rc = -1;
            }
            sqlite3_finalize(s);
        } else if (rc == 0) {
            rc = -1;
        }
        kill_here(t, FAULT_IN_INDEX);
        rc = exec(t, rc == 0 ? "COMMIT" : "ROLLBACK") || rc ? -1 : 0;
    }
    free(k);
    return rc;
}

static void touch(disk_tier *t, const char *name) {
    sqlite3_stmt *s = prep(t, "UPDATE files SET last_use = ?2 WHERE name = ?1");
    if (!s) return;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, now_ms());
    sqlite3_step(s);
    sqlite3_finalize(s);
}

static bool is_reading(const disk_tier *t, const char *name) {
    for (int i = 0; i < t->n_reading; i++)
        if (!strcmp(t->reading[i], name)) return true;
    return false;
}

/* Removes a file and its index rows (db_lock held). */
static void remove_file(disk_tier *t, const char *name) {
    char *path = path_of(t, name);
    if (path && unlink(path) != 0 && errno != ENOENT)
        PH_WARN("disk cache: cannot remove %s: %s", path, strerror(errno));
    free(path);
    index_delete(t, name);
}

static void reject(disk_tier *t, const char *name, const char *why) {
    PH_WARN("disk cache: %s/%s is bad (%s): removed", t->dir, name, why);
    remove_file(t, name);
    t->st.rejected++;
}

/* Names (with rows) of files that have key h (tail_only: as their tail). */
typedef struct cand {
    char name[DISK_NAME_LEN];
    int32_t n_rows;
} cand;

static int candidates(disk_tier *t, const uint8_t h[32], bool tail_only, cand *out, int max) {
    sqlite3_stmt *s = prep(t, tail_only ? "SELECT f.name, f.n_rows FROM keys k JOIN files f ON f.name = k.name "
                                          "WHERE k.hash = ?1 AND k.tail = 1 ORDER BY f.last_use DESC LIMIT ?2"
                                        : "SELECT f.name, f.n_rows FROM keys k JOIN files f ON f.name = k.name "
                                          "WHERE k.hash = ?1 ORDER BY f.n_rows DESC, f.last_use DESC LIMIT ?2");
    if (!s) return 0;
    sqlite3_bind_blob(s, 1, h, 32, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, max);
    int n = 0;
    while (n < max && sqlite3_step(s) == SQLITE_ROW) {
        const char *nm = (const char *)sqlite3_column_text(s, 0);
        if (!nm || strlen(nm) >= DISK_NAME_LEN) continue;
        copy_name(out[n].name, nm);
        out[n].n_rows = sqlite3_column_int(s, 1);
        n++;
    }
    sqlite3_finalize(s);
    return n;
}

static void refresh_totals(disk_tier *t) {
    sqlite3_stmt *s = prep(t, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM files");
    if (s && sqlite3_step(s) == SQLITE_ROW) {
        t->st.entries = (uint64_t)sqlite3_column_int64(s, 0);
        t->st.bytes = (uint64_t)sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
}

/* The folder's files as base/cache_dir sees them (db_lock held): all but
 * those open for a load may be removed, least recently used first. */
static uint64_t removable_files(void *ud, uint64_t *total) {
    disk_tier *t = ud;
    refresh_totals(t);
    uint64_t b = *total = t->st.bytes;
    sqlite3_stmt *s = t->n_reading ? prep(t, "SELECT bytes FROM files WHERE name = ?1") : NULL;
    for (int i = 0; s && i < t->n_reading; i++) {
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, t->reading[i], -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            const uint64_t r = (uint64_t)sqlite3_column_int64(s, 0);
            b -= r < b ? r : b;
        }
    }
    sqlite3_finalize(s);
    return b;
}

static uint64_t remove_oldest_file(void *ud) {
    disk_tier *t = ud;
    sqlite3_stmt *s = prep(t, "SELECT name, bytes FROM files ORDER BY last_use ASC");
    char name[DISK_NAME_LEN] = "";
    uint64_t bytes = 0;
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        const char *nm = (const char *)sqlite3_column_text(s, 0);
        if (!nm || strlen(nm) >= DISK_NAME_LEN || is_reading(t, nm)) continue;
        copy_name(name, nm);
        bytes = (uint64_t)sqlite3_column_int64(s, 1);
        break;
    }
    sqlite3_finalize(s);
    if (!name[0]) return 0;
    remove_file(t, name);
    t->st.bytes -= bytes < t->st.bytes ? bytes : t->st.bytes;
    t->st.evictions++;
    return bytes ? bytes : 1;
}

static cache_dir_files files_of(disk_tier *t) {
    return (cache_dir_files){.ud = t, .removable = removable_files, .remove_oldest = remove_oldest_file};
}

/* Removes least recently used files until at most max bytes remain
 * (db_lock held). */
static void enforce(disk_tier *t, uint64_t max, uint64_t *n_removed, uint64_t *bytes_removed) {
    const cache_dir_files f = files_of(t);
    const uint64_t n = cache_dir_fit(&f, max, bytes_removed);
    if (n_removed) *n_removed += n;
}

/* Room for need more bytes above the file system's free-space floor,
 * removing least recently used files only when that can make it
 * (base/cache_dir; db_lock held). */
static bool make_room(disk_tier *t, uint64_t need) {
    const cache_dir_files f = files_of(t);
    return cache_dir_make_room(t->dir, &f, need);
}

/* A checkpoint not written for want of room: counted, logged once until a
 * write succeeds. db_lock held. */
static void short_of_space(disk_tier *t, const char *why) {
    t->st.no_space++;
    if (!t->warned_full)
        PH_WARN("disk cache: %s: %s and removing the cache's own files would not make room; checkpoints are not "
                "written until there is room (the checkpoints there are kept)",
                t->dir, why);
    t->warned_full = true;
}

/* ---- the writer ---------------------------------------------------------------- */

static bool indexed(disk_tier *t, const char *name);

static void rows_read(disk_tier *t, job *j) {
    pthread_mutex_lock(&t->q_lock);
    j->reading = false;
    pthread_cond_broadcast(&t->q_cv);
    pthread_mutex_unlock(&t->q_lock);
}

/* Whether a stored file already holds j's rows (then it is made most
 * recent): with recurrent states, only one that holds them at j's end. */
static bool held(disk_tier *t, const job *j, const key_point *k, int32_t nk, int32_t nat) {
    cand c[2 * MAX_CANDIDATES];
    /* a file holding j's rows has j's last natural key among its own, and
     * j's end key too only when it ends where j does: look for both */
    int n = candidates(t, k[nk - 1].h, false, c, MAX_CANDIDATES);
    if (nk > nat && nat > 0) n += candidates(t, k[nat - 1].h, false, c + n, MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        if (c[i].n_rows < j->seq.n_rows) continue;
        opened o;
        char why[128];
        int rc = open_checked(t, c[i].name, &o, why, sizeof why);
        bool holds = rc == 0 && seq_common_prefix(&o.seq, &j->seq) == j->seq.n_rows &&
                     rec_cut(o.h.rec_rows, o.h.n_rec, j->seq.n_rows) == j->seq.n_rows;
        opened_close(&o);
        if (rc == -1) reject(t, c[i].name, why);
        if (holds) {
            touch(t, c[i].name);
            return true;
        }
    }
    return false;
}

/* Removes the stored files that j's file extends (with recurrent states,
 * only those that end at a row where j's file holds them). */
static void drop_prefixes(disk_tier *t, const job *j, const char *name, const key_point *k, int32_t nk) {
    for (int32_t i = 0; i < nk; i++) {
        cand c[MAX_CANDIDATES];
        int n = candidates(t, k[i].h, true, c, MAX_CANDIDATES);
        for (int m = 0; m < n; m++) {
            if (c[m].n_rows > j->seq.n_rows || !strcmp(c[m].name, name) || is_reading(t, c[m].name)) continue;
            opened o;
            char why[128];
            int rc = open_checked(t, c[m].name, &o, why, sizeof why);
            bool prefix = rc == 0 && seq_common_prefix(&o.seq, &j->seq) == o.seq.n_rows &&
                          rec_cut(j->rec_rows, j->n_rec, o.seq.n_rows) == o.seq.n_rows;
            opened_close(&o);
            if (rc == -1) reject(t, c[m].name, why);
            if (prefix) {
                remove_file(t, c[m].name);
                t->st.evictions++;
            }
        }
    }
}

/* Removes the writer's previous file when j's file extends it: the keys
 * cannot find a prefix that ends before the first boundary (a short
 * conversation's prompt, then its turn), but the writer remembers what it
 * wrote last. j's provenance becomes the one remembered. */
static void drop_last_if_prefix(disk_tier *t, job *j, const char *name) {
    if (t->last.n_rows && strcmp(t->last_name, name) && !is_reading(t, t->last_name) &&
        !memcmp(t->last.model_id, j->seq.model_id, 32) && !strcmp(t->last.format, j->seq.format) &&
        seq_common_prefix(&t->last, &j->seq) == t->last.n_rows &&
        rec_cut(j->rec_rows, j->n_rec, t->last.n_rows) == t->last.n_rows && indexed(t, t->last_name)) {
        remove_file(t, t->last_name);
        t->st.evictions++;
    }
    seq_state keep = t->last;
    t->last = j->seq;
    j->seq = keep; /* freed with the job */
    copy_name(t->last_name, name);
}

/* Writes one checkpoint. */
static void write_job(disk_tier *t, job *j) {
    const seq_state *s = &j->seq; /* (moved to t->last once the file is stored) */
    const kv_cache *kv = j->kv;
    const int32_t n = s->n_rows;
    int32_t nk, nat;
    key_point *k = seq_keys(s, n, &nk, &nat);
    header h = {0};
    h.n_rec = j->n_rec;
    h.rec_floats = j->rec_floats;
    memcpy(h.rec_rows, j->rec_rows, sizeof h.rec_rows);
    header_layout(&h, s->domain);
    memcpy(h.model_id, s->model_id, 32);
    memcpy(h.format, s->format, sizeof s->format);
    h.n_rows = n;
    h.n_spans = s->n_spans;
    h.n_layer = kv->n_layer;
    h.row_bytes = (uint32_t)kv->row_bytes;
    h.kv_bytes = 2 * (uint64_t)kv->n_layer * (uint64_t)n * kv->row_bytes; /* the file's layout, not a copy's */
    h.created = (int64_t)time(NULL);
    const size_t np = prov_bytes(n, s->n_spans);
    const uint64_t bytes = h.hdr_bytes + np + h.kv_bytes + rec_bytes(&h);
    char name[DISK_NAME_LEN];
    bool skip = !k || bytes > t->budget;
    if (k) {
        memcpy(h.key, k[nk - 1].h, 32);
        key_name(h.key, name);
        pthread_mutex_lock(&t->db_lock);
        skip = skip || held(t, j, k, nk, nat);
        if (!skip && !make_room(t, bytes)) {
            skip = true;
            short_of_space(t, "the file system is short of space (the cache keeps max(256 MiB, 5%) of it free)");
        }
        if (skip) t->st.skipped++;
        pthread_mutex_unlock(&t->db_lock);
    }
    if (skip) {
        rows_read(t, j);
        free(k);
        return;
    }
    const double t0 = time_now_s();
    char *tpath = NULL, *fpath = path_of(t, name);
    const int fd = cache_dir_tmp_create(t->dir, "tmp.", SUFFIX, &tpath, NULL);
    uint8_t *prov = prov_encode(s, n, s->n_spans);
    XXH3_state_t *x = XXH3_createState();
    int rc = fd >= 0 && fpath && prov && x ? 0 : -1;
    uint8_t b[HDR_MAX] = {0};
    const bool test_full = ++t->n_writes == t->enospc_at;
    bool no_room = false;
    for (int attempt = 0; rc == 0; attempt++) {
        if (test_full && attempt == 0) { /* a test's full disk: not a byte goes in */
            errno = ENOSPC;
            rc = -1;
        } else {
            rc = cache_dir_write_all(fd, b, h.hdr_bytes) || cache_dir_write_all(fd, prov, np);
        }
        if (rc == 0) {
            XXH3_64bits_reset(x);
            /* per layer its n K cells, then its n V cells, from the live
             * cells: one block's run of them at a time */
            for (int l = 0; rc == 0 && l < kv->n_layer; l++)
                for (int kvi = 0; rc == 0 && kvi < 2; kvi++)
                    for (int32_t r = 0; rc == 0 && r < n; r += KV_BLOCK_ROWS) {
                        const uint8_t *cells = kv_cache_cells(kv, r, l, kvi);
                        const size_t run = (size_t)(n - r < KV_BLOCK_ROWS ? n - r : KV_BLOCK_ROWS) * kv->row_bytes;
                        rc = cache_dir_write_all(fd, cells, run);
                        XXH3_64bits_update(x, cells, run);
                    }
            if (rc == 0 && h.n_rec) { /* the recurrent states copied when it was queued */
                rc = cache_dir_write_all(fd, j->rec, (size_t)rec_bytes(&h));
                XXH3_64bits_update(x, j->rec, (size_t)rec_bytes(&h));
            }
            h.kv_sum = XXH3_64bits_digest(x);
        }
        if (rc == 0 || attempt > 0 || (errno != ENOSPC && errno != EDQUOT)) break;
        /* The file system is fuller than statvfs said (a quota, or others'
         * writes since): it took `written` bytes of the file. When removing
         * least recently used files can make room for the rest, they go and
         * the file is written once more (the rows are still held:
         * rows_read has not been called); else nothing is removed and the
         * checkpoint is not written. */
        const int why = errno;
        struct stat st;
        const uint64_t written = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
        pthread_mutex_lock(&t->db_lock);
        const cache_dir_files f = files_of(t);
        no_room = !cache_dir_room_after_full(&f, bytes, written);
        if (no_room) {
            short_of_space(t, why == EDQUOT ? "over the disk quota" : "the file system is full");
            t->st.skipped++;
        }
        pthread_mutex_unlock(&t->db_lock);
        if (no_room || ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
            errno = why;
            rc = -1;
            break;
        }
        PH_INFO("disk cache: %s is full: removed the least recently used checkpoints and wrote again", t->dir);
        rc = 0;
    }
    rows_read(t, j); /* the cells are in the kernel's hands now */
    if (rc == 0) {
        header_encode(&h, b);
        h.hdr_sum = header_sum(b, h.hdr_bytes, prov, np);
        put64(b + h.hdr_bytes - 8, h.hdr_sum);
        rc = pwrite(fd, b, h.hdr_bytes, 0) == (ssize_t)h.hdr_bytes ? 0 : -1;
    }
    if (rc == 0) {
        kill_here(t, FAULT_BEFORE_FSYNC);
        rc = fsync(fd);
    }
    if (fd >= 0 && close(fd) != 0) rc = -1;
    if (rc == 0) {
        kill_here(t, FAULT_BEFORE_RENAME);
        rc = rename(tpath, fpath);
    }
    if (rc == 0) {
        fsync_parent_dir(fpath);
        kill_here(t, FAULT_BEFORE_INDEX);
    } else {
        if (!no_room)
            PH_WARN("disk cache: cannot write a checkpoint of %d rows to %s: %s", n, t->dir, strerror(errno));
        if (fd >= 0) unlink(tpath); /* ours only: not one whose name was taken */
    }
    const double secs = time_now_s() - t0;
    pthread_mutex_lock(&t->db_lock);
    if (rc == 0 && index_insert(t, name, &h, s, bytes, now_ms()) == 0) {
        t->st.saves++;
        t->warned_full = false;
        t->st.bytes_written += bytes;
        t->st.write_s += secs;
        drop_prefixes(t, j, name, k, nk);
        drop_last_if_prefix(t, j, name);
        enforce(t, t->budget, NULL, NULL);
        PH_DEBUG("disk cache: wrote %s (%d rows, %d pictures, %.1f MB) in %.3f s", name, n, h.n_spans,
                 (double)bytes / 1e6, secs);
    } else if (rc == 0) {
        remove_file(t, name); /* not indexed: not kept */
    }
    pthread_mutex_unlock(&t->db_lock);
    XXH3_freeState(x);
    free(prov);
    free(tpath);
    free(fpath);
    free(k);
}

static void job_free(job *j) {
    seq_free(&j->seq);
    free(j->rec);
    free(j);
}

static void *writer(void *arg) {
    disk_tier *t = arg;
    pthread_mutex_lock(&t->q_lock);
    for (;;) {
        while (!t->head && !t->stop) pthread_cond_wait(&t->q_cv, &t->q_lock);
        if (!t->head) break;
        job *j = t->head;
        const double now = time_now_s();
        if (!t->stop && j->due > now) { /* a newer checkpoint may make it needless meanwhile */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (j->due - now);
            ts.tv_sec = (time_t)at;
            ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&t->q_cv, &t->q_lock, &ts);
            continue;
        }
        j->reading = true;
        t->busy = j;
        pthread_mutex_unlock(&t->q_lock);
        write_job(t, j);
        pthread_mutex_lock(&t->q_lock);
        t->head = j->next;
        t->busy = NULL;
        job_free(j);
        pthread_cond_broadcast(&t->q_cv);
    }
    pthread_mutex_unlock(&t->q_lock);
    return NULL;
}

/* Makes every queued checkpoint due now (q_lock held). */
static void all_due(disk_tier *t) {
    for (job *j = t->head; j; j = j->next) j->due = 0;
    pthread_cond_broadcast(&t->q_cv);
}

bool disk_tier_save(disk_tier *t, const seq_state *seq, int32_t n, const kv_cache *kv, double delay_s) {
    if (n <= 0 || n > seq->n_rows || !seq_complete(seq, n)) return false;
    job *j = calloc(1, sizeof *j);
    if (!j || seq_init(&j->seq, n, NULL) || seq_copy(&j->seq, seq, n, NULL)) {
        if (j) job_free(j);
        return false;
    }
    j->kv = kv;
    j->due = delay_s > 0 ? time_now_s() + delay_s : 0;
    if (kv->recurrent) {
        /* the recurrent states at the points at or before n, copied now:
         * the live ones change as rows come */
        int32_t rows[REC_MAX];
        const int np = kv_cache_recurrent_points(kv, rows);
        int keep = 0;
        while (keep < np && rows[keep] <= n) keep++;
        const size_t one = kv->recurrent_floats * sizeof(float);
        float *all = keep && kv->recurrent_floats <= MAX_REC_FLOATS ? malloc((size_t)np * one) : NULL;
        if (!all) {
            job_free(j);
            return false;
        }
        kv_cache_save_recurrent(kv, all);
        j->rec = all;
        j->n_rec = keep;
        j->rec_floats = (uint32_t)kv->recurrent_floats;
        memcpy(j->rec_rows, rows, (size_t)keep * sizeof *rows);
    }
    pthread_mutex_lock(&t->q_lock);
    /* a queued checkpoint that this one extends is not written; one that
     * extends this one makes it needless */
    job **pp = &t->head;
    bool needless = false;
    while (*pp) {
        job *q = *pp;
        bool same = !memcmp(q->seq.model_id, j->seq.model_id, 32) && !strcmp(q->seq.format, j->seq.format);
        int32_t common = same ? seq_common_prefix(&q->seq, &j->seq) : 0;
        if (same && common == n && rec_cut(q->rec_rows, q->n_rec, n) == n) needless = true;
        if (q != t->busy && same && common == q->seq.n_rows &&
            rec_cut(j->rec_rows, j->n_rec, q->seq.n_rows) == q->seq.n_rows && !needless) {
            *pp = q->next;
            job_free(q);
            continue;
        }
        pp = &q->next;
    }
    if (needless) {
        pthread_mutex_unlock(&t->q_lock);
        job_free(j);
        return false;
    }
    *pp = j;
    if (!t->started) {
        t->started = pthread_create(&t->thread, NULL, writer, t) == 0;
        if (!t->started) { /* no thread: write it here */
            *pp = NULL;
            pthread_mutex_unlock(&t->q_lock);
            write_job(t, j);
            job_free(j);
            return true;
        }
    }
    pthread_cond_broadcast(&t->q_cv);
    pthread_mutex_unlock(&t->q_lock);
    return true;
}

void disk_tier_release_rows(disk_tier *t, int32_t n) {
    pthread_mutex_lock(&t->q_lock);
    all_due(t);
    for (;;) {
        bool wait = false;
        for (job *j = t->head; j && !wait; j = j->next)
            if ((j != t->busy || j->reading) && j->seq.n_rows > n) wait = true;
        if (!wait) break;
        pthread_cond_wait(&t->q_cv, &t->q_lock);
    }
    pthread_mutex_unlock(&t->q_lock);
}

void disk_tier_flush(disk_tier *t) {
    pthread_mutex_lock(&t->q_lock);
    all_due(t);
    while (t->head) pthread_cond_wait(&t->q_cv, &t->q_lock);
    pthread_mutex_unlock(&t->q_lock);
}

/* ---- open and recovery ------------------------------------------------------------- */

static bool is_ckpt_name(const char *name) {
    uint8_t k[32];
    return strlen(name) == 64 + strlen(SUFFIX) && !strcmp(name + 64, SUFFIX) && hex_decode(name, 32, k);
}

static bool indexed(disk_tier *t, const char *name) {
    sqlite3_stmt *s = prep(t, "SELECT 1 FROM files WHERE name = ?1");
    if (!s) return true;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    bool yes = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return yes;
}

/* Brings the index and the folder together: rows whose file is gone are
 * deleted, temporary files of dead writes removed, and files without a row
 * indexed (last used when they were written), after a full check, or, when
 * the index is being rebuilt (rebuild: every file is unindexed), after the
 * check of their header and provenance (a load checks the rest before it
 * uses a byte). */
static void recover(disk_tier *t, bool rebuild) {
    /* index rows whose file is gone */
    sqlite3_stmt *s = prep(t, "SELECT name FROM files");
    char(*gone)[DISK_NAME_LEN] = NULL;
    size_t n_gone = 0, cap = 0;
    while (s && sqlite3_step(s) == SQLITE_ROW) {
        const char *nm = (const char *)sqlite3_column_text(s, 0);
        char *path = nm ? path_of(t, nm) : NULL;
        struct stat st;
        if (path && stat(path, &st) != 0 && errno == ENOENT && strlen(nm) < DISK_NAME_LEN) {
            if (n_gone == cap) {
                void *g = realloc(gone, (cap = cap ? cap * 2 : 16) * sizeof *gone);
                if (!g) break;
                gone = g;
            }
            copy_name(gone[n_gone++], nm);
        }
        free(path);
    }
    sqlite3_finalize(s);
    for (size_t i = 0; i < n_gone; i++) {
        PH_INFO("disk cache: %s is indexed but gone: row removed", gone[i]);
        index_delete(t, gone[i]);
    }
    free(gone);
    /* temporary files of dead writers; files that were never indexed */
    DIR *d = opendir(t->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (!strncmp(name, "tmp.", 4) && cache_dir_tmp_stale(dirfd(d), name)) {
            if (unlinkat(dirfd(d), name, 0) == 0) PH_INFO("disk cache: removed %s, left by a write that died", name);
            continue;
        }
        if (!is_ckpt_name(name) || indexed(t, name)) continue;
        opened o;
        char why[128];
        int rc = open_checked(t, name, &o, why, sizeof why);
        if (rc == 0 && !rebuild) rc = read_kv(o.fd, &o.h, NULL, NULL, NULL, why, sizeof why);
        struct stat st;
        if (rc == 0 && fstat(o.fd, &st) != 0) {
            PH_WARN("disk cache: %s/%s: %s; not indexed", t->dir, name, strerror(errno));
            rc = -2; /* left as it is */
        }
        if (rc == 0) {
            const int64_t used = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
            if (index_insert(t, name, &o.h, &o.seq, (uint64_t)st.st_size, used) == 0 && !rebuild)
                PH_INFO("disk cache: %s was not indexed: checked and indexed", name);
        } else if (rc == -1) {
            reject(t, name, why);
        }
        opened_close(&o);
    }
    closedir(d);
}

/* WAL mode and the tables: SQLITE_OK or SQLite's code. Switching to WAL
 * needs the database to itself, which the busy handler does not wait for:
 * another process setting up the same new folder at the same moment makes
 * it fail with SQLITE_BUSY, so the setup is tried again for up to 10 s. */
static int setup_index(disk_tier *t) {
    static const char sql[] =
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS files(name TEXT PRIMARY KEY, model_id BLOB, format TEXT, n_rows INTEGER, "
        "n_pictures INTEGER, bytes INTEGER, last_use INTEGER, created INTEGER);"
        "CREATE TABLE IF NOT EXISTS keys(hash BLOB, name TEXT, row INTEGER, tail INTEGER);"
        "CREATE INDEX IF NOT EXISTS keys_hash ON keys(hash);"
        "CREATE INDEX IF NOT EXISTS keys_name ON keys(name);"
        "CREATE INDEX IF NOT EXISTS files_used ON files(last_use);";
    const double t_end = time_now_s() + 10.0;
    for (;;) {
        int rc = sqlite3_exec(t->db, sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK) return rc;
        rc &= 0xff; /* the primary code */
        if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || time_now_s() > t_end) return rc;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* SQLite's quick check of the whole index (every page read, the tables'
 * rows against their indexes): SQLITE_OK, SQLITE_CORRUPT when it finds
 * damage, or the code of what kept it from checking (busy: taken as sound,
 * as another process is using it). */
static int check_index(disk_tier *t) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(t->db, "PRAGMA quick_check(1)", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *r = (const char *)sqlite3_column_text(s, 0);
        rc = r && !strcmp(r, "ok") ? SQLITE_OK : SQLITE_CORRUPT;
    }
    sqlite3_finalize(s);
    return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED ? SQLITE_OK : rc;
}

/* Opens the index at path (made first, 0600: SQLite would create it 0644,
 * and its -wal and -shm files take the index's mode; one that exists keeps
 * its mode), sets it up and checks it: 0; 1 when the file is damaged (not
 * a database, or malformed: why says so, t->db is closed); -1 with err set
 * when it cannot be opened for another reason. */
static int index_open(disk_tier *t, const char *path, char *why, size_t cap, ph_err *err) {
    const int ifd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (ifd >= 0) close(ifd);
    int rc = sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        err_set(err, "%s: cannot open the checkpoint index: %s", t->dir,
                t->db ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc));
        return -1;
    }
    sqlite3_busy_timeout(t->db, 10000);
    rc = setup_index(t);
    if (rc == SQLITE_OK) rc = check_index(t);
    if (rc == SQLITE_OK) return 0;
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
        snprintf(why, cap, "%s", sqlite3_errstr(rc));
        sqlite3_close(t->db);
        t->db = NULL;
        return 1;
    }
    err_set(err, "%s: cannot set up the checkpoint index: %s", t->dir, sqlite3_errmsg(t->db));
    return -1;
}

/* Renames (or, with to NULL, removes) t->dir/from; a missing from is
 * success, and then a stale to is removed. */
static int move_aside(disk_tier *t, const char *from, const char *to) {
    char *a = path_of(t, from), *b = to ? path_of(t, to) : NULL;
    int rc = !a || (to && !b) ? -1 : to ? rename(a, b) : unlink(a);
    if (rc != 0 && a && errno == ENOENT) rc = b && unlink(b) != 0 && errno != ENOENT ? -1 : 0;
    free(a);
    free(b);
    return rc;
}

/* Keeps a damaged index aside as index.sqlite.damaged (its write-ahead log
 * as index.sqlite.damaged-wal), replacing an earlier one, and removes its
 * shared-memory file, so that a new index is made in its place. */
static int set_index_aside(disk_tier *t, const char *why, ph_err *err) {
    if (move_aside(t, "index.sqlite", "index.sqlite.damaged") ||
        move_aside(t, "index.sqlite-wal", "index.sqlite.damaged-wal") || move_aside(t, "index.sqlite-shm", NULL))
        return err_set(err, "%s: the checkpoint index is damaged (%s) and cannot be set aside: %s", t->dir, why,
                       strerror(errno));
    PH_WARN("disk cache: %s/index.sqlite is damaged (%s): kept aside as index.sqlite.damaged; the index is "
            "rebuilt from the checkpoint files",
            t->dir, why);
    return 0;
}

disk_tier *disk_tier_open(const char *dir, uint64_t budget, ph_err *err) {
    if (mkdir_p(dir, err)) return NULL;
    disk_tier *t = calloc(1, sizeof *t);
    if (!t || !(t->dir = strdup(dir))) {
        free(t);
        err_set(err, "out of memory");
        return NULL;
    }
    t->budget = budget;
    pthread_mutex_init(&t->db_lock, NULL);
    pthread_mutex_init(&t->q_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the writer waits for due times */
    pthread_cond_init(&t->q_cv, &ca);
    pthread_condattr_destroy(&ca);
    const char *full = test_hook("PINHOLE_TEST_DISK_ENOSPC");
    if (full && *full) t->enospc_at = atoi(full);
    const char *f = test_hook("PINHOLE_TEST_DISK_KILL");
    if (f && *f) {
        t->fault = !strcmp(f, "before-fsync")    ? FAULT_BEFORE_FSYNC
                   : !strcmp(f, "before-rename") ? FAULT_BEFORE_RENAME
                   : !strcmp(f, "before-index")  ? FAULT_BEFORE_INDEX
                   : !strcmp(f, "in-index")      ? FAULT_IN_INDEX
                                                 : FAULT_NONE;
    }
    /* The index is a cache of what the folder holds: one that is missing or
     * damaged is made again from the files' own headers. */
    char *path = path_of(t, "index.sqlite"), why[128];
    bool rebuild = path && access(path, F_OK) != 0;
    int rc = path ? index_open(t, path, why, sizeof why, err) : err_set(err, "out of memory");
    if (rc == 1) {
        rebuild = true;
        rc = set_index_aside(t, why, err);
        if (rc == 0 && index_open(t, path, why, sizeof why, err) == 1)
            rc = err_set(err, "%s: the new checkpoint index is damaged too (%s)", dir, why);
    }
    free(path);
    if (rc != 0) {
        disk_tier_close(t);
        return NULL;
    }
    pthread_mutex_lock(&t->db_lock);
    recover(t, rebuild);
    enforce(t, t->budget, NULL, NULL);
    make_room(t, 0);
    pthread_mutex_unlock(&t->db_lock);
    return t;
}

void disk_tier_close(disk_tier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->q_lock);
    t->stop = true;
    pthread_cond_broadcast(&t->q_cv);
    pthread_mutex_unlock(&t->q_lock);
    if (t->started) pthread_join(t->thread, NULL);
    if (t->db) sqlite3_close(t->db);
    seq_free(&t->last);
    pthread_mutex_destroy(&t->db_lock);
    pthread_mutex_destroy(&t->q_lock);
    pthread_cond_destroy(&t->q_cv);
    free(t->reading);
    free(t->dir);
    free(t);
}

/* ---- lookups and loads ------------------------------------------------------------- */

static void reading_add(disk_tier *t, const char *name) {
    if (t->n_reading == t->cap_reading) {
        int cap = t->cap_reading ? t->cap_reading * 2 : 4;
        void *r = realloc(t->reading, (size_t)cap * sizeof *t->reading);
        if (!r) return; /* then it may be evicted: the open descriptor still reads it */
        t->reading = r;
        t->cap_reading = cap;
    }
    copy_name(t->reading[t->n_reading++], name);
}

static void reading_remove(disk_tier *t, const char *name) {
    for (int i = 0; i < t->n_reading; i++)
        if (!strcmp(t->reading[i], name)) {
            memcpy(t->reading[i], t->reading[--t->n_reading], DISK_NAME_LEN);
            return;
        }
}

/* Opens and checks candidate files (bad ones are removed), keeping in *best
 * the one that shares the most rows with want, more than *best_prefix (then
 * updated; its name in name). A file no longer than *best_prefix cannot
 * share more: it is not opened. */
static void pick(disk_tier *t, const seq_state *want, const cand *c, int n, opened *best, int32_t *best_prefix,
                 char name[DISK_NAME_LEN]) {
    for (int i = 0; i < n; i++) {
        if (c[i].n_rows <= *best_prefix) continue;
        opened o;
        char why[128];
        int rc = open_checked(t, c[i].name, &o, why, sizeof why);
        if (rc == -1) reject(t, c[i].name, why);
        if (rc == -2) index_delete(t, c[i].name);
        if (rc) {
            opened_close(&o);
            continue;
        }
        int32_t p = !memcmp(o.h.model_id, want->model_id, 32) && !strcmp(o.h.format, want->format)
                        ? rec_cut(o.h.rec_rows, o.h.n_rec, seq_common_prefix(&o.seq, want))
                        : 0;
        if (p > *best_prefix) {
            opened_close(best);
            *best = o;
            *best_prefix = p;
            copy_name(name, c[i].name);
        } else {
            opened_close(&o);
        }
    }
}

int disk_tier_find(disk_tier *t, const seq_state *want, int32_t beat, disk_match *m) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    int32_t nk, nat;
    key_point *k = want->n_rows > 0 ? seq_keys(want, want->n_rows, &nk, &nat) : NULL;
    if (!k) {
        pthread_mutex_lock(&t->db_lock);
        t->st.misses++;
        pthread_mutex_unlock(&t->db_lock);
        return 0;
    }
    pthread_mutex_lock(&t->db_lock);
    /* the longest boundary some file holds: the exact end, else a binary
     * search over the natural ones (a file that holds a boundary holds
     * every earlier one) */
    cand c[MAX_CANDIDATES];
    opened bestf = {.fd = -1};
    const int32_t floor = beat > 0 ? beat : 0;
    int32_t best_prefix = floor;
    if (nk > nat)
        pick(t, want, c, candidates(t, k[nk - 1].h, false, c, MAX_CANDIDATES), &bestf, &best_prefix, m->name);
    if (best_prefix == floor) {
        int32_t lo = 0, hi = nat - 1, best = -1;
        while (lo <= hi) {
            int32_t mid = (lo + hi) / 2;
            cand probe[1];
            if (candidates(t, k[mid].h, false, probe, 1)) {
                best = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        if (best >= 0)
            pick(t, want, c, candidates(t, k[best].h, false, c, MAX_CANDIDATES), &bestf, &best_prefix, m->name);
    }
    free(k);
    if (best_prefix == floor) {
        t->st.misses++;
        pthread_mutex_unlock(&t->db_lock);
        return 0;
    }
    reading_add(t, m->name);
    pthread_mutex_unlock(&t->db_lock);
    m->fd = bestf.fd;
    m->seq = bestf.seq;
    m->prefix = best_prefix;
    m->kv_bytes = bestf.h.kv_bytes;
    m->kv_sum = bestf.h.kv_sum;
    m->n_layer = bestf.h.n_layer;
    m->row_bytes = bestf.h.row_bytes;
    m->hdr_bytes = bestf.h.hdr_bytes;
    m->n_rec = bestf.h.n_rec;
    m->rec_floats = bestf.h.rec_floats;
    memcpy(m->rec_rows, bestf.h.rec_rows, sizeof m->rec_rows);
    return 1;
}

int disk_tier_load(disk_tier *t, disk_match *m, kv_cache *kv, int32_t n, ph_err *err) {
    header h = {0};
    h.n_rows = m->seq.n_rows;
    h.n_spans = m->seq.n_spans;
    h.n_layer = m->n_layer;
    h.row_bytes = m->row_bytes;
    h.hdr_bytes = m->hdr_bytes;
    h.kv_sum = m->kv_sum;
    h.n_rec = m->n_rec;
    h.rec_floats = m->rec_floats;
    if (m->n_layer != kv->n_layer || m->row_bytes != kv->row_bytes || h.n_rows > kv->rows.n_ctx || n > h.n_rows)
        return err_set(err, "checkpoint %s does not fit this context (%d rows)", m->name, h.n_rows);
    if (rec_cut(m->rec_rows, m->n_rec, n) != n)
        return err_set(err, "checkpoint %s holds no recurrent state after row %d", m->name, n);
    char why[128];
    double secs = 0;
    float *rec = NULL;
    int rc = 0;
    if (kv->recurrent ? !m->n_rec || m->rec_floats != kv->recurrent_floats : m->n_rec != 0)
        rc = fail(why, sizeof why, "its recurrent states do not match the model's");
    else rc = read_kv(m->fd, &h, kv, &rec, &secs, why, sizeof why);
    pthread_mutex_lock(&t->db_lock);
    t->st.read_s += secs;
    if (rc == 0) {
        kv->rows.n_rows = n;
        if (rec) kv_cache_load_recurrent(kv, rec, m->rec_rows, m->n_rec, n);
        t->st.hits++;
        t->st.bytes_read += m->kv_bytes;
        touch(t, m->name);
    } else {
        reading_remove(t, m->name);
        reject(t, m->name, why);
        err_set(err, "checkpoint %s is bad (%s)", m->name, why);
    }
    pthread_mutex_unlock(&t->db_lock);
    free(rec);
    return rc;
}

int32_t disk_match_cut(const disk_match *m, int32_t n) { return rec_cut(m->rec_rows, m->n_rec, n); }

void disk_match_free(disk_tier *t, disk_match *m) {
    if (m->fd >= 0) close(m->fd);
    if (m->name[0]) {
        pthread_mutex_lock(&t->db_lock);
        reading_remove(t, m->name);
        pthread_mutex_unlock(&t->db_lock);
    }
    seq_free(&m->seq);
    memset(m, 0, sizeof *m);
    m->fd = -1;
}

void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st) {
    pthread_mutex_lock(&t->db_lock);
    refresh_totals(t);
    *st = t->st;
    pthread_mutex_unlock(&t->db_lock);
    st->queued = 0;
    pthread_mutex_lock(&t->q_lock);
    for (const job *j = t->head; j; j = j->next) st->queued++;
    pthread_mutex_unlock(&t->q_lock);
}

/* ---- administration ------------------------------------------------------------------ */

int disk_tier_list(disk_tier *t, int (*cb)(void *ud, const disk_entry *f), void *ud, ph_err *err) {
    pthread_mutex_lock(&t->db_lock);
    sqlite3_stmt *s = prep(t, "SELECT name, model_id, format, n_rows, n_pictures, bytes, last_use, created "
                              "FROM files ORDER BY last_use DESC");
    if (!s) {
        pthread_mutex_unlock(&t->db_lock);
        return err_set(err, "%s: cannot read the index: %s", t->dir, sqlite3_errmsg(t->db));
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
        disk_entry f = {0};
        const char *nm = (const char *)sqlite3_column_text(s, 0), *fmt = (const char *)sqlite3_column_text(s, 2);
        copy_name(f.name, nm ? nm : "");
        if (sqlite3_column_bytes(s, 1) == 32) memcpy(f.model_id, sqlite3_column_blob(s, 1), 32);
        snprintf(f.format, sizeof f.format, "%s", fmt ? fmt : "");
        f.n_rows = sqlite3_column_int(s, 3);
        f.n_pictures = sqlite3_column_int(s, 4);
        f.bytes = (uint64_t)sqlite3_column_int64(s, 5);
        f.last_use = sqlite3_column_int64(s, 6);
        f.created = sqlite3_column_int64(s, 7);
        if (cb(ud, &f)) break;
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&t->db_lock);
    return 0;
}

typedef struct names {
    char (*v)[DISK_NAME_LEN];
    size_t n, cap;
} names;

static int collect(void *ud, const disk_entry *f) {
    names *ns = ud;
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 16;
        void *v = realloc(ns->v, cap * sizeof *ns->v);
        if (!v) return 1;
        ns->v = v;
        ns->cap = cap;
    }
    memcpy(ns->v[ns->n++], f->name, DISK_NAME_LEN);
    return 0;
}

int disk_tier_verify(disk_tier *t, void (*bad)(void *ud, const char *name, const char *why), void *ud, uint64_t *n_ok,
                     uint64_t *n_bad, ph_err *err) {
    names ns = {0};
    if (disk_tier_list(t, collect, &ns, err)) return -1;
    *n_ok = *n_bad = 0;
    for (size_t i = 0; i < ns.n; i++) {
        opened o;
        char why[128];
        int rc = open_checked(t, ns.v[i], &o, why, sizeof why);
        if (rc == 0) rc = read_kv(o.fd, &o.h, NULL, NULL, NULL, why, sizeof why);
        opened_close(&o);
        if (rc == 0) {
            (*n_ok)++;
            continue;
        }
        if (rc == -3) continue; /* a newer build's: left alone */
        if (rc == -2) snprintf(why, sizeof why, "the file is missing");
        (*n_bad)++;
        if (bad) bad(ud, ns.v[i], why);
        pthread_mutex_lock(&t->db_lock);
        reject(t, ns.v[i], why);
        pthread_mutex_unlock(&t->db_lock);
    }
    free(ns.v);
    return 0;
}

int disk_tier_prune(disk_tier *t, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err) {
    (void)err;
    *n_removed = *bytes_removed = 0;
    pthread_mutex_lock(&t->db_lock);
    enforce(t, max_bytes, n_removed, bytes_removed);
    pthread_mutex_unlock(&t->db_lock);
    return 0;
}
