/* pinhole chat: an interactive chat in the model's chat format, with line
 * editing, history and tab completion (libedit). /image PATH attaches a
 * picture to the next message, /save FILE writes the transcript, /reset
 * starts over, /help lists the commands, /quit leaves. The conversation's
 * KV stays in the engine, so each turn evaluates only its own tokens; a
 * summary line on stderr says what each answer cost and reused. */
#include <editline/readline.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/error.h"
#include "cli/answer.h"
#include "cli/args.h"
#include "cli/model_find.h"
#include "cli/progress.h"
#include "pinhole.h"

#define CHAT_MAX_PENDING 16

/* One message of the conversation, with the parts it owns: its pictures
 * (and the paths they came from), then its text. */
typedef struct chat_msg {
    ph_role role;
    ph_chat_part *parts;
    size_t n_parts;
    char **paths;    /* n_parts - 1 */
    char *reasoning; /* an answer's reasoning (for the transcript; may be NULL) */
} chat_msg;

typedef struct chat {
    ph_engine *e;
    const char *model, *mmproj, *system;
    ph_gen_params gen;
    reasoning_mode reasoning;
    ph_chat_msg *msgs; /* views of hist for the engine */
    chat_msg *hist;
    size_t n, cap;
    ph_picture *pending[CHAT_MAX_PENDING];
    char *pending_paths[CHAT_MAX_PENDING];
    int n_pending;
} chat;

static const char chat_commands_help[] =
    "  /image PATH   attach a picture to the next message (Tab completes the path)\n"
    "  /save FILE    write the conversation to FILE as JSON: {\"model\", \"mmproj\",\n"
    "                \"messages\": [{\"role\", \"content\", \"images\": [paths], \"reasoning\"}]}\n"
    "  /reset        start a new conversation\n"
    "  /help         list these commands\n"
    "  /quit         leave (also /exit or Ctrl-D)\n";

static void chat_usage(FILE *out) {
    fprintf(out, "usage: pinhole chat -m LLM.gguf|DIR [--mmproj MMPROJ.gguf] [options]\n");
    model_help(out, 24, HELP_CTX | HELP_BUDGET);
    fprintf(out,
            "  --system TEXT         a system message\n"
            "  -n, --n-predict N     most tokens per answer (default 1024)\n"
            "  --temp T --top-k K --top-p P --min-p M --seed S   sampling (default greedy)\n"
            "  --reasoning MODE      a thinking model's reasoning: auto (shown dimmed when\n"
            "                        stdout is a terminal, else hidden), show (dimmed on a\n"
            "                        terminal, else between <think> and </think> lines), hide\n"
            "                        (default auto); it is not sent back with the history\n"
            "  --thinking MODE       auto (the template's default), on or off, where the\n"
            "                        template can switch thinking (default auto)\n"
            "answers go to stdout, everything else to stderr: after each answer one line\n"
            "[N tokens, R tok/s, first token after T s; prompt P rows: U reused, F prefilled;\n"
            "pictures: E encoded, C from cache, K reused]\n"
            "in the chat:\n"
            "%s",
            chat_commands_help);
}

static void drop_pending(chat *c) {
    for (int i = 0; i < c->n_pending; i++) {
        ph_picture_free(c->pending[i]);
        free(c->pending_paths[i]);
    }
    c->n_pending = 0;
}

static void free_msg(chat_msg *m) {
    for (size_t j = 0; j < m->n_parts; j++) {
        free((char *)m->parts[j].text);
        ph_picture_free(m->parts[j].picture);
    }
    for (size_t j = 0; j + 1 < m->n_parts; j++) free(m->paths[j]);
    free(m->paths);
    free(m->parts);
    free(m->reasoning);
}

static void drop_history(chat *c) {
    for (size_t i = 0; i < c->n; i++) free_msg(&c->hist[i]);
    c->n = 0;
}

/* Appends a message; takes the pictures and their paths, copies the text. */
static int push_msg(chat *c, ph_role role, ph_picture **pics, char **paths, int n_pics, const char *text,
                    size_t len) {
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
    *m = (chat_msg){.role = role, .n_parts = (size_t)n_pics + 1};
    m->parts = calloc(m->n_parts, sizeof *m->parts);
    m->paths = calloc(m->n_parts, sizeof *m->paths);
    char *t = malloc(len + 1);
    if (!m->parts || !m->paths || !t) {
        free(m->parts);
        free(m->paths);
        free(t);
        return -1;
    }
    for (int i = 0; i < n_pics; i++) {
        m->parts[i].picture = pics[i];
        m->paths[i] = paths[i];
    }
    memcpy(t, text, len);
    t[len] = '\0';
    m->parts[n_pics].text = t;
    m->parts[n_pics].len = len;
    c->n++;
    return 0;
}

