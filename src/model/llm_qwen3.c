/* Qwen3 / Qwen3-VL / Qwen3.5 language model: loading and the forward pass
 * (docs/numerics.md, Qwen3 and Qwen3-VL, and Qwen3.5, whose delta net layers are llm_qwen35.c's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/attention.h"
#include "model/llm.h"

const char *llm_chat_template(const ph_model *m, size_t *len) {
    gguf_str t;
    bool has = gguf_get_str(m->gguf, "tokenizer.chat_template", &t) == 0;
    *len = has ? (size_t)t.len : 0;
    return has ? t.ptr : NULL;
}

/* ---- loading ------------------------------------------------------------ */

static int get_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, bool required, ph_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_f32(f, key, out) == 0) return 0;
    if (!required) return 1;
    if (gguf_find_kv(f, key)) return err_set(err, "metadata key '%s' has the wrong type", key);
    return err_set(err, "metadata key '%s' is missing", key);
}

static int load_hparams(ph_model *m, ph_err *err) {
    const gguf_file *f = m->gguf;
    llm_hparams *hp = &m->hp;
    const char *a = m->arch_name;
    uint32_t u;
    if (weights_meta_u32(f, a, "context_length", &u, true, err)) return -1;
    hp->n_ctx_train = (int32_t)u;
    if (weights_meta_u32(f, a, "embedding_length", &u, true, err)) return -1;
    hp->n_embd = (int32_t)u;
    if (weights_meta_u32(f, a, "block_count", &u, true, err)) return -1;
    hp->n_layer = (int32_t)u;
    /* blocks for multi-token prediction follow the trunk; they are not run */
    uint32_t nextn = 0;
    weights_meta_u32(f, a, "nextn_predict_layers", &nextn, false, err);
    if (nextn >= u) return err_set(err, "%u blocks, %u of them for multi-token prediction", u, nextn);
    hp->n_layer -= (int32_t)nextn;
    if (weights_meta_u32(f, a, "feed_forward_length", &u, true, err)) return -1;
    hp->n_ff = (int32_t)u;
    if (weights_meta_u32(f, a, "attention.head_count", &u, true, err)) return -1;
    hp->n_head = (int32_t)u;
    hp->n_head_kv = hp->n_head;
    if (weights_meta_u32(f, a, "attention.head_count_kv", &u, false, err) == 0) hp->n_head_kv = (int32_t)u;
    if (hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return err_set(err, "head counts %d / %d (kv) are not usable", hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (weights_meta_u32(f, a, "attention.key_length", &u, false, err) == 0) hp->head_dim = (int32_t)u;
    uint32_t vlen = (uint32_t)hp->head_dim;
    if (weights_meta_u32(f, a, "attention.value_length", &vlen, false, err) == 0 && (int32_t)vlen != hp->head_dim)
        return err_set(err, "key length %d and value length %u differ", hp->head_dim, vlen);
    uint32_t n_rot = (uint32_t)hp->head_dim;
    weights_meta_u32(f, a, "rope.dimension_count", &n_rot, false, err);
    /* Qwen3.5 rotates the first n_rot dims of a head (docs/numerics.md, Gated attention) */
    if (hp->arch == LLM_ARCH_QWEN35 ? n_rot == 0 || n_rot % 2 || (int32_t)n_rot > hp->head_dim
                                    : (int32_t)n_rot != hp->head_dim)
        return err_set(err, "rope dimension count %u does not fit the head size %d", n_rot, hp->head_dim);
    if (get_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err)) return -1;
    hp->rope.freq_base = 10000.0f;
    get_f32(f, a, "rope.freq_base", &hp->rope.freq_base, false, err);
    hp->rope.n_dims = (int)n_rot;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str st;
    if (gguf_get_str(f, key, &st) == 0 && !gguf_str_eq(st, "none") && !gguf_str_eq(st, "linear"))
        return err_set(err, "rope scaling type '%.*s' is not supported", (int)st.len, st.ptr);
    float factor = 0.0f;
    if (get_f32(f, a, "rope.scaling.factor", &factor, false, err) == 0 && factor != 0.0f && factor != 1.0f)
        return err_set(err, "rope scaling factor %g is not supported", (double)factor);

    hp->n_deepstack = 0;
    if (hp->arch != LLM_ARCH_QWEN3) {
        hp->rope.mode = PH_ROPE_IMROPE;
        snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
        const gguf_kv *kv = gguf_find_kv(f, key);
        if (!kv) return err_set(err, "metadata key '%s' is missing", key);
        if (kv->type == GGUF_ARRAY) {
            if (kv->v.arr.n != 4) return err_set(err, "'%s' must hold 4 values", key);
            for (int i = 0; i < 4; i++) {
                int64_t s;
                if (gguf_arr_i64(kv, (uint64_t)i, &s) || s < 0 || s > hp->head_dim)
                    return err_set(err, "'%s' holds a value that is not a section size", key);
                hp->rope.sections[i] = (int)s;
            }
        } else if (gguf_get_u32(f, key, &u) == 0 && (int32_t)u <= hp->head_dim) {
            for (int i = 0; i < 4; i++) hp->rope.sections[i] = (int)u;
        } else {
            return err_set(err, "'%s' is not a section list", key);
        }
        int S = hp->rope.sections[0] + hp->rope.sections[1] + hp->rope.sections[2] + hp->rope.sections[3];
        if (S <= 0 || S > hp->head_dim / 2 * 2) return err_set(err, "'%s' sections sum to %d", key, S);
        if (hp->arch == LLM_ARCH_QWEN3VL && weights_meta_u32(f, a, "n_deepstack_layers", &u, false, err) == 0)
            hp->n_deepstack = (int32_t)u;
        if (hp->n_deepstack > hp->n_layer)
            return err_set(err, "%d deepstack layers but only %d layers", hp->n_deepstack, hp->n_layer);
    } else {
        hp->rope.mode = PH_ROPE_NEOX;
    }
    hp->n_embd_inp = hp->n_embd * (1 + hp->n_deepstack);
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->head_dim <= 0 || hp->head_dim % 2 ||
        hp->n_embd > (1 << 16) || hp->n_ff > (1 << 18) || hp->head_dim > 1024 || hp->n_layer > 1024 ||
        hp->n_head > 1024)
        return err_set(err, "the model's dimensions are not usable");
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return err_set(err, "out of memory");
    hp->gated_attn = hp->arch == LLM_ARCH_QWEN35;
    if (hp->arch == LLM_ARCH_QWEN35) return llm_qwen35_hparams(m, err);
    hp->n_attn_layer = hp->n_layer;
    for (int l = 0; l < hp->n_layer; l++) m->layers[l].slot = l;
    return 0;
}

