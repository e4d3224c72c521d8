/* Microbenchmark of mat_mul (not part of the library). Build by hand:
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Isrc -Iinclude tools/bench_kernels.c \
 *       build/libpinhole_core.a -lpthread -lm -o /tmp/bench_kernels
 * Reports the machine's read and copy bandwidth, decode (1 row) GB/s of
 * weight bytes streamed, and prefill (512 rows) GFLOP/s, for a matrix of
 * 2048 inputs x 6144 outputs. Decode rotates over enough copies of the
 * matrix to defeat the last-level cache. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const uint64_t *src;
    uint64_t *dst;
    size_t n;
    uint64_t sink[64];
} bw_ctx;

static void read_job(void *vctx, int ith, int nth) {
    bw_ctx *c = vctx;
    long lo, hi;
    tpool_split_range((long)c->n, ith, nth, &lo, &hi);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (long i = lo; i + 4 <= hi; i += 4)
        s0 += c->src[i], s1 += c->src[i + 1], s2 += c->src[i + 2], s3 += c->src[i + 3];
    c->sink[ith * 8] = s0 + s1 + s2 + s3;
}

static void copy_job(void *vctx, int ith, int nth) {
    bw_ctx *c = vctx;
    long lo, hi;
    tpool_split_range((long)c->n, ith, nth, &lo, &hi);
    memcpy(c->dst + lo, c->src + lo, (size_t)(hi - lo) * 8);
}

static void bandwidth(tpool *pool) {
    size_t bytes = (size_t)512 << 20;
    uint64_t *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    bw_ctx c = {.src = a, .dst = b, .n = bytes / 8};
    double best_r = 1e9, best_c = 1e9;
    for (int it = 0; it < 5; it++) {
        double t0 = now();
        tpool_run(pool, read_job, &c);
        double t1 = now();
        tpool_run(pool, copy_job, &c);
        double t2 = now();
        if (t1 - t0 < best_r) best_r = t1 - t0;
        if (t2 - t1 < best_c) best_c = t2 - t1;
    }
    printf("memory, %d threads: read %.1f GB/s, memcpy %.1f GB/s (read+write)\n", tpool_size(pool),
           bytes / best_r / 1e9, 2 * bytes / best_c / 1e9);
    free(a);
    free(b);
}

static void bench_type(int type, tpool *pool1, tpool *pool2) {
    const int64_t n_in = 2048, n_out = 6144, n_pf = 512;
    size_t rb = type_row_bytes(type, n_in), mb = rb * (size_t)n_out;
    int copies = (int)(((size_t)256 << 20) / mb) + 1;
    uint8_t *w = malloc(mb * (size_t)copies);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = (float)((o * 7 + i * 13) % 97) / 97.f - 0.5f;
        quantize_weight_row(type, row, w + (size_t)o * rb, n_in);
    }
    for (int k = 1; k < copies; k++) memcpy(w + (size_t)k * mb, w, mb);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_pf)), *y = malloc(sizeof(float) * (size_t)(n_out * n_pf));
    for (int64_t i = 0; i < n_in * n_pf; i++) x[i] = (float)(i % 31) / 31.f - 0.5f;

    tpool *pools[2] = {pool1, pool2};
    for (int p = 0; p < 2; p++) {
        wmat m = {.type = type, .n_in = n_in, .n_out = n_out, .data = w, .row_bytes = rb};
        double td = 1e9; /* best round over all copies, per product */
        for (int round = 0; round < 5; round++) {
            double t0 = now();
            for (int k = 0; k < copies; k++) {
                m.data = w + (size_t)k * mb;
                mat_mul(pools[p], &m, x, 1, y);
            }
            double t = (now() - t0) / copies;
            if (t < td) td = t;
        }
        m.data = w;
        mat_mul(pools[p], &m, x, n_pf, y); /* warm up */
        double best = 1e9;
        for (int r = 0; r < 3; r++) {
            double t1 = now();
            mat_mul(pools[p], &m, x, n_pf, y);
            double t = now() - t1;
            if (t < best) best = t;
        }
        printf("%-5s %d thread%s: decode %7.1f us  %5.1f GB/s   prefill(512) %6.1f ms  %6.1f GFLOP/s\n",
               type_get(type)->name, tpool_size(pools[p]), p ? "s" : " ", td * 1e6, mb / td / 1e9, best * 1e3,
               2.0 * n_in * n_out * n_pf / best / 1e9);
    }
    free(w);
    free(row);
    free(x);
    free(y);
}

int main(void) {
    kernels_init();
    printf("isa: %s\n", isa_name(kernels_isa()));
    tpool *pool1 = tpool_create(1), *pool2 = tpool_create(2);
    bandwidth(pool1);
    bandwidth(pool2);
    const int types[] = {PH_TYPE_Q4_K, PH_TYPE_Q6_K, PH_TYPE_Q8_0, PH_TYPE_F16,
                         PH_TYPE_Q4_0, PH_TYPE_Q5_K, PH_TYPE_F32};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) bench_type(types[i], pool1, pool2);
    tpool_free(pool1);
    tpool_free(pool2);
    return 0;
}
