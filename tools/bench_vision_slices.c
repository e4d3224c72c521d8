/* Times an encode in slices (vision_job; not part of the library). Build by hand:
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Isrc -Iinclude tools/bench_vision_slices.c \
 *       build/libpinhole_core.a -lpthread -lm -o /tmp/bench_vision_slices
 * Usage: bench_vision_slices MMPROJ.gguf [W H [BUDGET [LAYERS [THREADS]]]]
 * Encodes a W x H picture of pseudo-random values (default 1024 x 768) with
 * steps of BUDGET estimated flops (default VISION_STEP_FLOPS; 0: a whole
 * layer a step) for LAYERS layers (default all), and prints the time of
 * every step by the layer it ends in: median and largest, wall clock and
 * CPU time of the process (on a loaded machine the CPU time over the
 * threads is the better guess of an idle machine's wall clock). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/threadpool.h"
#include "model/vision.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MMPROJ.gguf [W H [BUDGET [LAYERS [THREADS]]]]\n", argv[0]);
        return 2;
    }
    const int w = argc > 3 ? atoi(argv[2]) : 1024, h = argc > 3 ? atoi(argv[3]) : 768;
    const int64_t budget = argc > 4 ? atoll(argv[4]) > 0 ? atoll(argv[4]) : INT64_MAX : VISION_STEP_FLOPS;
    tpool *pool = tpool_create(argc > 6 ? atoi(argv[6]) : 2);
    ph_err e = {0};
    vis_tower *v = vision_load(argv[1], pool, &e);
    if (!v) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    const vision_info *in = vision_get_info(v);
    const int layers = argc > 5 && atoi(argv[5]) > 0 ? atoi(argv[5]) : in->n_layer + 1;
    const int f = in->patch_size * in->n_merge;
    prep_image img = {w / f * f, h / f * f, w / f, h / f, NULL};
    img.pixels = malloc(sizeof(float) * 3 * (size_t)img.w * img.h);
    uint32_t s = 1;
    for (size_t i = 0; i < 3 * (size_t)img.w * img.h; i++) {
        s = s * 1664525u + 1013904223u;
        img.pixels[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    vision_job *j = vision_job_new(v, &img, NULL, &e);
    if (!j) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("%dx%d (%d patches), width %d, %d threads, budget %lld flops a step\n", img.w, img.h,
           img.w / in->patch_size * (img.h / in->patch_size), in->n_embd, tpool_size(pool), (long long)budget);
    double *t = malloc(sizeof(double) * 1000000), *c = malloc(sizeof(double) * 1000000);
    int n = 0, first = 0, done = 0, layer = 0, total;
    const double t0 = now(), c0 = cpu();
    while (!done && layer < layers) {
        const double a = now(), ac = cpu();
        done = vision_job_step(j, budget);
        c[n] = cpu() - ac;
        t[n++] = now() - a;
        int l;
        vision_job_progress(j, &l, &total);
        if (l != layer || done) {
            qsort(t + first, (size_t)(n - first), sizeof *t, cmp_double);
            qsort(c + first, (size_t)(n - first), sizeof *c, cmp_double);
            printf("layer %2d: %4d steps, median %.1f ms (cpu %.1f ms), largest %.1f ms (cpu %.1f ms)\n", l,
                   n - first, 1e3 * t[first + (n - first) / 2], 1e3 * c[first + (n - first) / 2], 1e3 * t[n - 1],
                   1e3 * c[n - 1]);
            first = n;
            layer = l;
        }
    }
    printf("%d steps in %.2f s (cpu %.2f s)\n", n, now() - t0, cpu() - c0);
    vision_job_free(j);
    free(t);
    free(c);
    free(img.pixels);
    vision_free(v);
    tpool_free(pool);
    return 0;
}
