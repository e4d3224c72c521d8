/* Parity with llama.cpp on every case of the oracle (tests/oracle: text and
 * pictures), for all three Qwen3-VL models and the three Qwen3.5 ones of
 * oracle/qwen35 (with that folder's extra cases): the prompt split exactly
 * (text chunks' ids, each picture's grid and positions), then 24
 * teacher-forced steps whose logits must match within the READMEs'
 * tolerances. `test_parity DIR` runs another oracle folder of the same
 * layout (the shared one's extra cases). */
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "pinhole.h"
#include "test.h"

static const struct {
    const char *name;        /* as oracle_ref takes it; the files are models/<name>.gguf and -mmproj.gguf */
    const char *extra_cases; /* cases past cases.json, or NULL */
    double picture_floor;    /* tolerance floor of the picture cases */
} models[] = {
    {"tiny-f16", NULL, 0.5},
    {"mid-q8", NULL, 0.5},
    {"small-q4k", NULL, 0.5},
    {"qwen35/tiny", "qwen35/cases-extra.json", 0.5},
    {"qwen35/q8", "qwen35/cases-extra.json", 0.5},
    /* the 4-bit model turns llama.cpp's own vision tower variations into a
     * logit (oracle/qwen35/README.md) */
    {"qwen35/q4k", "qwen35/cases-extra.json", 1.0},
};

/* Compares our prompt stream with the reference chunks. */
static int same_split(const ph_prompt *p, const ph_picture_chunk *pcs, json_t *chunks) {
    if (json_array_size(chunks) != p->n) return 0;
    for (size_t i = 0; i < p->n; i++) {
        json_t *c = json_array_get(chunks, i);
        const char *type = json_string_value(json_object_get(c, "type"));
        const ph_prompt_item *it = &p->items[i];
        if (!it->is_picture) {
            json_t *toks = json_object_get(c, "tokens");
            if (strcmp(type, "text") || json_array_size(toks) != it->tokens.n) return 0;
            for (size_t k = 0; k < it->tokens.n; k++)
                if (json_integer_value(json_array_get(toks, k)) != it->tokens.ids[k]) return 0;
        } else {
            const ph_picture_chunk *pc = &pcs[it->picture];
            if (strcmp(type, "image") || json_integer_value(json_object_get(c, "n_tokens")) != pc->n_tokens ||
                json_integer_value(json_object_get(c, "grid_x")) != pc->grid_x ||
                json_integer_value(json_object_get(c, "grid_y")) != pc->grid_y ||
                json_integer_value(json_object_get(c, "n_pos")) != pc->n_pos)
                return 0;
        }
    }
    return 1;
}

static void run_case(ph_model *m, ph_mmproj *mm, ph_session *s, const char *model, double picture_floor, json_t *ref,
                     json_t *cas) {
    const char *id = json_string_value(json_object_get(ref, "id"));
    const char *prompt = json_string_value(json_object_get(ref, "prompt"));
    json_t *images = json_object_get(cas, "images");
    const double mult = !strcmp(id, "img_jpeg") ? 2.0 : 1.0; /* decoder-dependent pixels */
    const double floor = json_array_size(images) ? picture_floor : 0.5;
    ph_err err;
    ph_prompt p;
    if (ph_prompt_from_raw(m, prompt, "<__image__>", &p, &err)) {
        CHECKF(0, "%s/%s: %s", model, id, err.msg);
        return;
    }
    CHECKF((size_t)p.n_pictures == json_array_size(images), "%s/%s: %d pictures", model, id, p.n_pictures);
    ph_picture_chunk pcs[8] = {0};
    ph_session_reset(s);
    int ok = 1;
    for (size_t i = 0; ok && i < p.n; i++) {
        const ph_prompt_item *it = &p.items[i];
        if (!it->is_picture) {
            ok = ph_session_eval_tokens(s, it->tokens.ids, it->tokens.n, &err) == 0;
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", oracle_dir(),
                 json_string_value(json_array_get(images, (size_t)it->picture)));
        ph_picture *pic = ph_picture_load(path, &err);
        ok = pic && it->picture < 8 && ph_session_eval_picture(s, mm, pic, &pcs[it->picture], NULL, &err) == 0;
        ph_picture_free(pic);
    }
    CHECKF(ok, "%s/%s: %s", model, id, err.msg);
    if (!ok) {
        ph_prompt_free(&p);
        return;
    }
    CHECKF(same_split(&p, pcs, json_object_get(ref, "chunks")), "%s/%s: the prompt split differs", model, id);
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
        if (oracle_compare_step_floor(json_array_get(steps, st), &mine, mult, floor, &worst, why, sizeof why)) {
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
    printf("%-10s %-18s worst logit difference %.4f\n", model, id, worst);
    free(gen);
    ph_prompt_free(&p);
}

/* The cases of cases.json, then those of `extra` (a file of the oracle folder) when given. */
static json_t *load_cases(const char *extra) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.json", oracle_dir());
    json_t *cases = json_load_file(path, 0, NULL);
    CHECKF(cases != NULL, "cannot read %s", path);
    if (!cases || !extra) return cases;
    snprintf(path, sizeof path, "%s/%s", oracle_dir(), extra);
    json_t *more = json_load_file(path, 0, NULL);
    CHECKF(more != NULL, "cannot read %s", path);
    if (more) json_array_extend(cases, more);
    json_decref(more);
    return cases;
}

int main(int argc, char **argv) {
    oracle_use(argc, argv);
    char path[1024];
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        const char *name = models[mi].name;
        json_t *cases = load_cases(models[mi].extra_cases);
        if (!cases) continue;
        ph_err err;
        oracle_path(path, sizeof path, name, "models/", ".gguf");
        ph_model *m = ph_model_load(path, 2, &err);
        CHECKF(m != NULL, "%s", err.msg);
        if (!m) {
            json_decref(cases);
            continue;
        }
        oracle_path(path, sizeof path, name, "models/", "-mmproj.gguf");
        ph_mmproj *mm = ph_mmproj_open(m, path, &err);
        CHECKF(mm != NULL, "%s", err.msg);
        ph_session *s = ph_session_new(m, 2048, &err);
        CHECKF(s != NULL, "%s", err.msg);
        size_t n_cases = 0;
        for (size_t ci = 0; mm && s && ci < json_array_size(cases); ci++) {
            json_t *cas = json_array_get(cases, ci);
            json_t *ref = oracle_ref(name, json_string_value(json_object_get(cas, "id")));
            CHECKF(ref != NULL, "%s: no reference for %s", name, json_string_value(json_object_get(cas, "id")));
            if (!ref) continue;
            run_case(m, mm, s, name, models[mi].picture_floor, ref, cas);
            json_decref(ref);
            n_cases++;
        }
        CHECKF(n_cases == json_array_size(cases), "%s: ran %zu cases", name, n_cases);
        ph_session_free(s);
        ph_mmproj_close(mm);
        ph_model_free(m);
        json_decref(cases);
    }
    TEST_END();
}
