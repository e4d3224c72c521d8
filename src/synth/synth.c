/* pinhole synth: synthetic model pairs with random weights, Qwen3-VL
 * (docs/numerics.md, LLM tensors, Vision tensors) or Qwen3.5 (docs/numerics.md,
 * Qwen3.5: gated delta net layers, gated attention every fa_interval-th
 * layer, a vision tower without deepstack),
 * in the same GGUF layout as converted checkpoints, so llama.cpp loads them
 * too. Benchmarks use them for models of real sizes. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "synth/synth.h"
#include "text/unicode.h"

typedef struct synth_shape {
    const char *arch, *name;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    int sections[4];
    float freq_base;
    bool tied;
    /* qwen35: rotated dims of a head, full attention in every fa_interval-th
     * layer, the delta net's key and value heads, their size, conv kernel */
    int n_rot, fa_interval, ssm_hk, ssm_hv, ssm_d, conv_k;
    /* vision */
    int v_embd, v_layer, v_head, v_ff, v_patch, v_npos;
    int n_deepstack;
    int deepstack[4]; /* vision layer indices */
    /* the weights as tools/mksynth.py draws them (roughly normal, scaled by
     * 1/sqrt(fan-in), norms near 1, nonzero biases: peaked logits, stable
     * greedy choices), not uniform in +-0.035 with norms at 1 */
    bool gauss;
    /* gauss and tied: the final norm's gain times sqrt(width), which sets the
     * logits' scale (0: mksynth's 3.5) */
    float logit_gain;
} synth_shape;

/* The test oracle's pairs (tests/oracle/README.md): the shapes of the
 * models llama.cpp's references were recorded with (tools/mksynth.py's
 * tiny, mid, small and, for qwen35, tiny, mid, q4k), small enough for the
 * parity tests to run every case on every kernel level. Qwen3-VL: 4 heads,
 * 2 KV heads, untied output. */
#define ORACLE_VL(nm, E, L, D, F, s0, s1, s2, VE, VL, VH, VF, npos, nds, ...)                                        \
    {                                                                                                                \
        .arch = "qwen3vl", .name = nm, .n_embd = E, .n_layer = L, .n_head = 4, .n_head_kv = 2, .head_dim = D,        \
        .n_ff = F, .n_ctx = 4096, .sections = {s0, s1, s2, 0}, .freq_base = 5e6f, .v_embd = VE, .v_layer = VL,       \
        .v_head = VH, .v_ff = VF, .v_patch = 16, .v_npos = npos, .n_deepstack = nds, .deepstack = __VA_ARGS__,       \
        .gauss = true                                                                                                \
    }
/* Qwen3.5: tied output, 2 key heads of the delta net, conv kernel 4; lg:
 * logit_gain. oracle-mid's logits are 2.5/3.5 of mksynth's: with its 8-bit
 * activations and recurrent layers, mksynth's scale turned float-order
 * differences (llama.cpp's own AVX2 and AVX-512 builds differ by 0.4 on
 * its picture cases) into logit differences at the 0.5 tolerance for every
 * seed tried (tests/oracle/README.md) */
#define ORACLE_35(nm, E, H, KV, D, rot, s0, s1, s2, F, L, fa, hv, dk, VE, VL, VH, VF, npos, lg)                      \
    {                                                                                                                \
        .arch = "qwen35", .name = nm, .n_embd = E, .n_layer = L, .n_head = H, .n_head_kv = KV, .head_dim = D,        \
        .n_ff = F, .n_ctx = 4096, .sections = {s0, s1, s2, 0}, .freq_base = 1e7f, .tied = true, .n_rot = rot,        \
        .fa_interval = fa, .ssm_hk = 2, .ssm_hv = hv, .ssm_d = dk, .conv_k = 4, .v_embd = VE, .v_layer = VL,         \
        .v_head = VH, .v_ff = VF, .v_patch = 16, .v_npos = npos, .gauss = true, .logit_gain = lg                     \
    }

// clang-format off
static const synth_shape shapes[] = {
    {"qwen3vl", "tiny", 256, 4, 4, 2, 64, 768, 4096, {12, 10, 10, 0}, 5e6f, false, 0, 0, 0, 0, 0, 0,
     128, 4, 4, 256, 16, 576, 2, {1, 2}, false, 0},
    {"qwen3vl", "2b", 2048, 28, 16, 8, 128, 6144, 262144, {24, 20, 20, 0}, 5e6f, true, 0, 0, 0, 0, 0, 0,
     1024, 24, 16, 4096, 16, 2304, 3, {5, 11, 17}, false, 0},
    /* more value heads than key heads (the tiled mapping); every matrix's
     * input a multiple of 256, so the K-quants apply everywhere */
    {"qwen35", "tiny", 256, 8, 4, 2, 64, 768, 4096, {3, 3, 2, 0}, 1e7f, true, 16, 4, 2, 4, 64, 4,
     128, 4, 4, 256, 16, 576, 0, {0}, false, 0},
    /* Qwen3.5-2B's sizes */
    {"qwen35", "2b", 2048, 24, 8, 2, 256, 6144, 262144, {11, 11, 10, 0}, 1e7f, true, 64, 4, 16, 16, 128, 4,
     1024, 24, 16, 4096, 16, 2304, 0, {0}, false, 0},
    /*        name            E    L  D   F    sections     VE   VL VH VF   npos deepstack */
    ORACLE_VL("oracle-tiny",  64,  3, 16, 192, 3, 3, 2,    32,  2, 2, 64,  256, 1, {0}),
    ORACLE_VL("oracle-mid",   128, 3, 32, 384, 6, 5, 5,    64,  3, 4, 128, 256, 2, {0, 1}),
    ORACLE_VL("oracle-small", 256, 4, 64, 768, 12, 10, 10, 128, 4, 4, 256, 576, 2, {1, 2}),
    /*        name          E    H  KV D    rot sections F    L  fa hv dk  VE  VL VH VF   npos logit */
    ORACLE_35("oracle-tiny", 64,  2, 1, 64,  16, 3, 3, 2, 192, 8, 4, 2, 16, 32, 2, 2, 64,  256, 0),
    ORACLE_35("oracle-mid",  96,  4, 2, 64,  16, 3, 3, 2, 288, 4, 2, 4, 32, 64, 3, 4, 128, 256, 2.5f),
    ORACLE_35("oracle-q4k",  256, 2, 1, 128, 32, 6, 5, 5, 512, 4, 4, 4, 64, 64, 3, 4, 128, 576, 0),
};
// clang-format on
#undef ORACLE_VL
#undef ORACLE_35

