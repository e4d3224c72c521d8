/* What the API adapters share besides the conversation: checked field
 * readers, JSON strings from model text, error statuses and bodies, ids
 * and seeds from getrandom(2). */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/error.h"
#include "server/api.h"

/* The member of root that path names: its last component ("budget_tokens"
 * of "thinking.budget_tokens"). */
static json_t *member(json_t *root, const char *path) {
    const char *dot = strrchr(path, '.');
    return json_object_get(root, dot ? dot + 1 : path);
}

int api_get_number(json_t *root, const char *path, double lo, double hi, double *out, ph_err *err) {
    json_t *v = member(root, path);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return err_setp(err, path, "'%s' must be a number", path);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return err_setp(err, path, "'%s' must be between %g and %g", path, lo, hi);
    *out = d;
    return 0;
}

int api_get_int(json_t *root, const char *path, int64_t lo, int64_t hi, int64_t *out, ph_err *err) {
    json_t *v = member(root, path);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return err_setp(err, path, "'%s' must be an integer", path);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return err_setp(err, path, "'%s' must be between %lld and %lld", path, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

int api_get_bool(json_t *root, const char *path, bool *out, ph_err *err) {
    json_t *v = member(root, path);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return err_setp(err, path, "'%s' must be true or false", path);
    *out = json_is_true(v);
    return 0;
}

const char *api_path(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return buf;
}

/* ---- the body ----------------------------------------------------------------- */

json_t *api_parse_body(const char *body, size_t len, char *msg, size_t cap) {
    json_error_t je;
    /* texts are bytes: a string may hold \u0000 (the model may write one, and
     * what the server answered comes back as history) */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (root && json_is_object(root)) return root;
    if (root) {
        json_decref(root);
        snprintf(msg, cap, "the body must be a JSON object");
        return NULL;
    }
    /* jansson's words are its own (some name its flags): this server's */
    const char *what;
    switch (json_error_code(&je)) {
    case json_error_out_of_memory: what = "the server ran out of memory reading it"; break;
    case json_error_stack_overflow: what = "it nests arrays and objects too deeply"; break;
    case json_error_invalid_utf8: what = "it is not valid UTF-8"; break;
    case json_error_premature_end_of_input: what = "it ends before its value does"; break;
    case json_error_end_of_input_expected: what = "more follows its value"; break;
    case json_error_null_character:
    case json_error_null_byte_in_key: what = "an object key holds \\u0000, which keys may not"; break;
    case json_error_duplicate_key: what = "an object has the same key twice"; break;
    case json_error_numeric_overflow: what = "a number is too large"; break;
    case json_error_invalid_syntax: what = NULL; break; /* its text names the token at fault */
    default: what = "it cannot be read"; break;
    }
    if (what) snprintf(msg, cap, "the body is not valid JSON: %s (line %d, column %d)", what, je.line, je.column);
    else snprintf(msg, cap, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    return NULL;
}

json_t *api_utf8_string(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    strbuf b = {0};
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *ok = len && i + len <= n ? json_stringn(s + i, len) : NULL;
        if (ok) {
            strbuf_put(&b, s + i, len);
            json_decref(ok);
            i += len;
        } else {
            strbuf_put(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    v = json_stringn(b.p ? b.p : "", b.n);
    strbuf_free(&b);
    return v ? v : json_string("");
}

/* ---- errors ----------------------------------------------------------------- */

int api_status_for(const ph_err *err) {
    switch (err->code) {
    case PH_ERR_INPUT:
    case PH_ERR_TOO_LONG:
    case PH_ERR_NO_VISION: return 400;
    default: return 500;
    }
}

static const char *openai_type(int status) {
    switch (status) {
    case 400:
    case 404:
    case 405:
    case 413:
    case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 503: return "server_error";
    default: return "server_error";
    }
}

json_t *openai_error_body(int status, const char *msg) { return openai_error_body_code(status, msg, NULL, NULL); }

json_t *openai_error_body_code(int status, const char *msg, const char *param, const char *code) {
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", openai_type(status), "param",
                     param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
}

json_t *api_error_body(bool anthropic, int status, const char *msg, const char *param) {
    if (anthropic) return anthropic_error_body(status, msg);
    return openai_error_body_code(status, msg, param && *param ? param : NULL, NULL);
}

json_t *anthropic_error_body(int status, const char *msg) {
    const char *type = status == 400 || status == 415 ? "invalid_request_error"
                       : status == 401                ? "authentication_error"
                       : status == 403                ? "permission_error"
                       : status == 404                ? "not_found_error"
                       : status == 413                ? "request_too_large"
                       : status == 503                ? "overloaded_error"
                                                      : "api_error";
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", msg);
}

void api_make_id(char *out, size_t cap, const char *prefix) {
    static const char hex[] = "0123456789abcdef";
    uint8_t r[12];
    for (size_t i = 0; i < sizeof r; i += 8) { /* 64 bits at a time, from getrandom(2) (api_random_seed) */
        const uint64_t x = api_random_seed();
        memcpy(r + i, &x, sizeof r - i < 8 ? sizeof r - i : 8);
    }
    char tail[25];
    for (size_t i = 0; i < sizeof r; i++) {
        tail[2 * i] = hex[r[i] >> 4];
        tail[2 * i + 1] = hex[r[i] & 15];
    }
    tail[24] = '\0';
    snprintf(out, cap, "%s%s", prefix, tail);
}

bool api_request_id_sane(const char *id) {
    size_t n = strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
    return n >= 1 && n <= 64 && !id[n];
}

uint64_t api_random_seed(void) {
    uint64_t seed;
    for (;;) {
        ssize_t got = getrandom(&seed, sizeof seed, GRND_NONBLOCK);
        if (got == (ssize_t)sizeof seed) return seed;
        if (got < 0 && errno == EINTR) continue;
        break;
    }
    /* No kernel randomness (an old kernel, a seccomp filter, entropy not yet
     * ready at boot): the clock's nanoseconds plus a counter (two requests in
     * the same clock tick still differ), mixed by the splitmix64 finalizer. */
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    z += (uint64_t)atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
