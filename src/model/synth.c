/* pinhole synth: synthetic Qwen3-VL model pairs with random weights, in the
 * same GGUF layout as converted checkpoints (spec B.2, E.2), so llama.cpp
 * loads them too. Benchmarks use them for models of real sizes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "pinhole.h"

typedef struct synth_shape {
    const char *name;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    int sections[4];
    float freq_base;
    bool tied;
    /* vision */
    int v_embd, v_layer, v_head, v_ff, v_patch, v_npos;
    int n_deepstack;
    int deepstack[4]; /* vision layer indices */
} synth_shape;

static const synth_shape shapes[] = {
    {"tiny", 256, 4, 4, 2, 64, 768, 4096, {12, 10, 10, 0}, 5e6f, false,
     128, 4, 4, 256, 16, 576, 2, {1, 2}},
    {"2b", 2048, 28, 16, 8, 128, 6144, 262144, {24, 20, 20, 0}, 5e6f, true,
     1024, 24, 16, 4096, 16, 2304, 3, {5, 11, 17}},
};

/* llama.cpp's general.file_type numbers for the mixes we write */
typedef struct synth_type {
    const char *name;
    int base;      /* type of most matrices */
    int file_type;
} synth_type;

static const synth_type types[] = {
    {"f32", PH_TYPE_F32, 0},   {"f16", PH_TYPE_F16, 1},    {"bf16", PH_TYPE_BF16, 32},
    {"q8_0", PH_TYPE_Q8_0, 7}, {"q4_0", PH_TYPE_Q4_0, 2},  {"q4_k", PH_TYPE_Q4_K, 14},
    {"q5_k", PH_TYPE_Q5_K, 16}, {"q6_k", PH_TYPE_Q6_K, 18}, {"q4_k_m", PH_TYPE_Q4_K, 15},
};

/* What one tensor is filled with. */
typedef enum { FILL_RANDOM, FILL_ONES, FILL_ZEROS } fill_kind;

typedef struct synth_tensor {
    char name[64];
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    fill_kind fill;
    float scale;   /* uniform in [-scale, scale] */
} synth_tensor;

typedef struct synth_list {
    synth_tensor *t;
    size_t n, cap;
    int failed;
} synth_list;

static void add(synth_list *l, int type, fill_kind fill, float scale, uint32_t n_dims, int64_t ne0, int64_t ne1,
                int64_t ne2, int64_t ne3, const char *fmt, ...) PH_PRINTF(10, 11);

static void add(synth_list *l, int type, fill_kind fill, float scale, uint32_t n_dims, int64_t ne0, int64_t ne1,
                int64_t ne2, int64_t ne3, const char *fmt, ...) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        synth_tensor *t = realloc(l->t, cap * sizeof *t);
        if (!t) {
            l->failed = 1;
            return;
        }
        l->t = t;
        l->cap = cap;
    }
    synth_tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->type = type;
    t->fill = fill;
    t->scale = scale;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = ne3;
}

/* Q4_K_M's choice of more bits for some layers (llama.cpp's use_more_bits). */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static void llm_tensors(synth_list *l, const synth_shape *s, const synth_type *ty, int64_t n_vocab) {
    const int64_t E = s->n_embd, F = s->n_ff, nq = (int64_t)s->n_head * s->head_dim,
                  nkv = (int64_t)s->n_head_kv * s->head_dim;
    const bool km = !strcmp(ty->name, "q4_k_m");
    const int base = ty->base;
    const float w = 0.035f; /* ~ 0.02 standard deviation */
    int embd_type = base, out_type = base;
    if (km) {
        embd_type = s->tied ? PH_TYPE_Q6_K : PH_TYPE_Q4_K;
        out_type = PH_TYPE_Q6_K;
    }
    add(l, embd_type, FILL_RANDOM, w, 2, E, n_vocab, 1, 1, "token_embd.weight");
    add(l, PH_TYPE_F32, FILL_ONES, 0, 1, E, 1, 1, 1, "output_norm.weight");
    if (!s->tied) add(l, out_type, FILL_RANDOM, w, 2, E, n_vocab, 1, 1, "output.weight");
    for (int i = 0; i < s->n_layer; i++) {
        int vtype = km && more_bits(i, s->n_layer) ? PH_TYPE_Q6_K : base;
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, E, 1, 1, 1, "blk.%d.attn_norm.weight", i);
        add(l, base, FILL_RANDOM, w, 2, E, nq, 1, 1, "blk.%d.attn_q.weight", i);
        add(l, base, FILL_RANDOM, w, 2, E, nkv, 1, 1, "blk.%d.attn_k.weight", i);
        add(l, vtype, FILL_RANDOM, w, 2, E, nkv, 1, 1, "blk.%d.attn_v.weight", i);
        add(l, base, FILL_RANDOM, w, 2, nq, E, 1, 1, "blk.%d.attn_output.weight", i);
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, s->head_dim, 1, 1, 1, "blk.%d.attn_q_norm.weight", i);
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, s->head_dim, 1, 1, 1, "blk.%d.attn_k_norm.weight", i);
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, E, 1, 1, 1, "blk.%d.ffn_norm.weight", i);
        add(l, base, FILL_RANDOM, w, 2, E, F, 1, 1, "blk.%d.ffn_gate.weight", i);
        add(l, base, FILL_RANDOM, w, 2, E, F, 1, 1, "blk.%d.ffn_up.weight", i);
        add(l, vtype, FILL_RANDOM, w, 2, F, E, 1, 1, "blk.%d.ffn_down.weight", i);
    }
}

