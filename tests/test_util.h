/* Small helpers the C tests share: running a command, damaging a file. */
#ifndef PH_TESTS_TEST_UTIL_H
#define PH_TESTS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Runs a shell command; returns its exit status (-1 when it did not exit)
 * and its stdout in *out (malloc'd, NUL-ended). */
static inline int t_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 4096) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Flips bit 6 of the byte from_end bytes before the end of path: 0, or -1. */
static inline int t_flip_byte_from_end(const char *path, long from_end) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    int rc = fseek(f, -from_end, SEEK_END);
    int c = rc == 0 ? fgetc(f) : EOF;
    if (c == EOF || fseek(f, -from_end, SEEK_END) || fputc(c ^ 0x40, f) == EOF) rc = -1;
    if (fclose(f)) rc = -1;
    return rc;
}

#endif
