/* The disk tier: a sequence's KV blocks and resume points in the block
 * store, the writer thread that queues them, lookups and loads. */
#include "state/disk_tier.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sha256.h"
#include "base/timeutil.h"
#include "state/block_store.h"
#include "state/kv_block.h"
#include "state/kv_pool.h"
#include "state/shared_tier.h"

#define REC_MAX  (KV_SNAPSHOTS + 1)
#define PROV_HDR 16               /* rows, pictures in the record, pictures started before its end, zero */
#define SPAN_REC (5 * 4 + 3 * 32) /* a picture's provenance */
#define PROV_MAX (PROV_HDR + KV_BLOCK_ROWS * 8 + KV_BLOCK_ROWS * SPAN_REC)
#define CHILDREN 8       /* resume points of one block looked at */
#define REC_TAG  ";rec=" /* the format tag of a model with recurrent layers goes on with it */

typedef struct job {
    seq_state seq;      /* provenance of its rows (seq.n_rows = n) */
    const kv_cache *kv; /* the live cells it reads */
    float *rec;         /* with recurrent layers, copies of their states after rec_rows (taken when queued) */
    int32_t rec_rows[REC_MAX];
    int n_rec;
    bool reading; /* taken by the writer, KV not yet read */
    int pending;  /* records handed to the store and not yet released */
    double due;   /* not written before this (time_now_s); 0: at once */
    bool keep;    /* written even when a newer checkpoint extends it */
    struct job *next;
} job;

struct disk_tier {
    char *dir;
    block_store *bs;
    pthread_mutex_t lock; /* the queue and the stats */
    pthread_cond_t cv;
    job *head; /* queued checkpoints, oldest first; head may be in flight */
    job *busy; /* the one being written */
    bool stop, started;
    pthread_t thread;
    disk_tier_stats st;  /* hits, misses, write_s, read_s, shared_records (the rest are the store's) */
    shared_tier *shared; /* NULL: none */
};

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool is_recurrent(const seq_state *s) { return strstr(s->format, REC_TAG) != NULL; }

/* The most of a checkpoint's first n rows it can resume at: n, or with
 * recurrent states the last of their rows at or before n (0: none). */
static int32_t rec_cut(const int32_t *rows, int n_rec, int32_t n) {
    return n_rec ? kv_rows_at_most(rows, n_rec, n) : n;
}

static void meta_of(const seq_state *s, block_meta *m) {
    memset(m, 0, sizeof *m);
    memcpy(m->model_id, s->model_id, 32);
    memcpy(m->format, s->format, strnlen(s->format, sizeof s->format));
    memcpy(m->domain, s->domain, 32);
}

/* ---- provenance ------------------------------------------------------------------ */

/* The provenance of rows [r0, r1) of s (docs/state-cache.md, Block
 * records): the header, per row its token id and position after it, per
 * picture with rows there its start, rows, grid, positions, image_id,
 * embed_key and cond_hash. Its length in *len. */
static uint32_t prov_encode(const seq_state *s, int32_t r0, int32_t r1, uint8_t p[PROV_MAX]) {
    uint8_t *q = p + PROV_HDR;
    for (int32_t r = r0; r < r1; r++, q += 8) {
        put32(q, (uint32_t)s->tok[r]);
        put32(q + 4, (uint32_t)s->pos_after[r]);
    }
    uint32_t n_pics = 0, before = 0;
    for (int32_t i = 0; i < s->n_spans && s->spans[i].start < r1; i++) {
        const seq_span *sp = &s->spans[i];
        before++;
        if (sp->start + sp->n_tokens <= r0) continue;
        put32(q, (uint32_t)sp->start);
        put32(q + 4, (uint32_t)sp->n_tokens);
        put32(q + 8, (uint32_t)sp->grid_x);
        put32(q + 12, (uint32_t)sp->grid_y);
        put32(q + 16, (uint32_t)sp->n_pos);
        memcpy(q + 20, sp->image_id, 32);
        memcpy(q + 52, sp->embed_key, 32);
        memcpy(q + 84, sp->cond_hash, 32);
        q += SPAN_REC;
        n_pics++;
    }
    put32(p, (uint32_t)(r1 - r0));
    put32(p + 4, n_pics);
    put32(p + 8, before);
    put32(p + 12, 0);
    return (uint32_t)(q - p);
}

/* Checks a record's provenance p (len bytes) for rows [r0, r0 + rows) of
 * s, of which those before s->n_rows are compared: every row's token and
 * position, every picture there by start, rows, grid, positions and
 * embed_key, whose stored cond_hash (and image_id) it takes. 0, or -1 with
 * why. */
static int prov_check(const uint8_t *p, uint32_t len, seq_state *s, int32_t r0, int32_t rows, const char **why) {
    *why = "its provenance does not hold together";
    if (len < PROV_HDR || (int32_t)get32(p) != rows) return -1;
    const uint32_t n_pics = get32(p + 4);
    if (n_pics > (uint32_t)rows || len != PROV_HDR + (uint32_t)rows * 8 + n_pics * SPAN_REC) return -1;
    *why = "its rows are not the request's";
    const int32_t r1 = r0 + rows < s->n_rows ? r0 + rows : s->n_rows;
    const uint8_t *q = p + PROV_HDR;
    for (int32_t r = r0; r < r1; r++)
        if ((int32_t)get32(q + (size_t)(r - r0) * 8) != s->tok[r] ||
            (int32_t)get32(q + (size_t)(r - r0) * 8 + 4) != s->pos_after[r])
            return -1;
    const uint8_t *pics = q + (size_t)rows * 8;
    for (int32_t i = 0; i < s->n_spans && s->spans[i].start < r1; i++) {
        seq_span *sp = &s->spans[i];
        if (sp->start + sp->n_tokens <= r0) continue;
        const uint8_t *x = NULL;
        for (uint32_t k = 0; k < n_pics && !x; k++)
            if ((int32_t)get32(pics + (size_t)k * SPAN_REC) == sp->start) x = pics + (size_t)k * SPAN_REC;
        if (!x || (int32_t)get32(x + 4) != sp->n_tokens || (int32_t)get32(x + 8) != sp->grid_x ||
            (int32_t)get32(x + 12) != sp->grid_y || (int32_t)get32(x + 16) != sp->n_pos ||
            memcmp(x + 52, sp->embed_key, 32))
            return -1;
        /* a kept picture keeps the cond_hash it was evaluated with
         * (docs/state-cache.md, Reuse rules), the same in every record
         * that holds its rows */
        if (sp->has_cond && memcmp(sp->cond_hash, x + 84, 32)) {
            *why = "its picture's cond_hash differs from an earlier record's";
            return -1;
        }
        memcpy(sp->image_id, x + 20, 32);
        memcpy(sp->cond_hash, x + 84, 32);
        sp->has_cond = true;
    }
    return 0;
}