static void vision_tensors(synth_list *l, const synth_shape *s, int vt) {
    const int64_t C = s->v_embd, C4 = 4 * C, P = s->n_embd, Fv = s->v_ff, ps = s->v_patch;
    const float w = 0.035f;
    add(l, vt == PH_TYPE_Q8_0 ? PH_TYPE_F16 : vt, FILL_RANDOM, w, 4, ps, ps, 3, C, "v.patch_embd.weight");
    add(l, vt == PH_TYPE_Q8_0 ? PH_TYPE_F16 : vt, FILL_RANDOM, w, 4, ps, ps, 3, C, "v.patch_embd.weight.1");
    add(l, PH_TYPE_F32, FILL_ZEROS, 0, 1, C, 1, 1, 1, "v.patch_embd.bias");
    add(l, PH_TYPE_F32, FILL_RANDOM, 0.1f, 2, C, s->v_npos, 1, 1, "v.position_embd.weight");
    for (int i = 0; i < s->v_layer; i++) {
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, C, 1, 1, 1, "v.blk.%d.ln1.weight", i);
        add(l, PH_TYPE_F32, FILL_ZEROS, 0, 1, C, 1, 1, 1, "v.blk.%d.ln1.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, C, 3 * C, 1, 1, "v.blk.%d.attn_qkv.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, 3 * C, 1, 1, 1, "v.blk.%d.attn_qkv.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, C, C, 1, 1, "v.blk.%d.attn_out.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, C, 1, 1, 1, "v.blk.%d.attn_out.bias", i);
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, C, 1, 1, 1, "v.blk.%d.ln2.weight", i);
        add(l, PH_TYPE_F32, FILL_ZEROS, 0, 1, C, 1, 1, 1, "v.blk.%d.ln2.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, C, Fv, 1, 1, "v.blk.%d.ffn_up.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, Fv, 1, 1, 1, "v.blk.%d.ffn_up.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, Fv, C, 1, 1, "v.blk.%d.ffn_down.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, C, 1, 1, 1, "v.blk.%d.ffn_down.bias", i);
    }
    for (int d = 0; d < s->n_deepstack; d++) {
        int i = s->deepstack[d];
        add(l, PH_TYPE_F32, FILL_ONES, 0, 1, C4, 1, 1, 1, "v.deepstack.%d.norm.weight", i);
        add(l, PH_TYPE_F32, FILL_ZEROS, 0, 1, C4, 1, 1, 1, "v.deepstack.%d.norm.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, C4, C4, 1, 1, "v.deepstack.%d.fc1.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, C4, 1, 1, 1, "v.deepstack.%d.fc1.bias", i);
        add(l, vt, FILL_RANDOM, w, 2, C4, P, 1, 1, "v.deepstack.%d.fc2.weight", i);
        add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, P, 1, 1, 1, "v.deepstack.%d.fc2.bias", i);
    }
    add(l, PH_TYPE_F32, FILL_ONES, 0, 1, C, 1, 1, 1, "v.post_ln.weight");
    add(l, PH_TYPE_F32, FILL_ZEROS, 0, 1, C, 1, 1, 1, "v.post_ln.bias");
    add(l, vt, FILL_RANDOM, w, 2, C4, C4, 1, 1, "mm.0.weight");
    add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, C4, 1, 1, 1, "mm.0.bias");
    add(l, vt, FILL_RANDOM, w, 2, C4, P, 1, 1, "mm.2.weight");
    add(l, PH_TYPE_F32, FILL_RANDOM, w, 1, P, 1, 1, 1, "mm.2.bias");
}

