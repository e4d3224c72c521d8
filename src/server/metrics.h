/* /metrics: Prometheus text exposition of the server's counters and the
 * engine's cache counters. Thread-safe. */
#ifndef PH_SERVER_METRICS_H
#define PH_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "pinhole.h"

#define METRICS_MAX_SERIES 64
#define METRICS_N_BUCKETS  12
#define METRICS_MAX_FIELDS 64

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
    /* request fields accepted and ignored (unknown to the server), by API and
     * name: METRICS_MAX_FIELDS names, then each API's field="other" */
    struct {
        const char *endpoint;
        char name[65];
        uint64_t n;
    } ignored[METRICS_MAX_FIELDS];
    int n_ignored;
    uint64_t ignored_other[3];
} metrics;

void metrics_init(metrics *m);
void metrics_free(metrics *m);
void metrics_request(metrics *m, const char *endpoint, int status); /* endpoint: a static string */
void metrics_turn(metrics *m, const ph_turn_report *r);
void metrics_queue(metrics *m, int64_t len);
void metrics_enqueued(metrics *m, int64_t len); /* one more accepted; len waiting now */
void metrics_cancelled(metrics *m);
/* A request field the server does not know, ignored (name cut to 64
 * bytes). endpoint: one of the three APIs' labels (a static string).
 * Returns true the first time this (endpoint, name) is counted, and the
 * first time an endpoint's names overflow into "other" (*other set). */
bool metrics_field_ignored(metrics *m, const char *endpoint, const char *name, bool *other);
void metrics_timed_out(metrics *m);
/* The connections' numbers (conns.h), read when /metrics is rendered. */
typedef struct metrics_conns {
    int open;
    uint64_t closed_deadline, closed_limit, refused, closed_stalled;
} metrics_conns;
/* The exposition text (malloc'd). */
char *metrics_render(metrics *m, const ph_engine_stats *st, const metrics_conns *cs);

#endif
