/* Sessions: a model, one sequence's KV cache and the entry points that feed it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/meminfo.h"
#include "engine/session.h"

#define PH_CHUNK 512

/* The default context's bounds: never below what it was before memory
 * was looked at (4096, or a smaller trained context), and the most a
 * session takes. */
#define CTX_FLOOR 4096
#define CTX_MOST  (1 << 22)

void session_ctx_choose(int32_t n_ctx_train, uint64_t row_bytes, int64_t mem_available, ph_ctx_choice *c) {
    memset(c, 0, sizeof *c);
    const int64_t train = n_ctx_train > 0 ? n_ctx_train : CTX_FLOOR;
    const int64_t floor = train < CTX_FLOOR ? train : CTX_FLOOR, most = train < CTX_MOST ? train : CTX_MOST;
    const double gib = (double)mem_available / (double)(1 << 30);
    c->n_ctx_train = (int32_t)train;
    c->row_bytes = row_bytes;
    c->mem_available = mem_available;
    int64_t n = most;
    if (mem_available < 0) { /* nothing to go by: what it was before */
        n = floor;
        snprintf(c->why, sizeof c->why, "trained %lld, capped at %lld: available memory unknown", (long long)train,
                 (long long)n);
    } else {
        const int64_t fit = mem_available / 2 / (int64_t)(row_bytes ? row_bytes : 1) / 1024 * 1024;
        if (fit < floor) n = floor;
        else if (fit < most) n = fit;
        if (n < train && fit < floor)
            snprintf(c->why, sizeof c->why, "trained %lld; at least %lld though only %.1f GiB memory is available",
                     (long long)train, (long long)n, gib);
        else if (n < train && fit < most)
            snprintf(c->why, sizeof c->why, "trained %lld, capped by %.1f GiB available memory", (long long)train,
                     gib);
        else if (n < train)
            snprintf(c->why, sizeof c->why, "trained %lld, capped at the most pinhole takes", (long long)train);
        else snprintf(c->why, sizeof c->why, "trained; %.1f GiB memory available", gib);
    }
    c->capped = n < train;
    c->n_ctx = (int32_t)n;
}

void ph_model_default_ctx(const ph_model *m, ph_ctx_choice *c) {
    session_ctx_choose(m->hp.n_ctx_train, kv_cache_row_bytes(&m->hp), ph_mem_available(), c);
}

ph_session *ph_session_new(ph_model *m, int32_t n_ctx, ph_err *err) { return session_new_in(m, n_ctx, NULL, err); }

ph_session *session_new_in(ph_model *m, int32_t n_ctx, kv_pool *pool, ph_err *err) {
    if (n_ctx <= 0) {
        ph_ctx_choice c;
        ph_model_default_ctx(m, &c);
        n_ctx = c.n_ctx;
    }
    if (n_ctx <= 0 || n_ctx > (1 << 22)) {
        err_set(err, "context size %d is not usable", n_ctx);
        return NULL;
    }
    ph_session *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->m = m;
    if (kv_cache_init(&s->kv, m, n_ctx, pool, err) ||
        llm_scratch_init(&s->sc, m, n_ctx < PH_CHUNK ? n_ctx : PH_CHUNK, 1, err)) {
        ph_session_free(s);
        return NULL;
    }
    return s;
}

void ph_session_free(ph_session *s) {
    if (!s) return;
    kv_cache_free(&s->kv);
    llm_scratch_free(&s->sc);
    free(s);
}

int32_t ph_session_n_ctx(const ph_session *s) { return s->kv.rows.n_ctx; }
int32_t ph_session_n_rows(const ph_session *s) { return s->kv.rows.n_rows; }
int32_t ph_session_next_pos(const ph_session *s) { return s->next_pos; }

void ph_session_reset(ph_session *s) {
    kv_cache_truncate(&s->kv, 0);
    s->next_pos = 0;
}

void session_truncate(ph_session *s, int32_t n_rows, int32_t next_pos) {
    kv_cache_truncate(&s->kv, n_rows);
    s->next_pos = next_pos;
}

const float *ph_session_logits(const ph_session *s) { return s->sc.logits; }

void ph_session_set_progress(ph_session *s, ph_progress_fn fn, void *ud) {
    s->progress = fn;
    s->progress_ud = ud;
}

void session_progress_span(ph_session *s, int64_t total) {
    s->prog_done = 0;
    s->prog_total = total;
    if (total && s->progress) s->progress(s->progress_ud, PH_PROGRESS_PREFILL, 0, total);
}

void session_encode_step(void *ud, int done, int total) {
    ph_session *s = ud;
    if (s->progress) s->progress(s->progress_ud, PH_PROGRESS_ENCODE, done, total);
}

/* done of an evaluation's n rows are in: reported within the span (after
 * its base rows done before), or as the evaluation's own. */
