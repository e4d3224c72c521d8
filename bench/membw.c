/* Streaming read bandwidth with N threads (bench/run.sh compiles this on the fly
 * into /tmp: cc -O3 -march=native -pthread bench/membw.c -o /tmp/...; -O3 vectorizes
 * the sum: at -O2 the scalar loop, not the memory, bounds it on fast machines).
 *
 *   membw [THREADS=2] [MIB=1024] [PASSES=10]
 *
 * Allocates MIB MiB (far larger than the caches), touches it, then each pass has
 * THREADS threads each sum 64-bit words of their own contiguous slice; a pass's
 * bandwidth is bytes / wall time of the slowest thread. Prints one JSON line with
 * the best and the median pass in GB/s (1e9 bytes/s): the "best" is the machine's
 * achievable read bandwidth, the bound that a decode step (which streams every
 * weight once) cannot beat. Not part of the build or CI. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    pthread_barrier_t *bar;
    double t0, t1;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    /* 4 independent accumulators; the compiler vectorizes this into wide loads */
    uint64_t a = 0, b = 0, c = 0, d = 0;
    const uint64_t *p = j->p;
    size_t n = j->n & ~(size_t)3;
    for (size_t i = 0; i < n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    j->t1 = now_s();
    j->sum = a + b + c + d;
    return NULL;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    int passes = argc > 3 ? atoi(argv[3]) : 10;
    if (threads < 1 || threads > 256 || mib < 64 || passes < 1 || passes > 1000) {
        fprintf(stderr, "usage: membw [THREADS] [MIB>=64] [PASSES]\n");
        return 2;
    }
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, bytes)) {
        fprintf(stderr, "membw: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;

    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double *gbs = calloc((size_t)passes, sizeof *gbs);
    uint64_t check = 0;
    size_t per = words / (size_t)threads;
    for (int r = 0; r < passes; r++) {
        for (int t = 0; t < threads; t++) {
            jobs[t] = (job){buf + (size_t)t * per, per, 0, &bar, 0, 0};
            pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        double t0 = 1e300, t1 = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            if (jobs[t].t0 < t0) t0 = jobs[t].t0;
            if (jobs[t].t1 > t1) t1 = jobs[t].t1;
            check += jobs[t].sum;
        }
        gbs[r] = (double)(per * (size_t)threads * 8) / (t1 - t0) / 1e9;
    }
    qsort(gbs, (size_t)passes, sizeof *gbs, cmp);
    printf("{\"threads\":%d,\"mib\":%zu,\"passes\":%d,\"best_gbs\":%.2f,\"median_gbs\":%.2f,\"check\":%llu}\n",
           threads, mib, passes, gbs[passes - 1], gbs[passes / 2], (unsigned long long)(check & 0xffff));
    free(gbs);
    free(tid);
    free(jobs);
    free(buf);
    return 0;
}
