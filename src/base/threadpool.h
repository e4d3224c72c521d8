/* A fixed pool of worker threads that run one parallel job at a time.
 * ph_pool_run calls fn(ctx, ith, nth) for ith = 0..nth-1, the caller's
 * thread taking ith = 0, and returns when all have finished. */
#ifndef PH_BASE_THREADPOOL_H
#define PH_BASE_THREADPOOL_H

typedef struct ph_pool ph_pool;
typedef void (*ph_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means the physical cores available (base/cpus.h). Returns
 * NULL on failure. */
ph_pool *ph_pool_create(int n_threads);
void ph_pool_free(ph_pool *pool);
int ph_pool_size(const ph_pool *pool);
/* pool may be NULL: fn runs once on the caller's thread with nth = 1. */
void ph_pool_run(ph_pool *pool, ph_pool_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal parts; part ith is [*lo, *hi). */
static inline void ph_split_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif
