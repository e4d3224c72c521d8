/* pinhole demo: with nothing downloaded, writes a synthetic Qwen3-VL pair and
 * a few generated pictures to a temporary folder, starts `pinhole serve` on
 * them and plays a scripted session through the OpenAI Chat Completions
 * endpoint, printing per turn what the engine reused, took from the
 * embedding cache, encoded and prefilled, and the time to first token.
 *
 * The client side is deliberately plain: an HTTP/1.1 client over a TCP
 * socket (Content-Length requests, Connection: close, chunked or sized
 * responses) and a reader of the SSE stream, so the demo also shows what a
 * real client sends: the whole conversation, pictures included, each turn. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spng.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/timeutil.h"
#include "cli/args.h"
#include "pinhole.h"

#define DEMO_SEED 7          /* the model's weights */
#define DEMO_SAMPLER_SEED 42 /* the requests' "seed" */
#define DEMO_MAX_TOKENS 20
#define DEMO_START_TIMEOUT_S 60.0
#define DEMO_IO_TIMEOUT_S 300.0 /* one request; generous for sanitizer builds */

static void demo_usage(FILE *out) {
    fprintf(out,
            "usage: pinhole demo [options]\n"
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

static int fail(const char *fmt, ...) PH_PRINTF(1, 2);
static int fail(const char *fmt, ...) {
    if (g_err[0]) return -1; /* what went wrong first is what matters */
    int n = g_turn ? snprintf(g_err, sizeof g_err, "turn %s: ", g_turn) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err + n, sizeof g_err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

typedef struct dbuf {
    char *p;
    size_t n, cap;
} dbuf;

static int dbuf_put(dbuf *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static void dbuf_drop(dbuf *b, size_t n) { /* drops the first n bytes */
    if (!n) return;
    memmove(b->p, b->p + n, b->n - n);
    b->n -= n;
    b->p[b->n] = '\0';
}

static char *base64(const unsigned char *p, size_t n, const char *prefix) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t lp = strlen(prefix);
    char *out = malloc(lp + (n + 2) / 3 * 4 + 1), *o;
    if (!out) return NULL;
    memcpy(out, prefix, lp);
    o = out + lp;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* Waits until fd is readable: 1, or 0 at t_end, or -1 when interrupted or failed. */
static int wait_readable(int fd, double t_end) {
    for (;;) {
        if (g_interrupted) return fail("interrupted");
        double left = t_end - ph_now_s();
        if (left <= 0) return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return fail("poll: %s", strerror(errno));
    }
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

static void paint(int which, uint8_t *rgb, uint32_t w, uint32_t h) {
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *px = rgb + ((size_t)y * w + x) * 3;
            if (which == 0) { /* a diagonal gradient with a red disc */
                int dx = (int)x - (int)w / 2, dy = (int)y - (int)h / 2, r = (int)h / 4;
                bool disc = dx * dx + dy * dy <= r * r;
                px[0] = disc ? 220 : (uint8_t)(x * 255 / w);
                px[1] = disc ? 30 : (uint8_t)(y * 255 / h);
                px[2] = disc ? 40 : (uint8_t)(255 - (x + y) * 255 / (w + h));
            } else { /* a blue and yellow checkerboard with a green square */
                bool sq = x >= w / 4 && x < w * 3 / 4 && y >= h / 4 && y < h * 3 / 4;
                bool dark = ((x / 32) + (y / 32)) % 2;
                px[0] = sq ? 40 : dark ? 30 : 240;
                px[1] = sq ? 190 : dark ? 60 : 210;
                px[2] = sq ? 60 : dark ? 200 : 40;
            }
        }
}

/* Paints picture `which`, writes it as DIR/NAME.png and keeps it as a data: URI. */
static int make_picture(int which, picture *pic, const char *dir) {
    size_t len = (size_t)pic->w * pic->h * 3;
    uint8_t *rgb = malloc(len);
    if (!rgb) return fail("out of memory");
    paint(which, rgb, pic->w, pic->h);
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {
        .width = pic->w, .height = pic->h, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
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
    if (!rc && !(pic->uri = base64(png, png_len, "data:image/png;base64,"))) rc = fail("out of memory");
    free(png);
    return rc;
}

/* ---- the server, as a child process -------------------------------------------- */

typedef struct server {
    pid_t pid;
    int err_fd;        /* its stderr */
    int port;
    bool draining;     /* a thread copies its stderr to log */
    bool show_log;     /* print log on failure */
    pthread_t drain;
    pthread_mutex_t mu;
    dbuf log;
} server;

static void *drain_main(void *arg) {
    server *s = arg;
    char buf[4096];
    for (;;) {
        ssize_t n = read(s->err_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        pthread_mutex_lock(&s->mu);
        dbuf_put(&s->log, buf, (size_t)n);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void print_server_log(server *s) {
    pthread_mutex_lock(&s->mu);
    const char *p = s->log.p ? s->log.p : "";
    size_t n = s->log.n;
    if (n > 8000) { /* the end is what matters */
        p += n - 8000;
        n = 8000;
    }
    fprintf(stderr, "---- the server's output%s ----\n%.*s%s---- end ----\n", s->log.n > n ? " (its end)" : "",
            (int)n, p, n && p[n - 1] != '\n' ? "\n" : "");
    pthread_mutex_unlock(&s->mu);
}

static const char *describe_exit(int st, char *buf, size_t n) {
    if (WIFEXITED(st)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(buf, n, "died on signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(buf, n, "stopped (wait status %#x)", (unsigned)st);
    return buf;
}

static int server_start(server *s, const char *dir, const char *model, const char *mmproj, int port, long threads) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) return fail("pipe: %s", strerror(errno));
    char port_s[16], threads_s[24], cache[1200], kv[1200];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(threads_s, sizeof threads_s, "%ld", threads);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(kv, sizeof kv, "%s/kv", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        /* the server's own caches (file ids) stay in the demo's folder */
        setenv("XDG_CACHE_HOME", cache, 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        const char *argv[] = {"pinhole", "serve", "-m", model, "--mmproj", mmproj, "--kv-disk-dir", kv, "--port",
                              port_s, threads > 0 ? "-t" : NULL, threads_s, NULL};
        execv("/proc/self/exe", (char *const *)argv);
        dprintf(STDERR_FILENO, "pinhole demo: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    s->err_fd = fds[0];
    /* its stderr, until it says where it listens (the log may hold an
     * earlier run's: look after it) */
    static const char ready[] = "pinhole: listening on http://127.0.0.1:";
    const double t_end = ph_now_s() + DEMO_START_TIMEOUT_S;
    const size_t from = s->log.n;
    for (;;) {
        char *at = s->log.n > from ? strstr(s->log.p + from, ready) : NULL;
        if (at && strchr(at, '\n')) {
            s->port = atoi(at + sizeof ready - 1);
            break;
        }
        int w = wait_readable(s->err_fd, t_end);
        if (w < 0) return -1;
        if (w == 0) {
            s->show_log = true;
            return fail("the server did not start within %.0f s", DEMO_START_TIMEOUT_S);
        }
        char buf[4096];
        ssize_t n = read(s->err_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int st = 0;
            waitpid(s->pid, &st, 0);
            s->pid = 0;
            s->show_log = true;
            char how[128];
            return fail("the server %s before listening", describe_exit(st, how, sizeof how));
        }
        dbuf_put(&s->log, buf, (size_t)n);
    }
    if (s->port <= 0 || s->port > 65535) return fail("the server announced a strange port");
    if (pthread_create(&s->drain, NULL, drain_main, s)) return fail("cannot start a thread");
    s->draining = true;
    return 0;
}

/* SIGINT, then waits (at most 60 s; then SIGKILL). Returns 0 when it exited 0. */
static int server_stop(server *s) {
    int rc = 0, st = 0;
    char how[128];
    if (s->pid > 0) {
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        const bool ended = w == s->pid; /* on its own, during the session */
        if (w == 0) {
            kill(s->pid, SIGINT);
            const double t_end = ph_now_s() + 60.0;
            while ((w = waitpid(s->pid, &st, WNOHANG)) == 0 && ph_now_s() < t_end) usleep(20 * 1000);
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
        if (rc) s->show_log = true;
    }
    if (s->draining) pthread_join(s->drain, NULL);
    s->draining = false;
    if (s->err_fd >= 0) close(s->err_fd);
    s->err_fd = -1;
    return rc;
}

/* ---- an HTTP/1.1 client ---------------------------------------------------------- */

typedef struct http {
    int fd;
    dbuf raw;        /* received, not yet decoded */
    int status;
    bool chunked, sized, done, eof;
    size_t left;     /* of the current chunk, or of Content-Length */
    bool want_crlf;  /* after a chunk's data */
} http;

static int http_open(http *h, int port, const char *method, const char *path, const char *body) {
    memset(h, 0, sizeof *h);
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (h->fd < 0) return fail("socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(h->fd, (struct sockaddr *)&a, sizeof a)) return fail("connect to port %d: %s", port, strerror(errno));
    size_t blen = body ? strlen(body) : 0;
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: pinhole-demo\r\nAccept: */*\r\n"
                      "Connection: close\r\n%sContent-Length: %zu\r\n\r\n",
                      method, path, port, body ? "Content-Type: application/json\r\n" : "", blen);
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)hn, blen};
    for (int i = 0; i < 2; i++)
        for (size_t off = 0; off < lens[i];) {
            ssize_t n = send(h->fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL);
            if (g_interrupted) return fail("interrupted");
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return fail("sending %s %s: %s", method, path, strerror(errno));
            off += (size_t)n;
        }
    return 0;
}

static void http_close(http *h) {
    if (h->fd >= 0) close(h->fd);
    h->fd = -1;
    free(h->raw.p);
    h->raw = (dbuf){0};
}

/* Reads what the server sent next; sets eof at the end. */
static int http_fill(http *h) {
    const double t_end = ph_now_s() + DEMO_IO_TIMEOUT_S;
    for (;;) {
        int w = wait_readable(h->fd, t_end);
        if (w < 0) return -1;
        if (w == 0) return fail("no answer from the server within %.0f s", DEMO_IO_TIMEOUT_S);
        char buf[16384];
        ssize_t n = recv(h->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail("reading from the server: %s", strerror(errno));
        if (n == 0) {
            h->eof = true;
            return 0;
        }
        return dbuf_put(&h->raw, buf, (size_t)n) ? fail("out of memory") : 0;
    }
}

static int http_head(http *h) {
    char *end;
    while (!(end = h->raw.p ? strstr(h->raw.p, "\r\n\r\n") : NULL)) {
        if (h->eof) return fail("the server closed the connection before answering");
        if (http_fill(h)) return -1;
    }
    *end = '\0';
    if (sscanf(h->raw.p, "HTTP/1.%*d %d", &h->status) != 1) return fail("not an HTTP response");
    for (char *line = strstr(h->raw.p, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (!strncasecmp(line, "transfer-encoding:", 18) && strstr(line, "chunked")) h->chunked = true;
        if (!strncasecmp(line, "content-length:", 15)) {
            h->sized = true;
            h->left = (size_t)strtoull(line + 15, NULL, 10);
        }
    }
    dbuf_drop(&h->raw, (size_t)(end - h->raw.p) + 4);
    if (!h->chunked && h->sized && h->left == 0) h->done = true;
    return 0;
}

/* Decodes the body bytes received so far into out; sets done at its end. */
static int http_decode(http *h, dbuf *out) {
    size_t pos = 0;
    int rc = 0;
    while (!h->done && pos < h->raw.n) {
        size_t avail = h->raw.n - pos;
        if (!h->chunked) {
            size_t take = h->sized && h->left < avail ? h->left : avail;
            if (dbuf_put(out, h->raw.p + pos, take)) return fail("out of memory");
            pos += take;
            if (h->sized && (h->left -= take) == 0) h->done = true;
        } else if (h->left) {
            size_t take = h->left < avail ? h->left : avail;
            if (dbuf_put(out, h->raw.p + pos, take)) return fail("out of memory");
            pos += take;
            h->left -= take;
            h->want_crlf = h->left == 0;
        } else if (h->want_crlf) {
            if (avail < 2) break;
            if (memcmp(h->raw.p + pos, "\r\n", 2)) {
                rc = fail("malformed chunked response");
                break;
            }
            pos += 2;
            h->want_crlf = false;
        } else {
            char *eol = strstr(h->raw.p + pos, "\r\n");
            if (!eol) break;
            char *e;
            unsigned long long size = strtoull(h->raw.p + pos, &e, 16);
            if (e == h->raw.p + pos) {
                rc = fail("malformed chunked response");
                break;
            }
            pos = (size_t)(eol - h->raw.p) + 2;
            if (size == 0) h->done = true; /* trailers, if any, do not matter */
            h->left = (size_t)size;
        }
    }
    dbuf_drop(&h->raw, pos);
    return rc;
}

/* Reads more of the body into out. Returns 1 at its end, 0 for more, -1 on errors. */
static int http_more(http *h, dbuf *out) {
    if (http_decode(h, out)) return -1;
    if (h->done) return 1;
    if (h->eof) {
        if (h->chunked || h->sized) return fail("the server closed the connection in the middle of an answer");
        return 1;
    }
    if (http_fill(h)) return -1;
    if (http_decode(h, out)) return -1;
    return h->done || (h->eof && !h->chunked && !h->sized) ? 1 : 0;
}

/* A whole request; the body (malloc'd) in *out. */
static int http_request(int port, const char *method, const char *path, const char *body, int *status, char **out) {
    http h;
    dbuf b = {0};
    int r = http_open(&h, port, method, path, body);
    if (!r) r = http_head(&h);
    while (!r) r = http_more(&h, &b);
    *status = h.status;
    http_close(&h);
    if (r < 0) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : strdup("");
    return 0;
}

/* ---- the counters of /metrics ---------------------------------------------------- */

enum { M_REUSED, M_RAM, M_DISK, M_PREFILLED, M_HITS, M_ENCODED, M_COUNT };
static const char *const metric_names[M_COUNT] = {
    "pinhole_prompt_tokens_reused_total", "pinhole_ram_cache_tokens_restored_total",
    "pinhole_disk_cache_tokens_restored_total",
    "pinhole_prompt_tokens_prefilled_total", "pinhole_image_cache_hits_total", "pinhole_images_encoded_total"};

static int read_metrics(int port, double v[M_COUNT]) {
    int status;
    char *text;
    if (http_request(port, "GET", "/metrics", NULL, &status, &text)) return -1;
    int rc = status == 200 ? 0 : fail("GET /metrics answered %d", status);
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
    dbuf answer;
    double ttft_s;    /* < 0: no text came */
    long long prompt, cached, completion;
    bool usage;
} turn_result;

/* One SSE data line: content deltas, the usage chunk, errors. */
static int on_data(const char *data, double t0, turn_result *tr, bool *finished) {
    if (!strcmp(data, "[DONE]")) {
        *finished = true;
        return 0;
    }
    json_error_t je;
    json_t *c = json_loads(data, 0, &je);
    if (!c) return fail("the stream sent a line that is not JSON: %s", je.text);
    int rc = 0;
    json_t *err = json_object_get(c, "error");
    json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
    json_t *content = json_object_get(json_object_get(ch, "delta"), "content");
    json_t *usage = json_object_get(c, "usage");
    if (err) {
        const char *m = json_string_value(json_object_get(err, "message"));
        rc = fail("the server reported an error in the stream: %s", m ? m : "(no message)");
    } else if (json_string_length(content)) {
        if (tr->ttft_s < 0) tr->ttft_s = ph_now_s() - t0;
        if (dbuf_put(&tr->answer, json_string_value(content), json_string_length(content))) rc = fail("out of memory");
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
    memset(tr, 0, sizeof *tr);
    tr->ttft_s = -1;
    http h;
    dbuf sse = {0};
    const double t0 = ph_now_s();
    int r = http_open(&h, port, "POST", "/v1/chat/completions", body);
    if (!r) r = http_head(&h);
    if (!r && h.status != 200) { /* the error body, for the message */
        while (!r) r = http_more(&h, &sse);
        json_t *j = sse.p ? json_loads(sse.p, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fail("POST /v1/chat/completions answered %d: %s", h.status, m ? m : sse.p ? sse.p : "");
        json_decref(j);
        r = -1;
    }
    bool finished = false;
    while (r == 0) {
        r = http_more(&h, &sse);
        if (r < 0) break;
        /* every complete line */
        char *nl;
        size_t used = 0;
        while (r >= 0 && used < sse.n && (nl = memchr(sse.p + used, '\n', sse.n - used))) {
            *nl = '\0';
            char *line = sse.p + used;
            if (nl > line && nl[-1] == '\r') nl[-1] = '\0';
            if (!strncmp(line, "data:", 5) && on_data(line + 5 + (line[5] == ' '), t0, tr, &finished)) r = -1;
            used = (size_t)(nl - sse.p) + 1;
        }
        if (used) dbuf_drop(&sse, used);
    }
    http_close(&h);
    free(sse.p);
    if (r < 0) return -1;
    if (!finished) return fail("the stream ended without data: [DONE]");
    if (!tr->usage) return fail("the stream sent no usage chunk (stream_options.include_usage was set)");
    if (!tr->answer.p) dbuf_put(&tr->answer, "", 0);
    return 0;
}

/* ---- the script ------------------------------------------------------------------- */

typedef struct step {
    const char *label;
    int conv;       /* 0 A, 1 B, 2 C */
    int picture;    /* attached to this turn's message; -1: none */
    bool text_first;/* the text before the picture */
    const char *text;
    const char *what;
    bool restart;   /* the server is stopped and started again before this turn */
} step;

static const step script[] = {
    {"A1", 0, 0, false, "What is in this picture?", "conversation A, turn 1: picture A + a question", false},
    {"A2", 0, -1, false, "Which colours does it use?", "A, turn 2: a follow-up (the history re-sent)", false},
    {"B1", 1, 1, false, "Describe this picture.", "conversation B, turn 1: picture B + a question", false},
    {"A3", 0, -1, false, "Is there a circle in it?", "back to A, turn 3: a follow-up", false},
    {"B2", 1, -1, false, "What shape is in the middle?", "B, turn 2: a follow-up", false},
    {"C1", 2, 0, true, "Here is a picture again; describe its colours:", "conversation C, new: picture A sent again", false},
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
           "    ram      of those, restored from a RAM checkpoint: a conversation displaced by another\n"
           "             one resumes from memory instead of being read again\n"
           "    disk     of those, restored from a checkpoint file (--kv-disk-dir): after a restart a\n"
           "             conversation resumes from disk, its picture neither encoded nor read again\n"
           "    cached   the same, as the API reports it (usage.prompt_tokens_details.cached_tokens)\n"
           "    ttft_ms  time to first token, measured here: it drops when the prefix is reused\n"
           "\n",
           shape);
}

static void print_row(const step *st, const row *rw) {
    char ttft[32];
    if (rw->tr.ttft_s >= 0) snprintf(ttft, sizeof ttft, "%.1f", rw->tr.ttft_s * 1e3);
    else snprintf(ttft, sizeof ttft, "-");
    printf("%-4s %4d %6lld %6.0f %6.0f %6.0f %6lld %7.0f %3.0f %3.0f %8s  %s\n", st->label, rw->pics, rw->tr.prompt,
           rw->d[M_REUSED], rw->d[M_RAM], rw->d[M_DISK], rw->tr.cached, rw->d[M_PREFILLED], rw->d[M_HITS],
           rw->d[M_ENCODED], ttft, st->what);
    printf("%-4s answer (%lld tokens): ", "", rw->tr.completion);
    print_clipped(rw->tr.answer.p, 60);
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
           "  (%.0f%%) were reused from the live state, a RAM checkpoint or a checkpoint file instead of being\n"
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

/* Where the server is started from, for a restart in the middle of the script. */
typedef struct launch {
    const char *dir, *model, *mmproj;
    int port;
    long threads;
} launch;

static int play(server *srv, const launch *l, picture *pics, const char *model_name, row *rows) {
    json_t *conv[N_CONVS];
    for (int c = 0; c < N_CONVS; c++)
        conv[c] = json_pack("[{s:s,s:s}]", "role", "system", "content",
                            "You are a helpful assistant. Answer briefly.");
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
            if (!rc) rc = server_start(srv, l->dir, l->model, l->mmproj, l->port, l->threads);
            if (rc) break;
        }
        const int port = srv->port;
        json_array_append_new(conv[st->conv], user_message(st->picture >= 0 ? &pics[st->picture] : NULL, st->text, st->text_first));
        if (st->picture >= 0) n_pics_in[st->conv]++;
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
        json_array_append_new(conv[st->conv], json_pack("{s:s,s:s}", "role", "assistant", "content", rw->tr.answer.p));
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
    server srv = {.err_fd = -1};
    pthread_mutex_init(&srv.mu, NULL);
    picture pics[2] = {{.name = "A", .desc = "a gradient with a red disc", .w = 320, .h = 240},
                       {.name = "B", .desc = "a checkerboard with a green square", .w = 256, .h = 256}};
    row rows[N_STEPS];
    memset(rows, 0, sizeof rows);
    char out[1200], model[1300], mmproj[1300], model_name[64];
    snprintf(model_name, sizeof model_name, "qwen3vl-synth-%s", shape);
    snprintf(out, sizeof out, "%s/%s", dir, model_name);
    snprintf(model, sizeof model, "%s.gguf", out);
    snprintf(mmproj, sizeof mmproj, "%s-mmproj.gguf", out);

    print_header(shape);
    printf("  folder    %s (%s)\n", dir, keep ? "kept: --keep" : "removed at the end; --keep keeps it");
    fflush(stdout);

    double t0 = ph_now_s();
    ph_synth_params sp = {.shape = shape, .type = "f16", .vision_type = "f16", .vocab = NULL, .out = out,
                          .seed = DEMO_SEED, .n_threads = (int)threads};
    ph_err err = {0};
    if (ph_synth(&sp, &err)) rc = fail("cannot write the synthetic model: %s", err.msg);
    if (!rc) {
        printf("  model     %s.gguf + %s-mmproj.gguf (%s, f16, random weights, seed %d), written in %.1f s\n",
               model_name, model_name, shape, DEMO_SEED, ph_now_s() - t0);
        for (int i = 0; i < 2 && !rc; i++) rc = make_picture(i, &pics[i], dir);
    }
    if (!rc) {
        printf("  pictures  ");
        for (int i = 0; i < 2; i++) printf("%s%s.png %ux%u (%s)", i ? ", " : "", pics[i].name, pics[i].w, pics[i].h,
                                           pics[i].desc);
        printf("\n");
        fflush(stdout);
        t0 = ph_now_s();
        rc = server_start(&srv, dir, model, mmproj, (int)port, threads);
    }
    if (!rc) {
        printf("  server    pinhole serve on http://127.0.0.1:%d, ready in %.1f s; each turn is a streamed\n"
               "            POST /v1/chat/completions (temperature 0.7, seed %d, max_tokens %d), with\n"
               "            GET /metrics read before and after it\n\n",
               srv.port, ph_now_s() - t0, DEMO_SAMPLER_SEED, DEMO_MAX_TOKENS);
        fflush(stdout);
        const launch l = {dir, model, mmproj, (int)port, threads};
        rc = play(&srv, &l, pics, model_name, rows);
        if (rc) srv.show_log = true;
    }
    if (server_stop(&srv)) rc = -1;
    if (!rc) print_summary(rows, pics, 2);

    /* the server's output stays with the kept folder */
    if (keep && srv.log.n) {
        char path[1200];
        snprintf(path, sizeof path, "%s/server.log", dir);
        FILE *f = fopen(path, "w");
        if (f) {
            fwrite(srv.log.p, 1, srv.log.n, f);
            fclose(f);
        }
    }
    if (!keep && nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && !rc)
        rc = fail("cannot remove %s: %s", dir, strerror(errno));
    else if (keep)
        printf("\nkept %s (the models, the pictures and server.log)\n", dir);

    for (int i = 0; i < N_STEPS; i++) free(rows[i].tr.answer.p);
    for (int i = 0; i < 2; i++) free(pics[i].uri);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc) {
        if (srv.show_log && !g_interrupted) print_server_log(&srv);
        fprintf(stderr, "pinhole demo: %s\n", g_err[0] ? g_err : "failed");
    }
    free(srv.log.p);
    pthread_mutex_destroy(&srv.mu);
    return rc ? 1 : 0;
}