static int load_weights(ph_model *m, ph_err *err) {
    llm_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff, hd = hp->head_dim;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    const int64_t nq_out = hp->gated_attn ? 2 * nq : nq;
    if (weights_mat(&m->w, "token_embd.weight", E, V, true, &m->tok_embd, err)) return -1;
    if (weights_vec(&m->w, "output_norm.weight", E, &m->output_norm, err)) return -1;
    int r = weights_mat(&m->w, "output.weight", E, V, false, &m->output, err);
    if (r < 0) return -1;
    if (r == 1) m->output = m->tok_embd; /* tied */
    char name[96];
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    for (int l = 0; l < hp->n_layer; l++) {
        llm_layer *L = &m->layers[l];
        const char *ffn_norm = hp->arch == LLM_ARCH_QWEN35 ? "post_attention_norm.weight" : "ffn_norm.weight";
        if (weights_vec(&m->w, BLK("attn_norm.weight"), E, &L->attn_norm, err) ||
            weights_vec(&m->w, BLK(ffn_norm), E, &L->ffn_norm, err) ||
            weights_mat(&m->w, BLK("ffn_gate.weight"), E, F, true, &L->gate, err) ||
            weights_mat(&m->w, BLK("ffn_up.weight"), E, F, true, &L->up, err) ||
            weights_mat(&m->w, BLK("ffn_down.weight"), F, E, true, &L->down, err))
            return -1;
        if (L->recurrent) {
            if (llm_qwen35_gdn_load(m, l, err)) return -1;
        } else if (weights_vec(&m->w, BLK("attn_q_norm.weight"), hd, &L->q_norm, err) ||
                   weights_vec(&m->w, BLK("attn_k_norm.weight"), hd, &L->k_norm, err) ||
                   weights_mat(&m->w, BLK("attn_q.weight"), E, nq_out, true, &L->wq, err) ||
                   weights_mat(&m->w, BLK("attn_k.weight"), E, nkv, true, &L->wk, err) ||
                   weights_mat(&m->w, BLK("attn_v.weight"), E, nkv, true, &L->wv, err) ||
                   weights_mat(&m->w, BLK("attn_output.weight"), nq, E, true, &L->wo, err)) {
            return -1;
        }
        wmat *mats[] = {&L->gate, &L->up, &L->down, &L->wq, &L->wk, &L->wv, &L->wo};
        for (size_t i = 0; i < (L->recurrent ? 3 : sizeof mats / sizeof mats[0]); i++)
            if (weights_pack(&m->w, m->pool, mats[i], true, err)) return -1;
    }
    /* a tied output matrix is also the embedding table, whose rows are read */
    if (weights_pack(&m->w, m->pool, &m->output, r == 0, err)) return -1;
#undef BLK
    return 0;
}

