/* pinhole bench: prefill and decode speed on a model, measured the way
 * llama.cpp's bench does (prefill of P tokens into a context holding D
 * tokens; decode of N tokens one at a time after D tokens; D = 0: an empty
 * context, as llama-bench -d), median of R runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "cli/args.h"
#include "pinhole.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL;
    long pp = 512, tg = 128, reps = 3, threads = 0, depth = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: pinhole bench -m LLM.gguf [-p 512] [-n 128] [-d 0] [-r 3] [-t THREADS]\n"
                   "  -p N   prompt tokens to prefill (0: skip)\n"
                   "  -n N   tokens to decode one at a time (0: skip)\n"
                   "  -d N   the context already holds N tokens when prefill and decode start (untimed)\n"
                   "  -r N   repetitions; the median is reported\n"
                   "  prints one JSON object with tokens per second\n");
            return 0;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p")) { if (arg_int(a, v, 0, 1 << 20, &pp)) return 2; }
        else if (!strcmp(a, "-n")) { if (arg_int(a, v, 0, 1 << 20, &tg)) return 2; }
        else if (!strcmp(a, "-d")) { if (arg_int(a, v, 0, 1 << 20, &depth)) return 2; }
        else if (!strcmp(a, "-r")) { if (arg_int(a, v, 1, 1000, &reps)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (arg_int(a, v, 1, 1024, &threads)) return 2; }
        else {
            fprintf(stderr, "pinhole bench: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "pinhole bench: -m MODEL is required\n");
        return 2;
    }
    ph_err err;
    ph_model *m = ph_model_load(model, (int)threads, &err);
    if (!m) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    const ph_model_info *info = ph_model_get_info(m);
    long n_ctx = depth + (pp > tg ? pp : tg) + 1;
    ph_session *s = ph_session_new(m, (int32_t)n_ctx, &err);
    const long n_ids = (pp > depth ? pp : depth) > 0 ? (pp > depth ? pp : depth) : 1;
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    double *pp_tps = calloc((size_t)reps, sizeof(double)), *tg_tps = calloc((size_t)reps, sizeof(double));
    int rc = 1;
    if (!s || !ids || !pp_tps || !tg_tps) {
        fprintf(stderr, "pinhole: %s\n", s ? "out of memory" : err.msg);
        goto done;
    }
    /* ordinary token ids (past the byte tokens), fixed so runs compare */
    ids[0] = 1000;
    for (long i = 0; i < n_ids; i++) ids[i] = (int32_t)((i * 7919) % info->n_vocab);
    /* one untimed warm-up pass brings the weights into memory */
    ph_session_reset(s);
    if (ph_session_eval_tokens(s, ids, pp > 16 ? 16 : (size_t)(pp > 0 ? pp : 1), &err)) goto fail;
    for (long r = 0; r < reps; r++) {
        if (pp > 0) {
            ph_session_reset(s);
            if (depth && ph_session_eval_tokens(s, ids, (size_t)depth, &err)) goto fail;
            double t0 = ph_now_s();
            if (ph_session_eval_tokens(s, ids, (size_t)pp, &err)) goto fail;
            pp_tps[r] = (double)pp / (ph_now_s() - t0);
        }
        if (tg > 0) {
            ph_session_reset(s);
            if (depth && ph_session_eval_tokens(s, ids, (size_t)depth, &err)) goto fail;
            int32_t tok = 1000;
            double t0 = ph_now_s();
            for (long i = 0; i < tg; i++) {
                if (ph_session_eval_tokens(s, &tok, 1, &err)) goto fail;
                tok = (int32_t)((i * 104729) % info->n_vocab);
            }
            tg_tps[r] = (double)tg / (ph_now_s() - t0);
        }
        fprintf(stderr, "pinhole bench: run %ld: prefill %.2f tok/s, decode %.2f tok/s\n", r + 1, pp_tps[r],
                tg_tps[r]);
    }
    printf("{\"model\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"pp\":%ld,\"tg\":%ld,\"depth\":%ld,\"reps\":%ld,"
           "\"prefill_tps\":%.3f,\"decode_tps\":%.3f}\n",
           info->name, threads > 0 ? (int)threads : 0, ph_cpu_isa(), pp, tg, depth, reps, median(pp_tps, (int)reps),
           median(tg_tps, (int)reps));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pinhole: %s\n", err.msg);
done:
    free(ids);
    free(pp_tps);
    free(tg_tps);
    ph_session_free(s);
    ph_model_free(m);
    return rc;
}
