/* pinhole synth without --vocab: the built-in tokenizer. Writes a tiny model
 * pair into a temporary folder and checks, through the public API, that it
 * loads, that text (ASCII, UTF-8, special tokens) round-trips through the
 * tokenizer, that common words are single tokens, that <|im_end|> ends
 * generation, that a prompt with a picture evaluates to finite logits, and
 * that the same seed writes the same bytes. A tiny qwen35 pair: the keys and
 * tensors of the oracle's qwen35 pair, a text and a picture prompt with
 * finite logits, the same on a second run, the Qwen3.5 chat format (its
 * renderings as llama.cpp renders the template); unknown architectures,
 * shapes and template files refused. The test oracle's options: an MTP
 * block, the output type, the name, mksynth's weight scales. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "pinhole.h"
#include "synth/synth.h"
#include "chat_format_of.h"
#include "test.h"
#include "text/chat_format.h"

#define ORACLE35 PH_ORACLE_DIR "/qwen35/models/"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static bool same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = read_all(a, &na), *y = read_all(b, &nb);
    const bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int synth(const char *arch, const char *out, uint64_t seed, ph_err *err) {
    const synth_params p = {
        .arch = arch, .shape = "tiny", .type = "f16", .vision_type = "f16", .out = out, .seed = seed, .n_threads = 2};
    return synth_write(&p, err);
}

static ph_tokens tokenize(const ph_model *m, const char *text, bool parse_special) {
    ph_tokens t = {0};
    ph_err e;
    CHECKF(ph_tokenize(m, text, strlen(text), parse_special, &t, &e) == 0, "%s", e.msg);
    return t;
}

/* Tokenizes and detokenizes text; returns the token count. */
static size_t round_trip(const ph_model *m, const char *text, bool parse_special) {
    ph_tokens t = tokenize(m, text, parse_special);
    char out[512];
    size_t n = 0;
    ph_detok d = {0};
    for (size_t i = 0; i < t.n; i++) n += ph_detok_token(&d, m, t.ids[i], out + n, sizeof out - n);
    n += ph_detok_finish(&d, out + n, sizeof out - n);
    CHECKF(n == strlen(text) && memcmp(out, text, n) == 0, "'%s' came back as '%.*s'", text, (int)n, out);
    const size_t count = t.n;
    ph_tokens_free(&t);
    return count;
}

