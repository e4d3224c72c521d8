/* The HTTP server: the door (door.h) accepts connections and checks their
 * request lines; libmicrohttpd serves them on a small fixed pool of epoll
 * threads. A pool thread reads and checks a request (size, key, JSON,
 * fields, pictures fingerprinted and their headers read) and queues a job;
 * one inference worker runs the jobs in arrival order (decoding their
 * pictures then) and writes their answers (SSE or a JSON body) back through
 * the job. While a connection waits for its job it is suspended (it holds
 * no thread) and the job resumes it. A watcher thread enforces the
 * connections' deadlines and limits (conns.h), cancels the jobs whose
 * clients left or whose time is up, and keeps quiet streams alive. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "server/access.h"
#include "server/api.h"
#include "server/conns.h"
#include "server/door.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/web.h"

/* pthread_cond_timedwait for at most `seconds` from now. */
static void cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + seconds;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The HTTP threads (epoll, a fixed pool): they only read, check and
 * answer; no thread waits for a job. */
#define HTTP_THREADS 4

/* The job the worker runs, and whether its stream has begun. */
typedef struct run_ctx {
    job *j;
    bool started;
    double t0;
} run_ctx;

struct srv {
    ph_engine *e;
    srv_config cfg;
    /* the HTTP library: HTTP_THREADS daemons of one epoll thread each, fed
     * by the door, which listens and checks each request line (door.h) */
    struct MHD_Daemon *d[HTTP_THREADS];
    unsigned next_d; /* the door's round robin (its thread only) */
    door *door;
    metrics met;
    /* the queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job **q;
    size_t q_head, q_len, q_cap;
    job **running;             /* per worker, its job (NULL: none) */
    uint64_t pixels_in_flight; /* the pictures of the queued and running jobs (--max-pixels-in-flight) */
    bool stopping;
    int n_streams;        /* streamed responses not yet finished (under mu) */
    ph_engine_stats snap; /* the engine's counters, as of the last job or tick */
    /* the workers (--parallel): each runs one job at a time through the
     * engine, which evaluates their rows together */
    struct worker_arg *workers;
    int n_workers, n_started;
    /* the connections and the watcher */
    conns conns;
    pthread_t watcher;
    bool watcher_stop; /* under mu */
    bool watcher_started;
    int port;                   /* the port bound */
    uint8_t (*key_domains)[32]; /* per API key its isolation domain (NULL: keys are not isolated) */
    web_page page;              /* the web chat page (GET /) */
    /* loading: the port is bound before the model is loaded; until e is
     * set (server_run) only GET /health is answered, with load_fraction */
    atomic_bool ready;
    double load_fraction; /* under mu */
    /* the longest token's bytes: a text of N bytes takes at least N / this
     * many rows (set by server_run; 0 until then) */
    size_t max_token_bytes;
    /* connections that ended before their job: their end lines wait for it */
    pthread_mutex_t late_mu;
    struct conn *late;
};

/* ---- jobs ---------------------------------------------------------------------- */

static job *job_new(srv *s, const api_kind *api, json_t *root) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->s = s;
    j->e = s->e;
    j->allow_forced = s->cfg.allow_forced_output;
    j->strict_fields = s->cfg.strict_fields;
    j->api = api;
    j->root = root;
    j->model_name = s->cfg.model_name;
    j->max_images = s->cfg.max_images;
    j->created = (int64_t)time(NULL);
    j->open_kind = -1;
    j->refs = 1;
    ph_gen_params_default(&j->gen);
    /* the server's defaults; each API's parser overwrites them with the fields the request has */
    j->gen.sampler.temperature = (float)s->cfg.temperature;
    j->gen.sampler.top_p = (float)s->cfg.top_p;
    j->gen.sampler.top_k = s->cfg.top_k;
    j->gen.max_tokens = s->cfg.max_tokens;
    j->gen.logprobs = false; /* only Chat Completions' logprobs asks for them */
    j->fd = -1;
    pthread_mutex_init(&j->mu, NULL);
    return j;
}

