/* pinhole demo: with nothing downloaded, writes a synthetic Qwen3-VL pair and
 * a few generated pictures to a temporary folder, starts `pinhole serve` on
 * them and plays a scripted session through the OpenAI Chat Completions
 * endpoint, printing per turn what the engine reused, took from the
 * embedding cache, encoded and prefilled, and the time to first token.
 *
 * The client is libcurl and a reader of the SSE stream, so the demo also
 * shows what a real client sends: the whole conversation, pictures
 * included, each turn. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <spawn.h>
#include <spng.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/timeutil.h"
#include "cli/args.h"
#include "pinhole.h"
#include "synth/synth.h"

#define DEMO_SEED            7  /* the model's weights */
#define DEMO_SAMPLER_SEED    42 /* the requests' "seed" */
#define DEMO_MAX_TOKENS      20
#define DEMO_START_TIMEOUT_S 60.0
#define DEMO_IO_TIMEOUT_S    300L /* one request; generous for sanitizer builds */
#define DEMO_LOG_TAIL        8000 /* bytes of the server's log shown on a failure */

static void demo_usage(FILE *out) {
    fprintf(out, "usage: pinhole demo [options]\n"
                 "  Plays a scripted session against `pinhole serve` with nothing downloaded: writes a\n"
                 "  synthetic Qwen3-VL model (random weights, built-in byte-level vocabulary) and a few\n"
                 "  generated pictures to a temporary folder, starts the server and talks to it through\n"
                 "  the OpenAI endpoint (POST /v1/chat/completions, streamed): a picture conversation\n"
                 "  over several turns, a second one interleaved, and a new conversation that re-sends\n"
                 "  an old picture. Each turn prints what was reused from the live state, taken from the\n"
                 "  embedding cache, encoded and prefilled, and the time to first token. The weights\n"
                 "  are random, so the answers are noise.\n"
                 "  --keep          keep the temporary folder (models, pictures, server.log)\n"
                 "  --port N        the server's port (default 0: any free port)\n"
                 "  -t, --threads N threads for the model writer and the server (default: all cores)\n"
                 "  --shape S       tiny (default; under a second) or 2b (Qwen3-VL-2B's real sizes: slow,\n"
                 "                  writes 3.5 GB and each turn takes seconds; about 1.5 minutes on 2 cores)\n");
}

/* ---- small helpers ----------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted;
static char g_err[1024];   /* the first failure, printed as the last line */
static const char *g_turn; /* the turn being played, for messages */

static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    if (g_err[0]) return -1; /* what went wrong first is what matters */
    int n = g_turn ? snprintf(g_err, sizeof g_err, "turn %s: ", g_turn) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err + n, sizeof g_err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Prints at most max code points of s on one line, control bytes as spaces. */
static void print_clipped(const char *s, int max) {
    putchar('"');
    int cp = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p & 0xc0) != 0x80 && ++cp > max) {
            fputs("...", stdout);
            break;
        }
        putchar(*p < 0x20 || *p == 0x7f ? ' ' : *p);
    }
    putchar('"');
}

/* ---- pictures ------------------------------------------------------------------ */

typedef struct picture {
    const char *name, *desc;
    uint32_t w, h;
    char *uri; /* data:image/png;base64,... */
} picture;

/* Paints picture `which` (0: a diagonal gradient with a red disc; 1: a blue and
 * yellow checkerboard with a green square), writes it as DIR/NAME.png and
 * keeps it as a data: URI. */