static bool is_qwen35(const synth_shape *s) { return !strcmp(s->arch, "qwen35"); }

/* qwen35: layer i is a gated delta net layer (docs/numerics.md, Qwen3.5 layers) */
static bool recurrent(const synth_shape *s, int i) { return is_qwen35(s) && (i + 1) % s->fa_interval != 0; }

/* llama.cpp's general.file_type numbers for the mixes we write */
typedef struct synth_type {
    const char *name;
    int base; /* type of most matrices */
    int file_type;
} synth_type;

static const synth_type types[] = {
    {"f32", PH_TYPE_F32, 0},    {"f16", PH_TYPE_F16, 1},    {"bf16", PH_TYPE_BF16, 32},
    {"q8_0", PH_TYPE_Q8_0, 7},  {"q4_0", PH_TYPE_Q4_0, 2},  {"q4_k", PH_TYPE_Q4_K, 14},
    {"q5_k", PH_TYPE_Q5_K, 16}, {"q6_k", PH_TYPE_Q6_K, 18}, {"q4_k_m", PH_TYPE_Q4_K, 15},
};

/* What one tensor is filled with: FILL_RANDOM is uniform in [-scale, scale],
 * FILL_NEGATIVE uniform in [-scale, -scale/50] (qwen35's ssm_a =
 * -exp(A_log): every head's state decays), FILL_NORMAL offset + scale * g
 * with g roughly normal (mean 0, variance 1). */
typedef enum { FILL_RANDOM, FILL_ONES, FILL_ZEROS, FILL_NEGATIVE, FILL_NORMAL } fill_kind;

typedef struct fill {
    fill_kind kind;
    float scale, offset;
} fill;

typedef struct synth_tensor {
    char name[64];
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    fill fill;
} synth_tensor;

typedef struct synth_list {
    synth_tensor *t;
    size_t n, cap;
    int failed;
} synth_list;

static void add(synth_list *l, int type, fill f, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                const char *fmt, ...) PH_PRINTF(9, 10);

static void add(synth_list *l, int type, fill f, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                const char *fmt, ...) {
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
    t->fill = f;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = ne3;
}

/* The fills of a shape's tensors by role: a matrix (gain / sqrt(fan_in)
 * when gauss, else uniform in +-0.035), a norm's weight (1 + 0.1 g, or 1),
 * a bias (0.1 g, or uniform in +-legacy, or 0 when legacy is 0); `pick`
 * chooses between a fill of each kind. sqrtf is exact (IEEE), so the files
 * are the same everywhere. */
static const fill ONES = {FILL_ONES, 0, 0}, ZEROS = {FILL_ZEROS, 0, 0};

static fill pick(const synth_shape *s, fill legacy, fill gauss) { return s->gauss ? gauss : legacy; }

static fill f_mat(const synth_shape *s, float gain, int64_t fan_in) {
    return pick(s, (fill){FILL_RANDOM, 0.035f, 0}, (fill){FILL_NORMAL, gain / sqrtf((float)fan_in), 0});
}

static fill f_norm(const synth_shape *s, float gain) { return pick(s, ONES, (fill){FILL_NORMAL, 0.1f * gain, gain}); }

static fill f_bias(const synth_shape *s, float legacy) {
    return pick(s, legacy > 0 ? (fill){FILL_RANDOM, legacy, 0} : ZEROS, (fill){FILL_NORMAL, 0.1f, 0});
}

/* Q4_K_M's choice of more bits for some layers (llama.cpp's use_more_bits). */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* A full-attention block's attention tensors (blk.i.attn_*) */
static void attn_tensors(synth_list *l, const synth_shape *s, int i, int base, int vtype) {
    const int64_t E = s->n_embd, nq = (int64_t)s->n_head * s->head_dim, nkv = (int64_t)s->n_head_kv * s->head_dim;
    /* qwen35's query rows hold each head's query, then its gate */
    add(l, base, f_mat(s, 1, E), 2, E, is_qwen35(s) ? 2 * nq : nq, 1, 1, "blk.%d.attn_q.weight", i);
    add(l, base, f_mat(s, 1, E), 2, E, nkv, 1, 1, "blk.%d.attn_k.weight", i);
    add(l, vtype, f_mat(s, 1, E), 2, E, nkv, 1, 1, "blk.%d.attn_v.weight", i);
    add(l, base, f_mat(s, 4, nq), 2, nq, E, 1, 1, "blk.%d.attn_output.weight", i);
    add(l, PH_TYPE_F32, f_norm(s, 1), 1, s->head_dim, 1, 1, 1, "blk.%d.attn_q_norm.weight", i);
    add(l, PH_TYPE_F32, f_norm(s, 1), 1, s->head_dim, 1, 1, 1, "blk.%d.attn_k_norm.weight", i);
}