static void job_unref(job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    for (size_t i = 0; i < j->n_images; i++) ph_picture_free(j->images[i]);
    free(j->images);
    free(j->msgs);
    free(j->msg_first);
    free(j->parts);
    free(j->msg_calls);
    free(j->calls);
    free(j->tools);
    for (size_t i = 0; i < j->n_owned; i++) free(j->owned[i]);
    free(j->owned);
    for (size_t i = 0; i < j->n_out_calls; i++) {
        strbuf_free(&j->out_calls[i].name);
        strbuf_free(&j->out_calls[i].args);
    }
    free(j->out_calls);
    free(j->stop);
    strbuf_free(&j->content);
    strbuf_free(&j->reasoning);
    strbuf_free(&j->out);
    json_decref(j->lp);
    json_decref(j->root);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void job_wake_locked(job *j) {
    if (!j->suspended) return;
    j->suspended = false;
    MHD_resume_connection(j->conn);
}

void job_emit(job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    strbuf_put(&j->out, s, n);
    job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

void job_sse(job *j, const char *name, json_t *v) {
    char *js = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    if (!js) return;
    strbuf b = {0};
    if (name) {
        strbuf_put(&b, "event: ", 7);
        strbuf_put(&b, name, strlen(name));
        strbuf_put(&b, "\n", 1);
    }
    strbuf_put(&b, "data: ", 6);
    strbuf_put(&b, js, strlen(js));
    strbuf_put(&b, "\n\n", 2);
    free(js);
    if (!b.oom) job_emit(j, b.p, b.n);
    strbuf_free(&b);
}

/* The job's connection waits, holding no thread, until job_wake_locked
 * (j->mu held; from the access handler or the stream's reader). */
static void job_suspend_locked(job *j) {
    j->suspended = true;
    j->t_suspended = time_now_s();
    MHD_suspend_connection(j->conn);
}

static void end_late(srv *s, const job *j);

/* The job is done: its connection (if waiting) resumes, and the end line
 * of a connection that ended first is written now (after the job's own). */
static void job_finish(job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    end_late(j->s, j);
}

static bool job_cancelled(job *j) {
    pthread_mutex_lock(&j->mu);
    bool c = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return c;
}

static bool job_timed_out(job *j) {
    pthread_mutex_lock(&j->mu);
    bool t = j->timed_out;
    pthread_mutex_unlock(&j->mu);
    return t;
}

/* ---- pictures in flight ----------------------------------------------------------- */

/* What a job's pictures alone rule out, before anything is decoded or
 * queued: a prompt that cannot fit the context (the worker's 400) and
 * pictures that could never be in flight together (--max-pixels-in-flight). */
static int check_pictures(const srv *s, const job *j, ph_err *err) {
    const int32_t n_ctx = ph_engine_n_ctx(s->e);
    int64_t rows = 0;
    for (size_t i = 0; j->picture_rows + 1 > n_ctx && i < j->n_images; i++) { /* the first that does not fit */
        const int32_t n = ph_engine_picture_rows(s->e, j->images[i]);
        if ((rows += n) + 1 > n_ctx)
            return err_setc(err, PH_ERR_TOO_LONG,
                            "picture %zu (%d tokens) does not fit: the prompt through it is at least %lld tokens "
                            "long (its pictures alone) but the context holds %d (and needs room for the answer)",
                            i + 1, n, (long long)rows, n_ctx);
    }
    const uint64_t most = s->cfg.max_pixels_in_flight;
    if (most && j->pixels > most)
        return err_setc(err, PH_ERR_INPUT,
                        "the request's pictures are %llu pixels in all, more than the %llu the server takes in at "
                        "once (--max-pixels-in-flight)",
                        (unsigned long long)j->pixels, (unsigned long long)most);
    return 0;
}

/* Whether a chat format may trim byte c at a message's edges: ASCII
 * whitespace, and any byte of a multi-byte character (some are spaces). */
static bool maybe_trimmed(unsigned char c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c >= 0x80;
}

/* The bytes of a message's text that every chat format renders as they
 * are: all of a system, user or tool message's text but what it may trim
 * at the message's edges (a picture is an edge). None of an assistant's
 * (its content is split at </think>, and part of it may be dropped). */
static size_t rendered_text_bytes(const ph_chat_msg *m) {
    if (m->role == PH_ROLE_ASSISTANT) return 0;
    size_t total = 0, lead = 0, trail = 0, i = 0;
    for (size_t k = 0; k < m->n_parts; k++) total += m->parts[k].text ? m->parts[k].len : 0;
    for (; i < m->n_parts && m->parts[i].text; i++) {
        const ph_chat_part *p = &m->parts[i];
        size_t k = 0;
        while (k < p->len && maybe_trimmed((unsigned char)p->text[k])) k++;
        lead += k;
        if (k < p->len) break;
    }
    if (i == m->n_parts) return 0; /* all of it may be trimmed */
    for (size_t k = m->n_parts; k-- > 0 && m->parts[k].text;) {
        const ph_chat_part *p = &m->parts[k];
        size_t e = p->len;
        while (e > 0 && maybe_trimmed((unsigned char)p->text[e - 1])) e--;
        trail += p->len - e;
        if (e > 0) break;
    }
    return total - lead - trail;
}

/* A prompt whose text alone proves that it cannot fit the context, before
 * it is tokenized (a token is at most max_token_bytes long, so N bytes of
 * text are at least N / that many rows) and before it is queued. */
static int check_text(const srv *s, const job *j, ph_err *err) {
    if (!s->max_token_bytes || j->count_only) return 0;
    size_t bytes = 0;
    for (size_t i = 0; i < j->n_msgs; i++) bytes += rendered_text_bytes(&j->msgs[i]);
    const int64_t rows = (int64_t)((bytes + s->max_token_bytes - 1) / s->max_token_bytes) + j->picture_rows;
    const int32_t n_ctx = ph_engine_n_ctx(s->e);
    if (rows + 1 <= n_ctx) return 0;
    return err_setc(err, PH_ERR_TOO_LONG,
                    "the prompt is at least %lld tokens long (its messages' %zu bytes of text, at most %zu bytes a "
                    "token%s) but the context holds %d (and needs room for the answer)",
                    (long long)rows, bytes, s->max_token_bytes, j->picture_rows ? ", and its pictures" : "", n_ctx);
}

/* Counts a job's pictures in (s->mu held); false when they would pass
 * --max-pixels-in-flight. */
static bool pixels_admit(srv *s, const job *j) {
    const uint64_t most = s->cfg.max_pixels_in_flight;
    if (most && s->pixels_in_flight + j->pixels > most) return false;
    s->pixels_in_flight += j->pixels;
    return true;
}

/* Counts them out when the job has ended (s->mu held). */
static void pixels_release(srv *s, const job *j) { s->pixels_in_flight -= j->pixels; }

/* Queues a job: 0; -1 when the server is stopping (or out of memory); -2
 * when --max-queue requests wait already; -3 when its pictures would pass
 * --max-pixels-in-flight. */
static int enqueue(srv *s, job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    if (s->cfg.max_queue > 0 && s->q_len >= (size_t)s->cfg.max_queue) {
        pthread_mutex_unlock(&s->mu);
        return -2;
    }
    if (s->q_len == s->q_cap) {
        size_t cap = s->q_cap ? s->q_cap * 2 : 16;
        job **q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        for (size_t i = 0; i < s->q_len; i++) q[i] = s->q[(s->q_head + i) % s->q_cap];
        free(s->q);
        s->q = q;
        s->q_head = 0;
        s->q_cap = cap;
    }
    if (!pixels_admit(s, j)) {
        pthread_mutex_unlock(&s->mu);
        return -3;
    }
    s->q[(s->q_head + s->q_len) % s->q_cap] = j;
    s->q_len++;
    j->refs++; /* the queue's reference (no other thread sees j yet) */
    j->t_queued = time_now_s();
    metrics_enqueued(&s->met, (int64_t)s->q_len);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- the worker ----------------------------------------------------------------- */

static void start_stream(job *j, bool *started) {
    if (!*started && j->stream) j->api->stream_start(j);
    *started = true;
}

static int on_gen(void *ud, const ph_gen_event *ev) {
    run_ctx *c = ud;
    job *j = c->j;
    if (ev->kind == PH_DELTA_TOOL_CALL || ev->kind == PH_DELTA_TOOL_ARGS) {
        out_call *oc = job_out_call(j, ev->call_index, j->api->call_prefix);
        if (!oc) return 1; /* out of memory: stop */
        strbuf_put(ev->kind == PH_DELTA_TOOL_CALL ? &oc->name : &oc->args, ev->text, ev->len);
    } else if (ev->len) {
        strbuf_put(ev->kind == PH_DELTA_REASONING ? &j->reasoning : &j->content, ev->text, ev->len);
    }
    if (j->stream) {
        start_stream(j, &c->started);
        j->api->stream_event(j, ev);
    } else if (j->api->collect && ev->token >= 0) {
        j->api->collect(j, ev);
    }
    return job_cancelled(j);
}

/* A request's log context (no status yet). */
static log_ctx req_ctx(const req_ident *r) {
    return (log_ctx){.id = r->id, .client = r->client, .method = r->method, .path = r->path};
}

/* A stream whose answer is this long in coming (a long picture encode or
 * prefill) begins at once, so that the client gets keep-alive comments
 * (watch_job) until the first token. */
#define STREAM_EARLY_S 1.0

/* The engine's progress on the worker's job (ud: the server). */
/* A job's progress (ud: its run_ctx; called while its worker waits in
 * ph_engine_chat, on that thread or the engine's batcher thread). */
static void on_progress(void *ud, ph_progress_phase phase, int64_t done, int64_t total) {
    (void)phase;
    (void)done;
    (void)total;
    run_ctx *c = ud;
    if (c && c->j->stream && !c->started && time_now_s() - c->t0 >= STREAM_EARLY_S) start_stream(c->j, &c->started);
}

static void run_job(srv *s, job *j) {
    const double t0 = time_now_s();
    run_ctx c = {.j = j, .t0 = t0};
    const log_ctx lc = req_ctx(&j->req);
    if (j->count_only) {
        j->failed = ph_engine_count(s->e, j->msgs, j->n_msgs, &j->gen, &j->n_counted, &j->err) != 0;
        log_line(LOG_INFO, &lc, "%s count_tokens: %d%s%s", j->api->endpoint, j->n_counted, j->failed ? ": " : "",
                 j->failed ? j->err.msg : "");
        return;
    }
    j->gen.progress = on_progress;
    j->gen.progress_ud = &c;
    int rc = ph_engine_chat(s->e, j->msgs, j->n_msgs, &j->gen, on_gen, &c, &j->rep, &j->err);
    if (!rc && j->rep.finish == PH_FINISH_CANCELLED) {
        /* cut by a shutdown or by --request-timeout-s: the client is still
         * there and must be able to tell (a client that left reads nothing) */
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping) err_set(&j->err, "the server is shutting down: the answer was cut short");
        else if (job_timed_out(j))
            err_set(&j->err, "the request did not finish within %g s (--request-timeout-s)",
                    s->cfg.request_timeout_s);
        j->failed = stopping || job_timed_out(j);
    }
    if (rc || j->failed) {
        j->failed = true;
        if (j->stream && c.started) j->api->stream_error(j, j->err.msg);
    } else if (j->stream) {
        start_stream(j, &c.started);
        if (j->rep.finish != PH_FINISH_CANCELLED) j->api->stream_end(j);
    }
    const ph_turn_report *r = &j->rep;
    if (!rc) metrics_turn(&s->met, r); /* a turn cut short counts what it did */
    char from[96] = "";
    if (r->n_from_ram)
        snprintf(from, sizeof from, " from %s in %.0f ms",
                 r->from_parked ? "the parked conversation" : "the RAM tier", r->checkpoint_s * 1e3);
    else if (r->n_from_disk) snprintf(from, sizeof from, " from a checkpoint file in %.0f ms", r->checkpoint_s * 1e3);
    const char *aux = !j->gen.auxiliary ? "" : r->parked ? " (auxiliary; the conversation parked)" : " (auxiliary)";
    log_line(LOG_INFO, &lc,
             "%s%s %s: prompt %d (reused %d%s, prefilled %d), pictures %d (kv %d, cache %d, encoded %d%s), "
             "generated %d, queued %.2f s, ttft %.2f s, %.1f tok/s%s%s",
             j->api->endpoint, aux,
             rc                                 ? "failed"
             : r->finish == PH_FINISH_CANCELLED ? "cancelled"
                                                : "done",
             r->n_prompt, r->n_reused, from, r->n_prefilled, r->n_pictures, r->pics_from_kv, r->pics_from_cache,
             r->pics_encoded, r->encoder_loaded ? ", encoder loaded" : "", r->n_generated, t0 - j->t_queued,
             r->ttft_s, r->decode_s > 0 ? r->n_generated / r->decode_s : 0.0, j->failed ? ": " : "",
             j->failed ? j->err.msg : "");
}

/* A job that will not run (the server is stopping, its client left, or
 * its time is up) is answered as such and released: its pictures are
 * counted out, its connection (if suspended) resumes. Drops the queue's
 * reference (s->mu held). */
static void job_drop(srv *s, job *j, bool stopping) {
    pixels_release(s, j);
    j->failed = true;
    j->rep.finish = PH_FINISH_CANCELLED;
    if (stopping) {
        err_set(&j->err, "the server is shutting down");
    } else if (job_timed_out(j)) {
        err_set(&j->err, "the request did not start within %g s (--request-timeout-s)", s->cfg.request_timeout_s);
        metrics_timed_out(&s->met);
    } else {
        err_set(&j->err, "the client went away");
        metrics_cancelled(&s->met);
    }
    job_finish(j);
    job_unref(j);
}

typedef struct worker_arg {
    srv *s;
    int i;
    pthread_t th;
} worker_arg;

static void *worker_main(void *arg) {
    srv *s = ((worker_arg *)arg)->s;
    const int me = ((worker_arg *)arg)->i;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stopping && s->q_len == 0) {
            pthread_mutex_unlock(&s->mu);
            double wait = ph_engine_tick(s->e);
            ph_engine_stats st;
            ph_engine_get_stats(s->e, &st);
            pthread_mutex_lock(&s->mu);
            s->snap = st;
            if (s->stopping || s->q_len) break;
            if (wait < 0) {
                pthread_cond_wait(&s->cv, &s->mu);
            } else {
                cond_wait_s(&s->cv, &s->mu, wait + 0.01);
            }
        }
        if (s->q_len == 0) break; /* stopping, nothing left */
        job *j = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        metrics_queue(&s->met, (int64_t)s->q_len);
        if (s->stopping || job_cancelled(j)) {
            job_drop(s, j, s->stopping);
            continue;
        }
        s->running[me] = j;
        pthread_mutex_unlock(&s->mu);
        run_job(s, j);
        if (j->rep.finish == PH_FINISH_CANCELLED && !j->failed) metrics_cancelled(&s->met);
        if (j->failed && job_timed_out(j)) metrics_timed_out(&s->met);
        ph_engine_stats st;
        ph_engine_get_stats(s->e, &st);
        pthread_mutex_lock(&s->mu);
        s->snap = st;         /* before the answer is released, so a client sees its own turn counted */
        pixels_release(s, j); /* and finds its pictures counted out */
        s->running[me] = NULL; /* and a shutdown right after it no request running */
        pthread_mutex_unlock(&s->mu);
        job_finish(j);
        job_unref(j);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- HTTP ------------------------------------------------------------------------ */

typedef struct conn {
    strbuf body;
    int refused; /* the status to answer with once the upload is over (0: none) */
    char why[200];
    bool answered;   /* refused at the door: the answer is queued, the body is never read */
    int key;         /* the index of the API key the request carries (-1: none needed) */
    job *j;          /* the request's job while the connection waits for it (a reference) */
    conn_rec *rec;   /* the connection's entry in s->conns (NULL: untracked) */
    req_ident req;   /* its id, client, method and path, for X-Request-Id and the log */
    log_level lv;    /* of its start and end lines (debug for /health and /metrics) */
    int status;      /* the answer's, once queued */
    job *answered_j; /* the job answered (a reference): its figures go in the end line */
    /* the request target as sent (on_target, before it is decoded) */
    bool begun;          /* on_request has seen the request */
    bool target_nul;     /* its path has %00 */
    int target_form;     /* access_target_split: 1 absolute form, -1 unsound */
    size_t path_at;      /* absolute form: where its path begins */
    char authority[256]; /* absolute form: its host[:port] */
    /* the error answered (its type and message as the client got them), for the end line */
    char err_type[40];
    char err_msg[400];
    /* the end line waits for the job when the connection ended first
     * (s->late, under s->late_mu) */
    enum MHD_RequestTerminationCode toe;
    bool stalled; /* closed because its client read nothing of its answer (--send-timeout-s) */
    struct conn *late_next;
} conn;

/* The request whose callback the thread is in: on_request sets it, and
 * every answer queued from there (queue_answer) carries its id. Each
 * connection is served by one HTTP thread, in on_request only. */
static _Thread_local conn *tl_conn;

/* Queues an answer with the request's X-Request-Id, noting its status. */
static enum MHD_Result queue_answer(struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    if (tl_conn) {
        MHD_add_response_header(r, "X-Request-Id", tl_conn->req.id);
        tl_conn->status = (int)status;
    }
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* CORS (--cors-origin): no header at all without the flag; with it, the
 * request's Origin is reflected when it is in the list, and every answer
 * says that it varies by Origin. */
static void add_cors(srv *s, struct MHD_Connection *c, struct MHD_Response *r) {
    if (!s->cfg.n_cors_origins) return;
    MHD_add_response_header(r, "Vary", "Origin");
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (access_origin_allowed(o, s->cfg.cors_origins, s->cfg.n_cors_origins)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, X-Pinhole-Ignored-Fields");
    }
}

/* close: the answer ends the connection (a request refused before its
 * body was read: the rest of the body is never read); hname: one more
 * header, with the value hvalue (NULL: none). */
static enum MHD_Result send_bytes_ex(srv *s, struct MHD_Connection *c, int status, const char *type, char *data,
                                     size_t n, bool close, const char *hname, const char *hvalue) {
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(n, data, free);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    add_cors(s, c, r);
    if (close) MHD_add_response_header(r, "Connection", "close");
    if (hname) MHD_add_response_header(r, hname, hvalue);
    return queue_answer(c, (unsigned)status, r);
}

static enum MHD_Result send_bytes(srv *s, struct MHD_Connection *c, int status, const char *type, char *data,
                                  size_t n) {
    return send_bytes_ex(s, c, status, type, data, n, false, NULL, NULL);
}

/* Keeps an error body's type and message (both APIs' shapes have them
 * in "error") for the request's end line. */
static void note_error(conn *cn, json_t *body) {
    json_t *e = json_object_get(body, "error");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!cn || !msg) return;
    snprintf(cn->err_type, sizeof cn->err_type, "%s", type ? type : "error");
    snprintf(cn->err_msg, sizeof cn->err_msg, "%s", msg);
}

static enum MHD_Result send_json_ex(srv *s, struct MHD_Connection *c, int status, json_t *v, bool close,
                                    const char *hname, const char *hvalue) {
    if (status >= 400) note_error(tl_conn, v);
    char *t = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (!t) return send_bytes_ex(s, c, 500, "text/plain", strdup("out of memory\n"), 14, close, NULL, NULL);
    return send_bytes_ex(s, c, status, "application/json", t, strlen(t), close, hname, hvalue);
}

static enum MHD_Result send_json(srv *s, struct MHD_Connection *c, int status, json_t *v) {
    return send_json_ex(s, c, status, v, false, NULL, NULL);
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, const char *endpoint, bool anthropic, int status,
                                  const char *msg) {
    metrics_request(&s->met, endpoint, status);
    return send_json(s, c, status, anthropic ? anthropic_error_body(status, msg) : openai_error_body(status, msg));
}

/* A request's error: its message, and the field at fault (OpenAI's error.param). */
static enum MHD_Result send_err(srv *s, struct MHD_Connection *c, const api_kind *api, int status, const ph_err *err) {
    metrics_request(&s->met, api->endpoint, status);
    return send_json(s, c, status, api_error_body(api->anthropic, status, err->msg, err->param));
}

/* A refusal at the door, from the headers alone: answered at once and the
 * connection closed, so the body (if any) is never read. hname: one more
 * header (NULL: none). */
static enum MHD_Result refuse_now_h(srv *s, struct MHD_Connection *c, conn *cn, const char *endpoint, bool anthropic,
                                    int status, const char *msg, const char *hname, const char *hvalue) {
    cn->answered = true;
    /* a body the client may be sending: the connection is closed in stages */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if ((cl && strcmp(cl, "0")) || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding"))
        conns_mark(&s->conns, cn->rec, CONN_LINGER);
    metrics_request(&s->met, endpoint, status);
    return send_json_ex(s, c, status, anthropic ? anthropic_error_body(status, msg) : openai_error_body(status, msg),
                        true, hname, hvalue);
}

static enum MHD_Result refuse_now(srv *s, struct MHD_Connection *c, conn *cn, const char *endpoint, bool anthropic,
                                  int status, const char *msg) {
    return refuse_now_h(s, c, cn, endpoint, anthropic, status, msg, NULL, NULL);
}

/* Whether a request may name this model: the served name or an alias. */
static bool model_served(const srv *s, const char *name) {
    if (!strcmp(name, s->cfg.model_name)) return true;
    for (size_t i = 0; i < s->cfg.n_aliases; i++)
        if (!strcmp(name, s->cfg.aliases[i])) return true;
    return false;
}

/* The request's "model" (unless --any-model): absent or null is accepted
 * (as before this check), a string must name the served model or an alias
 * (404 otherwise, OpenAI's model_not_found / Anthropic's not_found_error),
 * anything else is a 400. Returns MHD_YES with *sent false when it passes. */
static enum MHD_Result check_model(srv *s, struct MHD_Connection *c, const api_kind *api, json_t *root, bool *sent) {
    *sent = false;
    json_t *m = json_object_get(root, "model");
    if (s->cfg.any_model || !m || json_is_null(m)) return MHD_YES;
    *sent = true;
    char msg[700];
    int status;
    if (!json_is_string(m)) {
        status = 400;
        snprintf(msg, sizeof msg, "the field 'model' must be a string");
    } else {
        const char *name = json_string_value(m);
        if (strlen(name) == json_string_length(m) && model_served(s, name)) { /* "name\u0000..." is not name */
            *sent = false;
            return MHD_YES;
        }
        status = 404;
        int n = snprintf(msg, sizeof msg, "the model '%.200s' is not served here: this server serves '%.200s'", name,
                         s->cfg.model_name);
        for (size_t i = 1; i < s->cfg.n_aliases && n > 0 && (size_t)n < sizeof msg; i++)
            n += snprintf(msg + n, sizeof msg - (size_t)n, "%s'%.60s'", i == 1 ? " (or its alias " : ", ",
                          s->cfg.aliases[i]);
        if (s->cfg.n_aliases > 1 && n > 0 && (size_t)n < sizeof msg)
            n += snprintf(msg + n, sizeof msg - (size_t)n, ")");
        if (n > 0 && (size_t)n < sizeof msg)
            snprintf(msg + n, sizeof msg - (size_t)n, "; start it with --any-model to accept any name");
    }
    metrics_request(&s->met, api->endpoint, status);
    if (api->anthropic) return send_json(s, c, status, anthropic_error_body(status, msg));
    return send_json(s, c, status,
                     openai_error_body_code(status, msg, "model", status == 404 ? "model_not_found" : NULL));
}

/* Streams a job's SSE bytes as the worker writes them; with none yet, the
 * connection waits, suspended, until the worker writes more or ends (or
 * the watcher asks for a keep-alive comment). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    if (j->out.n == 0 && !j->done) {
        if (j->ping) { /* an SSE comment now and then keeps proxies and idle timers content */
            j->ping = false;
            pthread_mutex_unlock(&j->mu);
            static const char ping[] = ": keep-alive\n\n";
            memcpy(buf, ping, sizeof ping - 1);
            return (ssize_t)(sizeof ping - 1);
        }
        job_suspend_locked(j);
        pthread_mutex_unlock(&j->mu);
        return 0;
    }
    if (j->out.n == 0) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = j->out.n < max ? j->out.n : max;
    memcpy(buf, j->out.p, n);
    memmove(j->out.p, j->out.p + n, j->out.n - n);
    j->out.n -= n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    job *j = cls;
    srv *s = j->s;
    pthread_mutex_lock(&j->mu);
    if (!j->done) j->cancelled = true; /* the client went away: stop generating */
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    pthread_mutex_lock(&s->mu);
    s->n_streams--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

#define CACHE_SALT_MAX 256

/* The request's isolation domain: from its "cache_salt" (a string of 1 to
 * CACHE_SALT_MAX bytes; null: none) and, when each API key is isolated,
 * its key: the turn reuses only what was saved in it. */
static int parse_domain(srv *s, job *j, int key, ph_err *err) {
    json_t *v = json_object_get(j->root, "cache_salt");
    const bool salted = v && !json_is_null(v);
    if (salted && (!json_is_string(v) || json_string_length(v) < 1 || json_string_length(v) > CACHE_SALT_MAX))
        return err_setc(err, PH_ERR_INPUT, "'cache_salt' must be a non-empty string of at most %d bytes",
                        CACHE_SALT_MAX);
    access_domain(s->key_domains && key >= 0 ? s->key_domains[key] : NULL, salted ? json_string_value(v) : NULL,
                  salted ? json_string_length(v) : 0, j->gen.domain);
    return 0;
}

/* An auxiliary request (docs/state-cache.md, Parking): "auxiliary": true in the body, or the
 * header X-Pinhole-Auxiliary: 1 (true, yes; 0, false, no to say not). */
static int parse_auxiliary(job *j, struct MHD_Connection *c, ph_err *err) {
    if (api_get_bool(j->root, "auxiliary", &j->gen.auxiliary, err)) return -1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Pinhole-Auxiliary");
    if (!h) return 0;
    if (!strcasecmp(h, "1") || !strcasecmp(h, "true") || !strcasecmp(h, "yes")) j->gen.auxiliary = true;
    else if (!strcasecmp(h, "0") || !strcasecmp(h, "false") || !strcasecmp(h, "no")) j->gen.auxiliary = false;
    else return err_setc(err, PH_ERR_INPUT, "the X-Pinhole-Auxiliary header must be 1 or 0, not '%s'", h);
    return 0;
}

/* Whether the client of a connection (its socket) has closed it: its side
 * reads as ended, or the socket failed. (A client that only shuts down its
 * sending side after the request counts as gone too.) */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* 503 with Retry-After: the queue is full, or the pictures in flight. */
static enum MHD_Result send_busy(srv *s, struct MHD_Connection *c, const api_kind *api, const char *msg) {
    metrics_request(&s->met, api->endpoint, 503);
    return send_json_ex(s, c, 503, api->anthropic ? anthropic_error_body(503, msg) : openai_error_body(503, msg),
                        false, "Retry-After", "1");
}

/* The X-Pinhole-Ignored-Fields header's room: a few names of 64 bytes. */
#define IGNORED_HEADER_CAP 600

/* The request's fields that no list of its API has (accepted, ignored):
 * counted, and logged the first time each (API, name) is seen. */
static void note_ignored(srv *s, const job *j) {
    const log_ctx lc = req_ctx(&j->req);
    for (size_t i = 0; i < j->n_ignored; i++) {
        bool other;
        if (!metrics_field_ignored(&s->met, j->api->endpoint, j->ignored[i], &other)) continue;
        if (other)
            log_line(LOG_WARN, &lc,
                     "%s: more than %d unknown request fields seen; the others are counted as field=\"other\"",
                     j->api->endpoint, METRICS_MAX_FIELDS);
        else
            log_line(LOG_WARN, &lc,
                     "%s: the request field '%.64s' is not known to this server: accepted and ignored (named in "
                     "X-Pinhole-Ignored-Fields; --strict-fields refuses such fields)",
                     j->api->endpoint, j->ignored[i]);
    }
}

/* The answer to a queued request, once its job is ready: done, or for a
 * stream, planned (its first bytes written: a prompt that is too long
 * still gets a plain error with its status). Until then the connection
 * waits, suspended. */
static enum MHD_Result answer_or_wait(srv *s, struct MHD_Connection *c, conn *cn) {
    job *j = cn->j;
    const api_kind *api = j->api;
    pthread_mutex_lock(&j->mu);
    if (!j->done && !(j->stream && j->out.n > 0)) {
        job_suspend_locked(j);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    bool failed_early = j->done && j->failed && j->out.n == 0;
    if (j->stream && !failed_early) j->streaming = true;
    j->refs++; /* the end line's */
    pthread_mutex_unlock(&j->mu);
    cn->j = NULL;
    cn->answered_j = j;
    if (j->stream && !failed_early) {
        pthread_mutex_lock(&s->mu);
        s->n_streams++; /* stream_free counts it off */
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, j, stream_free);
        if (!r) {
            stream_free(j); /* as MHD would have: cancels the job, drops its reference and the count */
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        char ig[IGNORED_HEADER_CAP];
        if (api_ignored_header(j, ig, sizeof ig)) MHD_add_response_header(r, "X-Pinhole-Ignored-Fields", ig);
        add_cors(s, c, r);
        metrics_request(&s->met, api->endpoint, 200);
        return queue_answer(c, 200, r);
    }
    enum MHD_Result ok;
    if (j->failed)
        ok = send_err(s, c, api, j->rep.finish == PH_FINISH_CANCELLED ? 503 : api_status_for(&j->err), &j->err);
    else {
        metrics_request(&s->met, api->endpoint, 200);
        char ig[IGNORED_HEADER_CAP];
        const bool named = api_ignored_header(j, ig, sizeof ig);
        ok =
            send_json_ex(s, c, 200, j->count_only ? json_pack("{s:i}", "input_tokens", j->n_counted) : api->result(j),
                         false, named ? "X-Pinhole-Ignored-Fields" : NULL, ig);
    }
    job_unref(j);
    return ok;
}

static enum MHD_Result handle_api(srv *s, struct MHD_Connection *c, const api_kind *api, bool count_only, conn *cn) {
    char msg[300];
    json_t *root = api_parse_body(cn->body.p ? cn->body.p : "", cn->body.n, msg, sizeof msg);
    if (!root) return send_error(s, c, api->endpoint, api->anthropic, 400, msg);
    bool sent;
    enum MHD_Result mr = check_model(s, c, api, root, &sent);
    if (sent) {
        json_decref(root);
        return mr;
    }
    job *j = job_new(s, api, root);
    if (!j) {
        json_decref(root);
        return send_error(s, c, api->endpoint, api->anthropic, 500, "out of memory");
    }
    ph_err err = {0};
    j->count_only = count_only; /* the Messages parser then takes no stream and no max_tokens */
    j->conn = c;
    j->req = cn->req;
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = fd ? fd->connect_fd : -1;
    int q = 0;
    const int parsed = parse_domain(s, j, cn->key, &err) || api->parse(j, &err) || parse_auxiliary(j, c, &err);
    if (!parsed) note_ignored(s, j);
    if (parsed || check_pictures(s, j, &err) || check_text(s, j, &err) || (q = enqueue(s, j)) != 0) {
        const uint64_t pixels = j->pixels;
        job_unref(j);
        char busy[200];
        if (q == -2) {
            snprintf(busy, sizeof busy, "the server is busy: %d requests are waiting (--max-queue); try again later",
                     s->cfg.max_queue);
            return send_busy(s, c, api, busy);
        }
        if (q == -3) {
            snprintf(busy, sizeof busy,
                     "the server is busy: the pictures of the requests before this one and its %llu pixels would "
                     "pass --max-pixels-in-flight (%llu); try again later",
                     (unsigned long long)pixels, (unsigned long long)s->cfg.max_pixels_in_flight);
            return send_busy(s, c, api, busy);
        }
        if (!err.msg[0]) return send_error(s, c, api->endpoint, api->anthropic, 503, "the server is shutting down");
        return send_err(s, c, api, api_status_for(&err), &err);
    }
    cn->j = j; /* the handler's reference: the connection waits for the job */
    return answer_or_wait(s, c, cn);
}

/* Whether a request is for the web chat page: GET or HEAD of / or
 * /index.html. The page holds no secret, so it needs no API key; each
 * API call it makes does. */
static bool is_page_url(const char *url) { return !strcmp(url, "/") || !strcmp(url, "/index.html"); }

static bool is_page(const char *url, const char *method) {
    return (!strcmp(method, "GET") || !strcmp(method, "HEAD")) && is_page_url(url);
}

/* The page, or 304 when the browser's copy is current. Browsers check
 * each time (no-cache), so a new binary's page is seen at once. */
static enum MHD_Result send_page(srv *s, struct MHD_Connection *c) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    const bool same = web_etag_matches(&s->page, inm);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(same ? 0 : s->page.len, (void *)s->page.body, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", s->page.csp);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "ETag", s->page.etag);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    const int status = same ? 304 : 200;
    metrics_request(&s->met, "web", status);
    return queue_answer(c, (unsigned)status, r);
}

static enum MHD_Result handle_get(srv *s, struct MHD_Connection *c, const char *url, const char *method) {
    if (is_page(url, method)) return send_page(s, c);
    if (!strcmp(url, "/health")) {
        if (!atomic_load(&s->ready)) { /* the model is loading: how far */
            pthread_mutex_lock(&s->mu);
            const double f = s->load_fraction;
            pthread_mutex_unlock(&s->mu);
            metrics_request(&s->met, "health", 503);
            return send_json_ex(s, c, 503, json_pack("{s:s,s:f}", "status", "loading", "progress", f), false,
                                "Retry-After", "1");
        }
        metrics_request(&s->met, "health", 200);
        return send_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
    }
    if (!strcmp(url, "/metrics")) {
        /* the engine's counters now (ph_engine_get_stats takes its lock) */
        ph_engine_stats st;
        ph_engine_get_stats(s->e, &st);
        metrics_request(&s->met, "metrics", 200);
        metrics_conns cs;
        conns_stats(&s->conns, &cs.open, &cs.closed_deadline, &cs.closed_limit, &cs.refused, &cs.closed_stalled);
        char *text = metrics_render(&s->met, &st, &cs);
        if (!text) return send_bytes(s, c, 500, "text/plain", strdup("out of memory\n"), 14);
        return send_bytes(s, c, 200, "text/plain; version=0.0.4", text, strlen(text));
    }
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) {
        json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", s->cfg.model_name, "object", "model", "created",
                              (json_int_t)0, "owned_by", "pinhole");
        if (url[10] == '/' && !model_served(s, url + 11)) {
            json_decref(m);
            return send_error(s, c, "models", false, 404, "no such model");
        }
        metrics_request(&s->met, "models", 200);
        if (url[10] == '/') return send_json(s, c, 200, m);
        return send_json(s, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
    }
    return send_error(s, c, "other", false, 404, "no such endpoint");
}

static bool is_count_tokens(const char *url) {
    return !strcmp(url, "/v1/messages/count_tokens") || !strcmp(url, "/messages/count_tokens");
}

static const api_kind *api_for(const char *url) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return &api_openai_chat;
    if (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses")) return &api_openai_responses;
    if (!strcmp(url, "/v1/messages") || !strcmp(url, "/messages") || is_count_tokens(url))
        return &api_anthropic_messages;
    return NULL;
}

/* The endpoint label of /metrics for a URL. */
static const char *endpoint_label(const char *url, const api_kind *api) {
    if (api) return api->endpoint;
    if (!strcmp(url, "/health")) return "health";
    if (!strcmp(url, "/metrics")) return "metrics";
    if (is_page_url(url)) return "web";
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return "models";
    return "other";
}

/* An OPTIONS request. A CORS preflight (Origin and
 * Access-Control-Request-Method) from an origin in --cors-origin gets 204
 * with the Access-Control-Allow-* headers; from any other origin (or with
 * no --cors-origin) 403 and no CORS header. A plain OPTIONS gets 204 with
 * Allow. Neither needs the key: browsers send preflights without it. */
static enum MHD_Result handle_options(srv *s, struct MHD_Connection *c, conn *cn, const char *url,
                                      const api_kind *api) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *method = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    const char *label = endpoint_label(url, api);
    if (origin && method && !access_origin_allowed(origin, s->cfg.cors_origins, s->cfg.n_cors_origins)) {
        char msg[400];
        if (s->cfg.n_cors_origins)
            snprintf(msg, sizeof msg, "cross-origin requests from '%.200s' are not allowed (not in --cors-origin)",
                     origin);
        else
            snprintf(msg, sizeof msg,
                     "cross-origin requests are not allowed: start the server with --cors-origin %.200s to allow "
                     "this origin",
                     origin);
        return refuse_now(s, c, cn, label, api && api->anthropic, 403, msg);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(0, NULL, NULL);
    if (!r) return MHD_NO;
    add_cors(s, c, r);
    if (origin && method) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const char *hdrs = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        if (hdrs && *hdrs) MHD_add_response_header(r, "Access-Control-Allow-Headers", hdrs);
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        if (s->cfg.n_cors_origins) MHD_add_response_header(r, "Vary", "Access-Control-Request-Headers");
    } else {
        MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    }
    cn->answered = true;
    metrics_request(&s->met, label, 204);
    return queue_answer(c, 204, r);
}

