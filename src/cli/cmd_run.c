/* pinhole run: answer one question in the model's chat format (-p, through
 * the engine, as the server would), or generate from a raw prompt (--raw)
 * as text or as a JSON record of every step (the contract the parity tests
 * and outside tooling use). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "cli/answer.h"
#include "cli/args.h"
#include "cli/model_find.h"
#include "cli/progress.h"
#include "pinhole.h"

#define MAX_IMAGES 64

typedef struct run_opts {
    model_args files; /* -m, --mmproj, --no-mmproj */
    const char *raw;
    const char *prompt, *system; /* -p, --system */
    const char *images[MAX_IMAGES];
    int n_images;
    long img_min_tokens, img_max_tokens;
    long n_predict, threads, ctx, top_logits;
    ph_sampler_params sp;
    bool json, print_prompt, top_logits_set;
    reasoning_mode reasoning;
    int thinking;                  /* -1: the template's default */
    const char *p_only, *raw_only; /* the last flag seen that goes only with -p, only with --raw */
    ph_tokens forced;
} run_opts;

static void run_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole run -m LLM.gguf|DIR [--mmproj MMPROJ.gguf] -p TEXT [--image FILE ...] [options]\n"
            "       pinhole run -m LLM.gguf|DIR [--mmproj MMPROJ.gguf] --raw PROMPT [--image FILE ...] [options]\n");
    model_help(out, 24, HELP_CTX | HELP_BUDGET | HELP_ON_IMAGE);
    fprintf(out, "  -p, --prompt TEXT     a question: one user message in the model's chat format\n"
                 "                        (as the server renders it), the pictures before the text;\n"
                 "                        the answer is printed, then a summary line on stderr\n"
                 "  --system TEXT         with -p: a system message before it\n"
                 "  --reasoning MODE      with -p: a thinking model's reasoning: auto (shown dimmed\n"
                 "                        when stdout is a terminal, else hidden), show (dimmed on a\n"
                 "                        terminal, else between <think> and </think> lines), hide\n"
                 "                        (default auto)\n"
                 "  --thinking MODE       with -p: auto (the template's default), on or off, where\n"
                 "                        the template can switch thinking (default auto)\n"
                 "  --print-prompt        with -p: print the prompt it makes as a --raw prompt\n"
                 "                        (pictures as <__image__>) and exit\n"
                 "  --raw PROMPT          the prompt, used as given: special tokens such as\n"
                 "                        <|im_start|> are parsed, no BOS unless the model asks\n"
                 "  --image FILE          a picture (repeat for more); with --raw each <__image__>\n"
                 "                        in the prompt takes the next\n"
                 "  -n, --n-predict N     most tokens to generate (default 128 with --raw; with -p\n"
                 "                        until the answer ends or the context is full, as with 0)\n"
                 "  --temp T              temperature; 0 = greedy (default 0)\n"
                 "  --top-k K             keep the K most likely tokens (default off)\n"
                 "  --top-p P             nucleus sampling (default 1 = off)\n"
                 "  --min-p M             drop tokens below M x the top probability (default off)\n"
                 "  --seed S              sampling seed (default 0)\n"
                 "  --json                with --raw: print one JSON object: chunks,\n"
                 "                        n_past_after_prompt, generated, steps ({lse, top})\n"
                 "  --top-logits K        with --json: entries in each step's top list (default 16)\n"
                 "  --force-tokens IDS    with --raw: feed these comma-separated ids instead of\n"
                 "                        sampling\n");
}

static int parse_forced(const char *s, ph_tokens *out) {
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "pinhole: --force-tokens: '%s' is not a list of token ids\n", s);
            return -1;
        }
        if (ph_tokens_push(out, (int32_t)v)) return -1;
        p = *end ? end + 1 : end;
    }
    if (out->n == 0) {
        fprintf(stderr, "pinhole: --force-tokens: no ids given\n");
        return -1;
    }
    return 0;
}

