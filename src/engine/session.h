/* Sessions (the public ph_session): a model, the KV cache of one sequence
 * (state/kv_cache) and the forward pass's scratch, with the entry points
 * that feed them. */
#ifndef PH_ENGINE_SESSION_H
#define PH_ENGINE_SESSION_H

#include <pthread.h>

#include "engine/batcher.h"
#include "model/llm.h"
#include "state/kv_cache.h"

struct ph_session {
    ph_model *m;
    kv_cache kv;
    llm_scratch sc;
    int32_t next_pos; /* position of the next text token */
    ph_progress_fn progress;
    void *progress_ud;
    /* a span of work reported as one (session_progress_span): rows done
     * of total; total 0: each evaluation is its own span */
    int64_t prog_done, prog_total;
    /* an engine's session: its rows evaluated by the engine's batcher, its
     * blocks taken under the engine's lock (NULL: llm_forward, no lock) */
    batcher *bat;
    pthread_mutex_t *lock;
};

/* Reports the next prompt evaluations as one span of total rows (done 0
 * now); total 0 ends it. */
void session_progress_span(ph_session *s, int64_t total);
/* An encoder's step (a vision_progress's fn; ud: the session) reported
 * as the session's PH_PROGRESS_ENCODE. */
void session_encode_step(void *ud, int done, int total);

/* Evaluates a picture's rows (grid_x * grid_y rows of n_embd_inp floats,
 * row-major over the merged grid) with M-RoPE positions; the next text
 * position advances by max(grid_x, grid_y) (docs/numerics.md, Positions of picture rows). Logits are computed
 * only when asked (a prompt rarely ends with a picture). */
/* Rows of a prompt, however few, reported as prefill progress
 * (ph_session_eval_tokens takes a single token as a decoded one, which
 * reports none); the numbers are the same either way. */
int session_eval_prompt(ph_session *s, const int32_t *ids, size_t n, ph_err *err);
int session_eval_image_rows(ph_session *s, const float *rows, int32_t grid_x, int32_t grid_y, bool want_logits,
                            ph_err *err);

/* ph_model_default_ctx's choice for a model of n_ctx_train whose rows take
 * row_bytes each, with mem_available bytes (-1: unknown). */
void session_ctx_choose(int32_t n_ctx_train, uint64_t row_bytes, int64_t mem_available, ph_ctx_choice *c);

/* ph_session_new with its KV blocks taken from pool (NULL: a pool of
 * one context's blocks of its own: state/kv_cache.h). */
ph_session *session_new_in(ph_model *m, int32_t n_ctx, kv_pool *pool, ph_err *err);

/* Keeps the first n_rows KV cells and sets the next position. */
void session_truncate(ph_session *s, int32_t n_rows, int32_t next_pos);

#endif