/* What a request's head says about its framing and its credentials, in
 * one pass over its headers (a repeated header is counted). */
#define HEAD_TE_MAX 4
typedef struct head_facts {
    int n_length;       /* Content-Length headers */
    const char *length; /* the first one's value */
    bool lengths_differ;
    int n_te;                    /* Transfer-Encoding headers */
    const char *te[HEAD_TE_MAX]; /* the first ones' values */
    int n_host;
    int n_expect;
    const char *expect;   /* the first one's value */
    const char *bad_name; /* a header name that is not a token */
    access_creds creds;
} head_facts;

/* Whether s is an HTTP token (RFC 9110, 5.6.2): a method, a header name. */
static bool is_token(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s)) return false;
    return true;
}

static enum MHD_Result note_head(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    head_facts *f = cls;
    if (!value) value = "";
    if (!f->bad_name && !is_token(key)) f->bad_name = key;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ == 0) f->length = value;
        else if (strcmp(f->length, value)) f->lengths_differ = true;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        if (f->n_te < HEAD_TE_MAX) f->te[f->n_te] = value;
        f->n_te++;
    } else if (!strcasecmp(key, "Host")) {
        f->n_host++;
    } else if (!strcasecmp(key, "Expect")) {
        if (f->n_expect++ == 0) f->expect = value;
    } else if (!strcasecmp(key, "Authorization")) {
        if (f->creds.n_authorization++ == 0) f->creds.authorization = value;
    } else if (!strcasecmp(key, "x-api-key")) {
        if (f->creds.n_x_api_key++ == 0) f->creds.x_api_key = value;
    }
    return MHD_YES;
}

