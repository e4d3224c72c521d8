/* pinhole chat: an interactive chat in the model's chat format, with line
 * editing and history (libedit). /image PATH attaches a picture to the next
 * message, /reset starts over, /quit leaves. The conversation's KV stays in
 * the session, so each turn evaluates only its own tokens. */
#include <editline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "cli/args.h"
#include "pinhole.h"

#define CHAT_MAX_PENDING 16

typedef struct chat {
    ph_model *m;
    ph_mmproj *mm;
    ph_session *s;
    ph_sampler *smp;
    const ph_model_info *info;
    const char *system;
    long n_predict;
    ph_picture *pending[CHAT_MAX_PENDING];
    int n_pending;
    bool started; /* the system message (if any) is in the session */
} chat;

static void chat_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole chat -m LLM.gguf [--mmproj MMPROJ.gguf] [options]\n"
            "  -m, --model FILE      the LLM GGUF file\n"
            "  --mmproj FILE         the vision GGUF file (needed for /image)\n"
            "  --system TEXT         a system message\n"
            "  -n, --n-predict N     most tokens per answer (default 1024)\n"
            "  --temp T --top-k K --top-p P --min-p M --seed S   sampling (default greedy)\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  -c, --ctx-size N      context size (default: the model's, at most 4096)\n"
            "  --image-min-tokens N --image-max-tokens N          picture token budget\n"
            "in the chat:\n"
            "  /image PATH   attach a picture to the next message\n"
            "  /reset        start a new conversation\n"
            "  /quit         leave (also Ctrl-D)\n");
}

static void drop_pending(chat *c) {
    for (int i = 0; i < c->n_pending; i++) ph_picture_free(c->pending[i]);
    c->n_pending = 0;
}

static int chat_oom(ph_err *err) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return -1;
}

/* Evaluates text (special tokens parsed) after what the session holds. */
static int eval_text(chat *c, const char *text, ph_err *err) {
    ph_tokens t = {0};
    int rc = ph_tokenize(c->m, text, strlen(text), true, &t, err);
    if (rc == 0) rc = ph_session_eval_tokens(c->s, t.ids, t.n, err);
    ph_tokens_free(&t);
    return rc;
}

/* One turn: the user's message (pictures first, then the text), then the
 * answer, streamed. */