/* ---- filling ------------------------------------------------------------ */

typedef struct fill_ctx {
    const synth_list *list;
    uint64_t seed;
    ph_pool *pool;
    /* the job in flight */
    const synth_tensor *t;
    uint64_t t_index;
    uint8_t *buf;
    int64_t n_rows, row_len;
    size_t row_bytes;
    int failed;
} fill_ctx;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_rows(void *p, int ith, int nth) {
    fill_ctx *c = p;
    const synth_tensor *t = c->t;
    float *row = malloc((size_t)c->row_len * sizeof(float));
    if (!row) {
        c->failed = 1;
        return;
    }
    long lo, hi;
    ph_split_range((long)c->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        /* each row's numbers depend only on (seed, tensor, row): the same
         * file whatever the thread count */
        uint64_t st = mix64(c->seed ^ mix64(c->t_index * 0x100000001B3ull + (uint64_t)r));
        for (int64_t i = 0; i < c->row_len; i++) {
            if (t->fill == FILL_ONES) {
                row[i] = 1.0f;
            } else if (t->fill == FILL_ZEROS) {
                row[i] = 0.0f;
            } else {
                st += 0x9E3779B97F4A7C15ull;
                uint64_t z = mix64(st);
                row[i] = ((float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * t->scale;
            }
        }
        ph_quantize_weight_row(t->type, row, c->buf + (size_t)r * c->row_bytes, c->row_len);
    }
    free(row);
}

static int fill_tensor(void *ctx, uint64_t i, void *buf, uint64_t nbytes) {
    fill_ctx *c = ctx;
    const synth_tensor *t = &c->list->t[i];
    c->t = t;
    c->t_index = i;
    c->buf = buf;
    c->row_len = t->ne[0];
    c->n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    c->row_bytes = ph_row_bytes(t->type, t->ne[0]);
    if ((uint64_t)c->row_bytes * (uint64_t)c->n_rows != nbytes) return -1;
    c->failed = 0;
    ph_pool_run(c->pool, fill_rows, c);
    return c->failed ? -1 : 0;
}

static int write_file(const char *path, gguf_writer *w, synth_list *l, fill_ctx *fc, ph_err *e) {
    for (size_t i = 0; i < l->n; i++) gguf_writer_add_tensor(w, l->t[i].name, l->t[i].type, l->t[i].n_dims, l->t[i].ne);
    fc->list = l;
    return gguf_writer_write(w, path, fill_tensor, fc, e);
}

static const synth_type *find_type(const char *name) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(types[i].name, name)) return &types[i];
    return NULL;
}

