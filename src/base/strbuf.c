/* The growable text buffer. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

/* Room for n more bytes and the NUL: 0, or -1 (oom set). */
static int reserve(strbuf *b, size_t n) {
    if (b->oom) return -1;
    char *p = n < SIZE_MAX - b->n ? grow_array(b->p, &b->cap, b->n + n, 1, 64) : NULL;
    if (!p) {
        b->oom = true;
        return -1;
    }
    b->p = p;
    return 0;
}
void strbuf_put(strbuf *b, const void *s, size_t n) {
    if (reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void strbuf_puts(strbuf *b, const char *s) { strbuf_put(b, s, strlen(s)); }

void strbuf_putc(strbuf *b, char c) { strbuf_put(b, &c, 1); }

void strbuf_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->oom = true;
        return;
    }
    if (reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void strbuf_free(strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