static int make_picture(int which, picture *pic, const char *dir) {
    const uint32_t w = pic->w, h = pic->h;
    const size_t len = (size_t)w * h * 3;
    uint8_t *rgb = malloc(len), *px = rgb;
    if (!rgb) return fail("out of memory");
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++, px += 3) {
            int dx = (int)x - (int)w / 2, dy = (int)y - (int)h / 2, rad = (int)h / 4;
            uint32_t c; /* 0xRRGGBB */
            if (which == 0 && dx * dx + dy * dy <= rad * rad) c = 0xdc1e28;
            else if (which == 0) c = (x * 255 / w) << 16 | (y * 255 / h) << 8 | (255 - (x + y) * 255 / (w + h));
            else if (x >= w / 4 && x < w * 3 / 4 && y >= h / 4 && y < h * 3 / 4) c = 0x28be3c;
            else c = (x / 32 + y / 32) % 2 ? 0x1e3cc8 : 0xf0d228;
            px[0] = (uint8_t)(c >> 16), px[1] = (uint8_t)(c >> 8), px[2] = (uint8_t)c;
        }
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {.width = w, .height = h, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    int r = ctx ? spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1) : SPNG_EMEM;
    if (!r) r = spng_set_ihdr(ctx, &ihdr);
    if (!r) r = spng_encode_image(ctx, rgb, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    size_t png_len = 0;
    unsigned char *png = r ? NULL : spng_get_png_buffer(ctx, &png_len, &r);
    spng_ctx_free(ctx);
    free(rgb);
    if (!png) return fail("cannot encode picture %s as PNG: %s", pic->name, spng_strerror(r ? r : SPNG_EMEM));
    int rc = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.png", dir, pic->name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(png, 1, png_len, f) != png_len) rc = fail("cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) && !rc) rc = fail("cannot write %s: %s", path, strerror(errno));
    static const char prefix[] = "data:image/png;base64,";
    if (!rc && !(pic->uri = malloc(sizeof prefix + (png_len + 2) / 3 * 4))) rc = fail("out of memory");
    if (!rc) EVP_EncodeBlock((unsigned char *)stpcpy(pic->uri, prefix), png, (int)png_len);
    free(png);
    return rc;
}

/* ---- the server, as a child process -------------------------------------------- */

typedef struct server {
    const char *dir, *model, *mmproj; /* what it runs on, in the demo's folder */
    int asked_port, port;             /* --port (0: any); where it listens */
    long threads;
    pid_t pid;
    char log[1100]; /* its stderr: DIR/server.log, shown on a failure */
} server;

/* The whole log, NUL-terminated (*n bytes), or NULL. */
static char *read_log(const server *s, size_t *n) {
    FILE *f = fopen(s->log, "rb");
    char *p = NULL;
    long size = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    *n = 0;
    if (size >= 0 && !fseek(f, 0, SEEK_SET) && (p = malloc((size_t)size + 1)))
        p[ *n = fread(p, 1, (size_t)size, f)] = '\0';
    if (f) fclose(f);
    return p;
}

static void print_server_log(const server *s) {
    size_t n;
    char *p = read_log(s, &n);
    const size_t from = n > DEMO_LOG_TAIL ? n - DEMO_LOG_TAIL : 0; /* the end is what matters */
    fprintf(stderr, "---- the server's output%s ----\n%s%s---- end ----\n", from ? " (its end)" : "",
            p ? p + from : "", n && p[n - 1] != '\n' ? "\n" : "");
    free(p);
}