int ph_synth(const ph_synth_params *p, ph_err *e) {
    ph_kernels_init();
    const synth_shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (p->shape && !strcmp(shapes[i].name, p->shape)) s = &shapes[i];
    if (!s) return ph_err_set(e, "unknown shape '%s' (tiny, 2b)", p->shape ? p->shape : "");
    const synth_type *ty = find_type(p->type ? p->type : "f16");
    if (!ty) return ph_err_set(e, "unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m)", p->type);
    const synth_type *vty = find_type(p->vision_type ? p->vision_type : "f16");
    if (!vty || (vty->base != PH_TYPE_F32 && vty->base != PH_TYPE_F16 && vty->base != PH_TYPE_BF16 &&
                 vty->base != PH_TYPE_Q8_0))
        return ph_err_set(e, "vision type '%s' is not one of f32 f16 bf16 q8_0", p->vision_type);
    if (!p->vocab) return ph_err_set(e, "a vocabulary is needed: --vocab FILE.gguf");
    if (!p->out) return ph_err_set(e, "an output name is needed: -o NAME");

    gguf_file *voc = gguf_open(p->vocab, e);
    if (!voc) return -1;
    const gguf_kv *toks = gguf_find_kv(voc, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARRAY || toks->v.arr.type != GGUF_STRING) {
        gguf_close(voc);
        return ph_err_set(e, "%s has no tokenizer.ggml.tokens", p->vocab);
    }
    const int64_t n_vocab = (int64_t)toks->v.arr.n;

    int rc = -1;
    char path[4096];
    synth_list llm = {0}, vis = {0};
    gguf_writer *w = NULL;
    fill_ctx fc = {.seed = p->seed, .pool = ph_pool_create(p->n_threads)};
    if (!fc.pool) {
        ph_err_set(e, "cannot start threads");
        goto done;
    }
    llm_tensors(&llm, s, ty, n_vocab);
    vision_tensors(&vis, s, vty->base);
    if (llm.failed || vis.failed) {
        ph_err_set(e, "out of memory");
        goto done;
    }

    /* the LLM */
    w = gguf_writer_new();
    char name[128];
    snprintf(name, sizeof name, "pinhole-synth-%s-%s", s->name, ty->name);
    gguf_writer_set_str(w, "general.architecture", "qwen3vl");
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)ty->file_type);
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, "qwen3vl.context_length", (uint32_t)s->n_ctx);
    gguf_writer_set_u32(w, "qwen3vl.embedding_length", (uint32_t)s->n_embd);
    gguf_writer_set_u32(w, "qwen3vl.block_count", (uint32_t)s->n_layer);
    gguf_writer_set_u32(w, "qwen3vl.feed_forward_length", (uint32_t)s->n_ff);
    gguf_writer_set_u32(w, "qwen3vl.attention.head_count", (uint32_t)s->n_head);
    gguf_writer_set_u32(w, "qwen3vl.attention.head_count_kv", (uint32_t)s->n_head_kv);
    gguf_writer_set_u32(w, "qwen3vl.attention.key_length", (uint32_t)s->head_dim);
    gguf_writer_set_u32(w, "qwen3vl.attention.value_length", (uint32_t)s->head_dim);
    gguf_writer_set_f32(w, "qwen3vl.rope.freq_base", s->freq_base);
    gguf_writer_set_f32(w, "qwen3vl.attention.layer_norm_rms_epsilon", 1e-6f);
    int32_t sec[4] = {s->sections[0], s->sections[1], s->sections[2], s->sections[3]};
    gguf_writer_set_arr(w, "qwen3vl.rope.dimension_sections", GGUF_INT32, sec, 4);
    gguf_writer_set_u32(w, "qwen3vl.n_deepstack_layers", (uint32_t)s->n_deepstack);
    for (uint64_t k = 0; k < voc->n_kv; k++) {
        const gguf_kv *kv = &voc->kv[k];
        if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(w, kv);
    }
    snprintf(path, sizeof path, "%s.gguf", p->out);
    if (write_file(path, w, &llm, &fc, e)) goto done;
    gguf_writer_free(w);

    /* the mmproj */
    w = gguf_writer_new();
    snprintf(name, sizeof name, "pinhole-synth-%s-%s-mmproj", s->name, vty->name);
    gguf_writer_set_str(w, "general.architecture", "clip");
    gguf_writer_set_str(w, "general.type", "mmproj");
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)vty->file_type);
    gguf_writer_set_bool(w, "clip.has_vision_encoder", true);
    gguf_writer_set_str(w, "clip.projector_type", "qwen3vl_merger");
    gguf_writer_set_u32(w, "clip.vision.projection_dim", (uint32_t)s->n_embd);
    int side = (int)lround(sqrt((double)s->v_npos));
    gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)(side * s->v_patch));
    gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)s->v_patch);
    gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)s->v_embd);
    gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)s->v_ff);
    gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)s->v_layer);
    gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)s->v_head);
    float half[3] = {0.5f, 0.5f, 0.5f};
    gguf_writer_set_arr(w, "clip.vision.image_mean", GGUF_FLOAT32, half, 3);
    gguf_writer_set_arr(w, "clip.vision.image_std", GGUF_FLOAT32, half, 3);
    gguf_writer_set_bool(w, "clip.use_gelu", true);
    gguf_writer_set_u32(w, "clip.vision.spatial_merge_size", 2);
    gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    uint8_t ds[64] = {0};
    for (int d = 0; d < s->n_deepstack; d++) ds[s->deepstack[d]] = 1;
    gguf_writer_set_arr(w, "clip.vision.is_deepstack_layers", GGUF_BOOL, ds, (uint64_t)s->v_layer);
    snprintf(path, sizeof path, "%s-mmproj.gguf", p->out);
    if (write_file(path, w, &vis, &fc, e)) goto done;
    rc = 0;
done:
    gguf_writer_free(w);
    free(llm.t);
    free(vis.t);
    ph_pool_free(fc.pool);
    gguf_close(voc);
    return rc;
}