static int parse_run_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->thinking = -1;
    o->img_min_tokens = 8;
    o->img_max_tokens = 4096;
    o->top_logits = 16;
    o->sp = ph_sampler_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL()                                                                                                        \
    if (!(v = arg_value(argc, argv, &i))) return -1
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            o->files.model = v;
        } else if (!strcmp(a, "--mmproj")) {
            VAL();
            o->files.mmproj = v;
        } else if (!strcmp(a, "--no-mmproj")) {
            o->files.no_mmproj = true;
        } else if (!strcmp(a, "--image")) {
            VAL();
            if (o->n_images == MAX_IMAGES) {
                fprintf(stderr, "pinhole run: at most %d pictures\n", MAX_IMAGES);
                return -1;
            }
            o->images[o->n_images++] = v;
        } else if (!strcmp(a, "--image-min-tokens")) {
            VAL();
            if (arg_int(a, v, 1, 65536, &o->img_min_tokens)) return -1;
        } else if (!strcmp(a, "--image-max-tokens")) {
            VAL();
            if (arg_int(a, v, 1, 65536, &o->img_max_tokens)) return -1;
        } else if (!strcmp(a, "--raw")) {
            VAL();
            o->raw = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VAL();
            o->prompt = v;
        } else if (!strcmp(a, "--system")) {
            VAL();
            o->system = v;
            o->p_only = a;
        } else if (!strcmp(a, "--reasoning")) {
            VAL();
            if (arg_reasoning(a, v, &o->reasoning)) return -1;
            o->p_only = a;
        } else if (!strcmp(a, "--thinking")) {
            VAL();
            if (arg_thinking(a, v, &o->thinking)) return -1;
            o->p_only = a;
        } else if (!strcmp(a, "--print-prompt")) {
            o->print_prompt = true;
            o->p_only = a;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL();
            if (arg_int(a, v, 0, 1 << 24, &o->n_predict)) return -1;
        } else if (arg_sampler_flag(a)) {
            VAL();
            if (arg_sampler(a, v, &o->sp)) return -1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (arg_int(a, v, 1, 1024, &o->threads)) return -1;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VAL();
            if (arg_int(a, v, 1, 1 << 22, &o->ctx)) return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            o->raw_only = a;
        } else if (!strcmp(a, "--top-logits")) {
            VAL();
            if (arg_int(a, v, 1, 1 << 20, &o->top_logits)) return -1;
            o->top_logits_set = true;
        } else if (!strcmp(a, "--force-tokens")) {
            VAL();
            if (parse_forced(v, &o->forced)) return -1;
            o->raw_only = a;
        } else {
            fprintf(stderr, "pinhole run: unknown option '%s' (see pinhole run --help)\n", a);
            return -1;
        }
#undef VAL
    }
    if (!o->files.model || !o->raw == !o->prompt) {
        fprintf(stderr, "pinhole run: -m MODEL and either -p TEXT or --raw PROMPT are required (see pinhole run "
                        "--help)\n");
        return -1;
    }
    const char *bad = o->prompt ? o->raw_only : o->p_only;
    if (bad) {
        fprintf(stderr, "pinhole run: %s goes with %s (see pinhole run --help)\n", bad, o->prompt ? "--raw" : "-p");
        return -1;
    }
    if (o->top_logits_set && !o->json) {
        fprintf(stderr, "pinhole run: --top-logits goes with --json\n");
        return -1;
    }
    if (o->n_predict < 0) o->n_predict = o->raw ? 128 : 0;
    return 0;
}

static void print_ids(FILE *out, const int32_t *ids, size_t n) {
    fputc('[', out);
    for (size_t i = 0; i < n; i++) fprintf(out, i ? ",%d" : "%d", ids[i]);
    fputc(']', out);
}

static void print_floats(FILE *out, const float *v, size_t n) {
    fputc('[', out);
    for (size_t i = 0; i < n; i++) fprintf(out, i ? ",%.7g" : "%.7g", (double)v[i]);
    fputc(']', out);
}

/* The JSON chunk of a picture: its shape and what it put into the context
 * (the L2 norm of every row, the first and last rows in full). */