/* What a product with m reads. */
static uint64_t mat_bytes(const wmat *m) {
    return m->packed ? mat_pack_size(m) : (uint64_t)m->row_bytes * (uint64_t)m->n_out;
}

static void fill_info(ph_model *m) {
    const llm_hparams *hp = &m->hp;
    ph_model_info *in = &m->info;
    in->arch = m->arch_name;
    in->name = m->name;
    in->n_vocab = hp->n_vocab;
    in->n_ctx_train = hp->n_ctx_train;
    in->n_embd = hp->n_embd;
    in->n_embd_inp = hp->n_embd_inp;
    in->n_layer = hp->n_layer;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->n_ff = hp->n_ff;
    in->n_deepstack = hp->n_deepstack;
    in->mrope = hp->rope.mode == PH_ROPE_IMROPE;
    in->file_bytes = m->gguf->size;
    uint64_t np = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        np += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    in->n_params = np;
    uint64_t db = m->tok_embd.row_bytes + mat_bytes(&m->output);
    for (int l = 0; l < hp->n_layer; l++) {
        const llm_layer *L = &m->layers[l];
        const llm_gdn *g = &L->gdn; /* the matrices a layer does not have are empty */
        const wmat *mats[] = {&L->wq,   &L->wk,  &L->wv, &L->wo,   &L->gate,  &L->up,
                              &L->down, &g->qkv, &g->z,  &g->beta, &g->alpha, &g->out};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) db += mat_bytes(mats[i]);
    }
    in->decode_bytes = db;
}

/* The model of path: its architecture and hyperparameters read, and with
 * weights its vocabulary, thread pool and weights too. */
static ph_model *model_open(const char *path, bool weights, int n_threads, ph_err *err) {
    kernels_init();
    ph_model *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(err, "out of memory");
        return NULL;
    }
    m->gguf = gguf_open(path, err);
    if (!m->gguf) goto fail;
    m->w.f = m->gguf;
    gguf_str s;
    if (gguf_get_str(m->gguf, "general.architecture", &s) != 0) {
        err_set(err, "%s: no general.architecture key: not a model file", path);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
    if (gguf_str_eq(s, "qwen3")) {
        m->hp.arch = LLM_ARCH_QWEN3;
    } else if (gguf_str_eq(s, "qwen3vl")) {
        m->hp.arch = LLM_ARCH_QWEN3VL;
    } else if (gguf_str_eq(s, "qwen35")) {
        m->hp.arch = LLM_ARCH_QWEN35;
    } else if (gguf_str_eq(s, "clip")) {
        err_set(err, "%s is a vision projector (mmproj) file; give it with --mmproj and the LLM with -m", path);
        goto fail;
    } else {
        err_set(err, "%s: architecture '%s' is not supported (pinhole runs qwen3, qwen3vl and qwen35)", path,
                m->arch_name);
        goto fail;
    }
    if (gguf_get_str(m->gguf, "general.name", &s) == 0)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len < 127 ? s.len : 127), s.ptr);
    if (!weights) {
        if (load_hparams(m, err)) goto fail_prefix;
        return m;
    }
    m->vocab = vocab_load(m->gguf, err);
    if (!m->vocab) goto fail_prefix;
    m->hp.n_vocab = vocab_size(m->vocab);
    m->pool = tpool_create(n_threads);
    if (!m->pool) {
        err_set(err, "cannot start %d threads", n_threads);
        goto fail;
    }
    if (load_hparams(m, err) || load_weights(m, err)) goto fail_prefix;
    fill_info(m);
    return m;
