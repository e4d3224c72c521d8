/* pinhole chat: an interactive chat in the model's chat format, with line
 * editing and history (libedit). /image PATH attaches a picture to the next
 * message, /reset starts over, /quit leaves. The conversation's KV stays in
 * the session, so each turn evaluates only its own tokens. */
#include <editline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/timeutil.h"
#include "cli/args.h"
#include "cli/hub.h"
#include "pinhole.h"

#define CHAT_MAX_PENDING 16

/* One message of the conversation, with the parts it owns. */
typedef struct chat_msg {
    ph_role role;
    ph_chat_part *parts;
    size_t n_parts;
} chat_msg;

typedef struct chat {
    ph_engine *e;
    const char *system;
    ph_gen_params gen;
    ph_chat_msg *msgs;   /* views of hist for the engine */
    chat_msg *hist;
    size_t n, cap;
    ph_picture *pending[CHAT_MAX_PENDING];
    int n_pending;
} chat;

static void chat_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole chat -m LLM.gguf [--mmproj MMPROJ.gguf] [options]\n"
            "  -m, --model FILE      the LLM GGUF file, or OWNER/NAME[:QUANT]: a model\n"
            "                        fetched by pinhole pull (and its mmproj)\n"
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

static void free_msg(chat_msg *m) {
    for (size_t j = 0; j < m->n_parts; j++) {
        free((char *)m->parts[j].text);
        ph_picture_free(m->parts[j].picture);
    }
    free(m->parts);
}

static void drop_history(chat *c) {
    for (size_t i = 0; i < c->n; i++) free_msg(&c->hist[i]);
    c->n = 0;
}

/* Appends a message; takes the pictures, copies the text. */
static int push_msg(chat *c, ph_role role, ph_picture **pics, int n_pics, const char *text, size_t len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        chat_msg *h = realloc(c->hist, cap * sizeof *h);
        if (!h) return -1;
        c->hist = h;
        ph_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return -1;
        c->msgs = m;
        c->cap = cap;
    }
    chat_msg *m = &c->hist[c->n];
    m->role = role;
    m->n_parts = (size_t)n_pics + 1;
    m->parts = calloc(m->n_parts, sizeof *m->parts);
    char *t = malloc(len + 1);
    if (!m->parts || !t) {
        free(m->parts);
        free(t);
        return -1;
    }
    for (int i = 0; i < n_pics; i++) m->parts[i].picture = pics[i];
    memcpy(t, text, len);
    t[len] = '\0';
    m->parts[n_pics].text = t;
    m->parts[n_pics].len = len;
    c->n++;
    return 0;
}

typedef struct answer {
    char *text;
    size_t len, cap;
    bool in_reasoning;
} answer;

static int on_piece(void *ud, const ph_gen_event *ev) {
    answer *a = ud;
    if (!ev->len) return 0;
    if (ev->kind == PH_DELTA_REASONING) { /* shown dimmed, not kept in the history */
        fprintf(stdout, "%s%.*s", a->in_reasoning ? "" : "\033[2m", (int)ev->len, ev->text);
        a->in_reasoning = true;
        fflush(stdout);
        return 0;
    }
    if (a->in_reasoning) fputs("\033[0m\n", stdout);
    a->in_reasoning = false;
    fwrite(ev->text, 1, ev->len, stdout);
    fflush(stdout);
    if (a->len + ev->len + 1 > a->cap) {
        size_t cap = (a->len + ev->len + 1) * 2;
        char *t = realloc(a->text, cap);
        if (!t) return 1;
        a->text = t;
        a->cap = cap;
    }
    memcpy(a->text + a->len, ev->text, ev->len);
    a->len += ev->len;
    return 0;
}

/* One turn: the user's message (pictures first, then the text) joins the
 * conversation, the engine answers (reusing what the KV already holds). */