static void llm_tensors(synth_list *l, const synth_shape *s, const synth_type *ty, int out_type, bool mtp,
                        int64_t n_vocab) {
    const int64_t E = s->n_embd, F = s->n_ff;
    /* qwen35's delta net: q and k heads, then v heads, through the convolution */
    const int64_t hv = s->ssm_hv, dk = s->ssm_d, vdim = hv * dk, conv = 2 * s->ssm_hk * dk + vdim;
    const bool km = !strcmp(ty->name, "q4_k_m"), q35 = is_qwen35(s);
    const int base = ty->base;
    const int embd_type = s->tied ? out_type : km ? PH_TYPE_Q4_K : base;
    /* tied: the final norm sets the logits' scale */
    const float out_gain = s->tied && s->gauss ? (s->logit_gain > 0 ? s->logit_gain : 3.5f) / sqrtf((float)E) : 1.0f;
    add(l, embd_type, f_mat(s, 1, 1), 2, E, n_vocab, 1, 1, "token_embd.weight");
    add(l, PH_TYPE_F32, f_norm(s, out_gain), 1, E, 1, 1, 1, "output_norm.weight");
    if (!s->tied) add(l, out_type, f_mat(s, 3, E), 2, E, n_vocab, 1, 1, "output.weight");
    for (int i = 0; i < s->n_layer + (mtp ? 1 : 0); i++) {
        /* Q4_K_M's attn_v counter counts qwen35's attn_qkv too: one per layer */
        const int vtype = km && more_bits(i, s->n_layer) ? PH_TYPE_Q6_K : base;
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, E, 1, 1, 1, "blk.%d.attn_norm.weight", i);
        if (i < s->n_layer && recurrent(s, i)) {
            add(l, vtype, f_mat(s, 1, E), 2, E, conv, 1, 1, "blk.%d.attn_qkv.weight", i);
            add(l, base, f_mat(s, 1, E), 2, E, vdim, 1, 1, "blk.%d.attn_gate.weight", i);
            add(l, PH_TYPE_F32, pick(s, (fill){FILL_RANDOM, 0.5f, 0}, (fill){FILL_NORMAL, 0.5f, 0}), 2, s->conv_k,
                conv, 1, 1, "blk.%d.ssm_conv1d.weight", i);
            add(l, PH_TYPE_F32, pick(s, (fill){FILL_RANDOM, 0.5f, 0}, (fill){FILL_NORMAL, 0.5f, 0}), 1, hv, 1, 1, 1,
                "blk.%d.ssm_dt.bias", i);
            add(l, PH_TYPE_F32, (fill){FILL_NEGATIVE, 1.0f, 0}, 1, hv, 1, 1, 1, "blk.%d.ssm_a", i);
            add(l, base, f_mat(s, 1, E), 2, E, hv, 1, 1, "blk.%d.ssm_beta.weight", i);
            add(l, base, f_mat(s, 1, E), 2, E, hv, 1, 1, "blk.%d.ssm_alpha.weight", i);
            add(l, PH_TYPE_F32, f_norm(s, 1), 1, dk, 1, 1, 1, "blk.%d.ssm_norm.weight", i);
            add(l, base, f_mat(s, 4, vdim), 2, vdim, E, 1, 1, "blk.%d.ssm_out.weight", i);
        } else {
            attn_tensors(l, s, i, base, vtype);
        }
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, E, 1, 1, 1,
            q35 ? "blk.%d.post_attention_norm.weight" : "blk.%d.ffn_norm.weight", i);
        add(l, base, f_mat(s, 1, E), 2, E, F, 1, 1, "blk.%d.ffn_gate.weight", i);
        add(l, base, f_mat(s, 1, E), 2, E, F, 1, 1, "blk.%d.ffn_up.weight", i);
        add(l, vtype, f_mat(s, 4, F), 2, F, E, 1, 1, "blk.%d.ffn_down.weight", i);
    }
    if (mtp) {
        /* the MTP block's own tensors: the projection of [embedding, hidden] and its norms */
        const int i = s->n_layer;
        add(l, base, f_mat(s, 1, 2 * E), 2, 2 * E, E, 1, 1, "blk.%d.nextn.eh_proj.weight", i);
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, E, 1, 1, 1, "blk.%d.nextn.enorm.weight", i);
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, E, 1, 1, 1, "blk.%d.nextn.hnorm.weight", i);
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, E, 1, 1, 1, "blk.%d.nextn.shared_head_norm.weight", i);
    }
}

