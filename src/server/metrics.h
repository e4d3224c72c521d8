/* /metrics: Prometheus text exposition of the server's counters and the
 * engine's cache counters. Thread-safe. */
#ifndef PH_SERVER_METRICS_H
#define PH_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "pinhole.h"

#define METRICS_MAX_SERIES 64
#define METRICS_N_BUCKETS  12

typedef struct metrics {
    pthread_mutex_t mu;
    struct {
        const char *endpoint;
        int status;
        uint64_t n;
    } req[METRICS_MAX_SERIES];
    int n_req;
    uint64_t prompt_tokens, generated_tokens, cancelled, timed_out, enqueued;
    int64_t queue;
    uint64_t ttft_bucket[METRICS_N_BUCKETS];
    double ttft_sum;
    uint64_t ttft_count;
} metrics;

void metrics_init(metrics *m);
void metrics_free(metrics *m);
void metrics_request(metrics *m, const char *endpoint, int status); /* endpoint: a static string */
void metrics_turn(metrics *m, const ph_turn_report *r);
void metrics_queue(metrics *m, int64_t len);
void metrics_enqueued(metrics *m, int64_t len); /* one more accepted; len waiting now */
void metrics_cancelled(metrics *m);
void metrics_timed_out(metrics *m);
/* The connections' numbers (conns.h), read when /metrics is rendered. */
typedef struct metrics_conns {
    int open;
    uint64_t closed_deadline, closed_limit, refused;
} metrics_conns;
/* The exposition text (malloc'd). */
char *metrics_render(metrics *m, const ph_engine_stats *st, const metrics_conns *cs);

#endif