static void rows_done(ph_session *s, int64_t base, int64_t done, int64_t n) {
    if (!s->progress) return;
    if (!s->prog_total) s->progress(s->progress_ud, PH_PROGRESS_PREFILL, done, n);
    else if (done) s->progress(s->progress_ud, PH_PROGRESS_PREFILL, base + done, s->prog_total);
    if (s->prog_total && done == n) s->prog_done = base + n;
}

/* Makes rows up to n writable (kv_cache_reserve), under the engine's lock
 * when the session is an engine's (the pool is shared). */
static int reserve(ph_session *s, int32_t n, ph_err *err) {
    if (s->lock) pthread_mutex_lock(s->lock);
    const int rc = kv_cache_reserve(&s->kv, n, err);
    if (s->lock) pthread_mutex_unlock(s->lock);
    return rc;
}

/* Evaluates n rows at positions s->sc.pos: through the engine's batcher
 * (the logits copied to the session's; a decoded token's row goes first in
 * its step), or alone: the same numbers either way (llm_forward_batch). */
static int forward(ph_session *s, const int32_t *ids, const float *embd, int64_t n, bool want_logits, bool decode,
                   ph_err *err) {
    if (s->bat)
        return batcher_eval(s->bat, &s->kv.rows, ids, embd, n, s->sc.pos, want_logits, decode, s->sc.logits, err);
    return llm_forward(s->m, &s->kv.rows, &s->sc, ids, embd, n, s->sc.pos, want_logits, err);
}

static int eval_tokens(ph_session *s, const int32_t *ids, size_t n, bool prompt, ph_err *err) {
    if (n == 0) return 0;
    const llm_kv *kv = &s->kv.rows;
    if ((size_t)kv->n_rows + n > (size_t)kv->n_ctx)
        return err_set(err, "the prompt needs %zu more tokens but the context has room for %d", n,
                       kv->n_ctx - kv->n_rows);
    const bool mrope = s->m->hp.rope.mode == PH_ROPE_IMROPE;
    const int64_t base = s->prog_done;
    if (prompt) rows_done(s, base, 0, (int64_t)n);
    for (size_t done = 0; done < n;) {
        size_t c = n - done < (size_t)s->sc.cap ? n - done : (size_t)s->sc.cap;
        /* text positions: (p, p, p, 0) section-major for M-RoPE (docs/numerics.md, IMROPE) */
        for (size_t i = 0; i < c; i++) {
            int32_t p = s->next_pos + (int32_t)i;
            s->sc.pos[i] = p;
            if (mrope) {
                s->sc.pos[c + i] = p;
                s->sc.pos[2 * c + i] = p;
                s->sc.pos[3 * c + i] = 0;
            }
        }
        if (reserve(s, kv->n_rows + (int32_t)c, err) ||
            forward(s, ids + done, NULL, (int64_t)c, done + c == n, !prompt, err))
            return -1;
        s->next_pos += (int32_t)c;
        done += c;
        if (prompt) rows_done(s, base, (int64_t)done, (int64_t)n);
    }
    return 0;
}

/* More than one token: a prompt (its progress reported); one: a decoded token. */
int ph_session_eval_tokens(ph_session *s, const int32_t *ids, size_t n, ph_err *err) {
    return eval_tokens(s, ids, n, n > 1, err);
}

int session_eval_prompt(ph_session *s, const int32_t *ids, size_t n, ph_err *err) {
    return eval_tokens(s, ids, n, true, err);
}

int session_eval_image_rows(ph_session *s, const float *rows, int32_t grid_x, int32_t grid_y, bool want_logits,
                            ph_err *err) {
    const llm_hparams *hp = &s->m->hp;
    const int64_t n = (int64_t)grid_x * grid_y;
    if (hp->rope.mode != PH_ROPE_IMROPE)
        return err_set(err, "this model (%s) does not take pictures", s->m->arch_name);
    const llm_kv *kv = &s->kv.rows;
    if (kv->n_rows + n > kv->n_ctx)
        return err_set(err, "the picture needs %lld rows but the context has room for %d", (long long)n,
                       kv->n_ctx - kv->n_rows);
    /* every row of the picture has t = p0, h = p0 + row, w = p0 + col (docs/numerics.md, Positions of picture rows) */
    const int32_t p0 = s->next_pos;
    const int64_t base = s->prog_done;
    rows_done(s, base, 0, n);
    for (int64_t done = 0; done < n;) {
        int64_t c = n - done < s->sc.cap ? n - done : s->sc.cap;
        for (int64_t i = 0; i < c; i++) {
            int64_t k = done + i;
            s->sc.pos[i] = p0;
            s->sc.pos[c + i] = p0 + (int32_t)(k / grid_x);
            s->sc.pos[2 * c + i] = p0 + (int32_t)(k % grid_x);
            s->sc.pos[3 * c + i] = 0;
        }
        if (reserve(s, kv->n_rows + (int32_t)c, err) ||
            forward(s, NULL, rows + done * hp->n_embd_inp, c, want_logits && done + c == n, false, err))
            return -1;
        done += c;
        rows_done(s, base, done, n);
    }
    s->next_pos = p0 + (grid_x > grid_y ? grid_x : grid_y);
    return 0;
}