/* Transfer-Encoding (RFC 9112, 6.1). The HTTP library reads a body as
 * chunked only when the first header is "chunked", and otherwise until
 * the connection closes: any other use is refused at once. Returns 0 (none,
 * or one header that is "chunked"), or the status and why: 400 when the
 * body's length cannot be known (HTTP/1.0, chunked not last, chunked
 * twice, an empty or odd value), 501 for a coding before chunked that
 * this server does not decode (gzip, ...). */
static int te_refusal(const head_facts *f, const char *version, char *why, size_t cap) {
    if (!f->n_te) return 0;
    if (!strcmp(version, "HTTP/1.0")) {
        snprintf(why, cap, "an HTTP/1.0 request may not have a Transfer-Encoding: its length would be ambiguous");
        return 400;
    }
    if (f->n_te == 1 && !strcasecmp(f->te[0], "chunked")) return 0;
    char last[64] = "", other[64] = "";
    int n_chunked = 0;
    for (int i = 0; i < f->n_te && i < HEAD_TE_MAX; i++)
        for (const char *p = f->te[i]; *(p += strspn(p, " \t,"));) {
            const size_t n = strcspn(p, ","), w = strcspn(p, "; \t,");
            snprintf(last, sizeof last, "%.*s", (int)w, p);
            if (!strcasecmp(last, "chunked")) n_chunked++;
            else if (!other[0]) snprintf(other, sizeof other, "%s", last);
            p += n;
        }
    int status = 400;
    if (!last[0]) snprintf(why, cap, "the request's Transfer-Encoding is empty");
    else if (strcasecmp(last, "chunked"))
        snprintf(why, cap,
                 "the request's Transfer-Encoding does not end with chunked ('%.60s' is last): its length "
                 "cannot be known",
                 last);
    else if (n_chunked > 1) snprintf(why, cap, "the request's Transfer-Encoding has chunked more than once");
    else if (other[0]) {
        status = 501;
        snprintf(why, cap,
                 "the transfer coding '%.60s' is not supported: send the body with Transfer-Encoding: chunked alone, "
                 "or with a Content-Length",
                 other);
    } else snprintf(why, cap, "the request's Transfer-Encoding must be the one word chunked");
    return status;
}