static const char *describe_exit(int st, char *buf, size_t n) {
    if (WIFEXITED(st)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(buf, n, "died on signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(buf, n, "stopped (wait status %#x)", (unsigned)st);
    return buf;
}

static int server_start(server *s) {
    char port_s[16], threads_s[24], cache[1200], kv[1200];
    snprintf(port_s, sizeof port_s, "%d", s->asked_port);
    snprintf(threads_s, sizeof threads_s, "%ld", s->threads);
    snprintf(cache, sizeof cache, "%s/cache", s->dir);
    snprintf(kv, sizeof kv, "%s/kv", s->dir);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    setenv("XDG_CACHE_HOME", cache, 1); /* the server's own caches (file ids) stay in the demo's folder */
    const char *argv[] = {"pinhole",
                          "serve",
                          "-m",
                          s->model,
                          "--mmproj",
                          s->mmproj,
                          "--kv-disk-dir",
                          kv,
                          "--port",
                          port_s,
                          s->threads > 0 ? "-t" : NULL,
                          threads_s,
                          NULL};
    /* its stderr goes to the log, after an earlier run's: look after that */
    struct stat log_st;
    const size_t from = stat(s->log, &log_st) ? 0 : (size_t)log_st.st_size;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int e = posix_spawn(&s->pid, "/proc/self/exe", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        s->pid = 0;
        return fail("cannot run /proc/self/exe: %s", strerror(e));
    }
    /* until it says where it listens */
    static const char ready[] = "pinhole: listening on http://127.0.0.1:";
    const double t_end = time_now_s() + DEMO_START_TIMEOUT_S;
    for (int st = 0;; usleep(20 * 1000)) {
        size_t n;
        char *log = read_log(s, &n), *at = log && n > from ? strstr(log + from, ready) : NULL;
        const bool up = at && strchr(at, '\n');
        if (up) s->port = atoi(at + sizeof ready - 1);
        free(log);
        if (up) break;
        if (g_interrupted) return fail("interrupted");
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            char how[128];
            s->pid = 0;
            return fail("the server %s before listening", describe_exit(st, how, sizeof how));
        }
        if (time_now_s() > t_end) return fail("the server did not start within %.0f s", DEMO_START_TIMEOUT_S);
    }
    if (s->port <= 0 || s->port > 65535) return fail("the server announced a strange port");
    return 0;
}

/* SIGINT, then waits (at most 60 s; then SIGKILL). Returns 0 when it exited 0. */
static int server_stop(server *s) {
    if (s->pid <= 0) return 0;
    int rc = 0, st = 0;
    char how[128];
    pid_t w = waitpid(s->pid, &st, WNOHANG);
    const bool ended = w == s->pid; /* on its own, during the session */
    if (w == 0) {
        kill(s->pid, SIGINT);
        const double t_end = time_now_s() + 60.0;
        while ((w = waitpid(s->pid, &st, WNOHANG)) == 0 && time_now_s() < t_end) usleep(20 * 1000);
    }
    if (w == 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        rc = fail("the server did not stop within 60 s of SIGINT");
    } else if (w < 0) {
        rc = fail("waitpid: %s", strerror(errno));
    } else if (ended ? !g_interrupted : WIFSIGNALED(st) && WTERMSIG(st) != SIGINT) {
        /* it crashed or quit on its own: that explains any failed turn (once it listens,
         * SIGINT is no longer fatal to it, but it is while it loads) */
        g_err[0] = '\0';
        rc = fail("the server %s%s", describe_exit(st, how, sizeof how), ended ? " during the session" : "");
    } else if (WEXITSTATUS(st)) {
        rc = fail("on SIGINT the server %s (expected exit status 0)", describe_exit(st, how, sizeof how));
    }
    s->pid = 0;
    return rc;
}

/* ---- requests (libcurl) ------------------------------------------------------------ */

typedef int (*line_fn)(void *arg, const char *line, size_t len);

/* An answer as it arrives: its body so far; for a stream, each complete line
 * is handed to on_line as it comes. */
typedef struct reply {
    FILE *f;
    char *body;
    size_t n, done; /* body[0..done): lines handed on */
    line_fn on_line;
    void *arg;
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *arg) {
    reply *r = arg;
    if (fwrite(p, size, n, r->f) != n || fflush(r->f)) {
        fail("out of memory");
        return 0;
    }
    for (char *nl; r->on_line && (nl = memchr(r->body + r->done, '\n', r->n - r->done));
         r->done = (size_t)(nl - r->body) + 1)
        if (r->on_line(r->arg, r->body + r->done, (size_t)(nl - r->body) - r->done)) return 0; /* stops it */
    return size * n;
}

static int on_progress(void *arg, curl_off_t dl_total, curl_off_t dl, curl_off_t ul_total, curl_off_t ul) {
    (void)arg, (void)dl_total, (void)dl, (void)ul_total, (void)ul;
    return g_interrupted; /* non-zero stops the transfer */
}

/* GET path, or POST json when set. Returns the HTTP status with the answer's
 * body in *out (to free), or -1 with a message. */
static long request(int port, const char *path, const char *json, line_fn on_line, void *arg, char **out) {
    reply r = {.on_line = on_line, .arg = arg};
    CURL *c = curl_easy_init();
    char url[64], err[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    struct curl_slist *head = json ? curl_slist_append(NULL, "Content-Type: application/json") : NULL;
    const bool ready = c && (!json || head) && (r.f = open_memstream(&r.body, &r.n));
    if (ready) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* the server is on this machine */
        curl_easy_setopt(c, CURLOPT_USERAGENT, "pinhole-demo");
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, DEMO_IO_TIMEOUT_S);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, DEMO_IO_TIMEOUT_S);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, head);
        if (json) curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    }
    const CURLcode res = ready ? curl_easy_perform(c) : CURLE_OUT_OF_MEMORY;
    long status = -1;
    if (res == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (g_interrupted) fail("interrupted");
    else if (res == CURLE_OPERATION_TIMEDOUT) fail("no answer from the server within %ld s", DEMO_IO_TIMEOUT_S);
    else fail("%s %s: %s", json ? "POST" : "GET", path, err[0] ? err : curl_easy_strerror(res));
    if (r.f && fclose(r.f) && status >= 0) status = fail("out of memory");
    curl_slist_free_all(head);
    curl_easy_cleanup(c);
    *out = r.body;
    return status;
}