static void test_tokenizer(const ph_model *m) {
    const ph_model_info *info = ph_model_get_info(m);
    CHECKF(info->n_vocab == 1024, "n_vocab %d", info->n_vocab);
    CHECK(ph_model_bos(m) == -1); /* add_bos_token false */

    /* the special tokens: distinct ids, each one token when parsed */
    static const char *const specials[] = {"<|endoftext|>",        "<|im_start|>",   "<|im_end|>",
                                           "<|vision_start|>",     "<|vision_end|>", "<|image_pad|>",
                                           "<|object_ref_start|>", "<think>",        "</think>"};
    const size_t n_specials = sizeof specials / sizeof specials[0];
    int32_t ids[sizeof specials / sizeof specials[0]];
    for (size_t i = 0; i < n_specials; i++) {
        ids[i] = ph_token_lookup(m, specials[i]);
        CHECKF(ids[i] >= 0 && ids[i] < info->n_vocab, "%s: %d", specials[i], ids[i]);
        for (size_t j = 0; j < i; j++) CHECK(ids[i] != ids[j]);
        ph_tokens t = tokenize(m, specials[i], true);
        CHECKF(t.n == 1 && t.ids[0] == ids[i], "%s: %zu tokens", specials[i], t.n);
        ph_tokens_free(&t);
    }
    const int32_t im_start = ids[1], im_end = ids[2];
    CHECK(ph_token_is_eog(m, im_end));
    CHECK(ph_token_is_eog(m, ids[0])); /* <|endoftext|> */
    CHECK(!ph_token_is_eog(m, im_start));
    CHECK(!ph_token_is_eog(m, ids[3]));

    /* special tokens inside text */
    const char *chat = "<|im_start|>user\nDescribe the picture.<|im_end|>\n<|im_start|>assistant\n";
    ph_tokens t = tokenize(m, chat, true);
    CHECK(t.n > 6 && t.ids[0] == im_start);
    size_t n_end = 0;
    for (size_t i = 0; i < t.n; i++) n_end += t.ids[i] == im_end;
    CHECK(n_end == 1);
    ph_tokens_free(&t);
    CHECK(round_trip(m, chat, true) > 0);
    /* not parsed, a control token's text is plain text; <think> (user
     * defined) is still matched, as in llama.cpp */
    t = tokenize(m, "<|im_end|>", false);
    CHECK(t.n > 1);
    ph_tokens_free(&t);
    CHECK(round_trip(m, "<|im_end|>", false) > 1);
    t = tokenize(m, "a<think>b", false);
    CHECK(t.n == 3 && t.ids[1] == ids[7]);
    ph_tokens_free(&t);

    /* ASCII: common words are one token each */
    const char *ascii = "The people of the world said that there is water in the house.";
    const size_t n_ascii = round_trip(m, ascii, false);
    CHECKF(n_ascii <= 16, "%zu tokens for %zu bytes", n_ascii, strlen(ascii));
    static const char *const words[] = {" the", " people", " picture", " hello", " what", "user", "assistant"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        t = tokenize(m, words[i], false);
        CHECKF(t.n == 1, "'%s': %zu tokens", words[i], t.n);
        ph_tokens_free(&t);
    }
    CHECK(round_trip(m, "Hello, world! 12345 ~`^{}[]|\\ \t\r\n\n  x", false) > 0);
    /* UTF-8, through the byte tokens */
    CHECK(round_trip(m, "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c", false) >= 8); /* CJK: 3 byte tokens each */
    CHECK(round_trip(m, "\xf0\x9f\x98\x80 caf\xc3\xa9 \xd0\xbf\xd1\x80\xd0\xb8", true) > 0);
}

static bool finite_logits(const ph_session *s, int32_t n_vocab) {
    const float *l = ph_session_logits(s);
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isfinite(l[i])) return false;
    return true;
}

/* A picture prompt and 4 greedy steps; the last logits into last. */
static void test_picture(ph_model *m, const char *mmproj_path, float *last) {
    ph_err e;
    const ph_model_info *info = ph_model_get_info(m);
    const int32_t n_vocab = info->n_vocab;
    ph_mmproj *v = ph_mmproj_open(m, mmproj_path, &e);
    CHECKF(v != NULL, "%s", e.msg);
    ph_picture *pic = ph_picture_load(PH_ORACLE_DIR "/img/small.png", &e);
    CHECKF(pic != NULL, "%s", e.msg);
    ph_session *s = ph_session_new(m, 512, &e);
    CHECKF(s != NULL, "%s", e.msg);
    ph_prompt prompt = {0};
    const int rc = ph_prompt_from_raw(
        m, "<|im_start|>user\n<__image__>What is in the picture?<|im_end|>\n<|im_start|>assistant\n", "<__image__>",
        &prompt, &e);
    CHECKF(rc == 0, "%s", e.msg);
    if (!v || !pic || !s || rc) goto done;
    CHECK(prompt.n == 3 && prompt.n_pictures == 1);
    for (size_t i = 0; i < prompt.n; i++) {
        const ph_prompt_item *it = &prompt.items[i];
        if (it->is_picture) {
            ph_picture_chunk c;
            CHECKF(ph_session_eval_picture(s, v, pic, &c, NULL, &e) == 0, "%s", e.msg);
            CHECK(c.n_tokens > 0 && c.n_tokens == c.grid_x * c.grid_y);
            CHECKF(c.embd_width == info->n_embd_inp, "rows %d wide, the LLM takes %d", c.embd_width,
                   info->n_embd_inp);
        } else {
            CHECKF(ph_session_eval_tokens(s, it->tokens.ids, it->tokens.n, &e) == 0, "%s", e.msg);
        }
    }
    CHECK(finite_logits(s, n_vocab));
    /* a few greedy steps */
    ph_sampler_params sp = ph_sampler_defaults();
    ph_sampler *smp = ph_sampler_new(&sp);
    for (int step = 0; step < 4 && smp; step++) {
        const int32_t tok = ph_sampler_sample(smp, ph_session_logits(s), n_vocab);
        CHECK(tok >= 0 && tok < n_vocab);
        CHECKF(ph_session_eval_tokens(s, &tok, 1, &e) == 0, "%s", e.msg);
        CHECK(finite_logits(s, n_vocab));
    }
    memcpy(last, ph_session_logits(s), (size_t)n_vocab * sizeof *last);
    ph_sampler_free(smp);
done:
    ph_prompt_free(&prompt);
    ph_session_free(s);
    ph_picture_free(pic);
    ph_mmproj_close(v);
}

