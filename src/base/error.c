#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int set_v(ph_err *err, int code, const char *param, const char *fmt, va_list ap) {
    if (!err) return -1;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    err->code = code;
    err->param[0] = '\0';
    return err_at(err, param);
}

int err_set(ph_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(err, PH_ERR_INTERNAL, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

int err_setc(ph_err *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, NULL, fmt, ap);
    va_end(ap);
    return -1;
}

int err_setp(ph_err *err, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(err, PH_ERR_INPUT, param, fmt, ap);
    va_end(ap);
    return -1;
}

int err_at(ph_err *err, const char *param) {
    if (!err || err->code != PH_ERR_INPUT || err->param[0] || !param) return -1;
    const size_t n = strnlen(param, sizeof err->param - 1);
    memcpy(err->param, param, n);
    err->param[n] = '\0';
    return -1;
}

int err_prefix(ph_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[256];
    char old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* build "prefix: old" by hand: snprintf's truncation warning cannot see
     * that cutting a long message is intended */
    size_t np = strlen(prefix), no = strnlen(old, sizeof old - 1), cap = sizeof err->msg - 1, at = 0;
    memcpy(err->msg, prefix, np < cap ? np : cap);
    at = np < cap ? np : cap;
    for (const char *sep = ": "; *sep && at < cap; sep++) err->msg[at++] = *sep;
    size_t take = no < cap - at ? no : cap - at;
    memcpy(err->msg + at, old, take);
    err->msg[at + take] = '\0';
    return -1;
}
