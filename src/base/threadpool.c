/* Workers wait for a new job generation: they spin briefly (a decode step
 * launches hundreds of small jobs a token, and waking from a futex costs
 * more than the job), then yield the core for a while, then sleep on a
 * condition variable. Yielding matters when the machine is busy: a waiting
 * thread that only spins can hold the core that the thread it waits for
 * needs, and each job then costs a scheduler time slice. */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/cpus.h"

#define PH_SPIN_ITERS  2000  /* pause instructions before yielding */
#define PH_YIELD_ITERS 20000 /* sched_yield calls before sleeping */

struct tpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    _Atomic unsigned gen; /* bumped once per job */
    _Atomic int pending;  /* workers still running the current job */
    _Atomic int stop;
    tpool_fn fn;
    void *ctx;
};

typedef struct {
    tpool *pool;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    tpool *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire)) {
            if (++spins < PH_SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            if (spins < PH_SPIN_ITERS + PH_YIELD_ITERS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        if (atomic_load(&pool->stop)) break;
        seen = g;
        pool->fn(pool->ctx, ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

tpool *tpool_create(int n_threads) {
    if (n_threads <= 0) n_threads = cpus_threads();
    tpool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        if (!pool->threads) {
            tpool_free(pool);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->pool = pool; /* before the thread starts reading it */
                wa->ith = i;
            }
            if (!wa || pthread_create(&pool->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                pool->n = i; /* threads 1..i-1 started */
                tpool_free(pool);
                return NULL;
            }
        }
    }
    return pool;
}

int tpool_size(const tpool *pool) { return pool ? pool->n : 1; }

void tpool_run(tpool *pool, tpool_fn fn, void *ctx) {
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, pool->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    fn(ctx, 0, pool->n);
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; spins++) {
        if (spins < PH_SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}

void tpool_free(tpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i - 1], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    free(pool);
}