/* ---- qwen35 --------------------------------------------------------------- */

/* A tensor's name with its layer number (after "blk.") left out. */
static void layerless(const char *name, char *out, size_t size) {
    const char *b = strstr(name, "blk.");
    if (!b) {
        snprintf(out, size, "%s", name);
        return;
    }
    const char *rest = b + 4;
    while (*rest >= '0' && *rest <= '9') rest++;
    snprintf(out, size, "%.*sblk.%s", (int)(b - name), name, rest);
}

/* Whether a and b hold the same metadata keys (but general.* and
 * tokenizer.*) and tensor names, those of all layers counted as one. */
static bool same_names(const char *a, const char *b) {
    ph_err e;
    gguf_file *f[2] = {gguf_open(a, &e), gguf_open(b, &e)};
    bool same = f[0] && f[1];
    for (int i = 0; same && i < 2; i++) {
        const gguf_file *x = f[i], *y = f[1 - i];
        for (uint64_t k = 0; same && k < x->n_kv; k++) {
            const gguf_str key = x->kv[k].key;
            if ((key.len > 8 && !memcmp(key.ptr, "general.", 8)) ||
                (key.len > 10 && !memcmp(key.ptr, "tokenizer.", 10)))
                continue;
            bool found = false;
            for (uint64_t j = 0; !found && j < y->n_kv; j++)
                found = y->kv[j].key.len == key.len && !memcmp(y->kv[j].key.ptr, key.ptr, key.len);
            CHECKF(found, "%s has the key %.*s, %s not", i ? b : a, (int)key.len, key.ptr, i ? a : b);
            same = found;
        }
        for (uint64_t t = 0; same && t < x->n_tensors; t++) {
            char name[64], other[64];
            layerless(x->tensors[t].name, name, sizeof name);
            bool found = false;
            for (uint64_t j = 0; !found && j < y->n_tensors; j++) {
                layerless(y->tensors[j].name, other, sizeof other);
                found = !strcmp(name, other);
            }
            CHECKF(found, "%s has the tensor %s, %s not", i ? b : a, x->tensors[t].name, i ? a : b);
            same = found;
        }
    }
    gguf_close(f[0]);
    gguf_close(f[1]);
    return same;
}

/* A text prompt: finite logits, into last. */
static void text_run(ph_model *m, float *last) {
    ph_err e;
    const int32_t n_vocab = ph_model_get_info(m)->n_vocab;
    ph_session *s = ph_session_new(m, 256, &e);
    CHECKF(s != NULL, "%s", e.msg);
    if (!s) return;
    ph_tokens t = tokenize(m,
                           "<|im_start|>user\nHello, what is the color of the sky?<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n",
                           true);
    CHECKF(ph_session_eval_tokens(s, t.ids, t.n, &e) == 0, "%s", e.msg);
    CHECK(finite_logits(s, n_vocab));
    memcpy(last, ph_session_logits(s), (size_t)n_vocab * sizeof *last);
    ph_tokens_free(&t);
    ph_session_free(s);
}

static void check_render(const chat_fmt *f, const ph_chat_msg *msgs, size_t n, int thinking, const char *want) {
    const chat_render_opts o = {.thinking = thinking};
    char *text = NULL;
    size_t len = 0;
    ph_err e;
    CHECKF(chat_format_render_text(f, msgs, n, NULL, 0, &o, NULL, &text, &len, &e) == 0, "%s", e.msg);
    CHECKF(text && !strcmp(text, want), "rendered '%s', want '%s'", text ? text : "", want);
    free(text);
}