static int chat_turn(chat *c, const char *text, ph_err *err) {
    if (c->n == 0 && c->system && push_msg(c, PH_ROLE_SYSTEM, NULL, 0, c->system, strlen(c->system)))
        return ph_err_set(err, "out of memory");
    if (push_msg(c, PH_ROLE_USER, c->pending, c->n_pending, text, strlen(text)))
        return ph_err_set(err, "out of memory");
    c->n_pending = 0; /* the message owns them now */
    for (size_t i = 0; i < c->n; i++)
        c->msgs[i] = (ph_chat_msg){.role = c->hist[i].role, .parts = c->hist[i].parts, .n_parts = c->hist[i].n_parts};
    answer a = {0};
    ph_turn_report r;
    double t0 = ph_now_s();
    int rc = ph_engine_chat(c->e, c->msgs, c->n, &c->gen, on_piece, &a, &r, err);
    if (a.in_reasoning) fputs("\033[0m", stdout);
    if (rc == 0 && push_msg(c, PH_ROLE_ASSISTANT, NULL, 0, a.text ? a.text : "", a.len))
        rc = ph_err_set(err, "out of memory");
    free(a.text);
    if (rc) return -1;
    double prefill = r.prefill_s;
    fprintf(stderr, "\n[prompt %d tokens: %d reused, %d evaluated in %.2f s", r.n_prompt, r.n_reused, r.n_prefilled,
            prefill);
    if (r.n_pictures)
        fprintf(stderr, "; pictures: %d kept, %d cached, %d encoded in %.2f s", r.pics_from_kv, r.pics_from_cache,
                r.pics_encoded, r.encode_s);
    fprintf(stderr, "; answer %d tokens in %.2f s (%.1f tok/s); %.2f s in all]\n", r.n_generated, r.decode_s,
            r.decode_s > 0 ? r.n_generated / r.decode_s : 0.0, ph_now_s() - t0);
    return 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

int cmd_chat(int argc, char **argv) {
    ph_engine_params ep;
    ph_engine_params_default(&ep);
    long l;
    chat c = {0};
    ph_gen_params_default(&c.gen);
    c.gen.max_tokens = 1024;
    ph_sampler_params *sp = &c.gen.sampler;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            chat_usage(stdout);
            return 0;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) ep.model_path = v;
        else if (!strcmp(a, "--mmproj")) ep.mmproj_path = v;
        else if (!strcmp(a, "--system")) c.system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (arg_int(a, v, 1, 1 << 24, &l)) return 2; c.gen.max_tokens = (int32_t)l; }
        else if (!strcmp(a, "--temp")) { if (arg_float(a, v, 0, 100, &d)) return 2; sp->temperature = (float)d; }
        else if (!strcmp(a, "--top-k")) { if (arg_int(a, v, 0, 1 << 30, &l)) return 2; sp->top_k = (int32_t)l; }
        else if (!strcmp(a, "--top-p")) { if (arg_float(a, v, 0, 1, &d)) return 2; sp->top_p = (float)d; }
        else if (!strcmp(a, "--min-p")) { if (arg_float(a, v, 0, 1, &d)) return 2; sp->min_p = (float)d; }
        else if (!strcmp(a, "--seed")) { if (arg_u64(a, v, &sp->seed)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (arg_int(a, v, 1, 1024, &l)) return 2; ep.n_threads = (int)l; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (arg_int(a, v, 16, 1 << 22, &l)) return 2; ep.n_ctx = (int32_t)l; }
        else if (!strcmp(a, "--image-min-tokens")) { if (arg_int(a, v, 1, 65536, &l)) return 2; ep.image_min_tokens = (int)l; }
        else if (!strcmp(a, "--image-max-tokens")) { if (arg_int(a, v, 1, 65536, &l)) return 2; ep.image_max_tokens = (int)l; }
        else {
            fprintf(stderr, "pinhole chat: unknown option '%s' (see pinhole chat --help)\n", a);
            return 2;
        }
    }
    if (!ep.model_path) {
        fprintf(stderr, "pinhole chat: -m MODEL is required (see pinhole chat --help)\n");
        return 2;
    }
    ph_err err = {0};
    char *pulled[2];
    if (hub_model_arg(&ep.model_path, &ep.mmproj_path, pulled)) return 2;
    if (!(c.e = ph_engine_new(&ep, &err))) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        free(pulled[0]);
        free(pulled[1]);
        return 1;
    }
    const ph_model_info *info = ph_engine_model_info(c.e);
    fprintf(stderr, "pinhole chat: %s, context %d%s. /image PATH attaches a picture, /reset starts over, "
                    "/quit leaves.\n",
            info->name[0] ? info->name : ep.model_path, ph_engine_n_ctx(c.e),
            ph_engine_has_vision(c.e) ? ", pictures on" : "");
    using_history();
    char *line;
    while ((line = readline("> ")) != NULL) {
        char *in = trim(line);
        if (*in) add_history(in);
        if (!strcmp(in, "/quit") || !strcmp(in, "/exit")) {
            free(line);
            break;
        } else if (!strcmp(in, "/reset")) {
            drop_history(&c);
            drop_pending(&c);
            fprintf(stderr, "[new conversation]\n");
        } else if (!strncmp(in, "/image", 6) && (in[6] == ' ' || in[6] == '\0')) {
            const char *path = trim(in + 6);
            if (!ph_engine_has_vision(c.e)) {
                fprintf(stderr, "[pictures need --mmproj]\n");
            } else if (!*path) {
                fprintf(stderr, "[usage: /image PATH]\n");
            } else if (c.n_pending == CHAT_MAX_PENDING) {
                fprintf(stderr, "[at most %d pictures per message]\n", CHAT_MAX_PENDING);
            } else {
                ph_picture *im = ph_picture_load(path, &err);
                if (!im) {
                    fprintf(stderr, "[%s]\n", err.msg);
                } else {
                    c.pending[c.n_pending++] = im;
                    fprintf(stderr, "[picture %s goes with your next message]\n", path);
                }
            }
        } else if (*in == '/') {
            fprintf(stderr, "[unknown command; /image PATH, /reset, /quit]\n");
        } else if (*in || c.n_pending) {
            if (chat_turn(&c, in, &err)) {
                /* the failed message leaves the conversation */
                fprintf(stderr, "\n[%s]\n", err.msg);
                if (c.n && c.hist[c.n - 1].role == PH_ROLE_USER) free_msg(&c.hist[--c.n]);
            }
        }
        free(line);
    }
    drop_pending(&c);
    drop_history(&c);
    free(c.hist);
    free(c.msgs);
    ph_engine_free(c.e);
    free(pulled[0]);
    free(pulled[1]);
    return 0;
}