/* The checks made from the request's head alone, in this order, each
 * answered at once (the body is never read) and closing the connection:
 * the head's form (400: a header name that is not a token, %00 in the
 * path, an absolute-form target without a sound host), the body's framing
 * (400: differing Content-Length headers, Content-Length with
 * Transfer-Encoding, a Transfer-Encoding whose length cannot be known;
 * 501: a transfer coding besides chunked), Host (400: more than one, or
 * none in HTTP/1.1), Expect (417: anything but 100-continue), the method
 * (400: not a token; 405: not one served), the Host's name (DNS
 * rebinding: 403; an absolute-form target's host stands for it), CORS
 * preflights, the API key (401: every request but GET /health and the web
 * page), for the API endpoints' POSTs the Content-Type (415), and the
 * body's declared length (413: past --max-body-mb). Returns MHD_YES with
 * *done false when the request goes on. */
static enum MHD_Result at_the_door(srv *s, struct MHD_Connection *c, conn *cn, const char *url, const char *method,
                                   const char *version, const api_kind *api, bool *done) {
    *done = true;
    const char *label = endpoint_label(url, api);
    const bool anth = api && api->anthropic;
    char msg[400];
    head_facts f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, note_head, &f);
    if (f.bad_name) {
        snprintf(msg, sizeof msg,
                 "the header name '%.60s' is not a token (a space before its colon, or a line folded onto the one "
                 "before it?)",
                 f.bad_name);
        return refuse_now(s, c, cn, label, anth, 400, msg);
    }
    if (cn->target_nul)
        return refuse_now(s, c, cn, label, anth, 400, "the request target has %00 (a NUL byte) in its path");
    if (cn->target_form < 0)
        return refuse_now(s, c, cn, label, anth, 400,
                          "the request target is an absolute URL without a sound host (http://HOST[:PORT]/PATH)");
    if (f.lengths_differ)
        return refuse_now(s, c, cn, label, anth, 400, "the request has Content-Length headers that differ");
    if (f.n_length && f.n_te)
        return refuse_now(s, c, cn, label, anth, 400,
                          "the request has both Content-Length and Transfer-Encoding: its length is ambiguous");
    const int te = te_refusal(&f, version, msg, sizeof msg);
    if (te) return refuse_now(s, c, cn, label, anth, te, msg);
    if (f.n_host > 1) {
        snprintf(msg, sizeof msg, "the request has %d Host headers: send one", f.n_host);
        return refuse_now(s, c, cn, label, anth, 400, msg);
    }
    /* a request without Host (HTTP/1.0) passes: it cannot come from a browser page */
    if (!f.n_host && !cn->authority[0] && !strcmp(version, "HTTP/1.1"))
        return refuse_now(s, c, cn, label, anth, 400, "an HTTP/1.1 request must have a Host header");
    if (f.n_expect > 1 || (f.n_expect && strcasecmp(f.expect, "100-continue"))) {
        snprintf(msg, sizeof msg, "the expectation '%.60s' cannot be met: only Expect: 100-continue is",
                 f.n_expect > 1 ? "(several Expect headers)" : f.expect);
        return refuse_now(s, c, cn, label, anth, 417, msg);
    }
    if (!is_token(method)) {
        snprintf(msg, sizeof msg, "the request line is not HTTP: '%.40s' is not a method", method);
        return refuse_now(s, c, cn, label, anth, 400, msg);
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "POST") && strcmp(method, "OPTIONS")) {
        snprintf(msg, sizeof msg, "the method %.40s is not served here (GET, POST, OPTIONS)", method);
        return refuse_now_h(s, c, cn, label, anth, 405, msg, "Allow", "GET, POST, OPTIONS");
    }
    /* RFC 9112, 3.2.2: an absolute-form target's host is the request's Host */
    const char *host = cn->authority[0] ? cn->authority : MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (host && !access_host_allowed(host, s->cfg.host, s->cfg.allow_hosts, s->cfg.n_allow_hosts)) {
        snprintf(msg, sizeof msg,
                 "the Host '%.200s' is not allowed: this server answers requests addressed to localhost, "
                 "127.0.0.1, [::1] or %s; start it with --allow-host NAME to accept another name",
                 host, s->cfg.host);
        const log_ctx lc = req_ctx(&cn->req);
        log_line(LOG_INFO, &lc, "refused a request for Host '%.200s' (see --allow-host)", host);
        return refuse_now(s, c, cn, label, anth, 403, msg);
    }
    if (!strcmp(method, "OPTIONS")) return handle_options(s, c, cn, url, api);
    cn->key = -1;
    if (s->cfg.n_api_keys && strcmp(url, "/health") && !is_page(url, method)) {
        const char *why = access_creds_problem(&f.creds);
        cn->key = access_key_index(&f.creds, s->cfg.api_keys, s->cfg.n_api_keys); /* constant time in the keys */
        if (cn->key < 0)
            return refuse_now(s, c, cn, label, anth, 401,
                              why ? why
                                  : "a valid API key is required (Authorization: Bearer KEY or x-api-key: KEY)");
    }
    if (strcmp(url, "/health") && !is_page(url, method) && !atomic_load(&s->ready))
        return refuse_now_h(s, c, cn, label, anth, 503,
                            "the model is still loading; try again shortly (GET /health says how far it is)",
                            "Retry-After", "1");
    if (!strcmp(method, "POST") && api) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (!access_is_json(ct)) {
            if (ct)
                snprintf(msg, sizeof msg,
                         "the body must be JSON sent as Content-Type: application/json, not '%.200s'", ct);
            else
                snprintf(
                    msg, sizeof msg,
                    "the body must be JSON sent as Content-Type: application/json (the request has no Content-Type)");
            return refuse_now(s, c, cn, label, anth, 415, msg);
        }
    }
    /* an oversize body is refused from its header, before it is read: a
     * client that waits for "100 Continue" never sends it, another one gets
     * the answer as it sends */
    if (f.n_length && strtoull(f.length, NULL, 10) > s->cfg.max_body) {
        snprintf(msg, sizeof msg, "the request body is %.30s bytes; at most %zu MiB are accepted (--max-body-mb)",
                 f.length, s->cfg.max_body >> 20);
        return refuse_now(s, c, cn, label, anth, 413, msg);
    }
    *done = false;
    return MHD_YES;
}

