#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int set_v(ph_err *e, int code, const char *fmt, va_list ap) {
    if (!e) return -1;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    e->code = code;
    return -1;
}

int ph_err_set(ph_err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(e, PH_ERR_INTERNAL, fmt, ap);
    va_end(ap);
    return -1;
}

int ph_err_setc(ph_err *e, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_v(e, code, fmt, ap);
    va_end(ap);
    return -1;
}

int ph_err_prefix(ph_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[256];
    char old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* build "prefix: old" by hand: snprintf's truncation warning cannot see
     * that cutting a long message is intended */
    size_t np = strlen(prefix), no = strnlen(old, sizeof old - 1), cap = sizeof e->msg - 1, at = 0;
    memcpy(e->msg, prefix, np < cap ? np : cap);
    at = np < cap ? np : cap;
    for (const char *sep = ": "; *sep && at < cap; sep++) e->msg[at++] = *sep;
    size_t take = no < cap - at ? no : cap - at;
    memcpy(e->msg + at, old, take);
    e->msg[at + take] = '\0';
    return -1;
}
