#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static log_level g_level = LOG_INFO;
static log_format g_format = LOG_PLAIN;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void log_set_level(log_level level) { g_level = level; }

void log_set_format(log_format format) { g_format = format; }

int log_parse_format(const char *name, log_format *out) {
    if (!strcmp(name, "text")) *out = LOG_TEXT;
    else if (!strcmp(name, "json")) *out = LOG_JSON;
    else return -1;
    return 0;
}

/* A line being built: what does not fit is cut (the line stays whole). */
typedef struct line {
    char p[32768]; /* room for a whole message escaped */
    size_t n;
} line;

static void put(line *l, const char *s, size_t n) {
    if (n > sizeof l->p - 1 - l->n) n = sizeof l->p - 1 - l->n;
    memcpy(l->p + l->n, s, n);
    l->n += n;
}

static void putf(line *l, const char *fmt, ...) PH_PRINTF(2, 3);
static void putf(line *l, const char *fmt, ...) {
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0) put(l, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* s with its control characters escaped (a request's path or header
 * cannot forge a line); json: also quotes and backslashes, in quotes. */
static void put_escaped(line *l, const char *s, bool json) {
    if (json) put(l, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c < 0x20 || *c == 0x7f) putf(l, json ? "\\u%04x" : "\\x%02x", *c);
        else if (json && (*c == '"' || *c == '\\')) putf(l, "\\%c", *c);
        else put(l, (const char *)c, 1);
    }
    if (json) put(l, "\"", 1);
}

static void put_timestamp(line *l) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char b[32];
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    putf(l, "%s.%03ldZ", b, ts.tv_nsec / 1000000);
}

static void put_json_str(line *l, const char *key, const char *value) {
    if (!value) return;
    putf(l, ",\"%s\":", key);
    put_escaped(l, value, true);
}

static const char *const level_names[] = {"debug", "info", "warning", "error"};

static void render_json(line *l, log_level level, const log_ctx *c, const char *msg) {
    put(l, "{\"ts\":\"", 7);
    put_timestamp(l);
    putf(l, "\",\"level\":\"%s\"", level_names[level]);
    if (c) {
        put_json_str(l, "id", c->id);
        put_json_str(l, "client", c->client);
        put_json_str(l, "method", c->method);
        put_json_str(l, "path", c->path);
        put_json_str(l, "event", c->event);
        if (c->status) putf(l, ",\"status\":%d,\"ms\":%.1f", c->status, c->ms);
        for (int i = 0; i < c->n_fields && i < LOG_MAX_FIELDS; i++)
            putf(l, ",\"%s\":%lld", c->fields[i].key, (long long)c->fields[i].value);
        put_json_str(l, "error_type", c->error_type);
        put_json_str(l, "error", c->error);
    }
    put_json_str(l, "msg", msg);
    put(l, "}", 1);
}

/* [TS ]pinhole: [LEVEL: ][EVENT ][METHOD PATH][ from CLIENT][ id=ID][ STATUS][ in MS ms][: ][ERROR_TYPE: ERROR][; ]msg */
static void render_text(line *l, log_level level, const log_ctx *c, const char *msg) {
    if (g_format == LOG_TEXT) {
        put_timestamp(l);
        put(l, " ", 1);
    }
    put(l, "pinhole: ", 9);
    if (level != LOG_INFO) putf(l, "%s: ", level_names[level]);
    if (c) {
        const size_t head = l->n;
        if (c->event) putf(l, "%s ", c->event);
        if (c->method) {
            put_escaped(l, c->method, false);
            put(l, " ", 1);
        }
        if (c->path) put_escaped(l, c->path, false);
        if (c->client) putf(l, " from %s", c->client);
        if (c->id) putf(l, " id=%s", c->id);
        if (c->status) putf(l, " %d in %.0f ms", c->status, c->ms);
        const bool error = c->error_type || c->error;
        if (l->n > head && (*msg || error)) put(l, ": ", 2);
        if (c->error_type) {
            put_escaped(l, c->error_type, false);
            if (c->error) put(l, ": ", 2);
        }
        if (c->error) put_escaped(l, c->error, false);
        if (error && *msg) put(l, "; ", 2);
    }
    put_escaped(l, msg, false);
}

void log_line(log_level level, const log_ctx *ctx, const char *fmt, ...) {
    if (level < g_level) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    line l;
    l.n = 0;
    if (g_format == LOG_JSON) render_json(&l, level, ctx, msg);
    else render_text(&l, level, ctx, msg);
    l.p[l.n++] = '\n';
    pthread_mutex_lock(&g_lock);
    fwrite(l.p, 1, l.n, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_lock);
}