fail_prefix:
    err_prefix(err, "%s", path);
fail:
    ph_model_free(m);
    return NULL;
}

ph_model *ph_model_load(const char *path, int n_threads, ph_err *err) {
    return model_open(path, true, n_threads, err);
}

ph_model *llm_probe(const char *path, ph_err *err) { return model_open(path, false, 0, err); }

int llm_check_pictures(const ph_model *m, ph_err *err) {
    if (m->hp.rope.mode == PH_ROPE_IMROPE) return 0;
    return err_set(err, "%s models do not take pictures", m->arch_name);
}

void ph_model_free(ph_model *m) {
    if (!m) return;
    tpool_free(m->pool);
    weights_free(&m->w);
    free(m->layers);
    vocab_free(m->vocab);
    gguf_close(m->gguf);
    free(m);
}

const ph_model_info *ph_model_get_info(const ph_model *m) { return &m->info; }

/* ---- forward ------------------------------------------------------------ */

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

int llm_scratch_init(llm_scratch *sc, const ph_model *m, int32_t cap, int32_t n_logits, ph_err *err) {
    const llm_hparams *hp = &m->hp;
    const size_t nkv = (size_t)hp->n_head_kv * hp->head_dim, nq = (size_t)hp->n_head * hp->head_dim;
    const size_t C = (size_t)cap, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    /* a delta net layer's rows: the convolution's input in q, z in kx, its
     * output in att, beta and the decay in gate */
    const size_t conv = (size_t)hp->conv_dim, di = (size_t)hp->ssm_hv * hp->ssm_d;
    const size_t q_w = hp->gated_attn ? 2 * nq : nq, gate_w = hp->gated_attn ? nq : 0;
#define MAX(a, b) ((a) > (b) ? (a) : (b))
    memset(sc, 0, sizeof *sc);
    if (cap < 1 || n_logits < 1 || n_logits > cap)
        return err_set(err, "internal: scratch for %d rows, %d of logits", cap, n_logits);
    sc->cap = cap;
    sc->n_logits = n_logits;
    sc->x = malloc(C * E * sizeof(float));
    sc->h = malloc(C * E * sizeof(float));
    sc->q = malloc(C * MAX(q_w, conv) * sizeof(float));
    sc->kx = malloc(C * MAX(nkv, di) * sizeof(float));
    sc->vx = malloc(C * nkv * sizeof(float));
    sc->att = malloc(C * MAX(nq, di) * sizeof(float));
    sc->gate = malloc((C * MAX(gate_w, 2 * (size_t)hp->ssm_hv) + 1) * sizeof(float)); /* never malloc(0) */
#undef MAX
    sc->ga = malloc(C * F * sizeof(float));
    sc->up = malloc(C * F * sizeof(float));
    sc->rope_cs = malloc(C * (size_t)hp->rope.n_dims * sizeof(float));
    sc->pos = malloc(C * 4 * sizeof(int32_t));
    sc->logits = malloc((size_t)n_logits * (size_t)hp->n_vocab * sizeof(float));
    if (sc->x && sc->h && sc->q && sc->kx && sc->vx && sc->att && sc->gate && sc->ga && sc->up && sc->rope_cs &&
        sc->pos && sc->logits)
        return 0;
    llm_scratch_free(sc);
    return err_set(err, "out of memory for the forward pass's buffers");
}

void llm_scratch_free(llm_scratch *sc) {
    free(sc->x);
    free(sc->h);
    free(sc->q);
    free(sc->kx);
    free(sc->vx);
    free(sc->att);
    free(sc->gate);
    free(sc->ga);
    free(sc->up);
    free(sc->rope_cs);
    free(sc->pos);
    free(sc->logits);
    memset(sc, 0, sizeof *sc);
}

/* The attention mixer of layer L over the n normed rows in s->h, those of
 * n_seg segments in order (its output rows to s->h), each segment's rows
 * appending their K and V to its sequence's cells and attending to them;
 * Qwen3.5's query heads come with gate heads (docs/numerics.md, Gated
 * attention). */