static void vision_tensors(synth_list *l, const synth_shape *s, int vt) {
    const int64_t C = s->v_embd, C4 = 4 * C, P = s->n_embd, Fv = s->v_ff, ps = s->v_patch;
    const float w = 0.035f;
    /* the patch kernels: F16 for a quantized tower (F32 with gauss, as mksynth.py) */
    const int pt = vt != PH_TYPE_Q8_0 ? vt : s->gauss ? PH_TYPE_F32 : PH_TYPE_F16;
    add(l, pt, f_mat(s, 1, 3 * ps * ps), 4, ps, ps, 3, C, "v.patch_embd.weight");
    add(l, pt, f_mat(s, 1, 3 * ps * ps), 4, ps, ps, 3, C, "v.patch_embd.weight.1");
    add(l, PH_TYPE_F32, f_bias(s, 0), 1, C, 1, 1, 1, "v.patch_embd.bias");
    add(l, PH_TYPE_F32, pick(s, (fill){FILL_RANDOM, 0.1f, 0}, (fill){FILL_NORMAL, 0.5f, 0}), 2, C, s->v_npos, 1, 1,
        "v.position_embd.weight");
    for (int i = 0; i < s->v_layer; i++) {
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, C, 1, 1, 1, "v.blk.%d.ln1.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, 0), 1, C, 1, 1, 1, "v.blk.%d.ln1.bias", i);
        add(l, vt, f_mat(s, 1, C), 2, C, 3 * C, 1, 1, "v.blk.%d.attn_qkv.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, 3 * C, 1, 1, 1, "v.blk.%d.attn_qkv.bias", i);
        add(l, vt, f_mat(s, 1, C), 2, C, C, 1, 1, "v.blk.%d.attn_out.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, C, 1, 1, 1, "v.blk.%d.attn_out.bias", i);
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, C, 1, 1, 1, "v.blk.%d.ln2.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, 0), 1, C, 1, 1, 1, "v.blk.%d.ln2.bias", i);
        add(l, vt, f_mat(s, 1, C), 2, C, Fv, 1, 1, "v.blk.%d.ffn_up.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, Fv, 1, 1, 1, "v.blk.%d.ffn_up.bias", i);
        add(l, vt, f_mat(s, 1, Fv), 2, Fv, C, 1, 1, "v.blk.%d.ffn_down.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, C, 1, 1, 1, "v.blk.%d.ffn_down.bias", i);
    }
    for (int d = 0; d < s->n_deepstack; d++) {
        int i = s->deepstack[d];
        add(l, PH_TYPE_F32, f_norm(s, 1), 1, C4, 1, 1, 1, "v.deepstack.%d.norm.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, 0), 1, C4, 1, 1, 1, "v.deepstack.%d.norm.bias", i);
        add(l, vt, f_mat(s, 1, C4), 2, C4, C4, 1, 1, "v.deepstack.%d.fc1.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, C4, 1, 1, 1, "v.deepstack.%d.fc1.bias", i);
        add(l, vt, f_mat(s, 1, C4), 2, C4, P, 1, 1, "v.deepstack.%d.fc2.weight", i);
        add(l, PH_TYPE_F32, f_bias(s, w), 1, P, 1, 1, 1, "v.deepstack.%d.fc2.bias", i);
    }
    add(l, PH_TYPE_F32, f_norm(s, 1), 1, C, 1, 1, 1, "v.post_ln.weight");
    add(l, PH_TYPE_F32, f_bias(s, 0), 1, C, 1, 1, 1, "v.post_ln.bias");
    add(l, vt, f_mat(s, 1, C4), 2, C4, C4, 1, 1, "mm.0.weight");
    add(l, PH_TYPE_F32, f_bias(s, w), 1, C4, 1, 1, 1, "mm.0.bias");
    add(l, vt, f_mat(s, 1, C4), 2, C4, P, 1, 1, "mm.2.weight");
    add(l, PH_TYPE_F32, f_bias(s, w), 1, P, 1, 1, 1, "mm.2.bias");
}

/* ---- a vocabulary of our own -------------------------------------------- */
/* Without --vocab, synth writes a small byte-level BPE vocabulary laid out as
 * a Qwen3-VL one is (docs/numerics.md, Tokenizer): the 256 byte tokens in the order of GPT-2's
 * byte map, tokens learnt by BPE over a list of common English words (so
 * common words are one token), then Qwen3-VL's added tokens with their
 * types. It is the same every time, so the files are too. */

enum { SV_N_TOKENS = 1024, SV_MAX_WORD = 24, SV_MAX_MERGES = 2 * SV_N_TOKENS, SV_PAIR_SLOTS = 16384 };

/* Common English words (and some for pictures), most common first: the
 * learner weighs each by its rank. */
static const char *const SV_WORDS[] = {
    "the",      "of",       "and",         "to",        "a",       "in",       "is",        "you",        "that",
    "it",       "he",       "was",         "for",       "on",      "are",      "as",        "with",       "his",
    "they",     "I",        "at",          "be",        "this",    "have",     "from",      "or",         "one",
    "had",      "by",       "word",        "but",       "not",     "what",     "all",       "were",       "we",
    "when",     "your",     "can",         "said",      "there",   "use",      "an",        "each",       "which",
    "she",      "do",       "how",         "their",     "if",      "will",     "up",        "other",      "about",
    "out",      "many",     "then",        "them",      "these",   "so",       "some",      "her",        "would",
    "make",     "like",     "him",         "into",      "time",    "has",      "look",      "two",        "more",
    "write",    "go",       "see",         "number",    "no",      "way",      "could",     "people",     "my",
    "than",     "first",    "water",       "been",      "call",    "who",      "its",       "now",        "find",
    "long",     "down",     "day",         "did",       "get",     "come",     "made",      "may",        "part",
    "image",    "user",     "assistant",   "system",    "hello",   "describe", "please",    "thank",      "picture",
    "photo",    "shows",    "color",       "red",       "green",   "blue",     "white",     "black",      "yellow",
    "small",    "large",    "left",        "right",     "top",     "bottom",   "center",    "background", "front",
    "here",     "over",     "under",       "new",       "sound",   "take",     "only",      "little",     "work",
    "know",     "place",    "year",        "live",      "me",      "back",     "give",      "most",       "very",
    "after",    "thing",    "our",         "just",      "name",    "good",     "sentence",  "man",        "think",
    "say",      "great",    "where",       "help",      "through", "much",     "before",    "line",       "too",
    "mean",     "old",      "any",         "same",      "tell",    "boy",      "follow",    "came",       "want",
    "show",     "also",     "around",      "form",      "three",   "set",      "put",       "end",        "does",
    "another",  "well",     "must",        "big",       "even",    "such",     "because",   "turn",       "why",
    "ask",      "went",     "men",         "read",      "need",    "land",     "different", "home",       "us",
    "move",     "try",      "kind",        "hand",      "again",   "change",   "off",       "play",       "spell",
    "air",      "away",     "animal",      "house",     "point",   "page",     "letter",    "mother",     "answer",
    "found",    "study",    "still",       "learn",     "should",  "world",    "high",      "every",      "near",
    "add",      "food",     "between",     "own",       "below",   "country",  "plant",     "last",       "school",
    "father",   "keep",     "tree",        "never",     "start",   "city",     "earth",     "eye",        "light",
    "thought",  "head",     "story",       "saw",       "far",     "sea",      "draw",      "late",       "run",
    "while",    "press",    "close",       "night",     "real",    "life",     "few",       "north",      "open",
    "seem",     "together", "next",        "begin",     "got",     "walk",     "example",   "ease",       "paper",
    "group",    "always",   "music",       "those",     "both",    "mark",     "often",     "until",      "mile",
    "river",    "car",      "feet",        "care",      "second",  "book",     "carry",     "took",       "science",
    "eat",      "room",     "friend",      "began",     "idea",    "fish",     "mountain",  "stop",       "once",
    "base",     "hear",     "horse",       "cut",       "sure",    "watch",    "face",      "wood",       "main",
    "enough",   "plain",    "girl",        "usual",     "young",   "ready",    "above",     "ever",       "list",
    "though",   "feel",     "talk",        "bird",      "soon",    "body",     "dog",       "cat",        "family",
    "direct",   "pose",     "leave",       "song",      "measure", "door",     "product",   "short",      "table",
    "question", "happen",   "complete",    "ship",      "area",    "half",     "rock",      "order",      "fire",
    "south",    "problem",  "piece",       "told",      "knew",    "pass",     "since",     "whole",      "king",
    "street",   "inch",     "nothing",     "course",    "stay",    "wheel",    "full",      "force",      "object",
    "person",   "text",     "yes",         "sky",       "grass",   "road",     "window",    "building",   "wall",
    "sign",     "letters",  "information", "something", "model",
};

/* Pre-tokens that are not a word after a space: ChatML's roles (which
 * follow <|im_start|>), runs of spaces and blank lines. */
static const struct {
    const char *text;
    uint32_t weight;
} SV_EXTRA[] = {
    {"user", 400000}, {"assistant", 400000}, {"system", 100000}, {"  ", 100000}, {"    ", 100000}, {"\n\n", 100000},
};

/* Added tokens of Qwen3-VL, in its order: control tokens first, then those
 * its converter marks user-defined. */
static const char *const SV_ADDED[] = {
    "<|endoftext|>",  "<|im_start|>",   "<|im_end|>",      "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>",  "<|box_end|>",    "<|quad_start|>",  "<|quad_end|>",         "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",   "<|video_pad|>",        "<tool_call>",
    "</tool_call>",   "<|fim_prefix|>", "<|fim_middle|>",  "<|fim_suffix|>",       "<|fim_pad|>",
    "<|repo_name|>",  "<|file_sep|>",   "<tool_response>", "</tool_response>",     "<think>",
    "</think>",
};
enum { SV_N_ADDED = sizeof SV_ADDED / sizeof SV_ADDED[0], SV_N_CONTROL = 14 };
enum { SV_TYPE_NORMAL = 1, SV_TYPE_CONTROL = 3, SV_TYPE_USER = 4 }; /* tokenizer.ggml.token_type */

/* ChatML; an image item becomes <|vision_start|><|image_pad|><|vision_end|>. */
static const char SV_CHAT_TEMPLATE[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or item['type'] == 'image_url' or 'image' in item or 'image_url' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}";

/* A qwen35 file's template unless --chat-template gives one: Qwen3.5's
 * form (docs/chat-format.md, ChatML) for system, user and assistant messages: ChatML, the
 * answer opened with <think>\n (closed at once when enable_thinking is
 * false), the assistant turns after the last user message with their
 * reasoning in a think block, earlier ones without. It renders no tools:
 * a tool message is refused. */
static const char QWEN35_CHAT_TEMPLATE[] =
    "{%- macro content_text(content) -%}"
    "{%- if content is string -%}"
    "{{- content -}}"
    "{%- elif content is iterable and content is not mapping -%}"
    "{%- for item in content -%}"
    "{%- if item.type == 'image' or item.type == 'image_url' or 'image' in item or 'image_url' in item -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}"
    "{{- item.text -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(last_query=-1) -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}"
    "{%- set ns.last_query = loop.index0 -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set content = content_text(message.content) | trim -%}"
    "{%- if message.role == 'system' or message.role == 'user' -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set reasoning = '' -%}"
    "{%- if message.reasoning_content is string -%}"
    "{%- set reasoning = message.reasoning_content -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_query -%}"
    "{{- '<think>\\n' + reasoning | trim + '\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{{- content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- raise_exception('this template renders system, user and assistant messages only') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}";

/* The learner's words: three forms of each of SV_WORDS, and SV_EXTRA. */
#define SV_MAX_WORDS (3 * sizeof SV_WORDS / sizeof SV_WORDS[0] + sizeof SV_EXTRA / sizeof SV_EXTRA[0])

/* A token text: at most SV_MAX_WORD bytes, each mapped to at most 2 UTF-8
 * bytes; added tokens are shorter. A merge is two such texts and a space. */
typedef struct self_vocab {
    int32_t n_tokens, n_normal, n_merges;
    char text[SV_N_TOKENS][2 * SV_MAX_WORD + 1];
    int32_t type[SV_N_TOKENS];
    char merge[SV_MAX_MERGES][4 * SV_MAX_WORD + 2];
    /* the learner's state: each normal token's bytes, and the words */
    uint8_t raw[SV_N_TOKENS][SV_MAX_WORD];
    uint8_t raw_len[SV_N_TOKENS];
    int32_t byte_id[256];
    int16_t word[SV_MAX_WORDS][SV_MAX_WORD];
    uint8_t word_len[SV_MAX_WORDS];
    uint32_t word_weight[SV_MAX_WORDS];
    int n_words;
    uint32_t pair_key[SV_PAIR_SLOTS], pair_weight[SV_PAIR_SLOTS];
} self_vocab;

static bool byte_printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

/* Writes the text of bytes s[0..n) through GPT-2's byte map (docs/numerics.md, Byte map). */
static void map_bytes(const uint8_t *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = s[i];
        if (!byte_printable(s[i])) {
            cp = 0x100;
            for (int c = 0; c < s[i]; c++) cp += !byte_printable(c);
        }
        k += (size_t)utf8_encode(cp, (uint8_t *)out + k);
    }
    out[k] = '\0';
}

static void sv_add_word(self_vocab *v, const char *w, size_t n, uint32_t weight) {
    if (n == 0 || n > SV_MAX_WORD) return;
    for (size_t i = 0; i < n; i++) v->word[v->n_words][i] = (int16_t)v->byte_id[(uint8_t)w[i]];
    v->word_len[v->n_words] = (uint8_t)n;
    v->word_weight[v->n_words++] = weight;
}

/* The adjacent pair of the words with the largest total weight (ties: the
 * lowest ids), or false if no word has two tokens left. */
static bool sv_best_pair(self_vocab *v, int32_t *a, int32_t *b) {
    memset(v->pair_key, 0xff, sizeof v->pair_key);
    uint32_t best = UINT32_MAX, best_weight = 0, used = 0;
    for (int w = 0; w < v->n_words; w++) {
        for (int i = 0; i + 1 < v->word_len[w]; i++) {
            const uint32_t key = (uint32_t)v->word[w][i] << 16 | (uint32_t)v->word[w][i + 1];
            uint32_t s = (key * 2654435761u) >> 18; /* 14 bits: SV_PAIR_SLOTS */
            while (v->pair_key[s] != key && v->pair_key[s] != UINT32_MAX) s = (s + 1) & (SV_PAIR_SLOTS - 1);
            if (v->pair_key[s] == UINT32_MAX) {
                if (4 * (used + 1) > 3 * SV_PAIR_SLOTS) continue; /* far more pairs than the words have */
                v->pair_key[s] = key, v->pair_weight[s] = 0, used++;
            }
            const uint32_t total = v->pair_weight[s] += v->word_weight[w];
            if (total > best_weight || (total == best_weight && key < best)) best = key, best_weight = total;
        }
    }
    *a = (int32_t)(best >> 16);
    *b = (int32_t)(best & 0xffff);
    return best != UINT32_MAX;
}

/* Learns merges until the vocabulary is full or every word is one token. */
static void sv_learn(self_vocab *v) {
    int32_t a, b;
    while (v->n_normal < SV_N_TOKENS - SV_N_ADDED && v->n_merges < SV_MAX_MERGES && sv_best_pair(v, &a, &b)) {
        uint8_t s[2 * SV_MAX_WORD];
        const size_t n = (size_t)v->raw_len[a] + v->raw_len[b];
        memcpy(s, v->raw[a], v->raw_len[a]);
        memcpy(s + v->raw_len[a], v->raw[b], v->raw_len[b]);
        int32_t r = 256; /* two tokens that spell an existing one make it again */
        while (r < v->n_normal && (v->raw_len[r] != n || memcmp(v->raw[r], s, n))) r++;
        if (r == v->n_normal) {
            memcpy(v->raw[r], s, n); /* n <= SV_MAX_WORD: a and b come from one word */
            v->raw_len[r] = (uint8_t)n;
            map_bytes(s, n, v->text[r]);
            v->type[r] = SV_TYPE_NORMAL;
            v->n_normal++;
        }
        char *m = v->merge[v->n_merges++];
        const size_t la = strlen(v->text[a]), lb = strlen(v->text[b]);
        memcpy(m, v->text[a], la);
        m[la] = ' ';
        memcpy(m + la + 1, v->text[b], lb + 1);
        for (int w = 0; w < v->n_words; w++) {
            int j = 0;
            for (int i = 0; i < v->word_len[w]; j++) {
                const bool hit = i + 1 < v->word_len[w] && v->word[w][i] == a && v->word[w][i + 1] == b;
                v->word[w][j] = hit ? (int16_t)r : v->word[w][i];
                i += hit ? 2 : 1;
            }
            v->word_len[w] = (uint8_t)j;
        }
    }
}

static self_vocab *self_vocab_build(void) {
    self_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    /* the byte tokens, in the order of their mapped code points */
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; b < 256; b++) {
            if (byte_printable(b) != (pass == 0)) continue;
            const int32_t id = v->n_normal++;
            v->byte_id[b] = id;
            v->raw[id][0] = (uint8_t)b;
            v->raw_len[id] = 1;
            map_bytes(v->raw[id], 1, v->text[id]);
            v->type[id] = SV_TYPE_NORMAL;
        }
    }
    /* each word after a space (most weight), alone (a text's first word),
     * and capitalized after a space; then SV_EXTRA */
    const int n_words = (int)(sizeof SV_WORDS / sizeof SV_WORDS[0]);
    for (int i = 0; i < n_words; i++) {
        const uint32_t weight = 1000000u / (uint32_t)(i + 10);
        char w[SV_MAX_WORD + 2];
        const int n = snprintf(w, sizeof w, " %s", SV_WORDS[i]);
        if (n < 0 || n > SV_MAX_WORD) continue;
        sv_add_word(v, w, (size_t)n, 4 * weight);
        sv_add_word(v, w + 1, (size_t)n - 1, weight);
        if (w[1] >= 'a' && w[1] <= 'z') w[1] = (char)(w[1] - 'a' + 'A');
        sv_add_word(v, w, (size_t)n, weight);
    }
    for (size_t i = 0; i < sizeof SV_EXTRA / sizeof SV_EXTRA[0]; i++)
        sv_add_word(v, SV_EXTRA[i].text, strlen(SV_EXTRA[i].text), SV_EXTRA[i].weight);
    sv_learn(v);
    v->n_tokens = v->n_normal;
    for (int i = 0; i < SV_N_ADDED; i++) {
        snprintf(v->text[v->n_tokens], sizeof v->text[0], "%s", SV_ADDED[i]);
        v->type[v->n_tokens++] = i < SV_N_CONTROL ? SV_TYPE_CONTROL : SV_TYPE_USER;
    }
    return v;
}

/* The tokenizer.* keys, as a converted Qwen3-VL file has them. */
static void self_vocab_write(gguf_writer *w, const self_vocab *v) {
    const char *texts[SV_N_TOKENS], *merges[SV_MAX_MERGES];
    for (int32_t i = 0; i < v->n_tokens; i++) texts[i] = v->text[i];
    for (int32_t i = 0; i < v->n_merges; i++) merges[i] = v->merge[i];
    const uint32_t endoftext = (uint32_t)v->n_normal, im_end = endoftext + 2; /* SV_ADDED's order */
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, texts, (uint64_t)v->n_tokens);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, v->type, (uint64_t)v->n_tokens);
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_STRING, merges, (uint64_t)v->n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", im_end);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", endoftext);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", endoftext);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_set_str(w, "tokenizer.chat_template", SV_CHAT_TEMPLATE);
}

