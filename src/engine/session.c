/* Sessions: the KV cache of one sequence and the entry points that feed it. */
#include <stdlib.h>
#include <string.h>

#include "model/llm.h"

#define PH_CHUNK 512

static void session_free_buffers(ph_session *s) {
    if (s->k)
        for (int l = 0; l < s->m->hp.n_layer; l++) free(s->k[l]);
    if (s->v)
        for (int l = 0; l < s->m->hp.n_layer; l++) free(s->v[l]);
    free(s->k);
    free(s->v);
    free(s->logits);
    free(s->x);
    free(s->h);
    free(s->q);
    free(s->kx);
    free(s->vx);
    free(s->att);
    free(s->ga);
    free(s->up);
    free(s->rope_cs);
    free(s->pos);
}

ph_session *ph_session_new(ph_model *m, int32_t n_ctx, ph_err *e) {
    const llm_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_ctx <= 0 || n_ctx > (1 << 22)) {
        ph_err_set(e, "context size %d is not usable", n_ctx);
        return NULL;
    }
    ph_session *s = calloc(1, sizeof *s);
    if (!s) {
        ph_err_set(e, "out of memory");
        return NULL;
    }
    s->m = m;
    s->n_ctx = n_ctx;
    s->chunk_cap = n_ctx < PH_CHUNK ? n_ctx : PH_CHUNK;
    const size_t nkv = (size_t)hp->n_head_kv * hp->head_dim, nq = (size_t)hp->n_head * hp->head_dim;
    const size_t C = (size_t)s->chunk_cap, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    s->k = calloc((size_t)hp->n_layer, sizeof *s->k);
    s->v = calloc((size_t)hp->n_layer, sizeof *s->v);
    int ok = s->k && s->v;
    for (int l = 0; ok && l < hp->n_layer; l++) {
        s->k[l] = malloc((size_t)n_ctx * nkv * sizeof(ph_f16));
        s->v[l] = malloc((size_t)n_ctx * nkv * sizeof(ph_f16));
        ok = s->k[l] && s->v[l];
    }
    if (ok) {
        s->logits = malloc((size_t)hp->n_vocab * sizeof(float));
        s->x = malloc(C * E * sizeof(float));
        s->h = malloc(C * E * sizeof(float));
        s->q = malloc(C * nq * sizeof(float));
        s->kx = malloc(C * nkv * sizeof(float));
        s->vx = malloc(C * nkv * sizeof(float));
        s->att = malloc(C * nq * sizeof(float));
        s->ga = malloc(C * F * sizeof(float));
        s->up = malloc(C * F * sizeof(float));
        s->rope_cs = malloc(C * (size_t)hp->head_dim * sizeof(float));
        s->pos = malloc(C * 4 * sizeof(int32_t));
        ok = s->logits && s->x && s->h && s->q && s->kx && s->vx && s->att && s->ga && s->up && s->rope_cs &&
             s->pos;
    }
    if (!ok) {
        ph_err_set(e, "out of memory for a context of %d tokens", n_ctx);
        ph_session_free(s);
        return NULL;
    }
    return s;
}

void ph_session_free(ph_session *s) {
    if (!s) return;
    session_free_buffers(s);
    free(s);
}

int32_t ph_session_n_ctx(const ph_session *s) { return s->n_ctx; }
int32_t ph_session_n_rows(const ph_session *s) { return s->n_rows; }
int32_t ph_session_next_pos(const ph_session *s) { return s->next_pos; }

void ph_session_reset(ph_session *s) {
    s->n_rows = 0;
    s->next_pos = 0;
}

void session_truncate(ph_session *s, int32_t n_rows, int32_t next_pos) {
    if (n_rows < s->n_rows) s->n_rows = n_rows < 0 ? 0 : n_rows;
    s->next_pos = next_pos;
}

static size_t kv_row_bytes(const ph_session *s) {
    return (size_t)s->m->hp.n_head_kv * s->m->hp.head_dim * sizeof(ph_f16);
}