/* ---- the counters of /metrics ---------------------------------------------------- */

enum { M_REUSED, M_RAM, M_DISK, M_PREFILLED, M_HITS, M_ENCODED, M_COUNT };
static const char *const metric_names[M_COUNT] = {
    "pinhole_prompt_tokens_reused_total",       "pinhole_ram_cache_tokens_restored_total",
    "pinhole_disk_cache_tokens_restored_total", "pinhole_prompt_tokens_prefilled_total",
    "pinhole_image_cache_hits_total",           "pinhole_images_encoded_total"};

static int read_metrics(int port, double v[M_COUNT]) {
    char *text;
    const long status = request(port, "/metrics", NULL, NULL, NULL, &text);
    int rc = status == 200 ? 0 : status < 0 ? -1 : fail("GET /metrics answered %ld", status);
    for (int i = 0; i < M_COUNT && !rc; i++) {
        size_t n = strlen(metric_names[i]);
        const char *line = text;
        for (; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
            if (!strncmp(line, metric_names[i], n) && line[n] == ' ') break;
        if (!line) rc = fail("/metrics has no %s", metric_names[i]);
        else v[i] = strtod(line + n + 1, NULL);
    }
    free(text);
    return rc;
}

/* ---- one streamed turn ----------------------------------------------------------- */

typedef struct turn_result {
    char *answer;
    double ttft_s; /* < 0: no text came */
    long long prompt, cached, completion;
    bool usage, finished; /* the usage chunk came; data: [DONE] came */
    FILE *out;            /* the answer, while it streams */
    double t0;            /* when the request started */
} turn_result;

/* One line of the SSE stream: content deltas, the usage chunk, errors. */
static int on_sse_line(void *arg, const char *line, size_t len) {
    turn_result *tr = arg;
    len -= len && line[len - 1] == '\r';
    if (len < 5 || memcmp(line, "data:", 5)) return 0; /* blank lines, comments */
    const size_t skip = 5 + (len > 5 && line[5] == ' ');
    if (len - skip == 6 && !memcmp(line + skip, "[DONE]", 6)) {
        tr->finished = true;
        return 0;
    }
    json_error_t je;
    json_t *c = json_loadb(line + skip, len - skip, 0, &je);
    if (!c) return fail("the stream sent a line that is not JSON: %s", je.text);
    int rc = 0;
    json_t *err = json_object_get(c, "error");
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    json_t *content = json_object_get(json_object_get(ch, "delta"), "content");
    json_t *usage = json_object_get(c, "usage");
    const size_t n = json_string_length(content);
    if (err) {
        const char *m = json_string_value(json_object_get(err, "message"));
        rc = fail("the server reported an error in the stream: %s", m ? m : "(no message)");
    } else if (n) {
        if (tr->ttft_s < 0) tr->ttft_s = time_now_s() - tr->t0;
        if (fwrite(json_string_value(content), 1, n, tr->out) != n) rc = fail("out of memory");
    }
    if (json_is_object(usage)) {
        tr->usage = true;
        tr->prompt = json_integer_value(json_object_get(usage, "prompt_tokens"));
        tr->completion = json_integer_value(json_object_get(usage, "completion_tokens"));
        json_t *details = json_object_get(usage, "prompt_tokens_details");
        tr->cached = json_integer_value(json_object_get(details, "cached_tokens"));
    }
    json_decref(c);
    return rc;
}

static int chat_turn(int port, const char *body, turn_result *tr) {
    size_t len;
    *tr = (turn_result){.ttft_s = -1, .t0 = time_now_s()};
    if (!(tr->out = open_memstream(&tr->answer, &len))) return fail("out of memory");
    char *text;
    long status = request(port, "/v1/chat/completions", body, on_sse_line, tr, &text);
    if (fclose(tr->out) && status >= 0) status = fail("out of memory");
    if (status > 0 && status != 200) { /* the error body, for the message */
        json_t *j = json_loads(text, 0, NULL);
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        status = fail("POST /v1/chat/completions answered %ld: %s", status, m ? m : text);
        json_decref(j);
    }
    free(text);
    if (status < 0) return -1;
    if (!tr->finished) return fail("the stream ended without data: [DONE]");
    if (!tr->usage) return fail("the stream sent no usage chunk (stream_options.include_usage was set)");
    return 0;
}

/* ---- the script ------------------------------------------------------------------- */

typedef struct step {
    const char *label;
    int conv;        /* 0 A, 1 B, 2 C */
    int picture;     /* attached to this turn's message; -1: none */
    bool text_first; /* the text before the picture */
    const char *text;
    const char *what;
    bool restart; /* the server is stopped and started again before this turn */
} step;

static const step script[] = {
    {"A1", 0, 0, false, "What is in this picture?", "conversation A, turn 1: picture A + a question", false},
    {"A2", 0, -1, false, "Which colours does it use?", "A, turn 2: a follow-up (the history re-sent)", false},
    {"B1", 1, 1, false, "Describe this picture.", "conversation B, turn 1: picture B + a question", false},
    {"A3", 0, -1, false, "Is there a circle in it?", "back to A, turn 3: a follow-up", false},
    {"B2", 1, -1, false, "What shape is in the middle?", "B, turn 2: a follow-up", false},
    {"C1", 2, 0, true, "Here is a picture again; describe its colours:", "conversation C, new: picture A sent again",
     false},
    {"A4", 0, -1, false, "Anything else?", "the server restarted; A, turn 4: its KV from a checkpoint file", true},
};
#define N_STEPS (int)(sizeof script / sizeof script[0])
#define N_CONVS 3

typedef struct row {
    int pics;
    double d[M_COUNT];
    turn_result tr;
} row;

static json_t *user_message(const picture *pic, const char *text, bool text_first) {
    json_t *content = json_array();
    if (text_first) json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", text));
    if (pic)
        json_array_append_new(content, json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", pic->uri));
    if (!text_first) json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text", text));
    return json_pack("{s:s,s:o}", "role", "user", "content", content);
}

static void print_header(const char *shape) {
    printf("pinhole demo: a scripted session with `pinhole serve`, nothing downloaded\n"
           "\n"
           "  The model is synthetic: a %s Qwen3-VL with RANDOM weights and a small built-in\n"
           "  byte-level vocabulary, so its answers are noise; the words mean nothing.\n"
           "  What to look at is what the engine does with each request (the client re-sends the\n"
           "  whole conversation, pictures included, every turn, as real clients do):\n"
           "    enc      pictures run through the vision encoder: each picture once, then never again\n"
           "    hit      pictures whose embedding came from the embedding cache instead\n"
           "    reused   prompt tokens kept from the live state: a follow-up reuses its conversation's\n"
           "             prefix and prefills only what is new\n"
           "    ram      of those, restored from the RAM tier: a conversation displaced by another\n"
           "             one resumes from memory instead of being read again\n"
           "    disk     of those, restored from a checkpoint file (--kv-disk-dir): after a restart a\n"
           "             conversation resumes from disk, its picture neither encoded nor read again\n"
           "    cached   the same, as the API reports it (usage.prompt_tokens_details.cached_tokens)\n"
           "    ttft_ms  time to first token, measured here: it drops when the prefix is reused\n"
           "\n",
           shape);
}

static void print_row(const step *st, const row *rw) {
    char ttft[32] = "-";
    if (rw->tr.ttft_s >= 0) snprintf(ttft, sizeof ttft, "%.1f", rw->tr.ttft_s * 1e3);
    printf("%-4s %4d %6lld %6.0f %6.0f %6.0f %6lld %7.0f %3.0f %3.0f %8s  %s\n", st->label, rw->pics, rw->tr.prompt,
           rw->d[M_REUSED], rw->d[M_RAM], rw->d[M_DISK], rw->tr.cached, rw->d[M_PREFILLED], rw->d[M_HITS],
           rw->d[M_ENCODED], ttft, st->what);
    printf("%-4s answer (%lld tokens): ", "", rw->tr.completion);
    print_clipped(rw->tr.answer, 60);
    putchar('\n');
    fflush(stdout);
}

static void print_summary(const row *rows, const picture *pics, int n_pics) {
    double enc = 0, hits = 0, reused = 0;
    long long prompt = 0;
    int sent = 0;
    for (int i = 0; i < N_STEPS; i++) {
        enc += rows[i].d[M_ENCODED];
        hits += rows[i].d[M_HITS];
        reused += rows[i].d[M_REUSED];
        prompt += rows[i].tr.prompt;
        sent += rows[i].pics;
    }
    printf("\nsummary: %d turns sent %d pictures in all (%d distinct: ", N_STEPS, sent, n_pics);
    for (int i = 0; i < n_pics; i++) printf("%s%s %ux%u", i ? ", " : "", pics[i].name, pics[i].w, pics[i].h);
    printf(");\n  the encoder ran %.0f times, the embedding cache served %.0f, and %.0f of %lld prompt tokens\n"
           "  (%.0f%%) were reused from the live state, the RAM tier or a checkpoint file instead of being\n"
           "  evaluated again.\n",
           enc, hits, reused, prompt, prompt ? 100.0 * reused / (double)prompt : 0.0);
    /* conversation A's first turn against its follow-ups */
    if (rows[0].tr.ttft_s >= 0 && rows[1].tr.ttft_s >= 0)
        printf("  Time to first token: %.1f ms on A1 (everything new), %.1f ms on A2 (prefix reused).\n",
               rows[0].tr.ttft_s * 1e3, rows[1].tr.ttft_s * 1e3);
    const row *a4 = &rows[N_STEPS - 1];
    printf("  After the restart, A4 took %.0f rows from a checkpoint file and encoded %.0f pictures.\n",
           a4->d[M_DISK], a4->d[M_ENCODED]);
    if (enc != n_pics)
        printf("  note: the encoder ran %.0f times for %d distinct pictures (expected once each).\n", enc, n_pics);
    printf("  The answers are noise: the weights are random.\n");
}

static int play(server *srv, picture *pics, const char *model_name, row *rows) {
    json_t *conv[N_CONVS];
    for (int c = 0; c < N_CONVS; c++)
        conv[c] =
            json_pack("[{s:s,s:s}]", "role", "system", "content", "You are a helpful assistant. Answer briefly.");
    int n_pics_in[N_CONVS] = {0};
    int rc = 0;
    printf("turn pics prompt reused    ram   disk cached prefill hit enc  ttft_ms  what\n");
    for (int i = 0; i < N_STEPS && !rc; i++) {
        const step *st = &script[i];
        row *rw = &rows[i];
        g_turn = st->label;
        if (st->restart) {
            printf("---- the server stops (SIGINT: it writes its live state) and starts again ----\n");
            fflush(stdout);
            rc = server_stop(srv);
            if (!rc) rc = server_start(srv);
            if (rc) break;
        }
        const int port = srv->port;
        const picture *pic = st->picture >= 0 ? &pics[st->picture] : NULL;
        json_array_append_new(conv[st->conv], user_message(pic, st->text, st->text_first));
        if (pic) n_pics_in[st->conv]++;
        rw->pics = n_pics_in[st->conv];
        json_t *req = json_pack("{s:s,s:O,s:b,s:{s:b},s:f,s:i,s:i}", "model", model_name, "messages", conv[st->conv],
                                "stream", 1, "stream_options", "include_usage", 1, "temperature", 0.7, "seed",
                                DEMO_SAMPLER_SEED, "max_tokens", DEMO_MAX_TOKENS);
        char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
        json_decref(req);
        double before[M_COUNT], after[M_COUNT];
        if (!body) rc = fail("cannot build the request");
        if (!rc) rc = read_metrics(port, before);
        if (!rc) rc = chat_turn(port, body, &rw->tr);
        if (!rc) rc = read_metrics(port, after);
        free(body);
        if (rc) break;
        for (int m = 0; m < M_COUNT; m++) rw->d[m] = after[m] - before[m];
        json_array_append_new(conv[st->conv], json_pack("{s:s,s:s}", "role", "assistant", "content", rw->tr.answer));
        print_row(st, rw);
    }
    for (int c = 0; c < N_CONVS; c++) json_decref(conv[c]);
    if (!rc) g_turn = NULL;
    return rc;
}

/* ---- the command ---------------------------------------------------------------- */

int cmd_demo(int argc, char **argv) {
    bool keep = false;
    long port = 0, threads = 0;
    const char *shape = "tiny";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            demo_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--keep")) {
            keep = true;
            continue;
        }
        if (strcmp(a, "--port") && strcmp(a, "-t") && strcmp(a, "--threads") && strcmp(a, "--shape")) {
            fprintf(stderr, "pinhole demo: unknown option '%s' (see pinhole demo --help)\n", a);
            return 2;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--port")) {
            if (arg_int(a, v, 0, 65535, &port)) return 2;
        } else if (!strcmp(a, "--shape")) {
            if (strcmp(v, "tiny") && strcmp(v, "2b")) {
                fprintf(stderr, "pinhole demo: --shape must be tiny or 2b\n");
                return 2;
            }
            shape = v;
        } else if (arg_int(a, v, 1, 1024, &threads)) {
            return 2;
        }
    }

    /* Ctrl-C stops the session and cleans up; a second one kills at once */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    const char *tmp = getenv("TMPDIR");
    char dir[1024];
    if (!tmp || !*tmp) tmp = "/tmp";
    if (strlen(tmp) > sizeof dir - 32) {
        fprintf(stderr, "pinhole demo: TMPDIR is too long\n");
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/pinhole-demo-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "pinhole demo: cannot make a temporary folder %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = 0;
    picture pics[2] = {{.name = "A", .desc = "a gradient with a red disc", .w = 320, .h = 240},
                       {.name = "B", .desc = "a checkerboard with a green square", .w = 256, .h = 256}};
    row rows[N_STEPS];
    memset(rows, 0, sizeof rows);
    char out[1200], model[1300], mmproj[1300], model_name[64];
    snprintf(model_name, sizeof model_name, "qwen3vl-synth-%s", shape);
    snprintf(out, sizeof out, "%s/%s", dir, model_name);
    snprintf(model, sizeof model, "%s.gguf", out);
    snprintf(mmproj, sizeof mmproj, "%s-mmproj.gguf", out);
    server srv = {.dir = dir, .model = model, .mmproj = mmproj, .asked_port = (int)port, .threads = threads};

    print_header(shape);
    printf("  folder    %s (%s)\n", dir, keep ? "kept: --keep" : "removed at the end; --keep keeps it");
    fflush(stdout);

    double t0 = time_now_s();
    synth_params sp = {.shape = shape,
                       .type = "f16",
                       .vision_type = "f16",
                       .vocab = NULL,
                       .out = out,
                       .seed = DEMO_SEED,
                       .n_threads = (int)threads};
    ph_err err = {0};
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) rc = fail("cannot start libcurl");
    else if (synth_write(&sp, &err)) rc = fail("cannot write the synthetic model: %s", err.msg);
    if (!rc) {
        printf("  model     %s.gguf + %s-mmproj.gguf (%s, f16, random weights, seed %d), written in %.1f s\n",
               model_name, model_name, shape, DEMO_SEED, time_now_s() - t0);
        for (int i = 0; i < 2 && !rc; i++) rc = make_picture(i, &pics[i], dir);
    }
    if (!rc) {
        printf("  pictures  ");
        for (int i = 0; i < 2; i++)
            printf("%s%s.png %ux%u (%s)", i ? ", " : "", pics[i].name, pics[i].w, pics[i].h, pics[i].desc);
        printf("\n");
        fflush(stdout);
        t0 = time_now_s();
        rc = server_start(&srv);
    }
    if (!rc) {
        printf("  server    pinhole serve on http://127.0.0.1:%d, ready in %.1f s; each turn is a streamed\n"
               "            POST /v1/chat/completions (temperature 0.7, seed %d, max_tokens %d), with\n"
               "            GET /metrics read before and after it\n\n",
               srv.port, time_now_s() - t0, DEMO_SAMPLER_SEED, DEMO_MAX_TOKENS);
        fflush(stdout);
        rc = play(&srv, pics, model_name, rows);
    }
    if (server_stop(&srv)) rc = -1;
    if (!rc) print_summary(rows, pics, 2);
    else if (srv.log[0] && !g_interrupted) print_server_log(&srv); /* before its folder goes */

    if (!keep && nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && !rc)
        rc = fail("cannot remove %s: %s", dir, strerror(errno));
    else if (keep) printf("\nkept %s (the models, the pictures and server.log)\n", dir);

    for (int i = 0; i < N_STEPS; i++) free(rows[i].tr.answer);
    for (int i = 0; i < 2; i++) free(pics[i].uri);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    curl_global_cleanup();
    if (rc) fprintf(stderr, "pinhole demo: %s\n", g_err[0] ? g_err : "failed");
    return rc ? 1 : 0;
}
