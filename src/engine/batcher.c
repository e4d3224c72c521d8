/* The batcher (batcher.h): a queue of segments and pieces of work, and the
 * thread that turns them into batch steps. */
#include "engine/batcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/timeutil.h"

const int32_t ph_batch_row_bounds[BATCHER_BUCKETS] = {1, 2, 4, 8, 16, 64, 256, 512};

/* How long a step waits for the next rows of the sequences that decoded
 * in the step before (their threads sample the token, pass it on and hand
 * it back, a millisecond or two each, several threads on few cores): an
 * eighth of the last step's time, within these bounds. Without it each
 * answer's token would start a step of its own as soon as it came, and
 * answers running together would take turns instead of sharing steps. A
 * sequence that does not come back in time (its answer ended, or its
 * client is slow) is not waited for again until it does. */
#define GATHER_MIN_S 0.002
#define GATHER_MAX_S 0.050

/* The most prompt rows a step takes beside rows of answers: such a step
 * takes about as long as a decode step plus 32 prompt rows (0.4 s on two
 * AVX2 cores for a 2B model), so the answers running beside a long prompt
 * or a picture's rows keep getting a token about every half second; a
 * prompt alone goes in steps of up to cap rows. A row's numbers do not
 * depend on how its prompt is cut. */
#define PROMPT_ROWS_BESIDE_DECODES 32

/* A submitted segment, or a piece of work (fn set). */
typedef struct bjob {
    struct bjob *next;
    llm_kv *kv;
    const int32_t *tokens;
    const float *embd;
    int64_t n, done; /* rows, rows evaluated */
    const int32_t *pos;
    bool want_logits, decode;
    float *logits;
    int (*fn)(void *ud);
    void *ud;
    bool finished;
    int rc;
    ph_err err;
} bjob;

struct batcher {
    const ph_model *m;
    int32_t cap;
    int max_seqs;
    llm_scratch sc;
    int32_t *pos;  /* the step's positions, segment after segment */
    llm_seg *segs; /* the step's segments */
    bjob **in;     /* their jobs */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    bjob *rows;            /* segments, in order of arrival */
    const llm_kv **expect; /* the sequences that decoded in the last step, n_expect */
    int n_expect;
    double last_step_s; /* how long the last step took */
    bjob *pieces;       /* other work, in order of arrival */
    bool stop, started;
    pthread_t th;
    batcher_stats st;
};

static void push(bjob **q, bjob *j) {
    while (*q) q = &(*q)->next;
    *q = j;
}

static void unlink_job(bjob **q, bjob *j) {
    while (*q && *q != j) q = &(*q)->next;
    if (*q) *q = j->next;
}

/* Builds the step from the queued segments (b->mu held): decodes first,
 * then prefill rows, oldest first, while rows and logits are left (at most
 * PROMPT_ROWS_BESIDE_DECODES of them beside decodes). */
static int build_step(batcher *b, int64_t *n_rows) {
    int n_seg = 0, n_logits = 0;
    int64_t rows = 0, cap = b->cap;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && rows && rows + PROMPT_ROWS_BESIDE_DECODES < cap) cap = rows + PROMPT_ROWS_BESIDE_DECODES;
        for (bjob *j = b->rows; j && n_seg < b->max_seqs; j = j->next) {
            if (j->decode != (pass == 0) || rows >= cap) continue;
            int64_t take = j->n - j->done;
            if (take > cap - rows) take = cap - rows;
            const bool last = j->done + take == j->n;
            if (last && j->want_logits && n_logits >= b->sc.n_logits) continue;
            n_logits += last && j->want_logits;
            const bool mrope = b->m->hp.rope.mode == PH_ROPE_IMROPE;
            const int nsec = mrope ? 4 : 1;
            int32_t *pos = b->pos + (mrope ? 4 : 1) * rows;
            for (int s = 0; s < nsec; s++)
                memcpy(pos + s * take, j->pos + s * j->n + j->done, (size_t)take * sizeof *pos);
            const int64_t w = b->m->hp.n_embd_inp;
            b->segs[n_seg] = (llm_seg){.kv = j->kv,
                                       .tokens = j->tokens ? j->tokens + j->done : NULL,
                                       .embd = j->embd ? j->embd + j->done * w : NULL,
                                       .n = take,
                                       .pos = pos,
                                       .want_logits = last && j->want_logits};
            b->in[n_seg++] = j;
            rows += take;
        }
    }
    *n_rows = rows;
    return n_seg;
}

/* Whether every sequence that decoded in the last step has its next row
 * queued (b->mu held). */
static bool gathered(const batcher *b) {
    for (int i = 0; i < b->n_expect; i++) {
        const bjob *j = b->rows;
        while (j && !(j->decode && j->kv == b->expect[i])) j = j->next;
        if (!j) return false;
    }
    return true;
}

/* Waits (b->mu held) a while (GATHER_MIN_S..GATHER_MAX_S) for the next rows of the
 * sequences that decoded in the last step. */