static void attention(const ph_model *m, const llm_layer *L, const llm_seg *sg, int n_seg, llm_scratch *s,
                      int64_t n) {
    const llm_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim, nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    const int32_t c = L->slot;
    mat_mul(m->pool, &L->wq, s->h, n, s->q);
    mat_mul(m->pool, &L->wk, s->h, n, s->kx);
    mat_mul(m->pool, &L->wv, s->h, n, s->vx);
    if (hp->gated_attn) /* rows of [q_h | gate_h] per head: gates aside, queries packed (dst <= src) */
        for (int64_t i = 0; i < n; i++)
            for (int h = 0; h < hp->n_head; h++) {
                const float *src = s->q + 2 * (i * nq + h * hd);
                memcpy(s->gate + i * nq + h * hd, src + hd, (size_t)hd * sizeof(float));
                memmove(s->q + i * nq + h * hd, src, (size_t)hd * sizeof(float));
            }
    for (int64_t i = 0; i < n; i++) {
        const float *cs = s->rope_cs + i * hp->rope.n_dims;
        for (int h = 0; h < hp->n_head; h++) {
            float *qh = s->q + i * nq + h * hd;
            rms_norm(qh, qh, L->q_norm, hd, hp->rms_eps);
            rope_apply(qh, hp->rope.n_dims, cs);
        }
        for (int h = 0; h < hp->n_head_kv; h++) {
            float *kh = s->kx + i * nkv + h * hd;
            rms_norm(kh, kh, L->k_norm, hd, hp->rms_eps);
            rope_apply(kh, hp->rope.n_dims, cs);
        }
    }
    attn_args aa[PH_ATTN_BATCH];
    for (int64_t g = 0, off = 0; g < n_seg; off += sg[g++].n) {
        const llm_kv *kv = sg[g].kv;
        const int64_t r0 = off, sn = sg[g].n;
        /* this layer's K and V cells in a block (llm_kv) */
        const size_t cell = (size_t)nkv * sizeof(f16_bits), k_off = (size_t)(2 * c) * (size_t)kv->block_rows * cell,
                     v_off = k_off + (size_t)kv->block_rows * cell;
        for (int64_t i = 0; i < sn; i++) {
            const int64_t p = kv->n_rows + i, r = p % kv->block_rows;
            uint8_t *block = kv->blocks[p / kv->block_rows];
            quantize_act_row(PH_TYPE_F16, s->kx + (r0 + i) * nkv, (f16_bits *)(block + k_off) + r * nkv, nkv);
            quantize_act_row(PH_TYPE_F16, s->vx + (r0 + i) * nkv, (f16_bits *)(block + v_off) + r * nkv, nkv);
        }
        aa[g % PH_ATTN_BATCH] = (attn_args){
            .q = s->q + r0 * nq,
            .q_stride = nq,
            .blocks = (const uint8_t *const *)kv->blocks,
            .block_rows = kv->block_rows,
            .k_off = k_off,
            .v_off = v_off,
            .kv_stride = nkv,
            .n_q = sn,
            .n_kv = kv->n_rows + sn,
            .causal = true,
            .first_cell = kv->n_rows,
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .head_dim = (int)hd,
            .scale = 1.0f / sqrtf((float)hd),
            .out = s->att + r0 * nq,
            .out_stride = nq,
        };
        if (g % PH_ATTN_BATCH == PH_ATTN_BATCH - 1 || g == n_seg - 1) /* the segments' attention in one job */
            attn_compute_n(m->pool, aa, (int)(g % PH_ATTN_BATCH) + 1);
    }
    if (hp->gated_attn)
        for (int64_t i = 0; i < n * nq; i++) s->att[i] *= 1.0f / (1.0f + expf(-s->gate[i]));
    mat_mul(m->pool, &L->wo, s->att, n, s->h);
}

/* Whether the batch can be evaluated (nothing is changed before it is):
 * its total rows, or -1 with err set. */