/* ---- filling ------------------------------------------------------------ */

typedef struct fill_ctx {
    const synth_list *list;
    uint64_t seed;
    tpool *pool;
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
    tpool_split_range((long)c->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        /* each row's numbers depend only on (seed, tensor, row): the same
         * file whatever the thread count */
        uint64_t st = mix64(c->seed ^ mix64(c->t_index * 0x100000001B3ull + (uint64_t)r));
        const fill f = t->fill;
        for (int64_t i = 0; i < c->row_len; i++) {
            if (f.kind == FILL_ONES) {
                row[i] = 1.0f;
            } else if (f.kind == FILL_ZEROS) {
                row[i] = 0.0f;
            } else {
                st += 0x9E3779B97F4A7C15ull;
                uint64_t z = mix64(st);
                if (f.kind == FILL_NORMAL) {
                    /* the sum of four 16-bit uniforms (Irwin-Hall), centred and
                     * scaled to variance 1: integer sums, then one rounding per
                     * float operation (each its own statement, never fused),
                     * so the same bytes on every machine and compiler */
                    const int32_t sum = (int32_t)(z & 0xffff) + (int32_t)(z >> 16 & 0xffff) +
                                        (int32_t)(z >> 32 & 0xffff) + (int32_t)(z >> 48) - 131070;
                    const float g = (float)sum * (1.7320508f / 65536.0f);
                    const float v = g * f.scale;
                    row[i] = v + f.offset;
                    continue;
                }
                const float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
                if (f.kind == FILL_NEGATIVE) {
                    const float a = 0.98f * u;
                    const float b = 0.02f + a;
                    row[i] = -b * f.scale;
                } else {
                    row[i] = (u * 2.0f - 1.0f) * f.scale; /* u * 2 is exact: nothing to fuse */
                }
            }
        }
        quantize_weight_row(t->type, row, c->buf + (size_t)r * c->row_bytes, c->row_len);
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
    c->row_bytes = type_row_bytes(t->type, t->ne[0]);
    if ((uint64_t)c->row_bytes * (uint64_t)c->n_rows != nbytes) return -1;
    c->failed = 0;
    tpool_run(c->pool, fill_rows, c);
    return c->failed ? -1 : 0;
}

static int write_file(const char *path, gguf_writer *w, synth_list *l, fill_ctx *fc, ph_err *err) {
    for (size_t i = 0; i < l->n; i++)
        gguf_writer_add_tensor(w, l->t[i].name, l->t[i].type, l->t[i].n_dims, l->t[i].ne);
    fc->list = l;
    return gguf_writer_write(w, path, fill_tensor, fc, err);
}

static const synth_type *find_type(const char *name) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(types[i].name, name)) return &types[i];
    return NULL;
}

