/* A minimal test harness: CHECK records a failure and goes on; each test
 * binary ends with TEST_END, which prints "N passed, N failed" and returns
 * non-zero on any failure. */
#ifndef PH_TESTS_TEST_H
#define PH_TESTS_TEST_H

#include <stdio.h>

static int t_pass, t_fail;

#define CHECK(cond)                                                                                                  \
    do {                                                                                                             \
        if (cond) {                                                                                                  \
            t_pass++;                                                                                                \
        } else {                                                                                                     \
            t_fail++;                                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                 \
        }                                                                                                            \
    } while (0)

#define CHECKF(cond, ...)                                                                                            \
    do {                                                                                                             \
        if (cond) {                                                                                                  \
            t_pass++;                                                                                                \
        } else {                                                                                                     \
            t_fail++;                                                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                 \
            fprintf(stderr, __VA_ARGS__);                                                                            \
            fputc('\n', stderr);                                                                                     \
        }                                                                                                            \
    } while (0)

#define TEST_END()                                                                                                   \
    do {                                                                                                             \
        printf("%d passed, %d failed\n", t_pass, t_fail);                                                            \
        return t_fail ? 1 : 0;                                                                                       \
    } while (0)

#endif
