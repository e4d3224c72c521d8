/* A growable text (or byte) buffer: the one string builder of the project.
 * On a failed allocation it stops growing and sets oom, so a caller
 * appends freely and checks once at the end. p is NUL-terminated whenever
 * anything was appended (the NUL is not counted in n). */
#ifndef PH_BASE_STRBUF_H
#define PH_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
    char *p;
    size_t n, cap;
    bool oom;
} strbuf;

void strbuf_put(strbuf *b, const void *s, size_t n);
void strbuf_puts(strbuf *b, const char *s);
void strbuf_putc(strbuf *b, char c);
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_free(strbuf *b);

#endif