/* ---- pieces ---------------------------------------------------------------------- */

typedef disk_piece piece;

#define MAX_PIECES DISK_PIECES
_Static_assert(DISK_PIECES == KV_BLOCK_ROWS + 1, "a block's resume points: one at its start, one a row");

/* The parent of the first piece of block b: the name of block b - 1, or for
 * a resume point in block 0 the chain's root (a full block 0 has none:
 * all zero). */
static void block_start(const seq_state *s, const uint8_t (*names)[32], int32_t b, uint8_t out[32]) {
    if (b) memcpy(out, names[b - 1], 32);
    else kv_block_root(s, out);
}

/* A walk through a block's stored resume points (walk, below). */
typedef struct walker {
    disk_tier *t;
    const seq_state *s;
    int32_t b, limit;
    const uint8_t *start;
    piece path[MAX_PIECES], best[MAX_PIECES];
    int n_best;
} walker;

/* From the resume point path[depth - 1] (depth 0: the block's start,
 * offset 0), the children that s's rows agree with by their names, depth
 * first: the deepest chain found is kept in w->best. */
static void walk_from(walker *w, int depth) {
    const uint8_t *parent = depth ? w->path[depth - 1].name : w->start;
    const int32_t from = depth ? w->path[depth - 1].to : 0;
    block_info c[CHILDREN];
    const int n = depth < MAX_PIECES ? block_store_children(w->t->bs, parent, BLOCK_KIND_RESUME, c, CHILDREN) : 0;
    for (int i = 0; i < n; i++) {
        const int32_t to = from + (int32_t)c[i].n_rows, row = w->b * KV_BLOCK_ROWS + to;
        uint8_t name[32];
        if (to > KV_BLOCK_ROWS || row > w->limit || (to == from && from > 0) ||
            !kv_resume_name(w->s, row, w->start, true, name) || memcmp(name, c[i].name, 32))
            continue;
        piece *x = &w->path[depth];
        memcpy(x->name, c[i].name, 32);
        memcpy(x->parent, parent, 32);
        x->from = from;
        x->to = to;
        x->kind = BLOCK_KIND_RESUME;
        if (w->n_best == 0 || to > w->best[w->n_best - 1].to) {
            memcpy(w->best, w->path, (size_t)(depth + 1) * sizeof *x);
            w->n_best = depth + 1;
        }
        if (to > from)
            walk_from(w, depth + 1); /* one that holds no rows (the state at the block's start) ends a chain */
    }
}

/* The deepest chain of stored resume points in block b (its first piece's
 * parent: start) that s's rows agree with by their names, ending at most
 * at row limit: how many pieces (each one row further than the one
 * before), in path. */
static int walk(disk_tier *t, const seq_state *s, int32_t b, const uint8_t start[32], int32_t limit, piece *path) {
    walker *w = calloc(1, sizeof *w);
    if (!w) return 0;
    *w = (walker){.t = t, .s = s, .b = b, .limit = limit, .start = start};
    walk_from(w, 0);
    const int n = w->n_best;
    memcpy(path, w->best, (size_t)n * sizeof *path);
    free(w);
    return n;
}

/* ---- the writer ---------------------------------------------------------------- */

/* What the store reads of a record until it releases it: the job that
 * waits for it, and a payload the tier made (NULL: the live cells). */
typedef struct put_ud {
    job *j;
    void *own;
} put_ud;

static void released(void *ctx, void *ud) {
    disk_tier *t = ctx;
    put_ud *u = ud;
    pthread_mutex_lock(&t->lock);
    if (--u->j->pending == 0) pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
}

/* The resume points of a checkpoint, increasing: its end when that is not
 * a block boundary; with recurrent layers every row where it holds their
 * state. */
static int resume_points(const job *j, int32_t *rows) {
    if (j->n_rec) {
        int n = 0;
        for (int i = 0; i < j->n_rec; i++)
            if (j->rec_rows[i] > 0) rows[n++] = j->rec_rows[i];
        return n;
    }
    if (j->seq.n_rows % KV_BLOCK_ROWS == 0) return 0;
    rows[0] = j->seq.n_rows;
    return 1;
}

/* The records of one checkpoint being made. */
typedef struct batch {
    job *j;
    block_meta meta;
    block_put *puts;
    put_ud *uds;
    uint8_t *provs;
    int n, cap;
} batch;

/* Adds a record of block b's rows [from, to) (of each part: K then V of
 * every layer), from the live cells when it is the whole block, else
 * copied, with the recurrent state after row state_row (-1: none). false
 * when memory ran out. */