/* The key "ARCH.key" of the shape's architecture. */
typedef struct arch_key {
    char s[96];
} arch_key;

static const char *akey(arch_key *k, const synth_shape *s, const char *key) {
    snprintf(k->s, sizeof k->s, "%s.%s", s->arch, key);
    return k->s;
}

typedef struct u32_key {
    const char *key;
    int v;
} u32_key;

static void set_u32s(gguf_writer *w, const synth_shape *s, const u32_key *keys, size_t n) {
    arch_key k;
    for (size_t i = 0; i < n; i++) gguf_writer_set_u32(w, akey(&k, s, keys[i].key), (uint32_t)keys[i].v);
}

static void llm_metadata(gguf_writer *w, const synth_shape *s, const synth_type *ty, const char *name, bool mtp) {
    arch_key k;
    gguf_writer_set_str(w, "general.architecture", s->arch);
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)ty->file_type);
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    /* an MTP block is counted in block_count (docs/numerics.md, Qwen3.5) */
    const u32_key common[] = {
        {"context_length", s->n_ctx},          {"embedding_length", s->n_embd},
        {"block_count", s->n_layer + mtp},     {"feed_forward_length", s->n_ff},
        {"attention.head_count", s->n_head},   {"attention.head_count_kv", s->n_head_kv},
        {"attention.key_length", s->head_dim}, {"attention.value_length", s->head_dim},
    };
    set_u32s(w, s, common, sizeof common / sizeof *common);
    gguf_writer_set_f32(w, akey(&k, s, "rope.freq_base"), s->freq_base);
    gguf_writer_set_f32(w, akey(&k, s, "attention.layer_norm_rms_epsilon"), 1e-6f);
    int32_t sec[4] = {s->sections[0], s->sections[1], s->sections[2], s->sections[3]};
    gguf_writer_set_arr(w, akey(&k, s, "rope.dimension_sections"), GGUF_INT32, sec, 4);
    if (!is_qwen35(s)) {
        gguf_writer_set_u32(w, akey(&k, s, "n_deepstack_layers"), (uint32_t)s->n_deepstack);
        return;
    }
    const u32_key q35[] = {
        {"rope.dimension_count", s->n_rot},       {"full_attention_interval", s->fa_interval},
        {"ssm.conv_kernel", s->conv_k},           {"ssm.state_size", s->ssm_d},
        {"ssm.group_count", s->ssm_hk},           {"ssm.time_step_rank", s->ssm_hv},
        {"ssm.inner_size", s->ssm_hv * s->ssm_d},
    };
    set_u32s(w, s, q35, sizeof q35 / sizeof *q35);
    if (mtp) gguf_writer_set_u32(w, akey(&k, s, "nextn_predict_layers"), 1);
}

