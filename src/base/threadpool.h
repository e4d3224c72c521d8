/* A fixed pool of worker threads that run one parallel job at a time.
 * tpool_run calls fn(ctx, ith, nth) for ith = 0..nth-1, the caller's
 * thread taking ith = 0, and returns when all have finished. */
#ifndef PH_BASE_THREADPOOL_H
#define PH_BASE_THREADPOOL_H

typedef struct tpool tpool;
typedef void (*tpool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means the physical cores available (base/cpus.h). Returns
 * NULL on failure. */
tpool *tpool_create(int n_threads);
void tpool_free(tpool *pool);
int tpool_size(const tpool *pool);
/* pool may be NULL: fn runs once on the caller's thread with nth = 1. */
void tpool_run(tpool *pool, tpool_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal parts; part ith is [*lo, *hi). */
static inline void tpool_split_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif
