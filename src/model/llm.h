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

/* The KV rows the forward pass reads and appends to: per layer n_ctx cells
 * of n_head_kv * head_dim F16 values for K and for V, the first n_rows in
 * use (the attention mask is the cell order). The memory is owned by
 * state/kv_cache, which also saves, restores and truncates it. */
typedef struct llm_kv {
    ph_f16 **k, **v;
    int32_t n_ctx;
    int32_t n_rows;
} llm_kv;

/* The forward pass's working memory for one chunk of up to cap rows, and
 * the logits of the last row it computed. */
typedef struct llm_scratch {
    int32_t cap;
    float *x, *h, *q, *kx, *vx, *att, *ga, *up, *rope_cs;
    int32_t *pos;      /* [4][cap] positions for one chunk */
    float *logits;     /* n_vocab */
} llm_scratch;

int llm_scratch_init(llm_scratch *sc, const ph_model *m, int32_t cap, ph_err *e);
void llm_scratch_free(llm_scratch *sc);

/* Evaluates n rows (n <= sc->cap) at the end of kv. Either tokens (ids) or
 * embd (n rows of n_embd_inp floats, e.g. picture rows) is given. pos is
 * section-major [4][n] (only [0][n] for non-M-RoPE models). Computes the
 * logits of the last row (sc->logits) when want_logits. prompt: the rows
 * are a prompt's (attention's tiled path however few; see ph_attn_args),
 * else decoded tokens. */
int llm_forward(const ph_model *m, llm_kv *kv, llm_scratch *sc, const int32_t *tokens, const float *embd, int64_t n,
                const int32_t *pos, bool want_logits, bool prompt, ph_err *e);

#endif