static int chat_turn(chat *c, const char *text, ph_err *err) {
    double t0 = ph_now_s();
    int32_t rows0 = ph_session_n_rows(c->s);
    if (!c->started) {
        int32_t bos = ph_model_bos(c->m);
        if (bos >= 0 && ph_session_eval_tokens(c->s, &bos, 1, err)) return -1;
        if (c->system) {
            char *sys = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&sys, &len);
            if (!f) return chat_oom(err);
            fprintf(f, "<|im_start|>system\n%s<|im_end|>\n", c->system);
            fclose(f);
            int rc = eval_text(c, sys, err);
            free(sys);
            if (rc) return -1;
        }
        c->started = true;
    }
    if (eval_text(c, "<|im_start|>user\n", err)) return -1;
    double encode_s = 0.0;
    for (int i = 0; i < c->n_pending; i++) {
        ph_picture_chunk pc;
        if (eval_text(c, "<|vision_start|>", err) ||
            ph_session_eval_picture(c->s, c->mm, c->pending[i], &pc, NULL, err) ||
            eval_text(c, "<|vision_end|>", err))
            return -1;
        encode_s += pc.encode_s;
    }
    drop_pending(c);
    char *msg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&msg, &len);
    if (!f) return chat_oom(err);
    fprintf(f, "%s<|im_end|>\n<|im_start|>assistant\n", text);
    fclose(f);
    int rc = eval_text(c, msg, err);
    free(msg);
    if (rc) return -1;
    int32_t n_prompt = ph_session_n_rows(c->s) - rows0;
    double t1 = ph_now_s();

    ph_detok dt = {0};
    char piece[256];
    long n_gen = 0;
    int32_t tok = -1;
    for (; n_gen < c->n_predict; n_gen++) {
        tok = ph_sampler_sample(c->smp, ph_session_logits(c->s), c->info->n_vocab);
        if (ph_token_is_eog(c->m, tok)) break;
        size_t n = ph_detok_token(&dt, c->m, tok, piece, sizeof piece);
        fwrite(piece, 1, n, stdout);
        fflush(stdout);
        if (ph_session_eval_tokens(c->s, &tok, 1, err)) return -1;
    }
    size_t n = ph_detok_finish(&dt, piece, sizeof piece);
    fwrite(piece, 1, n, stdout);
    double t2 = ph_now_s();
    /* close the turn so the next one follows the chat format */
    if (eval_text(c, "<|im_end|>\n", err)) return -1;
    double prefill_s = t1 - t0 - encode_s;
    fprintf(stderr, "\n[prompt %d tokens in %.2f s (%.1f tok/s)", n_prompt, prefill_s,
            prefill_s > 0 ? n_prompt / prefill_s : 0.0);
    if (encode_s > 0) fprintf(stderr, ", pictures encoded in %.2f s", encode_s);
    fprintf(stderr, "; answer %ld tokens in %.2f s (%.1f tok/s)]\n", n_gen, t2 - t1,
            n_gen && t2 > t1 ? n_gen / (t2 - t1) : 0.0);
    return 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *mmproj = NULL;
    long threads = 0, ctx = 0, img_min = 8, img_max = 4096;
    chat c = {.n_predict = 1024};
    ph_sampler_params sp = ph_sampler_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        long l;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            chat_usage(stdout);
            return 0;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--mmproj")) mmproj = v;
        else if (!strcmp(a, "--system")) c.system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (arg_int(a, v, 1, 1 << 24, &c.n_predict)) return 2; }
        else if (!strcmp(a, "--temp")) { if (arg_float(a, v, 0, 100, &d)) return 2; sp.temperature = (float)d; }
        else if (!strcmp(a, "--top-k")) { if (arg_int(a, v, 0, 1 << 30, &l)) return 2; sp.top_k = (int32_t)l; }
        else if (!strcmp(a, "--top-p")) { if (arg_float(a, v, 0, 1, &d)) return 2; sp.top_p = (float)d; }
        else if (!strcmp(a, "--min-p")) { if (arg_float(a, v, 0, 1, &d)) return 2; sp.min_p = (float)d; }
        else if (!strcmp(a, "--seed")) { if (arg_u64(a, v, &sp.seed)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (arg_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (arg_int(a, v, 1, 1 << 22, &ctx)) return 2; }
        else if (!strcmp(a, "--image-min-tokens")) { if (arg_int(a, v, 1, 65536, &img_min)) return 2; }
        else if (!strcmp(a, "--image-max-tokens")) { if (arg_int(a, v, 1, 65536, &img_max)) return 2; }
        else {
            fprintf(stderr, "pinhole chat: unknown option '%s' (see pinhole chat --help)\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "pinhole chat: -m MODEL is required (see pinhole chat --help)\n");
        return 2;
    }
    ph_err err;
    int rc = 1;
    if (!(c.m = ph_model_load(model, (int)threads, &err))) goto fail;
    c.info = ph_model_get_info(c.m);
    if (mmproj && (!(c.mm = ph_mmproj_open(c.m, mmproj, &err)) ||
                   ph_mmproj_set_budget(c.mm, (int)img_min, (int)img_max, &err)))
        goto fail;
    if (!(c.s = ph_session_new(c.m, (int32_t)ctx, &err))) goto fail;
    if (!(c.smp = ph_sampler_new(&sp))) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto fail;
    }
    fprintf(stderr, "pinhole chat: %s, context %d%s. /image PATH attaches a picture, /reset starts over, "
                    "/quit leaves.\n",
            c.info->name[0] ? c.info->name : model, ph_session_n_ctx(c.s), c.mm ? ", pictures on" : "");
    using_history();
    char *line;
    while ((line = readline("> ")) != NULL) {
        char *in = trim(line);
        if (*in) add_history(in);
        if (!strcmp(in, "/quit") || !strcmp(in, "/exit")) {
            free(line);
            break;
        } else if (!strcmp(in, "/reset")) {
            ph_session_reset(c.s);
            drop_pending(&c);
            c.started = false;
            fprintf(stderr, "[new conversation]\n");
        } else if (!strncmp(in, "/image", 6) && (in[6] == ' ' || in[6] == '\0')) {
            const char *path = trim(in + 6);
            ph_picture *p = NULL;
            if (!c.mm) {
                fprintf(stderr, "[pictures need --mmproj]\n");
            } else if (!*path) {
                fprintf(stderr, "[usage: /image PATH]\n");
            } else if (c.n_pending == CHAT_MAX_PENDING) {
                fprintf(stderr, "[at most %d pictures per message]\n", CHAT_MAX_PENDING);
            } else if (!(p = ph_picture_load(path, &err))) {
                fprintf(stderr, "[%s]\n", err.msg);
            } else {
                int w, h;
                ph_picture_size(p, &w, &h);
                c.pending[c.n_pending++] = p;
                fprintf(stderr, "[picture %s (%dx%d) goes with your next message]\n", path, w, h);
            }
        } else if (*in == '/' ) {
            fprintf(stderr, "[unknown command; /image PATH, /reset, /quit]\n");
        } else if (*in || c.n_pending) {
            if (chat_turn(&c, in, &err)) {
                /* a failed turn may have left part of itself in the KV: start over */
                fprintf(stderr, "\n[%s; the conversation starts over]\n", err.msg);
                ph_session_reset(c.s);
                drop_pending(&c);
                c.started = false;
            }
        }
        free(line);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "pinhole: %s\n", err.msg);
done:
    drop_pending(&c);
    ph_sampler_free(c.smp);
    ph_session_free(c.s);
    ph_mmproj_close(c.mm);
    ph_model_free(c.m);
    return rc;
}