/* A request's head is in: its identity (X-Request-Id: the client's when
 * sane, else a new one), and its start line. */
static void request_begin(struct MHD_Connection *c, conn *cn, const char *url, const char *method) {
    req_ident *r = &cn->req;
    r->t0 = time_now_s();
    const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    if (id && api_request_id_sane(id)) snprintf(r->id, sizeof r->id, "%s", id);
    else api_make_id(r->id, 17, ""); /* 16 hex digits */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    conns_addr_text(ci ? ci->client_addr : NULL, r->client, sizeof r->client);
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    /* probes come often: their lines only with --verbose */
    cn->lv = !strcmp(method, "GET") && (!strcmp(url, "/health") || !strcmp(url, "/metrics")) ? LOG_DEBUG : LOG_INFO;
    log_ctx lc = req_ctx(r);
    lc.event = "start";
    log_line(cn->lv, &lc, "%s", "");
}

/* The request's end line: status, time since its head, why it was refused
 * (the error's type and message), and for a turn its rows. A connection
 * that ended before its job's end (a client that left, or read nothing
 * for --send-timeout-s) has its line written once the job has ended, as
 * cancelled (499 when nothing was sent: nginx's "client closed request"). */
static void request_end(const srv *s, conn *cn) {
    log_ctx lc = req_ctx(&cn->req);
    lc.event = "end";
    lc.status = cn->status;
    lc.ms = (time_now_s() - cn->req.t0) * 1e3;
    char msg[200] = "", why[200];
    job *j = cn->answered_j ? cn->answered_j : cn->j;
    const bool cut = cn->toe != MHD_REQUEST_TERMINATED_COMPLETED_OK; /* the connection ended before the answer */
    bool done = false;
    if (j) {
        pthread_mutex_lock(&j->mu);
        done = j->done;
        pthread_mutex_unlock(&j->mu);
        const ph_turn_report *r = &j->rep;
        if (done && !j->count_only) {
            const log_field f[] = {{"prompt_tokens", r->n_prompt},       {"reused_tokens", r->n_reused},
                                   {"from_ram_tokens", r->n_from_ram},   {"from_disk_tokens", r->n_from_disk},
                                   {"prefilled_tokens", r->n_prefilled}, {"completion_tokens", r->n_generated},
                                   {"pictures_encoded", r->pics_encoded}};
            memcpy(lc.fields, f, sizeof f);
            lc.n_fields = (int)(sizeof f / sizeof f[0]);
            snprintf(msg, sizeof msg, "prompt %d (reused %d, prefilled %d), generated %d", r->n_prompt, r->n_reused,
                     r->n_prefilled, r->n_generated);
        }
    }
    if (cn->err_msg[0]) { /* refused, or failed before its answer began */
        lc.error_type = cn->err_type;
        lc.error = cn->err_msg;
    } else if (j && done && cut && j->rep.finish == PH_FINISH_CANCELLED) {
        lc.error_type = "cancelled";
        if (cn->stalled)
            snprintf(why, sizeof why, "the client read nothing of its answer for %g s (--send-timeout-s)",
                     s->cfg.send_timeout_s);
        else snprintf(why, sizeof why, "the client went away before its answer was complete");
        lc.error = why;
        if (!lc.status) lc.status = 499;
    } else if (j && done && j->failed && cn->answered_j) { /* an error event after the stream began */
        lc.error_type = "stream_error";
        lc.error = j->err.msg;
    } else if (cut) {
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                 "%sthe connection ended before the whole answer was sent", msg[0] ? "; " : "");
    }
    log_line(cn->lv, &lc, "%s", msg);
}