static bool add_record(batch *bt, uint32_t kind, const uint8_t name[32], const uint8_t parent[32], int32_t b,
                       int32_t from, int32_t to, int state_at) {
    const kv_cache *kv = bt->j->kv;
    const size_t part = (size_t)KV_BLOCK_ROWS * kv->row_bytes, n_parts = 2 * (size_t)kv->n_layer,
                 run = (size_t)(to - from) * kv->row_bytes, cells = n_parts * run,
                 bytes = cells + (state_at >= 0 ? kv->recurrent_floats * sizeof(float) : 0);
    const uint8_t *blk = kv->rows.blocks[b];
    uint8_t *own = NULL;
    if (bt->n == bt->cap) return false;
    if (from > 0 || to < KV_BLOCK_ROWS || state_at >= 0) {
        if (!(own = malloc(bytes ? bytes : 1))) return false;
        for (size_t q = 0; q < n_parts && run; q++)
            memcpy(own + q * run, blk + q * part + (size_t)from * kv->row_bytes, run);
        if (state_at >= 0) memcpy(own + cells, bt->j->rec + (size_t)state_at * kv->recurrent_floats, bytes - cells);
    }
    block_put *p = &bt->puts[bt->n];
    put_ud *u = &bt->uds[bt->n];
    uint8_t *prov = bt->provs + (size_t)bt->n * PROV_MAX;
    memcpy(p->key.name, name, 32);
    memcpy(p->key.parent, parent, 32);
    p->key.kind = kind;
    p->key.meta = bt->meta;
    p->n_rows = (uint32_t)(to - from);
    p->prov = prov;
    p->prov_bytes = prov_encode(&bt->j->seq, b * KV_BLOCK_ROWS + from, b * KV_BLOCK_ROWS + to, prov);
    p->payload = own ? own : blk;
    p->payload_bytes = own ? bytes : cells;
    u->j = bt->j;
    u->own = own;
    p->ud = u;
    bt->n++;
    return true;
}

/* The records of block b that the store lacks: the resume points in it
 * (pts, rows in it, increasing) and, when it is full and not stored
 * (whole), the block itself, each holding only the rows after the stored
 * pieces it follows. */
static bool block_records(disk_tier *t, batch *bt, const uint8_t (*names)[32], int32_t b, const int32_t *pts,
                          int n_pts, bool whole) {
    const job *j = bt->j;
    const seq_state *s = &j->seq;
    uint8_t start[32];
    block_start(s, names, b, start);
    piece chain[MAX_PIECES];
    int k = walk(t, s, b, start, s->n_rows, chain);
    if (k == 1 && chain[0].to == 0) k = 0; /* the state at the block's start: no rows to follow */
    for (int i = 0; i < n_pts; i++) {
        const int32_t off = pts[i] - b * KV_BLOCK_ROWS;
        uint8_t name[32];
        if (!kv_resume_name(s, pts[i], start, false, name) || block_store_find(t->bs, name, NULL)) continue;
        int at = k; /* the piece it follows: the last that ends at or before it */
        while (at > 0 && chain[at - 1].to > off) at--;
        const int32_t from = at ? chain[at - 1].to : 0;
        int state_at = -1;
        for (int r = 0; r < j->n_rec; r++)
            if (j->rec_rows[r] == pts[i]) state_at = r;
        if (!add_record(bt, BLOCK_KIND_RESUME, name, at ? chain[at - 1].name : start, b, from, off, state_at))
            return false;
        if (at == k && off > from && k < MAX_PIECES) { /* the chain goes on from it */
            memcpy(chain[k].name, name, 32);
            chain[k].from = from;
            chain[k].to = off;
            k++;
        }
    }
    if (!whole) return true;
    uint8_t parent[32] = {0};
    if (k) memcpy(parent, chain[k - 1].name, 32);
    else if (b) memcpy(parent, names[b - 1], 32);
    return add_record(bt, BLOCK_KIND_KV, names[b], parent, b, k ? chain[k - 1].to : 0, KV_BLOCK_ROWS, -1);
}

/* Queues a record for the shared tier: the same bytes as in a segment, and
 * its name among its parent's children (a chain's first has none). */
static void push_record(disk_tier *t, const block_put *r) {
    static const uint8_t zero[32];
    uint8_t hdr[BLOCK_RECORD_HDR];
    if (block_record_header(r, hdr)) return;
    const void *parts[3] = {hdr, r->prov, r->payload};
    const size_t lens[3] = {sizeof hdr, r->prov_bytes, (size_t)r->payload_bytes};
    shared_tier_put(t->shared, SHARED_RECORD, r->key.name, memcmp(r->key.parent, zero, 32) ? r->key.parent : NULL,
                    parts, lens, 3);
}

/* Hands one checkpoint's new records to the store and waits until they are
 * written (the full blocks read straight from the live cells; the next
 * checkpoint's lookups then see them). */
static void write_job(disk_tier *t, job *j) {
    const seq_state *s = &j->seq;
    const int32_t n = s->n_rows, nb = n / KV_BLOCK_ROWS;
    int32_t pts[REC_MAX];
    const int n_pts = resume_points(j, pts);
    batch bt = {.j = j, .cap = nb + REC_MAX};
    meta_of(s, &bt.meta);
    uint8_t(*names)[32] = malloc(((size_t)nb + 1) * 32);
    bt.puts = calloc((size_t)bt.cap, sizeof *bt.puts);
    bt.uds = calloc((size_t)bt.cap, sizeof *bt.uds);
    bt.provs = malloc((size_t)bt.cap * PROV_MAX);
    const double t0 = time_now_s();
    bool ok = names && bt.puts && bt.uds && bt.provs;
    if (ok) {
        const int32_t named = kv_block_names(s, n, false, names);
        const int32_t stored = block_store_prefix(t->bs, (const uint8_t(*)[BLOCK_NAME_BYTES])names, named);
        int p = 0;
        for (int32_t b = 0; ok && b <= nb && b <= named; b++) {
            const int first = p;
            while (p < n_pts && pts[p] / KV_BLOCK_ROWS == b) p++;
            const bool whole = b >= stored && b < named;
            if (whole || p > first)
                ok = block_records(t, &bt, (const uint8_t(*)[32])names, b, pts + first, p - first, whole);
        }
    }
    if (!ok) PH_WARN("disk cache: out of memory writing a checkpoint of %d rows", (int)n);
    pthread_mutex_lock(&t->lock);
    j->pending = bt.n;
    pthread_mutex_unlock(&t->lock);
    if (t->shared) /* copied now: the store may release the cells as soon as it has them */
        for (int i = 0; i < bt.n; i++) push_record(t, &bt.puts[i]);
    if (bt.n) block_store_put(t->bs, bt.puts, bt.n, released, t);
    pthread_mutex_lock(&t->lock);
    while (j->pending) pthread_cond_wait(&t->cv, &t->lock);
    j->reading = false; /* the store is done with the cells */
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    block_store_flush(t->bs);
    pthread_mutex_lock(&t->lock);
    t->st.write_s += time_now_s() - t0;
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < bt.n; i++) free(bt.uds[i].own);
    free(names);
    free(bt.puts);
    free(bt.uds);
    free(bt.provs);
}