/* Copies the tokenizer.* keys of voc. A Qwen2 vocabulary (llama.cpp's
 * models/ggml-vocab-qwen2.gguf) holds placeholders [PADn] where Qwen3-VL's
 * added tokens go, after <|im_end|>: they are written in (with their types,
 * as Qwen3-VL's converter does, SV_ADDED's order) and <|im_end|> becomes
 * the end token. pre, when given, replaces tokenizer.ggml.pre (Qwen3.5's
 * test vocabulary is Qwen2's with pre "qwen35"). */
static int copy_vocab(gguf_writer *w, const gguf_file *voc, const char *pre, ph_err *err) {
    for (uint64_t k = 0; k < voc->n_kv; k++) {
        const gguf_kv *kv = &voc->kv[k];
        if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) gguf_writer_copy_kv(w, kv);
    }
    if (pre) gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    const gguf_kv *toks = gguf_find_kv(voc, "tokenizer.ggml.tokens"),
                  *types = gguf_find_kv(voc, "tokenizer.ggml.token_type");
    const uint64_t n = toks->v.arr.n;
    uint64_t im_end = 0;
    while (im_end < n && !gguf_str_eq(toks->v.arr.strs[im_end], "<|im_end|>")) im_end++;
    const uint64_t first = im_end + 1, n_add = SV_N_ADDED - 3; /* SV_ADDED after <|im_end|> */
    for (uint64_t i = 0; i < n_add; i++) {
        char want[32];
        snprintf(want, sizeof want, "[PAD%" PRIu64 "]", first + i);
        if (first + i >= n || !gguf_str_eq(toks->v.arr.strs[first + i], want)) return 0; /* nothing to fill */
    }
    if (!types || types->type != GGUF_ARRAY || types->v.arr.type != GGUF_INT32 || types->v.arr.n != n)
        return err_set(err, "tokenizer.ggml.token_type is not %" PRIu64 " INT32 values", n);
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) bytes += toks->v.arr.strs[i].len + 1;
    const char **texts = malloc(n * sizeof *texts);
    char *buf = malloc(bytes);
    int32_t *type = malloc(n * sizeof *type);
    if (!texts || !buf || !type) {
        free(texts);
        free(buf);
        free(type);
        return err_set(err, "out of memory");
    }
    char *at = buf;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_str t = toks->v.arr.strs[i];
        memcpy(at, t.ptr, t.len);
        at[t.len] = '\0';
        texts[i] = at;
        at += t.len + 1;
        memcpy(&type[i], types->v.arr.data + 4 * i, 4);
    }
    for (uint64_t i = 0; i < n_add; i++) {
        texts[first + i] = SV_ADDED[3 + i];
        type[first + i] = 3 + i < SV_N_CONTROL ? SV_TYPE_CONTROL : SV_TYPE_USER;
    }
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, texts, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, type, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)im_end);
    free(texts);
    free(buf);
    free(type);
    return 0;
}