/* The request target as sent, before the library decodes it (its
 * uri_log_callback, called for every request of a connection): %00 in
 * its path, and its absolute form (on_request takes the path at the same
 * place in the decoded target). Returns the request's conn (*con_cls). */
static void *on_target(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls;
    (void)c;
    conn *cn = calloc(1, sizeof *cn);
    if (!cn || !uri) return cn;
    cn->target_nul = memmem(uri, strcspn(uri, "?"), "%00", 3) != NULL;
    cn->target_form = access_target_split(uri, cn->authority, sizeof cn->authority, &cn->path_at);
    return cn;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
    }
    tl_conn = cn;
    if (cn->target_form > 0) url = url[cn->path_at] ? url + cn->path_at : "/";
    const api_kind *api = api_for(url);
    if (!cn->begun) {
        cn->begun = true;
        request_begin(c, cn, url, method);
        const union MHD_ConnectionInfo *ctx = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cn->rec = ctx ? ctx->socket_context : NULL;
        /* the head is in: the body's deadline starts (or the answer's work) */
        conns_set_phase(&s->conns, cn->rec, strcmp(method, "POST") ? CONN_BUSY : CONN_BODY, time_now_s());
        bool done;
        return at_the_door(s, c, cn, url, method, version, api, &done);
    }
    if (cn->j) return answer_or_wait(s, c, cn); /* resumed: its job is ready */
    if (cn->answered) {                         /* refused at the door: nothing more is read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->refused && cn->body.n + *upload_size > s->cfg.max_body) {
            cn->refused = 413;
            snprintf(cn->why, sizeof cn->why, "the request body is over %zu MiB (--max-body-mb)",
                     s->cfg.max_body >> 20);
            strbuf_free(&cn->body);
        }
        if (!cn->refused) strbuf_put(&cn->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    conns_set_phase(&s->conns, cn->rec, CONN_BUSY, time_now_s()); /* the whole body is in */
    if (cn->refused)
        return send_error(s, c, api ? api->endpoint : "other", api && api->anthropic, cn->refused, cn->why);
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) return handle_get(s, c, url, method);
    if (!strcmp(method, "POST") && api) {
        if (cn->body.oom) return send_error(s, c, api->endpoint, api->anthropic, 500, "out of memory");
        return handle_api(s, c, api, is_count_tokens(url), cn);
    }
    if (api) return send_error(s, c, api->endpoint, api->anthropic, 405, "use POST");
    return send_error(s, c, "other", false, 404, "no such endpoint");
}

/* A connection's end line (if its request began), then its references
 * and memory go. */
static void conn_end(const srv *s, conn *cn) {
    if (cn->begun) request_end(s, cn);
    if (cn->answered_j) job_unref(cn->answered_j);
    if (cn->j) job_unref(cn->j);
    free(cn);
}

