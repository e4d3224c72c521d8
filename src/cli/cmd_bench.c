/* pinhole bench: prefill and decode speed on a model, measured the way
 * llama.cpp's bench does (prefill of P tokens into a context holding D
 * tokens; decode of N tokens one at a time after D tokens; D = 0: an empty
 * context, as llama-bench -d), median of R runs; with --mmproj and --image,
 * also a cold picture turn: the picture's encode and the time to the first
 * token of a chat prompt holding it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "cli/args.h"
#include "cli/model_find.h"
#include "pinhole.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct picture_turn {
    int w, h;
    int32_t rows, prompt_rows; /* the picture's rows; the whole prompt's */
    double encode_s, ttft_s;   /* medians */
} picture_turn;

/* A cold picture turn, as a chat client's first request: the prompt
 * (ChatML with the picture in the user turn) evaluated from an empty
 * context, the picture encoded on the way, until the first token is
 * chosen; median of reps runs. */
static int picture_bench(ph_model *m, ph_session *s, const char *mmproj, const char *image, long reps,
                         picture_turn *out, ph_err *err) {
    static const char prompt[] = "<|im_start|>user\n<__image__>What is in this picture?<|im_end|>\n"
                                 "<|im_start|>assistant\n";
    int rc = -1;
    ph_mmproj *v = ph_mmproj_open(m, mmproj, err);
    ph_picture *pic = v ? ph_picture_load(image, err) : NULL;
    ph_prompt p = {0};
    double *enc = calloc((size_t)reps, sizeof(double)), *ttft = calloc((size_t)reps, sizeof(double));
    if (!pic || !enc || !ttft) {
        if (pic) snprintf(err->msg, sizeof err->msg, "out of memory");
        goto out;
    }
    if (ph_prompt_from_raw(m, prompt, "<__image__>", &p, err)) goto out;
    ph_picture_size(pic, &out->w, &out->h);
    for (long r = 0; r < reps; r++) {
        ph_session_reset(s);
        const double t0 = time_now_s();
        for (size_t i = 0; i < p.n; i++) {
            const ph_prompt_item *it = &p.items[i];
            if (!it->is_picture) {
                if (ph_session_eval_tokens(s, it->tokens.ids, it->tokens.n, err)) goto out;
                continue;
            }
            ph_picture_chunk ch;
            if (ph_session_eval_picture(s, v, pic, &ch, NULL, err)) goto out;
            enc[r] = ch.encode_s;
            out->rows = ch.n_tokens;
        }
        const ph_model_info *info = ph_model_get_info(m);
        int32_t top;
        float val;
        ph_logits_top(ph_session_logits(s), info->n_vocab, 1, &top, &val); /* the first token, greedy */
        ttft[r] = time_now_s() - t0;
        out->prompt_rows = ph_session_n_rows(s);
        fprintf(stderr, "pinhole bench: picture run %ld: encode %.3f s, time to first token %.3f s\n", r + 1, enc[r],
                ttft[r]);
    }
    out->encode_s = median(enc, (int)reps);
    out->ttft_s = median(ttft, (int)reps);
    rc = 0;
out:
    free(enc);
    free(ttft);
    ph_prompt_free(&p);
    ph_picture_free(pic);
    ph_mmproj_close(v);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *image = NULL;
    model_args ma = {0};
    long pp = 512, tg = 128, reps = 3, threads = 0, depth = 0;
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"no-mmproj", no_argument, NULL, 'N'},
                                         {"model", required_argument, NULL, 'm'},
                                         {"mmproj", required_argument, NULL, 'M'},
                                         {"image", required_argument, NULL, 'i'},
                                         {"threads", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    arg_state st = {0};
    const char *a, *v;
    for (int o; (o = arg_next("bench", argc, argv, "hm:p:n:d:r:t:", opts, &st, &a, &v)) != -1;) {
        switch (o) {
        case -2: return 2;
        case 'h':
            printf("usage: pinhole bench -m LLM.gguf|DIR [-p 512] [-n 128] [-d 0] [-r 3] [-t THREADS]\n");
            model_help(stdout, 24, HELP_ON_IMAGE);
            printf("  -p N                  prompt tokens to prefill (default 512; 0: skip)\n"
                   "  -n N                  tokens to decode one at a time (default 128; 0: skip)\n"
                   "  -d N                  the context already holds N tokens when prefill and decode start\n"
                   "                        (untimed; default 0)\n"
                   "  --image FILE          also a cold picture turn: encode, and time to first token\n"
                   "  -r N                  repetitions; the median is reported (default 3)\n"
                   "prints one JSON object with tokens per second\n");
            return 0;
        case 'N': ma.no_mmproj = true; break;
        case 'm': ma.model = v; break;
        case 'M': ma.mmproj = v; break;
        case 'i': image = v; break;
        case 'p':
            if (arg_int(a, v, 0, 1 << 20, &pp)) return 2;
            break;
        case 'n':
            if (arg_int(a, v, 0, 1 << 20, &tg)) return 2;
            break;
        case 'd':
            if (arg_int(a, v, 0, 1 << 20, &depth)) return 2;
            break;
        case 'r':
            if (arg_int(a, v, 1, 1000, &reps)) return 2;
            break;
        case 't':
            if (arg_int(a, v, 1, 1024, &threads)) return 2;
            break;
        }
    }
    if (arg_rest() < argc) {
        fprintf(stderr, "pinhole bench: unexpected argument '%s' (see pinhole bench --help)\n", argv[arg_rest()]);
        return 2;
    }
    if (!ma.model) {
        fprintf(stderr, "pinhole bench: -m MODEL is required\n");
        return 2;
    }
    model_files files;
    if (model_find(&ma, image != NULL, "pinhole bench", &files)) return 2;
    if (image && !files.mmproj[0]) {
        fprintf(stderr, "pinhole bench: --image needs a vision file (%s): --mmproj MMPROJ.gguf\n", files.text_only);
        return 2;
    }
    if (!image && files.mmproj[0]) {
        fprintf(stderr, "pinhole bench: --mmproj goes with --image\n");
        return 2;
    }
    if (image) model_files_say(&files, true, NULL);
    const char *mmproj = files.mmproj;
    ph_err err;
    ph_model *m = ph_model_load(files.model, (int)threads, &err);
    if (!m) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    const ph_model_info *info = ph_model_get_info(m);
    long n_ctx = depth + (pp > tg ? pp : tg) + 1;
    if (image && n_ctx < 8192) n_ctx = 8192; /* a picture's rows (at most 4096 by default) and its prompt */
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
            double t0 = time_now_s();
            if (ph_session_eval_tokens(s, ids, (size_t)pp, &err)) goto fail;
            pp_tps[r] = (double)pp / (time_now_s() - t0);
        }
        if (tg > 0) {
            ph_session_reset(s);
            if (depth && ph_session_eval_tokens(s, ids, (size_t)depth, &err)) goto fail;
            int32_t tok = 1000;
            double t0 = time_now_s();
            for (long i = 0; i < tg; i++) {
                if (ph_session_eval_tokens(s, &tok, 1, &err)) goto fail;
                tok = (int32_t)((i * 104729) % info->n_vocab);
            }
            tg_tps[r] = (double)tg / (time_now_s() - t0);
        }
        fprintf(stderr, "pinhole bench: run %ld: prefill %.2f tok/s, decode %.2f tok/s\n", r + 1, pp_tps[r],
                tg_tps[r]);
    }
    picture_turn pt = {0};
    if (image && picture_bench(m, s, mmproj, image, reps, &pt, &err)) goto fail;
    const double dtps = median(tg_tps, (int)reps);
    printf("{\"model\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"pp\":%ld,\"tg\":%ld,\"depth\":%ld,\"reps\":%ld,"
           "\"prefill_tps\":%.3f,\"decode_tps\":%.3f,\"decode_bytes_per_token\":%llu,\"decode_gbs\":%.2f",
           info->name, threads > 0 ? (int)threads : ph_cpu_threads(), ph_cpu_isa(), pp, tg, depth, reps,
           median(pp_tps, (int)reps), dtps, (unsigned long long)info->decode_bytes,
           dtps * (double)info->decode_bytes / 1e9);
    if (image)
        printf(",\"picture\":{\"width\":%d,\"height\":%d,\"rows\":%d,\"prompt_rows\":%d,\"encode_s\":%.4f,"
               "\"ttft_s\":%.4f}",
               pt.w, pt.h, pt.rows, pt.prompt_rows, pt.encode_s, pt.ttft_s);
    printf("}\n");
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