static int64_t batch_check(const ph_model *m, const llm_seg *sg, int n_seg, const llm_scratch *s, ph_err *err) {
    const llm_hparams *hp = &m->hp;
    int64_t total = 0;
    int n_logits = 0;
    if (n_seg < 1) return err_set(err, "internal: batch of %d segments", n_seg);
    for (int g = 0; g < n_seg; g++) {
        const llm_seg *a = &sg[g];
        if (a->n <= 0 || a->n > s->cap || !a->kv || !a->pos || !a->tokens == !a->embd)
            return err_set(err, "internal: batch segment %d of %lld rows", g, (long long)a->n);
        total += a->n;
        n_logits += a->want_logits;
        for (int k = 0; k < g; k++)
            if (sg[k].kv == a->kv) return err_set(err, "internal: batch segments %d and %d of one sequence", k, g);
        if (a->kv->n_rows + a->n > a->kv->n_ctx)
            return err_set(err, "the context is full (%d of %d rows used, %lld more needed)", a->kv->n_rows,
                           a->kv->n_ctx, (long long)a->n);
        for (int64_t i = 0; a->tokens && i < a->n; i++)
            if (a->tokens[i] < 0 || a->tokens[i] >= hp->n_vocab)
                return err_set(err, "token id %d is outside the vocabulary (%d)", a->tokens[i], hp->n_vocab);
    }
    if (total > s->cap) return err_set(err, "internal: batch of %lld rows", (long long)total);
    if (n_logits > s->n_logits) return err_set(err, "internal: batch wants %d rows of logits", n_logits);
    return total;
}

int llm_forward_batch(const ph_model *m, llm_seg *sg, int n_seg, llm_scratch *s, ph_err *err) {
    const llm_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t n = batch_check(m, sg, n_seg, s, err);
    if (n < 0) return -1;

    for (int64_t g = 0, off = 0; g < n_seg; off += sg[g++].n) {
        const llm_seg *a = &sg[g];
        for (int64_t i = 0; i < a->n; i++) {
            float *x = s->x + (off + i) * E;
            if (a->tokens)
                dequant_row(m->tok_embd.type,
                            (const uint8_t *)m->tok_embd.data + (size_t)a->tokens[i] * m->tok_embd.row_bytes, x, E);
            else memcpy(x, a->embd + i * hp->n_embd_inp, (size_t)E * sizeof(float));
        }
        rope_table(&hp->rope, a->pos, a->n, s->rope_cs + off * hp->rope.n_dims);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const llm_layer *L = &m->layers[l];
        for (int64_t i = 0; i < n; i++) rms_norm(s->h + i * E, s->x + i * E, L->attn_norm, E, hp->rms_eps);
        if (L->recurrent) llm_qwen35_gdn(m, L, sg, n_seg, s, n);
        else attention(m, L, sg, n_seg, s, n);
        add_rows(s->x, s->h, n * E);

        for (int64_t i = 0; i < n; i++) rms_norm(s->h + i * E, s->x + i * E, L->ffn_norm, E, hp->rms_eps);
        mat_mul(m->pool, &L->gate, s->h, n, s->ga);
        mat_mul(m->pool, &L->up, s->h, n, s->up);
        act_swiglu(s->ga, s->ga, s->up, n * F);
        mat_mul(m->pool, &L->down, s->ga, n, s->h);
        add_rows(s->x, s->h, n * E);

        /* deepstack slice l of each picture row (docs/numerics.md, Deepstack) */
        for (int64_t g = 0, off = 0; l < hp->n_deepstack && g < n_seg; off += sg[g++].n)
            for (int64_t i = 0; sg[g].embd && i < sg[g].n; i++)
                add_rows(s->x + (off + i) * E, sg[g].embd + i * hp->n_embd_inp + (l + 1) * E, E);
    }

    /* the output matrix once over the last rows of the segments that want logits */
    int64_t k = 0;
    for (int64_t g = 0, off = 0; g < n_seg; off += sg[g++].n) {
        sg[g].kv->n_rows += (int32_t)sg[g].n;
        sg[g].logits = NULL;
        if (sg[g].want_logits)
            rms_norm(s->h + k++ * E, s->x + (off + sg[g].n - 1) * E, m->output_norm, E, hp->rms_eps);
    }
    if (k) mat_mul(m->pool, &m->output, s->h, k, s->logits);
    for (int64_t g = 0, j = 0; g < n_seg; g++)
        if (sg[g].want_logits) sg[g].logits = s->logits + j++ * hp->n_vocab;
    return 0;
}

int llm_forward(const ph_model *m, llm_kv *kv, llm_scratch *s, const int32_t *tokens, const float *embd, int64_t n,
                const int32_t *pos, bool want_logits, ph_err *err) {
    llm_seg one = {
        .kv = kv, .tokens = tokens, .embd = tokens ? NULL : embd, .n = n, .pos = pos, .want_logits = want_logits};
    return llm_forward_batch(m, &one, 1, s, err);
}
