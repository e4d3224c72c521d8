/* The LLM: hyperparameters and weights read from a GGUF file, and the
 * forward pass over a batch of rows (architectures qwen3, qwen3vl; spec B). */
#ifndef PH_MODEL_LLM_H
#define PH_MODEL_LLM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "model/weights.h"
#include "pinhole.h"
#include "text/tokenizer.h"

typedef enum { LLM_ARCH_QWEN3, LLM_ARCH_QWEN3VL } llm_arch;

typedef struct llm_hparams {
    llm_arch arch;
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_deepstack, n_embd_inp;
    float rms_eps;
    ph_rope rope;
} llm_hparams;

typedef struct llm_layer {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    ph_mat wq, wk, wv, wo, gate, up, down;
} llm_layer;

struct ph_model {
    gguf_file *gguf;
    ph_vocab *vocab;
    ph_pool *pool;
    llm_hparams hp;
    llm_layer *layers;
    ph_mat tok_embd, output;
    const float *output_norm;
    ph_weights w;
    char arch_name[32];
    char name[128];
    ph_model_info info;
};

/* The KV cache and forward state of one sequence. */
struct ph_session {
    ph_model *m;
    int32_t n_ctx;
    int32_t n_rows;     /* KV cells in use */
    int32_t next_pos;   /* position of the next text token */
    ph_f16 **k, **v;    /* per layer: [n_ctx][n_head_kv * head_dim] */
    float *logits;      /* n_vocab */
    /* scratch for one chunk of up to chunk_cap rows */
    int32_t chunk_cap;
    float *x, *h, *q, *kx, *vx, *att, *ga, *up, *rope_cs;
    int32_t *pos;
};

/* Evaluates n rows at the end of the session. Either tokens (ids) or embd
 * (n rows of n_embd_inp floats, e.g. picture rows) is given. pos is
 * section-major [4][n] (only [0][n] for non-M-RoPE models). Computes the
 * logits of the last row when want_logits. */
int llm_forward(ph_session *s, const int32_t *tokens, const float *embd, int64_t n, const int32_t *pos,
                bool want_logits, ph_err *e);

/* Evaluates a picture's rows (grid_x * grid_y rows of n_embd_inp floats,
 * row-major over the merged grid) with M-RoPE positions; the next text
 * position advances by max(grid_x, grid_y) (spec D). Logits are computed
 * only when asked (a prompt rarely ends with a picture). */
int session_eval_image_rows(ph_session *s, const float *rows, int32_t grid_x, int32_t grid_y, bool want_logits,
                            ph_err *e);

/* Keeps the first n_rows KV cells (the attention mask is the cell order, so
 * later cells are simply overwritten) and sets the next position. */
void session_truncate(ph_session *s, int32_t n_rows, int32_t next_pos);

/* A copy of the first n KV cells (a checkpoint): session_kv_bytes(s, n)
 * bytes, per layer its n K cells then its n V cells. */
size_t session_kv_bytes(const ph_session *s, int32_t n);
void session_kv_save(const ph_session *s, int32_t n, void *dst);
/* Makes the session the first n cells of a copy of src_rows cells (n <=
 * src_rows <= n_ctx) with next_pos the position after them. The logits are
 * not restored: evaluate at least one row before sampling. */
void session_kv_load(ph_session *s, const void *src, int32_t src_rows, int32_t n, int32_t next_pos);

#endif