/* One turn: the user's message (pictures first, then the text) joins the
 * conversation, the engine answers (reusing what the KV already holds). */
static int chat_turn(chat *c, const char *text, ph_err *err) {
    if (c->n == 0 && c->system && push_msg(c, PH_ROLE_SYSTEM, NULL, NULL, 0, c->system, strlen(c->system)))
        return err_set(err, "out of memory");
    if (push_msg(c, PH_ROLE_USER, c->pending, c->pending_paths, c->n_pending, text, strlen(text)))
        return err_set(err, "out of memory");
    c->n_pending = 0; /* the message owns them now */
    for (size_t i = 0; i < c->n; i++)
        c->msgs[i] = (ph_chat_msg){.role = c->hist[i].role, .parts = c->hist[i].parts, .n_parts = c->hist[i].n_parts};
    answer a;
    if (answer_begin(&a, c->reasoning)) {
        answer_free(&a);
        return err_set(err, "out of memory");
    }
    ph_turn_report r;
    int rc = ph_engine_chat(c->e, c->msgs, c->n, &c->gen, answer_event, &a, &r, err);
    if (answer_end(&a, rc == 0) && !rc) rc = err_set(err, "out of memory");
    if (rc == 0 && push_msg(c, PH_ROLE_ASSISTANT, NULL, NULL, 0, a.text, a.len)) rc = err_set(err, "out of memory");
    if (rc == 0 && a.reason_len) {
        c->hist[c->n - 1].reasoning = a.reason;
        a.reason = NULL;
    }
    answer_free(&a);
    if (rc) return -1;
    turn_summary(stderr, &r);
    return 0;
}

/* The transcript as JSON (see chat_commands_help), written whole or not at
 * all. jansson refuses text that is not UTF-8 (a typed line, a path). */
static int save_transcript(const chat *c, const char *path, ph_err *err) {
    json_t *msgs = json_array(),
           *doc = json_pack("{s:s, s:s?, s:o}", "model", c->model, "mmproj", c->mmproj, "messages", msgs);
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    size_t i = 0;
    for (; doc && i < c->n; i++) {
        const chat_msg *m = &c->hist[i];
        const ph_chat_part *t = &m->parts[m->n_parts - 1];
        json_t *o = json_pack("{s:s, s:s%}", "role", roles[m->role], "content", t->text, t->len);
        if (!o || json_array_append_new(msgs, o)) goto bad;
        if (m->n_parts > 1) {
            json_t *im = json_array();
            if (json_object_set_new(o, "images", im)) goto bad;
            for (size_t j = 0; j + 1 < m->n_parts; j++)
                if (json_array_append_new(im, json_string(m->paths[j]))) goto bad;
        }
        if (m->reasoning && json_object_set_new(o, "reasoning", json_string(m->reasoning))) goto bad;
    }
    char *s = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    if (!s) return err_set(err, "cannot save: the model or vision file's path is not UTF-8 (or memory is out)");
    const void *parts[] = {s, "\n"};
    const size_t lens[] = {strlen(s), 1};
    int rc = file_write_atomic(path, parts, lens, 2, err);
    free(s);
    return rc;
bad:
    json_decref(doc);
    return err_set(err, "cannot save: message %zu's text or picture path is not UTF-8 (or memory is out)", i + 1);
}

/* Tab completion: a command's name at the start of the line, a path after
 * /image and /save, nothing in a message. */
static const char *const chat_commands[] = {"/image", "/save", "/reset", "/help", "/quit", "/exit", NULL};

static char *command_match(const char *text, int state) {
    static size_t i;
    if (!state) i = 0;
    for (; chat_commands[i]; i++)
        if (!strncmp(chat_commands[i], text, strlen(text))) return strdup(chat_commands[i++]);
    return NULL;
}