size_t session_kv_bytes(const ph_session *s, int32_t n) {
    return 2 * (size_t)s->m->hp.n_layer * (size_t)n * kv_row_bytes(s);
}

void session_kv_save(const ph_session *s, int32_t n, void *dst) {
    const size_t part = (size_t)n * kv_row_bytes(s);
    uint8_t *d = dst;
    for (int l = 0; l < s->m->hp.n_layer; l++) {
        memcpy(d, s->k[l], part);
        memcpy(d + part, s->v[l], part);
        d += 2 * part;
    }
}

void session_kv_load(ph_session *s, const void *src, int32_t src_rows, int32_t n, int32_t next_pos) {
    const size_t row = kv_row_bytes(s), part = (size_t)src_rows * row;
    const uint8_t *p = src;
    for (int l = 0; l < s->m->hp.n_layer; l++) {
        memcpy(s->k[l], p, (size_t)n * row);
        memcpy(s->v[l], p + part, (size_t)n * row);
        p += 2 * part;
    }
    s->n_rows = n;
    s->next_pos = next_pos;
}

const float *ph_session_logits(const ph_session *s) { return s->logits; }

int ph_session_eval_tokens(ph_session *s, const int32_t *ids, size_t n, ph_err *e) {
    if (n == 0) return 0;
    if ((size_t)s->n_rows + n > (size_t)s->n_ctx)
        return ph_err_set(e, "the prompt needs %zu more tokens but the context has room for %d", n,
                          s->n_ctx - s->n_rows);
    const bool mrope = s->m->hp.rope.mode == PH_ROPE_IMROPE;
    for (size_t done = 0; done < n;) {
        size_t c = n - done < (size_t)s->chunk_cap ? n - done : (size_t)s->chunk_cap;
        /* text positions: (p, p, p, 0) section-major for M-RoPE (spec C.4) */
        for (size_t i = 0; i < c; i++) {
            int32_t p = s->next_pos + (int32_t)i;
            s->pos[i] = p;
            if (mrope) {
                s->pos[c + i] = p;
                s->pos[2 * c + i] = p;
                s->pos[3 * c + i] = 0;
            }
        }
        if (llm_forward(s, ids + done, NULL, (int64_t)c, s->pos, done + c == n, e)) return -1;
        s->next_pos += (int32_t)c;
        done += c;
    }
    return 0;
}

int session_eval_image_rows(ph_session *s, const float *rows, int32_t grid_x, int32_t grid_y, bool want_logits,
                            ph_err *e) {
    const llm_hparams *hp = &s->m->hp;
    const int64_t n = (int64_t)grid_x * grid_y;
    if (hp->rope.mode != PH_ROPE_IMROPE)
        return ph_err_set(e, "this model (%s) does not take pictures", s->m->arch_name);
    if (s->n_rows + n > s->n_ctx)
        return ph_err_set(e, "the picture needs %lld rows but the context has room for %d", (long long)n,
                          s->n_ctx - s->n_rows);
    /* every row of the picture has t = p0, h = p0 + row, w = p0 + col (spec D) */
    const int32_t p0 = s->next_pos;
    for (int64_t done = 0; done < n;) {
        int64_t c = n - done < s->chunk_cap ? n - done : s->chunk_cap;
        for (int64_t i = 0; i < c; i++) {
            int64_t k = done + i;
            s->pos[i] = p0;
            s->pos[c + i] = p0 + (int32_t)(k / grid_x);
            s->pos[2 * c + i] = p0 + (int32_t)(k % grid_x);
            s->pos[3 * c + i] = 0;
        }
        if (llm_forward(s, NULL, rows + done * hp->n_embd_inp, c, s->pos, want_logits && done + c == n, e))
            return -1;
        done += c;
    }
    s->next_pos = p0 + (grid_x > grid_y ? grid_x : grid_y);
    return 0;
}
