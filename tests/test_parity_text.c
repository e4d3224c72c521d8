/* Parity with llama.cpp on every text case of ../shared/oracle, for all
 * three models: the prompt's tokens exactly, then 24 teacher-forced steps
 * whose logits must match within the README's tolerances. */
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "pinhole.h"
#include "test.h"

static const char *models[] = {"tiny-f16", "mid-q8", "small-q4k"};
static const char *cases[] = {"text_hello", "text_system", "text_long"};

static void run_case(ph_model *m, ph_session *s, const char *model, const char *id) {
    json_t *ref = oracle_ref(model, id);
    CHECKF(ref != NULL, "no reference for %s/%s", model, id);
    if (!ref) return;
    const char *prompt = json_string_value(json_object_get(ref, "prompt"));
    json_t *chunk = json_array_get(json_object_get(ref, "chunks"), 0);
    size_t n_ref;
    int *ref_tokens = oracle_ids(json_object_get(chunk, "tokens"), &n_ref);

    ph_err err;
    ph_tokens toks = {0};
    CHECK(ph_tokenize(m, prompt, strlen(prompt), true, &toks, &err) == 0);
    int same = toks.n == n_ref;
    for (size_t i = 0; same && i < n_ref; i++) same = toks.ids[i] == ref_tokens[i];
    CHECKF(same, "%s/%s: prompt tokens differ (%zu vs %zu reference)", model, id, toks.n, n_ref);

    ph_session_reset(s);
    CHECK(ph_session_eval_tokens(s, toks.ids, toks.n, &err) == 0);
    CHECKF(ph_session_next_pos(s) == json_integer_value(json_object_get(ref, "n_past_after_prompt")),
           "%s/%s: n_past %d", model, id, ph_session_next_pos(s));

    const int32_t n_vocab = ph_model_get_info(m)->n_vocab;
    json_t *steps = json_object_get(ref, "steps");
    size_t n_gen;
    int *gen = oracle_ids(json_object_get(ref, "generated"), &n_gen);
    double worst = 0.0;
    int bad_steps = 0;
    for (size_t st = 0; st < json_array_size(steps); st++) {
        const float *logits = ph_session_logits(s);
        int32_t top_ids[16];
        float top_vals[16];
        ph_logits_top(logits, n_vocab, 16, top_ids, top_vals);
        int ids[16];
        double vals[16];
        for (int k = 0; k < 16; k++) {
            ids[k] = top_ids[k];
            vals[k] = top_vals[k];
        }
        oracle_mine mine = {ph_logits_lse(logits, n_vocab), logits, ids, vals, 16};
        char why[256] = "";
        if (oracle_compare_step(json_array_get(steps, st), &mine, 1.0, &worst, why, sizeof why)) {
            bad_steps++;
            fprintf(stderr, "%s/%s step %zu: %s\n", model, id, st, why);
        }
        if (st + 1 < n_gen) {
            int32_t t = gen[st];
            if (ph_session_eval_tokens(s, &t, 1, &err)) {
                CHECKF(0, "%s", err.msg);
                break;
            }
        }
    }
    CHECKF(bad_steps == 0, "%s/%s: %d steps out of tolerance", model, id, bad_steps);
    printf("%-10s %-12s worst logit difference %.4f\n", model, id, worst);
    free(gen);
    free(ref_tokens);
    ph_tokens_free(&toks);
    json_decref(ref);
}

int main(void) {
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s.gguf", PH_ORACLE_DIR, models[mi]);
        ph_err err;
        ph_model *m = ph_model_load(path, 2, &err);
        CHECKF(m != NULL, "%s", err.msg);
        if (!m) continue;
        ph_session *s = ph_session_new(m, 1024, &err);
        CHECKF(s != NULL, "%s", err.msg);
        for (size_t ci = 0; s && ci < sizeof cases / sizeof *cases; ci++) run_case(m, s, models[mi], cases[ci]);
        ph_session_free(s);
        ph_model_free(m);
    }
    TEST_END();
}