#define PART(s)                                                                                                      \
    { .text = s, .len = sizeof s - 1 }

/* The Qwen3.5 chat format, from the built-in template. The expected texts
 * are llama.cpp's renderings of that template (llama-server's
 * /apply-template, identical to those of Qwen3.5's own template). */
static void test_qwen35_format(const ph_model *m) {
    const chat_fmt f = format_of(m);
    CHECK(f.think && f.thinking_switch && f.reasoning_history && !strcmp(chat_format_family(&f)->name, "xml"));
    const ph_chat_part sys[] = {PART("Be brief.")}, hi[] = {PART("Hi")},
                       hello[] = {PART("<think>\nhmm\n</think>\n\nHello!")}, now[] = {PART("And now?")};
    const ph_chat_msg msgs[] = {
        {.role = PH_ROLE_SYSTEM, .parts = sys, .n_parts = 1},
        {.role = PH_ROLE_USER, .parts = hi, .n_parts = 1},
        {.role = PH_ROLE_ASSISTANT, .parts = hello, .n_parts = 1},
        {.role = PH_ROLE_USER, .parts = now, .n_parts = 1},
    };
    check_render(&f, msgs, 2, -1,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n");
    check_render(&f, msgs + 1, 3, -1,
                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAnd now?"
                 "<|im_end|>\n<|im_start|>assistant\n<think>\n");
    check_render(&f, msgs + 1, 1, 0,
                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

static void remove_pair(const char *out) {
    char path[320];
    snprintf(path, sizeof path, "%s.gguf", out);
    unlink(path);
    snprintf(path, sizeof path, "%s-mmproj.gguf", out);
    unlink(path);
}

/* DIR/NAME, and the pair's files DIR/NAME.gguf and DIR/NAME-mmproj.gguf */
typedef struct pair_paths {
    char out[256], llm[300], mmproj[300];
} pair_paths;

static pair_paths pair_in(const char *dir, const char *name) {
    pair_paths p;
    snprintf(p.out, sizeof p.out, "%s/%s", dir, name);
    snprintf(p.llm, sizeof p.llm, "%s.gguf", p.out);
    snprintf(p.mmproj, sizeof p.mmproj, "%s-mmproj.gguf", p.out);
    return p;
}

static void test_qwen35(const char *dir) {
    const pair_paths pp = pair_in(dir, "q35");
    const char *out = pp.out, *llm = pp.llm, *mmproj = pp.mmproj;
    ph_err e;
    CHECKF(synth("qwen35", out, 1, &e) == 0, "%s", e.msg);
    CHECK(same_names(llm, ORACLE35 "tiny.gguf"));
    CHECK(same_names(mmproj, ORACLE35 "tiny-mmproj.gguf"));
    ph_model *m = ph_model_load(llm, 2, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        const ph_model_info *info = ph_model_get_info(m);
        CHECKF(!strcmp(info->arch, "qwen35") && info->n_layer == 8 && info->n_deepstack == 0 &&
                   info->n_embd_inp == info->n_embd,
               "%s, %d layers, %d deepstack, rows %d wide", info->arch, info->n_layer, info->n_deepstack,
               info->n_embd_inp);
        test_qwen35_format(m);
        const size_t n = (size_t)info->n_vocab;
        float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
        if (a && b) {
            text_run(m, a);
            text_run(m, b);
            CHECK(memcmp(a, b, n * sizeof *a) == 0);
            test_picture(m, mmproj, a);
            test_picture(m, mmproj, b);
            CHECK(memcmp(a, b, n * sizeof *a) == 0);
        }
        free(a);
        free(b);
        ph_model_free(m);
    }
    remove_pair(out);

    /* refusals: a clear error, nothing written */
    synth_params p = {.arch = "llama", .shape = "tiny", .out = out, .seed = 1, .n_threads = 2};
    CHECK(synth_write(&p, &e) == -1 && strstr(e.msg, "unknown architecture 'llama' (qwen3vl, qwen35)"));
    p.arch = "qwen35";
    p.shape = "7b";
    CHECK(synth_write(&p, &e) == -1 &&
          strstr(e.msg, "unknown shape '7b' (tiny, 2b, oracle-tiny, oracle-mid, oracle-q4k)"));
    p.shape = "tiny";
    p.chat_template = PH_ORACLE_DIR "/no-such-template.jinja";
    CHECK(synth_write(&p, &e) == -1 && strstr(e.msg, "no-such-template.jinja"));
    CHECK(access(llm, F_OK) != 0 && access(mmproj, F_OK) != 0);

    /* a template from a file: Qwen3.5's own, its tool markup picks the format */
    const char *tmpl = PH_ORACLE_DIR "/../spec/templates/Qwen3.5.jinja";
    p.chat_template = tmpl;
    CHECKF(synth_write(&p, &e) == 0, "%s", e.msg);
    gguf_file *g = gguf_open(llm, &e);
    size_t want_len = 0;
    char *want = read_all(tmpl, &want_len);
    gguf_str got = {0};
    CHECK(g && want && gguf_get_str(g, "tokenizer.chat_template", &got) == 0 && got.len == want_len &&
          !memcmp(got.ptr, want, want_len));
    free(want);
    gguf_close(g);
    m = ph_model_load(llm, 2, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        const chat_fmt f = format_of(m);
        CHECK(f.think && f.family_from_template && !strcmp(chat_format_family(&f)->name, "xml"));
        ph_model_free(m);
    }
    remove_pair(out);
}

/* The test oracle's options (cmake/oracle.cmake): an MTP block, the output
 * type, the name, mksynth's weight scales; and what they refuse. */
static void test_oracle_options(const char *dir) {
    const pair_paths pp = pair_in(dir, "opt");
    const char *out = pp.out, *llm = pp.llm, *mmproj = pp.mmproj;
    ph_err e;
    synth_params p = {.arch = "qwen35",
                      .shape = "oracle-mid",
                      .type = "q8_0",
                      .mtp = true,
                      .name = "opt",
                      .out = out,
                      .seed = 5,
                      .n_threads = 2};
    CHECKF(synth_write(&p, &e) == 0, "%s", e.msg);
    gguf_file *g = gguf_open(llm, &e);
    uint32_t blocks = 0, nextn = 0;
    gguf_str name = {0};
    CHECK(g && gguf_get_u32(g, "qwen35.block_count", &blocks) == 0 && blocks == 5 &&
          gguf_get_u32(g, "qwen35.nextn_predict_layers", &nextn) == 0 && nextn == 1);
    CHECK(g && gguf_get_str(g, "general.name", &name) == 0 && gguf_str_eq(name, "opt"));
    const gguf_tensor *eh = gguf_find_tensor(g, "blk.4.nextn.eh_proj.weight"),
                      *q = gguf_find_tensor(g, "blk.4.attn_q.weight");
    CHECK(eh && eh->type == PH_TYPE_Q8_0 && eh->ne[0] == 192 && eh->ne[1] == 96 && q);
    /* the weights spread as mksynth's: a norm near 1, not 1 */
    const gguf_tensor *norm = gguf_find_tensor(g, "blk.0.attn_norm.weight");
    bool spread = norm && norm->type == PH_TYPE_F32;
    float lo = 9, hi = -9;
    for (int64_t i = 0; spread && i < norm->ne[0]; i++) {
        float v;
        memcpy(&v, (const uint8_t *)norm->data + 4 * i, 4);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CHECKF(spread && lo > 0.6f && lo < 0.95f && hi > 1.05f && hi < 1.4f, "norm in [%g, %g]", lo, hi);
    gguf_close(g);
    g = gguf_open(mmproj, &e);
    CHECK(g && gguf_get_str(g, "general.name", &name) == 0 && gguf_str_eq(name, "opt-mmproj"));
    gguf_close(g);
    ph_model *m = ph_model_load(llm, 2, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        CHECKF(ph_model_get_info(m)->n_layer == 4, "%d layers (the MTP block is not one)",
               ph_model_get_info(m)->n_layer);
        float *last = malloc((size_t)ph_model_get_info(m)->n_vocab * sizeof *last);
        if (last) test_picture(m, mmproj, last);
        free(last);
        ph_model_free(m);
    }
    remove_pair(out);

    /* Q4_K_M: a tied embedding is Q6_K unless --output-type says otherwise */
    p = (synth_params){.arch = "qwen35", .shape = "oracle-q4k", .type = "q4_k_m", .out = out, .n_threads = 2};
    for (int k = 0; k < 2; k++) {
        p.output_type = k ? "q4_k" : NULL;
        CHECKF(synth_write(&p, &e) == 0, "%s", e.msg);
        g = gguf_open(llm, &e);
        const gguf_tensor *embd = gguf_find_tensor(g, "token_embd.weight"),
                          *qkv = gguf_find_tensor(g, "blk.2.attn_qkv.weight");
        CHECK(embd && embd->type == (k ? PH_TYPE_Q4_K : PH_TYPE_Q6_K) && qkv && qkv->type == PH_TYPE_Q6_K &&
              !gguf_find_tensor(g, "output.weight"));
        gguf_close(g);
        remove_pair(out);
    }

    /* refusals */
    p = (synth_params){.shape = "oracle-tiny", .mtp = true, .out = out, .n_threads = 2};
    CHECK(synth_write(&p, &e) == -1 && strstr(e.msg, "MTP block is for qwen35"));
    p = (synth_params){.shape = "oracle-tiny", .output_type = "q4_k_m", .out = out, .n_threads = 2};
    CHECK(synth_write(&p, &e) == -1 && strstr(e.msg, "unknown output type 'q4_k_m'"));
    p = (synth_params){.shape = "oracle-tiny", .vocab_pre = "qwen35", .out = out, .n_threads = 2};
    CHECK(synth_write(&p, &e) == -1 && strstr(e.msg, "only for --vocab"));
    CHECK(access(llm, F_OK) != 0 && access(mmproj, F_OK) != 0);
}

int main(void) {
    char dir[] = "/tmp/pinhole-test-synth-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char a[256], b[256], c[256], llm[300], mmproj[300], path2[300];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    ph_err e;
    CHECKF(synth(NULL, a, 1, &e) == 0, "%s", e.msg);
    CHECKF(synth(NULL, b, 1, &e) == 0, "%s", e.msg);
    CHECKF(synth(NULL, c, 2, &e) == 0, "%s", e.msg);

    /* the same seed, the same bytes; another seed, other weights */
    static const char *const suffixes[] = {".gguf", "-mmproj.gguf"};
    for (int i = 0; i < 2; i++) {
        snprintf(llm, sizeof llm, "%s%s", a, suffixes[i]);
        snprintf(path2, sizeof path2, "%s%s", b, suffixes[i]);
        CHECKF(same_file(llm, path2), "%s and %s differ", llm, path2);
        snprintf(path2, sizeof path2, "%s%s", c, suffixes[i]);
        CHECKF(!same_file(llm, path2), "seeds 1 and 2 wrote the same %s", suffixes[i]);
    }

    snprintf(llm, sizeof llm, "%s.gguf", a);
    snprintf(mmproj, sizeof mmproj, "%s-mmproj.gguf", a);
    ph_model *m = ph_model_load(llm, 2, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        test_tokenizer(m);
        float *last = malloc((size_t)ph_model_get_info(m)->n_vocab * sizeof *last);
        if (last) test_picture(m, mmproj, last);
        free(last);
        /* no template file: the built-in tokenizer's ChatML, Qwen3-VL's tool format */
        const chat_fmt f = format_of(m);
        CHECK(!f.think && !strcmp(chat_format_family(&f)->name, "hermes"));
        ph_model_free(m);
    }
    test_qwen35(dir);
    test_oracle_options(dir);

    const char *names[] = {a, b, c};
    for (int n = 0; n < 3; n++) {
        for (int i = 0; i < 2; i++) {
            snprintf(path2, sizeof path2, "%s%s", names[n], suffixes[i]);
            unlink(path2);
        }
    }
    rmdir(dir);
    TEST_END();
}