int synth_write(const synth_params *p, ph_err *err) {
    kernels_init();
    const char *arch = p->arch ? p->arch : "qwen3vl";
    const synth_shape *s = NULL;
    bool known_arch = false;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (strcmp(shapes[i].arch, arch)) continue;
        known_arch = true;
        if (p->shape && !strcmp(shapes[i].name, p->shape)) s = &shapes[i];
    }
    if (!known_arch) return err_set(err, "unknown architecture '%s' (qwen3vl, qwen35)", arch);
    if (!s) {
        char names[256] = "";
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            if (!strcmp(shapes[i].arch, arch))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "",
                         shapes[i].name);
        return err_set(err, "unknown shape '%s' (%s)", p->shape ? p->shape : "", names);
    }
    const synth_type *ty = find_type(p->type ? p->type : "f16");
    if (!ty) return err_set(err, "unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m)", p->type);
    const synth_type *oty = p->output_type ? find_type(p->output_type) : NULL;
    if (p->output_type && (!oty || !strcmp(oty->name, "q4_k_m")))
        return err_set(err, "unknown output type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k)", p->output_type);
    const int out_type = oty ? oty->base : !strcmp(ty->name, "q4_k_m") ? PH_TYPE_Q6_K : ty->base;
    if (p->mtp && !is_qwen35(s)) return err_set(err, "an MTP block is for qwen35 models only");
    if (p->vocab_pre && !p->vocab) return err_set(err, "the tokenizer's pre-tokenizer is set only for --vocab");
    const synth_type *vty = find_type(p->vision_type ? p->vision_type : "f16");
    if (!vty || (vty->base != PH_TYPE_F32 && vty->base != PH_TYPE_F16 && vty->base != PH_TYPE_BF16 &&
                 vty->base != PH_TYPE_Q8_0))
        return err_set(err, "vision type '%s' is not one of f32 f16 bf16 q8_0", p->vision_type);
    if (!p->out) return err_set(err, "an output name is needed: -o NAME");

    /* the chat template: a file's, else qwen35's own, else the tokenizer's */
    char *tmpl_file = NULL;
    const char *tmpl = is_qwen35(s) ? QWEN35_CHAT_TEMPLATE : NULL;
    if (p->chat_template) {
        size_t len = 0;
        if (file_read_all(p->chat_template, 1u << 20, (void **)&tmpl_file, &len, err)) return -1;
        if (len == 0 || strlen(tmpl_file) != len) {
            free(tmpl_file);
            return err_set(err, "%s: a chat template must be text, not empty and without NUL bytes",
                           p->chat_template);
        }
        tmpl = tmpl_file;
    }

    /* the tokenizer: copied from p->vocab, or our own */
    gguf_file *voc = NULL;
    self_vocab *own = NULL;
    int64_t n_vocab;
    if (p->vocab) {
        if (!(voc = gguf_open(p->vocab, err))) return -1;
        const gguf_kv *toks = gguf_find_kv(voc, "tokenizer.ggml.tokens");
        if (!toks || toks->type != GGUF_ARRAY || toks->v.arr.type != GGUF_STRING) {
            gguf_close(voc);
            return err_set(err, "%s has no tokenizer.ggml.tokens", p->vocab);
        }
        n_vocab = (int64_t)toks->v.arr.n;
    } else {
        if (!(own = self_vocab_build())) return err_set(err, "out of memory");
        n_vocab = own->n_tokens;
    }

    int rc = -1;
    char path[4096];
    synth_list llm = {0}, vis = {0};
    gguf_writer *w = NULL;
    fill_ctx fc = {.seed = p->seed, .pool = tpool_create(p->n_threads)};
    if (!fc.pool) {
        err_set(err, "cannot start threads");
        goto done;
    }
    llm_tensors(&llm, s, ty, out_type, p->mtp, n_vocab);
    vision_tensors(&vis, s, vty->base);
    if (llm.failed || vis.failed) {
        err_set(err, "out of memory");
        goto done;
    }

    /* the LLM */
    char name[160];
    /* a qwen3vl pair's names (and bytes) are those of the versions before qwen35 */
    if (p->name) snprintf(name, sizeof name, "%s", p->name);
    else snprintf(name, sizeof name, "pinhole-synth-%s%s-%s", is_qwen35(s) ? "qwen35-" : "", s->name, ty->name);
    w = gguf_writer_new();
    llm_metadata(w, s, ty, name, p->mtp);
    if (voc && copy_vocab(w, voc, p->vocab_pre, err)) goto done;
    if (own) self_vocab_write(w, own);
    if (tmpl) gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    snprintf(path, sizeof path, "%s.gguf", p->out);
    if (write_file(path, w, &llm, &fc, err)) goto done;
    gguf_writer_free(w);

    /* the mmproj */
    w = gguf_writer_new();
    if (p->name) snprintf(name, sizeof name, "%s-mmproj", p->name);
    else
        snprintf(name, sizeof name, "pinhole-synth-%s%s-%s-mmproj", is_qwen35(s) ? "qwen35-" : "", s->name,
                 vty->name);
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
    if (write_file(path, w, &vis, &fc, err)) goto done;
    rc = 0;
done:
    gguf_writer_free(w);
    free(llm.t);
    free(vis.t);
    tpool_free(fc.pool);
    gguf_close(voc);
    free(own);
    free(tmpl_file);
    return rc;
}