static void print_picture_chunk(FILE *out, const ph_picture_chunk *c, const float *rows) {
    fprintf(out,
            "{\"type\":\"image\",\"n_tokens\":%d,\"grid_x\":%d,\"grid_y\":%d,\"n_pos\":%d,\"embd_width\":%d,"
            "\"row_norms\":[",
            c->n_tokens, c->grid_x, c->grid_y, c->n_pos, c->embd_width);
    for (int32_t r = 0; r < c->n_tokens; r++) {
        double ss = 0.0;
        for (int32_t k = 0; k < c->embd_width; k++) {
            double v = rows[(size_t)r * (size_t)c->embd_width + (size_t)k];
            ss += v * v;
        }
        fprintf(out, r ? ",%.7g" : "%.7g", sqrt(ss));
    }
    fputs("],\"first_row\":", out);
    print_floats(out, rows, (size_t)c->embd_width);
    fputs(",\"last_row\":", out);
    print_floats(out, rows + (size_t)(c->n_tokens - 1) * (size_t)c->embd_width, (size_t)c->embd_width);
    fputc('}', out);
}

/* -p: one user message (the pictures, then the text) after the --system
 * one, answered by the engine as the server answers a one-message chat. */
static int run_prompt(const run_opts *o, const model_files *files) {
    if (o->n_images && !files->mmproj[0]) {
        fprintf(stderr, "pinhole: pictures need a vision file (%s): --mmproj MMPROJ.gguf\n", files->text_only);
        return 1;
    }
    ph_engine_params ep;
    ph_engine_params_default(&ep);
    ep.n_parallel = 1; /* one request at a time */
    ep.model_path = files->model;
    ep.mmproj_path = files->mmproj[0] ? files->mmproj : NULL;
    ep.n_ctx = (int32_t)o->ctx;
    ep.n_threads = (int)o->threads;
    ep.picture_min_tokens = (int)o->img_min_tokens;
    ep.picture_max_tokens = (int)o->img_max_tokens;
    ep.ram_cache_bytes = ep.conversation_cache_bytes = 0; /* one turn: nothing comes back */
    ep.picture_cache_entries = 0;
    int rc = 1;
    ph_err err = {0};
    ph_chat_part parts[MAX_IMAGES + 1] = {{0}};
    char *text = NULL;
    size_t len;
    answer a = {0};
    ph_engine *e = ph_engine_new(&ep, &err);
    if (!e) goto fail;
    cli_progress prog;
    cli_progress_init(&prog);
    ph_engine_set_progress(e, cli_progress_cb, &prog);
    if (ep.mmproj_path) model_files_say(files, true, NULL);
    for (int i = 0; i < o->n_images; i++)
        if (!(parts[i].picture = ph_picture_load(o->images[i], &err))) goto fail;
    parts[o->n_images] = (ph_chat_part){.text = o->prompt, .len = strlen(o->prompt)};
    const ph_chat_part sys = {.text = o->system, .len = o->system ? strlen(o->system) : 0};
    ph_chat_msg msgs[2];
    size_t n = 0;
    if (o->system) msgs[n++] = (ph_chat_msg){.role = PH_ROLE_SYSTEM, .parts = &sys, .n_parts = 1};
    msgs[n++] = (ph_chat_msg){.role = PH_ROLE_USER, .parts = parts, .n_parts = (size_t)o->n_images + 1};
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.sampler = o->sp;
    g.max_tokens = (int32_t)o->n_predict;
    g.thinking = o->thinking;
    if (o->print_prompt) {
        if (ph_engine_render(e, msgs, n, &g, "<__image__>", &text, &len, &err)) goto fail;
        fwrite(text, 1, len, stdout);
        rc = 0;
        goto done;
    }
    if (answer_begin(&a, o->reasoning)) {
        fprintf(stderr, "pinhole: out of memory\n");
        goto done;
    }
    ph_turn_report r;
    const int crc = ph_engine_chat(e, msgs, n, &g, answer_event, &a, &r, &err);
    answer_end(&a, crc == 0);
    if (crc) goto fail;
    turn_summary(stderr, &r);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pinhole: %s\n", err.msg);
done:
    answer_free(&a);
    free(text);
    for (int i = 0; i < o->n_images; i++) ph_picture_free(parts[i].picture);
    ph_engine_free(e);
    return rc;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    model_files files;
    if (parse_run_args(argc, argv, &o) || model_find(&o.files, o.n_images > 0, "pinhole run", &files)) {
        ph_tokens_free(&o.forced);
        return 2;
    }
    if (o.prompt) return run_prompt(&o, &files);
    int rc = 1;
    ph_err err;
    ph_model *m = NULL;
    ph_mmproj *mm = NULL;
    ph_session *s = NULL;
    ph_sampler *smp = NULL;
    ph_prompt prompt = {0};
    ph_picture *pics[MAX_IMAGES] = {0};
    ph_tokens gen = {0};
    int32_t *top_ids = NULL;
    float *top_vals = NULL;
    char *steps_json = NULL, *chunks_json = NULL;
    size_t steps_len = 0, chunks_len = 0;
    FILE *steps = NULL, *chunks = NULL;

    m = ph_model_load(files.model, (int)o.threads, &err);
    if (!m) goto fail;
    const ph_model_info *info = ph_model_get_info(m);
    if (ph_prompt_from_raw(m, o.raw, "<__image__>", &prompt, &err)) goto fail;
    if (prompt.n_pictures != o.n_images) {
        fprintf(stderr, "pinhole: the prompt has %d <__image__> markers but %d --image files were given\n",
                prompt.n_pictures, o.n_images);
        goto done;
    }
    if (o.n_images && !files.mmproj[0]) {
        fprintf(stderr, "pinhole: pictures need a vision file (%s): --mmproj MMPROJ.gguf\n", files.text_only);
        goto done;
    }
    if (files.mmproj[0]) {
        if (!(mm = ph_mmproj_open(m, files.mmproj, &err))) goto fail;
        if (ph_mmproj_set_budget(mm, (int)o.img_min_tokens, (int)o.img_max_tokens, &err)) goto fail;
        model_files_say(&files, true, NULL);
    }
    for (int i = 0; i < o.n_images; i++)
        if (!(pics[i] = ph_picture_load(o.images[i], &err))) goto fail;
    if (prompt.n == 0) {
        fprintf(stderr, "pinhole: the prompt is empty\n");
        goto done;
    }
    for (size_t i = 0; i < o.forced.n; i++)
        if (o.forced.ids[i] >= info->n_vocab) {
            fprintf(stderr, "pinhole: --force-tokens: id %d is outside the vocabulary (%d)\n", o.forced.ids[i],
                    info->n_vocab);
            goto done;
        }
    s = ph_session_new(m, (int32_t)o.ctx, &err);
    if (!s) goto fail;
    cli_progress prog;
    cli_progress_init(&prog);
    ph_session_set_progress(s, cli_progress_cb, &prog);
    smp = ph_sampler_new(&o.sp);
    top_ids = malloc((size_t)o.top_logits * sizeof *top_ids);
    top_vals = malloc((size_t)o.top_logits * sizeof *top_vals);
    if (!smp || !top_ids || !top_vals) goto oom;
    if (o.json &&
        (!(steps = open_memstream(&steps_json, &steps_len)) || !(chunks = open_memstream(&chunks_json, &chunks_len))))
        goto oom;
    if (o.top_logits > info->n_vocab) o.top_logits = info->n_vocab;

    /* the prompt, item by item */
    double t0 = time_now_s(), encode_s = 0.0;
    size_t n_prompt_tokens = 0;
    for (size_t i = 0; i < prompt.n; i++) {
        const ph_prompt_item *it = &prompt.items[i];
        if (chunks && i) fputc(',', chunks);
        if (!it->is_picture) {
            if (ph_session_eval_tokens(s, it->tokens.ids, it->tokens.n, &err)) goto fail;
            n_prompt_tokens += it->tokens.n;
            if (chunks) {
                fputs("{\"type\":\"text\",\"tokens\":", chunks);
                print_ids(chunks, it->tokens.ids, it->tokens.n);
                fputc('}', chunks);
            }
            continue;
        }
        ph_picture_chunk pc;
        float *rows = NULL;
        if (ph_session_eval_picture(s, mm, pics[it->picture], &pc, chunks ? &rows : NULL, &err)) goto fail;
        n_prompt_tokens += (size_t)pc.n_tokens;
        encode_s += pc.encode_s;
        if (chunks) print_picture_chunk(chunks, &pc, rows);
        free(rows);
    }
    if (prompt.items[prompt.n - 1].is_picture) {
        fprintf(stderr, "pinhole: the prompt must not end with a picture: add the text that follows it\n");
        goto done;
    }
    double t1 = time_now_s();
    int32_t n_past_after_prompt = ph_session_next_pos(s);

    const size_t n_steps = o.forced.n ? o.forced.n : (size_t)o.n_predict;
    ph_detok dt = {0};
    char piece[256];
    for (size_t step = 0; step < n_steps; step++) {
        const float *logits = ph_session_logits(s);
        if (o.json) {
            ph_logits_top(logits, info->n_vocab, (int32_t)o.top_logits, top_ids, top_vals);
            fprintf(steps, "%s{\"lse\":%.9g,\"top\":[", step ? "," : "", ph_logits_lse(logits, info->n_vocab));
            for (long k = 0; k < o.top_logits; k++)
                fprintf(steps, "%s[%d,%.9g]", k ? "," : "", top_ids[k], (double)top_vals[k]);
            fputs("]}", steps);
        }
        int32_t tok = o.forced.n ? o.forced.ids[step] : ph_sampler_sample(smp, logits, info->n_vocab);
        if (ph_tokens_push(&gen, tok)) goto oom;
        if (!o.json) {
            size_t len = ph_detok_token(&dt, m, tok, piece, sizeof piece);
            fwrite(piece, 1, len, stdout);
            fflush(stdout);
        }
        if (!o.forced.n && ph_token_is_eog(m, tok)) break;
        if (step + 1 == n_steps) break; /* the last token is chosen, not fed */
        if (ph_session_eval_tokens(s, &tok, 1, &err)) goto fail;
    }
    double t2 = time_now_s();
    if (!o.json) {
        size_t len = ph_detok_finish(&dt, piece, sizeof piece);
        fwrite(piece, 1, len, stdout);
        putchar('\n');
    } else {
        fclose(steps);
        fclose(chunks);
        steps = chunks = NULL;
        printf("{\"chunks\":[%s],\"n_past_after_prompt\":%d,\"generated\":", chunks_json ? chunks_json : "",
               n_past_after_prompt);
        print_ids(stdout, gen.ids, gen.n);
        printf(",\"steps\":[%s]}\n", steps_json ? steps_json : "");
    }
    size_t n_fed = gen.n > 0 ? gen.n - 1 : 0;
    if (o.n_images) fprintf(stderr, "pinhole: %d pictures encoded in %.3f s\n", o.n_images, encode_s);
    fprintf(stderr,
            "pinhole: prompt %zu tokens in %.3f s (%.2f tok/s), generation %zu tokens in %.3f s (%.2f tok/s)\n",
            n_prompt_tokens, t1 - t0 - encode_s, (double)n_prompt_tokens / (t1 - t0 - encode_s), n_fed, t2 - t1,
            n_fed ? (double)n_fed / (t2 - t1) : 0.0);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "pinhole: out of memory\n");
    goto done;
fail:
    fprintf(stderr, "pinhole: %s\n", err.msg);
done:
    if (steps) fclose(steps);
    if (chunks) fclose(chunks);
    free(steps_json);
    free(chunks_json);
    free(top_ids);
    free(top_vals);
    for (int i = 0; i < o.n_images; i++) ph_picture_free(pics[i]);
    ph_prompt_free(&prompt);
    ph_tokens_free(&gen);
    ph_tokens_free(&o.forced);
    ph_sampler_free(smp);
    ph_session_free(s);
    ph_mmproj_close(mm);
    ph_model_free(m);
    return rc;
}
