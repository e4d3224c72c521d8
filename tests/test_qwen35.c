/* Qwen3.5 beyond the oracle's cases (model/llm_qwen35.c), on the oracle's
 * tiny qwen35 model: which layers are recurrent when the file says so per
 * layer (bool or integer array) instead of by interval, refusals of files
 * whose metadata and tensors disagree, and the recurrent state carried
 * across prompt pieces and cleared by a reset. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf_variant.h"
#include "pinhole.h"
#include "test.h"

#define LLM     PH_ORACLE_DIR "/qwen35/models/tiny.gguf"
#define N_LAYER 8 /* the tiny model's trunk: full attention at layers 3 and 7 */

static const int32_t prompt[] = {151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198};
#define N_PROMPT (int)(sizeof prompt / sizeof prompt[0])

/* The logits after the prompt, evaluated in pieces of the given sizes
 * (summing to N_PROMPT), into out (n_vocab floats); 0, or -1. */
static int logits_of(ph_model *m, ph_session *s, const int *pieces, int n_pieces, float *out) {
    ph_err e = {0};
    ph_session_reset(s);
    int done = 0;
    for (int i = 0; i < n_pieces; i++) {
        if (ph_session_eval_tokens(s, prompt + done, (size_t)pieces[i], &e)) {
            fprintf(stderr, "eval: %s\n", e.msg);
            return -1;
        }
        done += pieces[i];
    }
    memcpy(out, ph_session_logits(s), (size_t)ph_model_get_info(m)->n_vocab * sizeof(float));
    return 0;
}

/* Loads path and returns the logits of the whole prompt at once (NULL when
 * it does not load: *msg then holds why). */
static float *logits_of_file(const char *path, char *msg, size_t n_msg) {
    ph_err e = {0};
    ph_model *m = ph_model_load(path, 2, &e);
    if (!m) {
        snprintf(msg, n_msg, "%s", e.msg);
        return NULL;
    }
    ph_session *s = ph_session_new(m, 256, &e);
    float *out = s ? malloc((size_t)ph_model_get_info(m)->n_vocab * sizeof(float)) : NULL;
    const int whole[] = {N_PROMPT};
    if (out && logits_of(m, s, whole, 1, out)) {
        free(out);
        out = NULL;
    }
    ph_session_free(s);
    ph_model_free(m);
    return out;
}

static void test_layer_kinds(const float *want, int n_vocab) {
    char dir[] = "/tmp/ph_test_qwen35_XXXXXX", path[64], msg[512] = "";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    const uint8_t as_bool[N_LAYER] = {1, 1, 1, 0, 1, 1, 1, 0};
    const int32_t as_i32[N_LAYER] = {1, 1, 1, 0, 1, 1, 1, 0};
    const uint8_t wrong[N_LAYER] = {1, 1, 1, 1, 1, 1, 1, 0}, short_[N_LAYER - 1] = {1, 1, 1, 0, 1, 1, 1};
    static const char *const interval = "qwen35.full_attention_interval", *const layers =
                                                                              "qwen35.attention.recurrent_layers";
    const struct {
        variant v;
        const char *expect; /* NULL: loads, with the original's logits */
    } cases[] = {
        {{.key = interval,
          .bool_value = -1,
          .arr_key = layers,
          .arr_type = GGUF_BOOL,
          .arr_data = as_bool,
          .arr_n = N_LAYER},
         NULL},
        {{.key = interval,
          .bool_value = -1,
          .arr_key = layers,
          .arr_type = GGUF_INT32,
          .arr_data = as_i32,
          .arr_n = N_LAYER},
         NULL},
        {{.key = interval, .bool_value = -1}, NULL}, /* the default interval, 4 */
        {{.arr_key = layers, .arr_type = GGUF_BOOL, .arr_data = wrong, .arr_n = N_LAYER, .bool_value = -1},
         "'blk.3.attn_qkv.weight' is missing"},
        {{.arr_key = layers, .arr_type = GGUF_BOOL, .arr_data = short_, .arr_n = N_LAYER - 1, .bool_value = -1},
         "does not hold a value per layer"},
        {{.drop_tensor = "blk.5.ssm_a", .bool_value = -1}, "'blk.5.ssm_a' is missing"},
        {{.reshape_tensor = "blk.0.ssm_conv1d.weight", .bool_value = -1}, "'blk.0.ssm_conv1d.weight' has shape"},
        {{.key = "qwen35.ssm.group_count", .bool_value = -1}, "'qwen35.ssm.group_count' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECKF(write_variant(LLM, path, &cases[i].v) == 0, "cannot write variant %zu", i);
        float *got = logits_of_file(path, msg, sizeof msg);
        if (cases[i].expect) {
            CHECKF(!got && strstr(msg, cases[i].expect), "variant %zu: expected \"%s\", got \"%s\"", i,
                   cases[i].expect, got ? "(loaded)" : msg);
        } else {
            CHECKF(got && memcmp(got, want, (size_t)n_vocab * sizeof(float)) == 0, "variant %zu: %s", i,
                   got ? "other logits than the original's" : msg);
        }
        free(got);
    }
    unlink(path);
    rmdir(dir);
}

int main(void) {
    ph_err e = {0};
    ph_model *m = ph_model_load(LLM, 2, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (!m) TEST_END();
    const int n_vocab = ph_model_get_info(m)->n_vocab;
    CHECK(ph_model_get_info(m)->n_layer == N_LAYER);
    ph_session *s = ph_session_new(m, 256, &e);
    float *whole = malloc((size_t)n_vocab * sizeof(float)), *pieces = malloc((size_t)n_vocab * sizeof(float));
    /* the recurrent state goes on from piece to piece, and a reset clears it */
    const int one[] = {N_PROMPT}, three[] = {5, 2, N_PROMPT - 7}; /* pieces of a prompt: 2 rows or more */
    CHECK(logits_of(m, s, one, 1, whole) == 0);
    CHECK(logits_of(m, s, three, 3, pieces) == 0);
    CHECKF(memcmp(whole, pieces, (size_t)n_vocab * sizeof(float)) == 0, "the prompt in pieces gives other logits");
    CHECK(logits_of(m, s, one, 1, pieces) == 0);
    CHECKF(memcmp(whole, pieces, (size_t)n_vocab * sizeof(float)) == 0,
           "the prompt after a reset gives other logits");
    ph_session_free(s);
    ph_model_free(m);
    test_layer_kinds(whole, n_vocab);
    free(whole);
    free(pieces);
    TEST_END();
}