/* The end lines of the connections that ended before j did. */
static void end_late(srv *s, const job *j) {
    conn *mine = NULL;
    pthread_mutex_lock(&s->late_mu);
    for (conn **p = &s->late; *p;) {
        conn *cn = *p;
        if (cn->answered_j == j || cn->j == j) {
            *p = cn->late_next;
            cn->late_next = mine;
            mine = cn;
        } else {
            p = &cn->late_next;
        }
    }
    pthread_mutex_unlock(&s->late_mu);
    while (mine) {
        conn *next = mine->late_next;
        conn_end(s, mine);
        mine = next;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    srv *s = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    *con_cls = NULL;
    if (tl_conn == cn) tl_conn = NULL;
    cn->toe = toe;
    cn->stalled = conns_marked(&s->conns, cn->rec, CONN_STALLED);
    strbuf_free(&cn->body);
    /* a kept-alive connection waits for its next request's head */
    conns_set_phase(&s->conns, cn->rec, CONN_HEAD, time_now_s());
    job *j = cn->answered_j ? cn->answered_j : cn->j;
    if (j && cn->begun) {
        /* under late_mu: job_finish sets done before it looks for late lines */
        pthread_mutex_lock(&s->late_mu);
        pthread_mutex_lock(&j->mu);
        const bool wait = !j->done;
        if (wait && cn->j) j->cancelled = true; /* ended before its answer: nobody waits for the job any more */
        pthread_mutex_unlock(&j->mu);
        if (wait) {
            cn->late_next = s->late;
            s->late = cn;
        }
        pthread_mutex_unlock(&s->late_mu);
        if (wait) return;
    }
    conn_end(s, cn);
}

/* A connection's record in the table, made by the door at accept, goes
 * with it into MHD and is removed when MHD closes it (before the socket
 * is closed). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = fd ? conns_find_fd(&s->conns, fd->connect_fd) : NULL;
    } else {
        /* the library closes the socket next: a connection answered before
         * its body was read is closed in stages instead (door_linger) */
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (fd && conns_marked(&s->conns, *socket_context, CONN_LINGER)) {
            pthread_mutex_lock(&s->mu);
            const int kept = s->door ? fcntl(fd->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
            if (kept >= 0) door_linger(s->door, kept);
            pthread_mutex_unlock(&s->mu);
        }
        conns_remove(&s->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* The door hands over a connection whose request line is sound: to the
 * HTTP threads in turn. MHD closes the socket if it cannot take it; the
 * record then goes too (no other connection can have that socket yet: the
 * door is the only one that accepts). */
static void door_hand(void *ud, int fd, const struct sockaddr *addr, socklen_t len, conn_rec *rec) {
    (void)rec;
    srv *s = ud;
    struct MHD_Daemon *d = s->d[s->next_d++ % HTTP_THREADS];
    if (MHD_add_connection(d, fd, addr, len) != MHD_YES) {
        PH_WARN("cannot take a connection: %s", strerror(errno));
        conns_remove_fd(&s->conns, fd);
    }
}

static void door_refused(void *ud) {
    srv *s = ud;
    metrics_request(&s->met, "other", 400);
}

/* The watcher (s->mu held): a job whose client left or whose time is up
 * is cancelled (a queued one is answered and dropped at once, freeing its
 * place in the queue); a quiet stream gets a keep-alive comment every 5 s. */
static void watch_job(srv *s, job *j, double now) {
    pthread_mutex_lock(&j->mu);
    if (!j->done && !j->cancelled) {
        if (s->cfg.request_timeout_s > 0 && now - j->t_queued > s->cfg.request_timeout_s) {
            j->timed_out = j->cancelled = true;
        } else if (j->suspended && client_gone(j->fd)) {
            j->cancelled = true;
        } else if (j->suspended && j->streaming && now - j->t_suspended >= 5) {
            j->ping = true;
            job_wake_locked(j);
        }
    }
    pthread_mutex_unlock(&j->mu);
}

static void *watcher_main(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watcher_stop) {
        pthread_mutex_unlock(&s->mu);
        const double now = time_now_s();
        conns_sweep(&s->conns, now);
        pthread_mutex_lock(&s->mu);
        for (int w = 0; w < s->n_workers; w++)
            if (s->running[w]) watch_job(s, s->running[w], now);
        size_t kept = 0;
        for (size_t i = 0; i < s->q_len; i++) {
            job *j = s->q[(s->q_head + i) % s->q_cap];
            watch_job(s, j, now);
            if (!s->stopping && job_cancelled(j)) job_drop(s, j, false);
            else s->q[(s->q_head + kept++) % s->q_cap] = j;
        }
        if (kept != s->q_len) {
            s->q_len = kept;
            metrics_queue(&s->met, (int64_t)s->q_len);
        }
        pthread_mutex_unlock(&s->mu);
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = '\0';
    PH_DEBUG("http: %s", buf);
}

/* MHD's limit over --max-connections: room for the connections being
 * closed to make room (conns.h), and file descriptors kept for the
 * model, the caches and the logs. */
#define CONN_SLACK 64
#define FD_RESERVE 128

/* Raises the soft limit on open files as far as --max-connections needs
 * (the hard limit at most), or lowers --max-connections to fit (with a
 * warning). */
static void fit_connections(srv_config *cfg) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t want = (rlim_t)cfg->max_connections + CONN_SLACK + FD_RESERVE;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= want) return;
    long fit = (long)rl.rlim_cur - CONN_SLACK - FD_RESERVE;
    if (fit < 8) fit = 8;
    PH_WARN("%d connections need %llu open files, the limit is %llu: at most %ld connections", cfg->max_connections,
            (unsigned long long)want, (unsigned long long)rl.rlim_cur, fit);
    cfg->max_connections = (int)fit;
    if (cfg->max_connections_per_ip > fit) cfg->max_connections_per_ip = (int)fit;
}

/* Stops what server_open started (and what server_run left) and frees it. */
void server_close(srv *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    door *d = s->door;
    s->door = NULL;
    pthread_mutex_unlock(&s->mu);
    door_close(d);
    for (int i = 0; i < HTTP_THREADS; i++)
        if (s->d[i]) MHD_stop_daemon(s->d[i]);
    if (s->watcher_started) {
        pthread_mutex_lock(&s->mu);
        s->watcher_stop = true;
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watcher, NULL);
    }
    while (s->late) { /* none after server_run: every job has ended */
        conn *cn = s->late;
        s->late = cn->late_next;
        conn_end(s, cn);
    }
    pthread_mutex_destroy(&s->late_mu);
    conns_free(&s->conns);
    metrics_free(&s->met);
    free(s->key_domains);
    free(s->q);
    free(s->running);
    free(s->workers);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void server_config_default(srv_config *c) {
    *c = (srv_config){.host = "127.0.0.1",
                      .port = 8080,
                      .max_images = 16,
                      .max_queue = 64,
                      .parallel = 4,
                      .max_pixels_in_flight = (uint64_t)256 << 20,
                      .max_body = (size_t)64 << 20,
                      .max_connections = 256,
                      .max_connections_per_ip = 64,
                      .header_timeout_s = 10,
                      .body_timeout_s = 60,
                      .send_timeout_s = 60,
                      .temperature = 1.0,
                      .top_p = 1.0,
                      .top_k = 0,
                      .max_tokens = SERVER_MAX_TOKENS};
}

srv *server_open(const srv_config *cfg, ph_err *err) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    fit_connections(&s->cfg);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->late_mu, NULL);
    metrics_init(&s->met);
    conns_init(&s->conns, s->cfg.max_connections, s->cfg.max_connections_per_ip, s->cfg.header_timeout_s,
               s->cfg.body_timeout_s, s->cfg.send_timeout_s);
    if (web_page_init(&s->page, err)) goto fail;
    s->n_workers = s->cfg.parallel > 0 ? s->cfg.parallel : 1;
    s->running = calloc((size_t)s->n_workers, sizeof *s->running);
    s->workers = calloc((size_t)s->n_workers, sizeof *s->workers);
    if (!s->running || !s->workers) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (cfg->n_api_keys > 1) { /* each key its own isolation domain */
        if (!(s->key_domains = calloc(cfg->n_api_keys, sizeof *s->key_domains))) {
            err_set(err, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < cfg->n_api_keys; i++) access_key_domain(cfg->api_keys[i], s->key_domains[i]);
    }
    signal(SIGPIPE, SIG_IGN);
    if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0) {
        err_set(err, "cannot start the watcher thread");
        goto fail;
    }
    s->watcher_started = true;
    for (int i = 0; i < HTTP_THREADS; i++) {
        s->d[i] = MHD_start_daemon(
            MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
            0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)(s->cfg.max_connections + CONN_SLACK), MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)256 * 1024, MHD_OPTION_URI_LOG_CALLBACK, on_target, s,
            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_END);
        if (!s->d[i]) {
            err_set(err, "cannot start the HTTP threads: %s", strerror(errno));
            goto fail;
        }
    }
    const door_hooks hooks = {door_hand, door_refused, s};
    if (!(s->door = door_open(cfg->host, cfg->port, &s->conns, &hooks, &s->port, err))) goto fail;
    PH_INFO("bound to http://%s:%d; loading the model (GET /health answers 503 until it is ready)", cfg->host,
            s->port);
    return s;
fail:
    server_close(s);
    return NULL;
}

void server_loading(srv *s, double fraction) {
    pthread_mutex_lock(&s->mu);
    s->load_fraction = fraction;
    pthread_mutex_unlock(&s->mu);
}

/* The thread in sigwait. The engine's threads were started before the
 * signals were blocked here, so a SIGINT or SIGTERM the kernel hands to
 * one of them would kill the process: the handler sends it on to the
 * waiting thread instead. */
static pthread_t g_signal_thread;

static void forward_signal(int sig) { pthread_kill(g_signal_thread, sig); }

int server_run(srv *s, ph_engine *e) {
    s->e = e;
    /* the longest token: no prompt of N bytes of text is under N / it rows */
    const int32_t n_vocab = ph_engine_model_info(e)->n_vocab;
    for (int32_t id = 0; id < n_vocab; id++) {
        char b[8];
        const size_t n = ph_engine_token_bytes(e, id, b, sizeof b);
        if (n > s->max_token_bytes) s->max_token_bytes = n;
    }
    ph_engine_get_stats(e, &s->snap);
    /* signals go to sigwait below, not to any thread */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    g_signal_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (int w = 0; w < s->n_workers; w++) {
        s->workers[w] = (worker_arg){.s = s, .i = w};
        if (pthread_create(&s->workers[w].th, NULL, worker_main, &s->workers[w]) != 0) {
            PH_ERROR("cannot start worker thread %d", w + 1);
            pthread_mutex_lock(&s->mu);
            s->stopping = true;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            for (int k = 0; k < s->n_started; k++) pthread_join(s->workers[k].th, NULL);
            server_close(s);
            return 1;
        }
        s->n_started++;
    }
    atomic_store(&s->ready, true);
    PH_INFO("listening on http://%s:%d", s->cfg.host, s->port);
    int sig = 0;
    sigwait(&set, &sig);
    /* a second signal during the shutdown ends the process, as before */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const double t_stop = time_now_s();
    pthread_mutex_lock(&s->mu);
    int was_running = 0;
    for (int w = 0; w < s->n_workers; w++) was_running += s->running[w] != NULL;
    const size_t queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
    PH_INFO("%s (%s), stopping: no new requests; %s; %zu queued refused",
            sig == SIGINT ? "interrupted" : "terminated", sig == SIGINT ? "SIGINT" : "SIGTERM",
            was_running ? "the running requests cut short" : "no request was running", queued);
    /* stop taking connections and requests, cancel the running one, refuse
     * the queued ones */
    pthread_mutex_lock(&s->mu);
    door *d = s->door; /* on_connection hands it lingering closes under mu */
    s->door = NULL;
    pthread_mutex_unlock(&s->mu);
    door_close(d);
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (int w = 0; w < s->n_workers; w++) {
        job *r = s->running[w];
        if (!r) continue;
        pthread_mutex_lock(&r->mu);
        r->cancelled = true;
        pthread_mutex_unlock(&r->mu);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int w = 0; w < s->n_started; w++) pthread_join(s->workers[w].th, NULL);
    /* let the streams write their last events (a cut one its error event)
     * before the connections are closed: at most 2 s */
    pthread_mutex_lock(&s->mu);
    const double until = time_now_s() + 2.0;
    while (s->n_streams > 0 && time_now_s() < until) {
        cond_wait_s(&s->cv, &s->mu, 0.05);
    }
    pthread_mutex_unlock(&s->mu);
    server_close(s);
    PH_INFO("the server stopped in %.2f s", time_now_s() - t_stop);
    return 0;
}