static void job_free(job *j) {
    seq_free(&j->seq);
    free(j->rec);
    free(j);
}

static void *writer(void *arg) {
    disk_tier *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->head && !t->stop) pthread_cond_wait(&t->cv, &t->lock);
        if (!t->head) break;
        job *j = t->head;
        const double now = time_now_s();
        if (!t->stop && j->due > now) { /* a newer checkpoint may make it needless meanwhile */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (j->due - now);
            ts.tv_sec = (time_t)at;
            ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&t->cv, &t->lock, &ts);
            continue;
        }
        j->reading = true;
        t->busy = j;
        pthread_mutex_unlock(&t->lock);
        write_job(t, j);
        pthread_mutex_lock(&t->lock);
        t->head = j->next;
        t->busy = NULL;
        job_free(j);
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Makes every queued checkpoint due now (lock held). */
static void all_due(disk_tier *t) {
    for (job *j = t->head; j; j = j->next) j->due = 0;
    pthread_cond_broadcast(&t->cv);
}

bool disk_tier_save(disk_tier *t, const seq_state *seq, int32_t n, const kv_cache *kv, double delay_s, bool keep) {
    if (n <= 0 || n > seq->n_rows || !seq_complete(seq, n)) return false;
    job *j = calloc(1, sizeof *j);
    if (!j || seq_init(&j->seq, n, NULL) || seq_copy(&j->seq, seq, n, NULL)) {
        if (j) job_free(j);
        return false;
    }
    j->kv = kv;
    j->due = delay_s > 0 ? time_now_s() + delay_s : 0;
    j->keep = keep;
    if (kv->recurrent) {
        /* the recurrent states at the points at or before n, copied now:
         * the live ones change as rows come */
        int32_t rows[REC_MAX];
        const int np = kv_cache_recurrent_points(kv, rows);
        int keep = 0;
        while (keep < np && rows[keep] <= n) keep++;
        float *all = keep ? malloc((size_t)np * kv->recurrent_floats * sizeof(float)) : NULL;
        if (!all) {
            job_free(j);
            return false;
        }
        kv_cache_save_recurrent(kv, all);
        j->rec = all;
        j->n_rec = keep;
        memcpy(j->rec_rows, rows, (size_t)keep * sizeof *rows);
    }
    pthread_mutex_lock(&t->lock);
    /* a queued checkpoint that this one extends is not written (unless it
     * is to be kept); one that extends this one makes it needless */
    job **pp = &t->head;
    bool needless = false;
    while (*pp) {
        job *q = *pp;
        bool same = !memcmp(q->seq.model_id, j->seq.model_id, 32) && !strcmp(q->seq.format, j->seq.format);
        int32_t common = same ? seq_common_prefix(&q->seq, &j->seq) : 0;
        if (same && common == n && rec_cut(q->rec_rows, q->n_rec, n) == n) needless = true;
        if (q != t->busy && !q->keep && same && common == q->seq.n_rows &&
            rec_cut(j->rec_rows, j->n_rec, q->seq.n_rows) == q->seq.n_rows && !needless) {
            *pp = q->next;
            job_free(q);
            continue;
        }
        pp = &q->next;
    }
    if (needless) {
        pthread_mutex_unlock(&t->lock);
        job_free(j);
        return false;
    }
    *pp = j;
    if (!t->started) {
        t->started = pthread_create(&t->thread, NULL, writer, t) == 0;
        if (!t->started) { /* no thread: written here */
            *pp = NULL;
            pthread_mutex_unlock(&t->lock);
            write_job(t, j);
            job_free(j);
            return true;
        }
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    return true;
}

void disk_tier_release_rows(disk_tier *t, int32_t n) {
    pthread_mutex_lock(&t->lock);
    all_due(t);
    for (;;) {
        bool wait = false;
        for (job *j = t->head; j && !wait; j = j->next)
            if ((j != t->busy || j->reading) && j->seq.n_rows > n) wait = true;
        if (!wait) break;
        pthread_cond_wait(&t->cv, &t->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

void disk_tier_flush(disk_tier *t) {
    pthread_mutex_lock(&t->lock);
    all_due(t);
    while (t->head) pthread_cond_wait(&t->cv, &t->lock);
    pthread_mutex_unlock(&t->lock);
    block_store_flush(t->bs);
}

/* ---- open, close ------------------------------------------------------------------ */

/* Whether name is a file that an earlier version of the tier wrote in the
 * folder itself: checkpoint files, their temporary files, their index. */
static bool earlier_file(const char *name) {
    const size_t l = strlen(name);
    return (l > 5 && !strcmp(name + l - 5, ".phkv")) || !strncmp(name, "index.sqlite", 12);
}

/* Removes what earlier versions wrote (docs/state-cache.md, Disk tier):
 * its layout is not this one's, and nothing of it is read. */
static void remove_earlier(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (!earlier_file(de->d_name)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) n++;
    }
    closedir(d);
    if (n)
        PH_INFO("disk cache: %s: removed %d files written by earlier versions (checkpoint files and their index): "
                "files written by earlier versions are ignored and pruned, never misread",
                dir, n);
}

disk_tier *disk_tier_open(const char *dir, uint64_t budget, ph_err *err) {
    disk_tier *t = calloc(1, sizeof *t);
    if (!t || !(t->dir = strdup(dir))) {
        free(t);
        err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the writer waits for due times */
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    const block_store_opts o = {.budget = budget};
    if (!(t->bs = block_store_open(dir, &o, err))) {
        disk_tier_close(t);
        return NULL;
    }
    remove_earlier(dir);
    return t;
}

void disk_tier_set_shared(disk_tier *t, shared_tier *shared) { t->shared = shared; }

void disk_tier_close(disk_tier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    if (t->started) pthread_join(t->thread, NULL);
    block_store_close(t->bs);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cv);
    free(t->dir);
    free(t);
}

/* ---- lookups and loads ------------------------------------------------------------- */

/* Rows of want from row r0 on that a resume point's provenance p (len
 * bytes, of rows rows) holds the same: tokens and positions, pictures by
 * their rows (a picture row's embed_key and grid are in want's span). */
static int32_t prov_common(const uint8_t *p, uint32_t len, const seq_state *want, int32_t r0, int32_t rows) {
    if (len < PROV_HDR + (uint32_t)rows * 8 || (int32_t)get32(p) != rows) return 0;
    const uint32_t n_pics = get32(p + 4);
    if (len != PROV_HDR + (uint32_t)rows * 8 + n_pics * SPAN_REC) return 0;
    const uint8_t *q = p + PROV_HDR, *pics = q + (size_t)rows * 8;
    int32_t r = r0, span = 0;
    for (; r < r0 + rows && r < want->n_rows; r++) {
        const int32_t tok = (int32_t)get32(q + (size_t)(r - r0) * 8);
        if (tok != want->tok[r] || (int32_t)get32(q + (size_t)(r - r0) * 8 + 4) != want->pos_after[r]) break;
        if (tok != SEQ_ROW_PICTURE) continue;
        while (span < want->n_spans && want->spans[span].start + want->spans[span].n_tokens <= r) span++;
        const seq_span *sp = &want->spans[span];
        bool same = false;
        for (uint32_t k = 0; k < n_pics && !same; k++) {
            const uint8_t *x = pics + (size_t)k * SPAN_REC;
            same = (int32_t)get32(x) == sp->start && (int32_t)get32(x + 4) == sp->n_tokens &&
                   (int32_t)get32(x + 8) == sp->grid_x && (int32_t)get32(x + 12) == sp->grid_y &&
                   !memcmp(x + 52, sp->embed_key, 32);
        }
        if (!same) break;
    }
    return r - r0;
}

/* Without recurrent layers: the record after want's stored blocks and
 * resume points that want leaves part way (it agrees with the chain up to
 * m's path, then with some of the next record's rows), by its provenance:
 * a resume point, or the block's last record (a block that filled with
 * rows want does not have, e.g. an answer that the client sends back in
 * other words). How many of its rows want shares (0: none), the record
 * appended to m->path. */
static int32_t partial_piece(disk_tier *t, const seq_state *want, disk_match *m, const uint8_t start[32]) {
    const int32_t b = m->res_block, from = m->n_path ? m->path[m->n_path - 1].to : 0;
    const uint8_t *parent = m->n_path ? m->path[m->n_path - 1].name : start;
    const uint32_t kinds[2] = {BLOCK_KIND_RESUME, BLOCK_KIND_KV};
    int32_t best = 0;
    for (int k = 0; k < 2 && m->n_path < MAX_PIECES; k++) {
        block_info c[CHILDREN];
        const int n = block_store_children(t->bs, parent, kinds[k], c, CHILDREN);
        for (int i = 0; i < n; i++) {
            uint8_t prov[PROV_MAX];
            block_meta meta;
            uint32_t len = 0;
            if (from + (int32_t)c[i].n_rows > KV_BLOCK_ROWS ||
                block_store_peek(t->bs, c[i].name, &meta, prov, sizeof prov, &len) != 1 || len > sizeof prov)
                continue;
            const int32_t common = prov_common(prov, len, want, b * KV_BLOCK_ROWS + from, (int32_t)c[i].n_rows);
            if (common > best) {
                best = common;
                piece *x = &m->path[m->n_path];
                memcpy(x->name, c[i].name, 32);
                memcpy(x->parent, parent, 32);
                x->from = from;
                x->to = from + (int32_t)c[i].n_rows;
                x->kind = kinds[k];
            }
        }
    }
    if (best) m->n_path++;
    return best;
}

/* ---- the shared tier: what this folder lacks, fetched into it ------------------ */

#define PULL_MAX   (2 * MAX_PIECES) /* records one lookup fetches at most */
#define PULL_LISTS 16               /* and sets of children it reads */

static void free_value(void *ctx, void *ud) {
    (void)ctx;
    free(ud);
}

static bool meta_same(const block_meta *a, const block_meta *b) {
    return !memcmp(a->model_id, b->model_id, 32) && !memcmp(a->domain, b->domain, 32) &&
           !strncmp(a->format, b->format, BLOCK_FORMAT_BYTES);
}

/* Fetches record name from the shared tier into the folder's store,
 * checked: its bytes whole (block_record_parse), its name, made for meta,
 * a KV block or resume point, and a child of parent (NULL: any). Its
 * parent into got_parent. false when it is not there or refused (counted
 * there); its rows' provenance is checked when it is loaded, as for any
 * record of the folder. */
static bool pull_record(disk_tier *t, const block_meta *meta, const uint8_t name[32], const uint8_t *parent,
                        uint8_t got_parent[32], int *budget) {
    void *v;
    size_t len;
    if (*budget <= 0 || shared_tier_get(t->shared, SHARED_RECORD, name, &v, &len) != 1) return false;
    --*budget;
    block_put r;
    char why[128] = "";
    if (block_record_parse(v, len, &r, why, sizeof why)) {
    } else if (memcmp(r.key.name, name, 32)) {
        snprintf(why, sizeof why, "a record of another name");
    } else if (!meta_same(&r.key.meta, meta)) {
        snprintf(why, sizeof why, "made for another model, format or isolation domain");
    } else if (r.key.kind != BLOCK_KIND_KV && r.key.kind != BLOCK_KIND_RESUME) {
        snprintf(why, sizeof why, "neither a KV block nor a resume point");
    } else if (parent && memcmp(r.key.parent, parent, 32)) {
        snprintf(why, sizeof why, "not a child of the record it is listed under");
    }
    if (why[0]) {
        shared_tier_refused(t->shared, SHARED_RECORD, name, why);
        free(v);
        return false;
    }
    memcpy(got_parent, r.key.parent, 32);
    r.ud = v;
    block_store_put(t->bs, &r, 1, free_value, NULL);
    pthread_mutex_lock(&t->lock);
    t->st.shared_records++;
    pthread_mutex_unlock(&t->lock);
    return true;
}

/* Fetches full block b (named names[b]) and the pieces it is made of, back
 * to the block's start (start): false when any is missing. */
static bool pull_block(disk_tier *t, const block_meta *meta, const uint8_t (*names)[32], int32_t b,
                       const uint8_t start[32], int *budget) {
    static const uint8_t zero[32];
    uint8_t name[32], parent[32];
    memcpy(name, names[b], 32);
    for (int i = 0; i < MAX_PIECES; i++) {
        block_info info;
        if (block_store_find(t->bs, name, &info) == 1) memcpy(parent, info.parent, 32);
        else if (!pull_record(t, meta, name, NULL, parent, budget)) return false;
        if (!memcmp(parent, start, 32) || !memcmp(parent, zero, 32)) return true;
        memcpy(name, parent, 32);
    }
    return false;
}

/* Fetches the resume points under parent (and under them, depth first)
 * that the folder lacks; each set of children read costs one of *lists. */
static void pull_children(disk_tier *t, const block_meta *meta, const uint8_t parent[32], int depth, int *budget,
                          int *lists) {
    uint8_t kids[CHILDREN][32], got[32];
    if (depth >= MAX_PIECES || *lists <= 0) return;
    --*lists;
    const int n = shared_tier_children(t->shared, parent, kids, CHILDREN);
    for (int i = 0; i < n; i++) {
        if (*budget <= 0) break;
        if (block_store_find(t->bs, kids[i], NULL) == 1 || pull_record(t, meta, kids[i], parent, got, budget))
            pull_children(t, meta, kids[i], depth + 1, budget, lists);
    }
}

/* What the shared tier holds of want past the folder's stored blocks (its
 * named blocks names[0..named-1]): its blocks, then the resume points after
 * the last, written to the folder (flushed before the lookup reads the
 * index). */
static void pull(disk_tier *t, const seq_state *want, const uint8_t (*names)[32], int32_t named) {
    block_meta meta;
    meta_of(want, &meta);
    int budget = PULL_MAX, lists = PULL_LISTS;
    int32_t b = block_store_prefix(t->bs, names, named);
    uint8_t start[32];
    for (; b < named; b++) {
        block_start(want, names, b, start);
        if (!pull_block(t, &meta, names, b, start, &budget)) break;
    }
    if (b * KV_BLOCK_ROWS < want->n_rows) {
        block_start(want, names, b, start);
        pull_children(t, &meta, start, 0, &budget, &lists);
    }
    if (budget < PULL_MAX) block_store_flush(t->bs);
}

int disk_tier_find(disk_tier *t, const seq_state *want, int32_t beat, disk_match *m) {
    memset(m, 0, sizeof *m);
    const int32_t nb = want->n_rows / KV_BLOCK_ROWS;
    int32_t best = 0;
    if (!(m->names = malloc(((size_t)nb + 1) * 32)) || seq_init(&m->seq, want->n_rows > 0 ? want->n_rows : 1, NULL))
        goto none;
    memcpy(m->seq.model_id, want->model_id, 32);
    memcpy(m->seq.format, want->format, sizeof want->format);
    memcpy(m->seq.domain, want->domain, sizeof want->domain);
    m->recurrent = is_recurrent(want);
    const int32_t named = kv_block_names(want, want->n_rows, true, m->names);
    if (t->shared && want->n_rows > beat) pull(t, want, (const uint8_t(*)[32])m->names, named);
    m->n_full = block_store_prefix(t->bs, (const uint8_t(*)[BLOCK_NAME_BYTES])m->names, named);
    uint8_t start[32];
    if (!m->recurrent) {
        /* the stored blocks, then the resume points after them */
        best = m->n_full * KV_BLOCK_ROWS;
        m->res_block = m->n_full;
        if (best < want->n_rows && (best + KV_BLOCK_ROWS > beat)) {
            block_start(want, (const uint8_t(*)[32])m->names, m->res_block, start);
            m->n_path = walk(t, want, m->res_block, start, want->n_rows, m->path);
            const int32_t exact = m->n_path ? m->path[m->n_path - 1].to : 0, part = partial_piece(t, want, m, start);
            best += exact + part;
            m->res_row = m->n_path ? m->res_block * KV_BLOCK_ROWS + m->path[m->n_path - 1].to : 0;
        }
    } else {
        /* the last resume point before want's last row (a block boundary
         * is none: the state there is not known) */
        for (int32_t b = m->n_full; b >= 0 && (b + 1) * KV_BLOCK_ROWS > beat && !m->n_path; b--) {
            if (b * KV_BLOCK_ROWS >= want->n_rows) continue;
            block_start(want, (const uint8_t(*)[32])m->names, b, start);
            m->n_path = walk(t, want, b, start, want->n_rows - 1, m->path);
            m->res_block = b;
        }
        if (m->n_path) best = m->res_row = m->res_block * KV_BLOCK_ROWS + m->path[m->n_path - 1].to;
    }
    best = seq_back_off(want, best);
    if (m->recurrent && best != m->res_row) best = 0;
    if (best <= beat || best <= 0) goto none;
    m->prefix = best;
    seq_copy(&m->seq, want, best, NULL); /* m->seq.cap is want's rows */
    for (int32_t i = 0; i < m->seq.n_spans; i++) m->seq.spans[i].has_cond = false;
    return 1;
none:
    pthread_mutex_lock(&t->lock);
    t->st.misses++;
    pthread_mutex_unlock(&t->lock);
    disk_match_free(m);
    return 0;
}

int32_t disk_match_cut(const disk_match *m, int32_t n) {
    if (!m->recurrent) return n;
    return m->res_row && n >= m->res_row ? m->res_row : 0;
}

/* Reads one record into prov and payload (cap bytes, what it must hold)
 * and checks its provenance for rows [r0, r0 + rows) of m->seq: 0, or -1
 * (logged; the store counts what fails its own checks, the tier the rest). */
static int read_record(disk_tier *t, const block_key *k, int32_t r0, int32_t rows, void *payload, size_t cap,
                       disk_match *m) {
    uint8_t prov[PROV_MAX];
    block_info info;
    const int rc = block_store_get(t->bs, k, prov, sizeof prov, payload, cap, &info);
    const char *why = rc == 0 ? "it is gone" : rc == -2 ? "its size is not this model's" : "it failed its checks";
    if (rc == 1 && (info.payload_bytes != cap || info.n_rows != (uint32_t)rows)) why = "its size is not this model's";
    else if (rc == 1 && prov_check(prov, info.prov_bytes, &m->seq, r0, rows, &why) == 0) return 0;
    char hex[DISK_NAME_LEN];
    hex_encode(k->name, 32, hex);
    PH_WARN("disk cache: record %s (rows %d to %d) refused: %s", hex, (int)r0, (int)(r0 + rows), why);
    if (rc == 1) {
        pthread_mutex_lock(&t->lock);
        t->st.rejected++;
        pthread_mutex_unlock(&t->lock);
    }
    return -1;
}

/* Reads a piece of block b, rows [from, to) of which the first use go into
 * kv's cells (and with recurrent layers, when state, its state into kv):
 * 0, or -1. buf holds a block and a state. */
static int read_piece(disk_tier *t, disk_match *m, kv_cache *kv, uint32_t kind, const piece *x, int32_t b,
                      int32_t use, bool state, uint8_t *buf) {
    const size_t part = (size_t)KV_BLOCK_ROWS * kv->row_bytes, n_parts = 2 * (size_t)kv->n_layer,
                 run = (size_t)(x->to - x->from) * kv->row_bytes, cells = n_parts * run;
    const bool rec = kind == BLOCK_KIND_RESUME && kv->recurrent;
    block_key k = {.kind = kind};
    meta_of(&m->seq, &k.meta);
    memcpy(k.name, x->name, 32);
    memcpy(k.parent, x->parent, 32);
    uint8_t *blk = kv->rows.blocks[b];
    const bool direct = x->from == 0 && x->to == KV_BLOCK_ROWS && !rec; /* a whole block: straight into its cells */
    uint8_t *dst = direct ? blk : buf;
    if (read_record(t, &k, b * KV_BLOCK_ROWS + x->from, x->to - x->from, dst,
                    cells + (rec ? kv->recurrent_floats * sizeof(float) : 0), m))
        return -1;
    if (!direct)
        for (size_t q = 0; q < n_parts && use > 0; q++)
            memcpy(blk + q * part + (size_t)x->from * kv->row_bytes, buf + q * run, (size_t)use * kv->row_bytes);
    if (rec && state) {
        const int32_t row = b * KV_BLOCK_ROWS + x->to;
        kv_cache_load_recurrent(kv, (const float *)(buf + cells), &row, 1, row);
    }
    return 0;
}

/* Reads stored block b of m's request into kv: its pieces, from the
 * block's first row (found by walking its record's parents back to the
 * block before it). 0, or -1; a block whose pieces are not all there (one
 * was dropped) is dropped too, so that the next checkpoint writes it
 * again. */
static int read_block(disk_tier *t, disk_match *m, kv_cache *kv, int32_t b, uint8_t *buf) {
    uint8_t start[32], zero[32] = {0};
    block_start(&m->seq, (const uint8_t(*)[32])m->names, b, start);
    piece p[MAX_PIECES];
    int n = 0;
    block_info info;
    uint8_t name[32];
    memcpy(name, m->names[b], 32);
    int32_t to = KV_BLOCK_ROWS;
    bool whole = false;
    while (n < MAX_PIECES && block_store_find(t->bs, name, &info) == 1 && info.n_rows <= (uint32_t)to &&
           (n == 0 ? info.kind == BLOCK_KIND_KV : info.kind == BLOCK_KIND_RESUME)) {
        piece *x = &p[n++];
        memcpy(x->name, name, 32);
        memcpy(x->parent, info.parent, 32);
        x->to = to;
        x->from = to - (int32_t)info.n_rows;
        /* the first piece's parent is the block before (all zero for block 0's full record) */
        if (x->from == 0) {
            whole = !memcmp(x->parent, b || n > 1 ? start : zero, 32);
            break;
        }
        to = x->from;
        memcpy(name, info.parent, 32);
    }
    for (int i = n - 1; whole && i >= 0; i--)
        whole = read_piece(t, m, kv, i == 0 ? BLOCK_KIND_KV : BLOCK_KIND_RESUME, &p[i], b, p[i].to - p[i].from, false,
                           buf) == 0;
    if (whole) return 0;
    if (n > 1) block_store_forget(t->bs, m->names[b]);
    return -1;
}

int32_t disk_tier_load(disk_tier *t, disk_match *m, kv_cache *kv, int32_t n) {
    const double t0 = time_now_s();
    if (n > m->prefix || n > kv->rows.n_ctx) n = m->prefix < kv->rows.n_ctx ? m->prefix : kv->rows.n_ctx;
    n = disk_match_cut(m, n);
    if (n <= 0) return 0;
    /* fresh blocks from kv's pool for the rows (none: nothing restored) */
    kv_cache_truncate(kv, 0);
    if (kv_cache_reserve(kv, n, NULL)) return 0;
    const bool resume = m->recurrent || n > m->res_block * KV_BLOCK_ROWS;
    const int32_t full = resume ? m->res_block : (n + KV_BLOCK_ROWS - 1) / KV_BLOCK_ROWS;
    uint8_t *buf = malloc((size_t)KV_BLOCK_ROWS * 2 * (size_t)kv->n_layer * kv->row_bytes +
                          kv->recurrent_floats * sizeof(float));
    int32_t got = 0;
    for (int32_t i = 0; buf && i < full && read_block(t, m, kv, i, buf) == 0; i++) got = (i + 1) * KV_BLOCK_ROWS;
    if (got > n) got = n;
    if (buf && resume && got == full * KV_BLOCK_ROWS) {
        const int32_t b = m->res_block, base = b * KV_BLOCK_ROWS;
        for (int i = 0; i < m->n_path; i++) {
            const piece *x = &m->path[i];
            const int32_t use = (n - base < x->to ? n - base : x->to) - x->from;
            if (read_piece(t, m, kv, x->kind, x, b, use, i == m->n_path - 1, buf)) break;
            got = base + x->from + use;
        }
    }
    free(buf);
    if (m->recurrent && got != n) got = 0; /* its state is known only at the resume point */
    got = seq_back_off(&m->seq, got);
    kv->rows.n_rows = got;
    seq_truncate(&m->seq, got);
    pthread_mutex_lock(&t->lock);
    t->st.read_s += time_now_s() - t0;
    if (got > 0) t->st.hits++;
    else t->st.misses++;
    pthread_mutex_unlock(&t->lock);
    return got;
}

void disk_match_free(disk_match *m) {
    seq_free(&m->seq);
    free(m->names);
    memset(m, 0, sizeof *m);
}

void disk_tier_get_stats(disk_tier *t, disk_tier_stats *st) {
    block_store_stats b;
    block_store_get_stats(t->bs, &b);
    pthread_mutex_lock(&t->lock);
    *st = t->st;
    for (const job *j = t->head; j; j = j->next) st->queued++;
    pthread_mutex_unlock(&t->lock);
    st->saves = b.written;
    st->skipped = b.no_space + b.failed;
    st->no_space = b.no_space;
    st->evictions = b.evicted;
    st->rejected += b.rejected; /* the tier's own: records whose provenance is not what their names say */
    st->entries = b.records;
    st->bytes = b.bytes;
    st->queued += b.queued;
    st->bytes_written = b.bytes_written;
    st->bytes_read = b.bytes_read;
}

/* ---- administration ------------------------------------------------------------------- */

typedef struct list_ctx {
    disk_tier *t;
    int (*cb)(void *ud, const disk_entry *f);
    void *ud;
} list_ctx;

static int on_end(void *ud, const block_end *e) {
    const list_ctx *c = ud;
    disk_entry d = {
        .n_rows = (int32_t)e->rows, .bytes = e->bytes, .last_use = e->last.last_use, .created = e->last.created};
    hex_encode(e->last.name, 32, d.name);
    block_meta meta;
    uint8_t prov[PROV_MAX];
    uint32_t len = 0;
    if (block_store_peek(c->t->bs, e->last.name, &meta, prov, sizeof prov, &len) == 1 && len >= PROV_HDR) {
        memcpy(d.model_id, meta.model_id, 32);
        memcpy(d.format, meta.format, sizeof d.format - 1);
        d.n_pictures = (int32_t)get32(prov + 8);
    }
    return c->cb(c->ud, &d);
}

int disk_tier_list(disk_tier *t, int (*cb)(void *ud, const disk_entry *f), void *ud, ph_err *err) {
    list_ctx c = {t, cb, ud};
    return block_store_ends(t->bs, on_end, &c, err);
}

typedef struct verify_ctx {
    void (*bad)(void *ud, const char *name, const char *why);
    void *ud;
} verify_ctx;

static void on_bad(void *ud, const uint8_t name[BLOCK_NAME_BYTES], const char *why) {
    const verify_ctx *c = ud;
    char hex[DISK_NAME_LEN];
    hex_encode(name, 32, hex);
    if (c->bad) c->bad(c->ud, hex, why);
}

int disk_tier_verify(disk_tier *t, void (*bad)(void *ud, const char *name, const char *why), void *ud, uint64_t *n_ok,
                     uint64_t *n_bad, ph_err *err) {
    verify_ctx c = {bad, ud};
    return block_store_verify(t->bs, on_bad, &c, n_ok, n_bad, err);
}

int disk_tier_prune(disk_tier *t, uint64_t max_bytes, uint64_t *n_removed, uint64_t *bytes_removed, ph_err *err) {
    return block_store_prune(t->bs, max_bytes, n_removed, bytes_removed, err);
}
