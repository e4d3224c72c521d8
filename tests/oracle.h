/* Reading the oracle (tests/oracle/README.md: llama.cpp's references for
 * the models the build makes, in PH_ORACLE_DIR) and comparing results with
 * it, as its README says (tolerances, teacher forcing). Header-only: each
 * parity test includes it. */
#ifndef PH_TESTS_ORACLE_H
#define PH_TESTS_ORACLE_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The oracle folder: PH_ORACLE_DIR, or another one of the same layout
 * (the shared oracle's extra cases) after oracle_use(argc, argv) took it
 * from the command line. */
static inline const char **oracle_dir_slot(void) {
    static const char *dir = PH_ORACLE_DIR;
    return &dir;
}
static inline const char *oracle_dir(void) { return *oracle_dir_slot(); }
/* `test [ORACLE_DIR]`: the folder given, else PH_ORACLE_DIR */
static inline void oracle_use(int argc, char **argv) {
    if (argc > 1) *oracle_dir_slot() = argv[1];
    printf("oracle: %s\n", oracle_dir());
}

/* The path of one of model `model`'s files in the oracle folder:
 * <prefix><model><suffix>, for a model of a subfolder ("qwen35/tiny") in
 * that subfolder: oracle_path(p, n, "qwen35/tiny", "models/", ".gguf") is
 * <oracle>/qwen35/models/tiny.gguf. */
static inline void oracle_path(char *path, size_t n, const char *model, const char *prefix, const char *suffix) {
    const char *slash = strrchr(model, '/');
    if (slash)
        snprintf(path, n, "%s/%.*s/%s%s%s", oracle_dir(), (int)(slash - model), model, prefix, slash + 1, suffix);
    else snprintf(path, n, "%s/%s%s%s", oracle_dir(), prefix, model, suffix);
}

/* The reference line for case `id` of model `model` ("tiny-f16", ...,
 * "qwen35/tiny"), or NULL. The caller json_decref()s it. */
static inline json_t *oracle_ref(const char *model, const char *id) {
    char path[1024];
    oracle_path(path, sizeof path, model, "ref-", ".jsonl");
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *line = NULL;
    size_t cap = 0;
    json_t *found = NULL;
    while (!found && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && !strcmp(json_string_value(json_object_get(j, "id")), id)) found = j;
        else json_decref(j);
    }
    free(line);
    fclose(f);
    return found;
}

/* Tolerance of a step: the larger of `floor` (0.5; 1.0 for qwen35's q4k
 * picture cases) and 2% of its top logit, times `mult` (2 for the JPEG
 * case). */
static inline double oracle_tol(json_t *ref_step, double mult, double floor) {
    json_t *top = json_object_get(ref_step, "top");
    double top0 = json_real_value(json_array_get(json_array_get(top, 0), 1));
    double t = fabs(top0) * 0.02;
    return (t > floor ? t : floor) * mult;
}

/* Compares one step. logit_of(id) gives our logit for any id (NULL when we
 * only have a top list: then ids absent from it count as below our last
 * entry). Returns the number of violations; *worst tracks the largest
 * difference seen. */
typedef struct {
    double lse;
    const float *logits; /* full logits, or NULL */
    const int *top_ids;  /* our top list, descending */
    const double *top_vals;
    int n_top;
} oracle_mine;

static inline int oracle_have(const oracle_mine *m, int id, double *val) {
    if (m->logits) {
        *val = m->logits[id];
        return 1;
    }
    for (int i = 0; i < m->n_top; i++)
        if (m->top_ids[i] == id) {
            *val = m->top_vals[i];
            return 1;
        }
    return 0;
}

/* oracle_compare_step with a tolerance floor other than 0.5 */
static inline int oracle_compare_step_floor(json_t *ref_step, const oracle_mine *m, double mult, double floor,
                                            double *worst, char *why, size_t whylen) {
    const double t = oracle_tol(ref_step, mult, floor);
    json_t *top = json_object_get(ref_step, "top");
    int bad = 0;
    double d = fabs(json_real_value(json_object_get(ref_step, "lse")) - m->lse);
    if (d > *worst) *worst = d;
    if (d > t) {
        bad++;
        snprintf(why, whylen, "lse differs by %.3f (tolerance %.3f)", d, t);
    }
    const double ref_top = json_real_value(json_array_get(json_array_get(top, 0), 1));
    for (size_t k = 0; k < json_array_size(top); k++) {
        int id = (int)json_integer_value(json_array_get(json_array_get(top, k), 0));
        double rv = json_real_value(json_array_get(json_array_get(top, k), 1));
        double mv;
        if (!oracle_have(m, id, &mv)) {
            if (ref_top - rv <= t) {
                bad++;
                snprintf(why, whylen, "token %d (reference logit %.3f, near the top) is missing from our list", id,
                         rv);
            }
            continue;
        }
        if (k >= 8) continue;
        d = fabs(mv - rv);
        if (d > *worst) *worst = d;
        if (d > t) {
            bad++;
            snprintf(why, whylen, "token %d: logit %.3f vs reference %.3f (tolerance %.3f)", id, mv, rv, t);
        }
    }
    /* argmax must agree unless the reference's first two are within t */
    double ref_second = json_real_value(json_array_get(json_array_get(top, 1), 1));
    int ref_arg = (int)json_integer_value(json_array_get(json_array_get(top, 0), 0));
    if (ref_top - ref_second > t && m->top_ids[0] != ref_arg) {
        bad++;
        snprintf(why, whylen, "argmax %d, reference %d", m->top_ids[0], ref_arg);
    }
    return bad;
}

static inline int oracle_compare_step(json_t *ref_step, const oracle_mine *m, double mult, double *worst, char *why,
                                      size_t whylen) {
    return oracle_compare_step_floor(ref_step, m, mult, 0.5, worst, why, whylen);
}

/* The ids of a JSON array of integers into a malloc'd array. */
static inline int *oracle_ids(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int *ids = malloc((*n ? *n : 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int)json_integer_value(json_array_get(arr, i));
    return ids;
}

#endif