static char **chat_complete(const char *text, int start, int end) {
    (void)end;
    rl_attempted_completion_over = 1;
    const char *buf = rl_line_buffer ? rl_line_buffer : "", *line = buf;
    while (*line == ' ' || *line == '\t') line++;
    if (text[0] == '/' && start == (int)(line - buf)) return rl_completion_matches(text, command_match);
    if (!strncmp(line, "/image ", 7) || !strncmp(line, "/save ", 6))
        return rl_completion_matches(text, rl_filename_completion_function);
    return NULL;
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
    ep.n_parallel = 1; /* one request at a time */
    model_args ma = {0};
    long l;
    chat c = {0};
    ph_gen_params_default(&c.gen);
    c.gen.max_tokens = 1024;
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"no-mmproj", no_argument, NULL, 'N'},
                                         {"model", required_argument, NULL, 'm'},
                                         {"mmproj", required_argument, NULL, 'M'},
                                         {"system", required_argument, NULL, 'S'},
                                         {"reasoning", required_argument, NULL, 'R'},
                                         {"thinking", required_argument, NULL, 'T'},
                                         {"n-predict", required_argument, NULL, 'n'},
                                         ARG_ENGINE_OPTS,
                                         ARG_SAMPLER_OPTS,
                                         {NULL, 0, NULL, 0}};
    arg_state st = {0};
    const char *a, *v;
    for (int o; (o = arg_next("chat", argc, argv, "hm:n:c:t:", opts, &st, &a, &v)) != -1;) {
        if (o == -2) return 2;
        if (o == 'h') {
            chat_usage(stdout);
            return 0;
        }
        const int engine_flag = arg_engine(a, v, &ep),
                  sampler_flag = engine_flag ? 0 : arg_sampler_opt(a, v, &c.gen.sampler);
        if (engine_flag < 0 || sampler_flag < 0) return 2;
        if (engine_flag || sampler_flag) continue;
        switch (o) {
        case 'N': ma.no_mmproj = true; break;
        case 'm': ma.model = v; break;
        case 'M': ma.mmproj = v; break;
        case 'S': c.system = v; break;
        case 'R':
            if (arg_reasoning(a, v, &c.reasoning)) return 2;
            break;
        case 'T':
            if (arg_thinking(a, v, &c.gen.thinking)) return 2;
            break;
        case 'n':
            if (arg_int(a, v, 1, 1 << 24, &l)) return 2;
            c.gen.max_tokens = (int32_t)l;
            break;
        }
    }
    if (arg_rest() < argc) {
        fprintf(stderr, "pinhole chat: unexpected argument '%s' (see pinhole chat --help)\n", argv[arg_rest()]);
        return 2;
    }
    if (!ma.model) {
        fprintf(stderr, "pinhole chat: -m MODEL is required (see pinhole chat --help)\n");
        return 2;
    }
    model_files files;
    if (model_find(&ma, true, "pinhole chat", &files)) return 2;
    ep.model_path = files.model;
    ep.mmproj_path = files.mmproj[0] ? files.mmproj : NULL;
    ph_err err = {0};
    if (!(c.e = ph_engine_new(&ep, &err))) {
        fprintf(stderr, "pinhole: %s\n", err.msg);
        return 1;
    }
    cli_progress prog;
    cli_progress_init(&prog);
    ph_engine_set_progress(c.e, cli_progress_cb, &prog);
    c.model = ep.model_path;
    c.mmproj = ep.mmproj_path;
    model_files_say(&files, ph_engine_has_vision(c.e), NULL);
    char name[256];
    model_name(&ma, &files, name, sizeof name);
    model_say_setup(c.e, name, ep.n_threads);
    fprintf(stderr, "pinhole chat: /help lists the commands, /quit leaves.\n");
    using_history();
    rl_attempted_completion_function = chat_complete;
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
        } else if (!strcmp(in, "/help")) {
            fprintf(stderr, "%s", chat_commands_help);
        } else if (!strncmp(in, "/save", 5) && (in[5] == ' ' || in[5] == '\0')) {
            const char *path = trim(in + 5);
            if (!*path) fprintf(stderr, "[usage: /save FILE]\n");
            else if (save_transcript(&c, path, &err)) fprintf(stderr, "[%s]\n", err.msg);
            else fprintf(stderr, "[%zu messages saved to %s]\n", c.n, path);
        } else if (!strncmp(in, "/image", 6) && (in[6] == ' ' || in[6] == '\0')) {
            const char *path = trim(in + 6);
            if (!ph_engine_has_vision(c.e)) {
                fprintf(stderr, "[pictures need a vision file: --mmproj FILE]\n");
            } else if (!*path) {
                fprintf(stderr, "[usage: /image PATH]\n");
            } else if (c.n_pending == CHAT_MAX_PENDING) {
                fprintf(stderr, "[at most %d pictures per message]\n", CHAT_MAX_PENDING);
            } else {
                ph_picture *im = ph_picture_load(path, &err);
                char *p = im ? strdup(path) : NULL;
                if (!im) {
                    fprintf(stderr, "[%s]\n", err.msg);
                } else if (!p) {
                    ph_picture_free(im);
                    fprintf(stderr, "[out of memory]\n");
                } else {
                    c.pending_paths[c.n_pending] = p;
                    c.pending[c.n_pending++] = im;
                    fprintf(stderr, "[picture %s goes with your next message]\n", path);
                }
            }
        } else if (*in == '/') {
            fprintf(stderr, "[unknown command; /help lists them]\n");
        } else if (*in || c.n_pending) {
            if (chat_turn(&c, in, &err)) {
                /* the failed message leaves the conversation */
                fprintf(stderr, "[%s]\n", err.msg);
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
    return 0;
}
