/* The LLM: hyperparameters and weights read from a GGUF file, and the
 * forward pass over a batch of rows (architectures qwen3, qwen3vl: docs/numerics.md, Qwen3 and Qwen3-VL;
 * qwen35, gated delta net layers between gated attention layers: docs/numerics.md, Qwen3.5). */
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

typedef enum { LLM_ARCH_QWEN3, LLM_ARCH_QWEN3VL, LLM_ARCH_QWEN35 } llm_arch;

typedef struct llm_hparams {
    llm_arch arch;
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_deepstack, n_embd_inp;
    float rms_eps;
    rope_params rope;
    bool gated_attn;      /* qwen35: a gate head beside each query head (docs/numerics.md, Gated attention) */
    int32_t n_attn_layer; /* layers with a KV cache */
    /* qwen35's gated delta net layers (docs/numerics.md, Qwen3.5 layers): n_rec_layer of them, conv_k
     * taps, hk key heads and hv value heads of ssm_d (= key head size) */
    int32_t n_rec_layer, conv_k, ssm_hk, ssm_hv, ssm_d, conv_dim;
} llm_hparams;

/* A gated delta net layer's own weights (docs/numerics.md, Qwen3.5 tensors). */
typedef struct llm_gdn {
    wmat qkv, z, beta, alpha, out;
    const float *conv; /* [conv_k][conv_dim], tap-major (the file's transposed) */
    const float *dt_bias, *a, *norm;
} llm_gdn;

typedef struct llm_layer {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* ffn_norm: qwen35's post_attention_norm */
    wmat wq, wk, wv, wo, gate, up, down;
    bool recurrent;
    int32_t slot; /* index among the layers of its kind (KV cells, or recurrent state) */
    llm_gdn gdn;  /* when recurrent (then wq .. wo are unused) */
} llm_layer;

struct ph_model {
    gguf_file *gguf;
    bpe_vocab *vocab;
    tpool *pool;
    llm_hparams hp;
    llm_layer *layers;
    wmat tok_embd, output;
    const float *output_norm;
    weight_set w;
    char arch_name[32];
    char name[128];
    ph_model_info info;
};

/* The KV rows the forward pass reads and appends to: per attention layer
 * n_ctx cells of n_head_kv * head_dim F16 values for K and for V, the first
 * n_rows in use (the attention mask is the cell order), held in blocks of
 * block_rows rows: row p is row p % block_rows of blocks[p / block_rows],
 * whose bytes are, per attention layer l (its slot), the K cells of its
 * rows, then their V cells (state/kv_block.h; attention reads them through
 * this table, kernels/attention.h); and per recurrent
 * layer the state after those n_rows rows: the convolution's last conv_k - 1
 * input rows ([conv_k - 1][conv_dim]) and the delta net's matrices
 * ([ssm_hv][ssm_d][ssm_d]; docs/numerics.md, Recurrent state), zero for an empty sequence. The memory
 * is owned by state/kv_cache, which also saves, restores and truncates it. */
typedef struct llm_kv {
    uint8_t **blocks; /* [ceil(n_ctx / block_rows)] */
    int32_t block_rows;
    float **conv, **ssm;
    int32_t n_ctx;
    int32_t n_rows;
} llm_kv;

/* The forward pass's working memory for one batch of up to cap rows (all
 * its segments' rows together: cap bounds a batch's total), and the
 * logits of up to n_logits rows (the segments of a batch that want them). */
typedef struct llm_scratch {
    int32_t cap, n_logits;
    float *x, *h, *q, *kx, *vx, *att, *ga, *up, *rope_cs;
    float *gate;   /* qwen35: attention gates [cap][n_head * head_dim]; the delta net's
                          beta, then alpha, logits ([n][ssm_hv] each) */
    int32_t *pos;  /* [4][cap] positions for one chunk */
    float *logits; /* [n_logits][n_vocab] */
} llm_scratch;

/* n_logits >= 1: how many segments of one batch may want logits. */
int llm_scratch_init(llm_scratch *sc, const ph_model *m, int32_t cap, int32_t n_logits, ph_err *err);
void llm_scratch_free(llm_scratch *sc);

/* One sequence's rows in a batch: n rows (n >= 1) at the end of *kv (its
 * table has blocks for them), either tokens (ids) or embd (n rows of
 * n_embd_inp floats, e.g. picture rows with their deepstack slices) given;
 * pos section-major [4][n] (only [0][n] for non-M-RoPE models). want_logits: the logits of its last row are wanted;
 * the pass then points logits at them (in the scratch, valid until its
 * next pass), else sets it NULL. */
typedef struct llm_seg {
    llm_kv *kv;
    const int32_t *tokens;
    const float *embd;
    int64_t n;
    const int32_t *pos;
    bool want_logits;
    const float *logits; /* out */
} llm_seg;

/* One forward pass over the rows of n_seg segments, each of a different
 * sequence (no two share a kv), evaluated as one batch of their rows
 * concatenated in segment order: at most sc->cap rows in all, at most
 * sc->n_logits segments wanting logits. The matrix products run once over
 * all rows (the output matrix once over the rows whose logits are wanted),
 * the norms and the rope per row with its own positions; a segment's rows
 * attend (causally) to its own sequence's cells, to which their K and V are
 * appended, and a recurrent layer runs over them from its sequence's own
 * state. A row's results do not depend on the other rows of the batch nor
 * on how many there are (attn_compute, mat_mul): a sequence's numbers are
 * those of the same rows evaluated alone, at once, in chunks or token by
 * token (docs/numerics.md, Batches of several sequences). The
 * segments' logits are in the order of the segments that want them:
 * sc->logits + j * n_vocab for the j-th.
 * 0, or -1 with nothing changed when the batch is not usable. */
int llm_forward_batch(const ph_model *m, llm_seg *segs, int n_seg, llm_scratch *sc, ph_err *err);

/* Evaluates n rows (n <= sc->cap) of one sequence at the end of kv: a
 * batch of one segment (llm_forward_batch). Computes the logits of the
 * last row (sc->logits) when want_logits. */
int llm_forward(const ph_model *m, llm_kv *kv, llm_scratch *sc, const int32_t *tokens, const float *embd, int64_t n,
                const int32_t *pos, bool want_logits, ph_err *err);

/* The model of path with its architecture and hyperparameters (hp,
 * arch_name, name) read and nothing else loaded: for llm_check_pictures and
 * the like, and ph_model_free. */
ph_model *llm_probe(const char *path, ph_err *err);
/* Whether the model takes pictures (its positions are M-RoPE's): 0, or -1
 * with e saying it does not. */
int llm_check_pictures(const ph_model *m, ph_err *err);

/* The model's chat template (tokenizer.chat_template): NULL and *len 0 when
 * it has none. Points into the model file. */
const char *llm_chat_template(const ph_model *m, size_t *len);

/* ---- qwen35 (llm_qwen35.c), for llm_qwen3.c -------------------------------- */
/* Reads the recurrent layers' settings and which layers they are (docs/numerics.md, Qwen3.5 layers). */
int llm_qwen35_hparams(ph_model *m, ph_err *err);
/* Loads layer l's delta net weights (docs/numerics.md, Qwen3.5 tensors). */
int llm_qwen35_gdn_load(ph_model *m, int l, ph_err *err);
/* The delta net mixer of layer L over the n normed rows in sc->h, those of
 * n_seg segments in order, each from its own sequence's state; its output
 * rows (n_embd wide) go to sc->h. */
void llm_qwen35_gdn(const ph_model *m, const llm_layer *L, const llm_seg *segs, int n_seg, llm_scratch *sc,
                    int64_t n);

#endif