static void gather(batcher *b) {
    if (!b->n_expect || gathered(b)) return;
    double wait = b->last_step_s / 8;
    wait = wait < GATHER_MIN_S ? GATHER_MIN_S : wait > GATHER_MAX_S ? GATHER_MAX_S : wait;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(wait * 1e9);
    while (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (!b->stop && !gathered(b))
        if (pthread_cond_timedwait(&b->work, &b->mu, &until) == ETIMEDOUT) break;
}

static void *loop(void *arg) {
    batcher *b = arg;
    const int32_t n_vocab = b->m->hp.n_vocab;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->stop && !b->rows && !b->pieces) pthread_cond_wait(&b->work, &b->mu);
        if (!b->rows && !b->pieces) break; /* stopping, nothing left */
        if (b->pieces) {                   /* one piece of other work between two steps */
            bjob *j = b->pieces;
            b->pieces = j->next;
            pthread_mutex_unlock(&b->mu);
            j->rc = j->fn(j->ud);
            pthread_mutex_lock(&b->mu);
            j->finished = true;
            b->st.slices++;
            pthread_cond_broadcast(&b->done);
            if (!b->rows) continue;
        }
        gather(b);
        int64_t rows;
        const int n_seg = build_step(b, &rows);
        pthread_mutex_unlock(&b->mu);
        ph_err err = {0};
        const double t0 = time_now_s();
        const int rc = llm_forward_batch(b->m, b->segs, n_seg, &b->sc, &err);
        const double dt = time_now_s() - t0;
        pthread_mutex_lock(&b->mu);
        int k = 0;
        b->n_expect = 0;
        for (int i = 0; i < n_seg; i++) {
            bjob *j = b->in[i];
            if (j->decode && !rc) b->expect[b->n_expect++] = j->kv;
            if (rc) {
                j->rc = -1;
                j->err = err;
            } else {
                if (b->segs[i].want_logits)
                    memcpy(j->logits, b->sc.logits + (size_t)k++ * n_vocab, (size_t)n_vocab * sizeof *j->logits);
                j->done += b->segs[i].n;
                if (j->decode) b->st.decode_rows += (uint64_t)b->segs[i].n;
                else b->st.prefill_rows += (uint64_t)b->segs[i].n;
            }
            if (rc || j->done == j->n) {
                unlink_job(&b->rows, j);
                j->finished = true;
            }
        }
        b->st.steps++;
        b->st.multi_steps += n_seg > 1;
        if (n_seg > b->st.max_seqs_step) b->st.max_seqs_step = n_seg;
        b->st.step_s += dt;
        b->last_step_s = dt;
        int bk = 0;
        while (bk < BATCHER_BUCKETS && rows > ph_batch_row_bounds[bk]) bk++;
        b->st.rows_hist[bk]++;
        pthread_cond_broadcast(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

batcher *batcher_new(const ph_model *m, int32_t batch_tokens, int max_seqs, ph_err *err) {
    if (batch_tokens < 1 || max_seqs < 1) {
        err_set(err, "a batch of %d rows for %d sequences is not usable", batch_tokens, max_seqs);
        return NULL;
    }
    batcher *b = calloc(1, sizeof *b);
    if (!b) {
        err_set(err, "out of memory");
        return NULL;
    }
    b->m = m;
    b->cap = batch_tokens;
    b->max_seqs = max_seqs;
    b->pos = malloc((size_t)4 * batch_tokens * sizeof *b->pos);
    b->segs = calloc((size_t)max_seqs, sizeof *b->segs);
    b->in = calloc((size_t)max_seqs, sizeof *b->in);
    b->expect = calloc((size_t)max_seqs, sizeof *b->expect);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work, NULL);
    pthread_cond_init(&b->done, NULL);
    if (!b->pos || !b->segs || !b->in || !b->expect) {
        err_set(err, "out of memory");
        batcher_free(b);
        return NULL;
    }
    if (llm_scratch_init(&b->sc, m, batch_tokens, max_seqs, err)) {
        batcher_free(b);
        return NULL;
    }
    if (pthread_create(&b->th, NULL, loop, b)) {
        err_set(err, "cannot start the batcher's thread");
        batcher_free(b);
        return NULL;
    }
    b->started = true;
    return b;
}

void batcher_free(batcher *b) {
    if (!b) return;
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        pthread_cond_signal(&b->work);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->th, NULL);
    }
    llm_scratch_free(&b->sc);
    free(b->pos);
    free(b->segs);
    free(b->in);
    free(b->expect);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->done);
    free(b);
}

/* Queues j and waits until the thread is done with it. */
static int submit(batcher *b, bjob **q, bjob *j, ph_err *err) {
    pthread_mutex_lock(&b->mu);
    push(q, j);
    pthread_cond_signal(&b->work);
    while (!j->finished) pthread_cond_wait(&b->done, &b->mu);
    pthread_mutex_unlock(&b->mu);
    if (j->rc && err && j->err.msg[0]) *err = j->err;
    return j->rc;
}

int batcher_eval(batcher *b, llm_kv *kv, const int32_t *tokens, const float *embd, int64_t n, const int32_t *pos,
                 bool want_logits, bool decode, float *logits, ph_err *err) {
    if (n <= 0) return 0;
    bjob j = {.kv = kv,
              .tokens = tokens,
              .embd = embd,
              .n = n,
              .pos = pos,
              .want_logits = want_logits,
              .decode = decode,
              .logits = logits};
    return submit(b, &b->rows, &j, err);
}

int batcher_run(batcher *b, int (*fn)(void *ud), void *ud) {
    bjob j = {.fn = fn, .ud = ud};
    return submit(b, &b->pieces, &j, NULL);
}

void batcher_get_stats(batcher *b, batcher_stats *st) {
    pthread_mutex_lock(&b->mu);
    *st = b->st;
    pthread_mutex_unlock(&b->mu);
}
