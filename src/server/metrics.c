#include "server/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double ttft_le[METRICS_N_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

void metrics_init(metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_free(metrics *m) { pthread_mutex_destroy(&m->mu); }

void metrics_request(metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_req && !(m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint))) i++;
    if (i == m->n_req && m->n_req < METRICS_MAX_SERIES) {
        m->req[i].endpoint = endpoint;
        m->req[i].status = status;
        m->req[i].n = 0;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_turn(metrics *m, const ph_turn_report *r) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)r->n_prompt;
    m->generated_tokens += (uint64_t)r->n_generated;
    if (r->n_generated > 0 || r->ttft_s > 0) {
        for (int b = 0; b < METRICS_N_BUCKETS; b++)
            if (r->ttft_s <= ttft_le[b]) m->ttft_bucket[b]++;
        m->ttft_sum += r->ttft_s;
        m->ttft_count++;
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_queue(metrics *m, int64_t len) {
    pthread_mutex_lock(&m->mu);
    m->queue = len;
    pthread_mutex_unlock(&m->mu);
}

void metrics_enqueued(metrics *m, int64_t len) {
    pthread_mutex_lock(&m->mu);
    m->queue = len;
    m->enqueued++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_cancelled(metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

static const char *const field_apis[3] = {"chat_completions", "responses", "messages"};

bool metrics_field_ignored(metrics *m, const char *endpoint, const char *name, bool *other) {
    const size_t len = strnlen(name, 64);
    bool first = false;
    *other = false;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_ignored && !(!strcmp(m->ignored[i].endpoint, endpoint) &&
                                 !strncmp(m->ignored[i].name, name, len) && m->ignored[i].name[len] == 0))
        i++;
    if (i == m->n_ignored && m->n_ignored < METRICS_MAX_FIELDS) {
        m->ignored[i].endpoint = endpoint;
        memcpy(m->ignored[i].name, name, len);
        m->ignored[i].name[len] = 0;
        m->ignored[i].n = 0;
        m->n_ignored++;
        first = true;
    }
    if (i < m->n_ignored) {
        m->ignored[i].n++;
    } else {
        size_t a = 0;
        while (a < 2 && strcmp(field_apis[a], endpoint)) a++;
        first = *other = m->ignored_other[a]++ == 0;
    }
    pthread_mutex_unlock(&m->mu);
    return first;
}

/* A label value in the exposition format: \, \" and \n escaped. */
static void label_value(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') fputc('\\', f);
        if (*s == '\n') fputs("\\n", f);
        else fputc(*s, f);
    }
}

void metrics_timed_out(metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->timed_out++;
    pthread_mutex_unlock(&m->mu);
}

static void metric(FILE *f, const char *type, const char *name, const char *help, uint64_t v) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, (unsigned long long)v);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v) { metric(f, "counter", name, help, v); }
static void gauge(FILE *f, const char *name, const char *help, uint64_t v) { metric(f, "gauge", name, help, v); }

/* The engine's counters and gauges: name, help, and the ph_engine_stats
 * field (a uint64_t) that holds the value. */
typedef struct engine_metric {
    const char *name, *help;
    size_t offset;
    bool gauge;
} engine_metric;

#define EM(name, help, field, gauge)                                                                                 \
    { name, help, offsetof(ph_engine_stats, field), gauge }
static const engine_metric engine_metrics[] = {
    EM("pinhole_prompt_tokens_reused_total", "Prompt rows kept from the live state, the RAM tier or a file.",
       prompt_tokens_reused, false),
    EM("pinhole_prompt_tokens_prefilled_total", "Prompt rows evaluated.", prompt_tokens_prefilled, false),
    EM("pinhole_image_cache_hits_total", "Picture embeddings found in the cache.", picture_cache_hits, false),
    EM("pinhole_image_cache_misses_total", "Picture embeddings not in the cache.", picture_cache_misses, false),
    EM("pinhole_image_cache_evictions_total", "Embeddings evicted from the cache.", picture_cache_evictions, false),
    EM("pinhole_image_cache_disk_evictions_total",
       "Embedding files removed to keep --image-cache-dir within its budget.", picture_cache_disk_evictions, false),
    EM("pinhole_ram_cache_tokens_restored_total", "Prompt rows restored from the RAM tier (part of reused).",
       prompt_tokens_from_ram, false),
    EM("pinhole_ram_cache_hits_total", "Turns that resumed a conversation from the RAM tier.", ram_cache_hits, false),
    EM("pinhole_ram_cache_saves_total", "Displaced conversations kept as resume points of the RAM tier.",
       ram_cache_saves, false),
    EM("pinhole_ram_cache_evictions_total",
       "Resume points of the RAM tier dropped (budget, or held by a longer one).", ram_cache_evictions, false),
    EM("pinhole_ram_cache_refused_total", "Checkpoints not taken because memory was short.", ram_cache_refused,
       false),
    EM("pinhole_conversations_parked_total", "Primary conversations parked before an auxiliary request.",
       conversations_parked, false),
    EM("pinhole_conversations_restored_total", "Parked conversations restored by the next primary request.",
       conversations_restored, false),
    EM("pinhole_conversations_dropped_total", "Parked conversations the next primary request did not match.",
       conversations_dropped, false),
    EM("pinhole_images_encoded_total", "Pictures run through the vision encoder.", pictures_encoded, false),
    EM("pinhole_encoder_loads_total", "Times the vision encoder was loaded on demand.", encoder_loads, false),
    EM("pinhole_encoder_unloads_total", "Times the idle vision encoder was released.", encoder_unloads, false),
    EM("pinhole_image_cache_entries", "Embeddings held in memory.", picture_cache_entries, true),
    EM("pinhole_image_cache_bytes", "Bytes of embeddings held in memory.", picture_cache_bytes, true),
    EM("pinhole_image_cache_disk_bytes", "Bytes of embedding files in --image-cache-dir.", picture_cache_disk_bytes,
       true),
    EM("pinhole_disk_cache_hits_total", "Turns that resumed a conversation from the disk tier.", disk_cache_hits,
       false),
    EM("pinhole_disk_cache_misses_total", "Lookups in the disk tier that found nothing usable.", disk_cache_misses,
       false),
    EM("pinhole_disk_cache_saves_total", "Block records written (KV blocks and resume points).", disk_cache_saves,
       false),
    EM("pinhole_disk_cache_skipped_total",
       "Block records not written: no room (budget or free-space floor), or an I/O error.", disk_cache_skipped,
       false),
    EM("pinhole_disk_cache_evictions_total", "Block records removed for space.", disk_cache_evictions, false),
    EM("pinhole_disk_cache_rejected_total", "Block records that failed a check (dropped, never loaded).",
       disk_cache_rejected, false),
    EM("pinhole_disk_cache_tokens_restored_total", "Prompt rows restored from the disk tier (part of reused).",
       disk_cache_tokens_restored, false),
    EM("pinhole_disk_cache_written_bytes_total", "Bytes of block records written.", disk_cache_bytes_written, false),
    EM("pinhole_disk_cache_read_bytes_total", "Bytes of block records read.", disk_cache_bytes_read, false),
    EM("pinhole_disk_cache_entries", "Block records in --kv-disk-dir.", disk_cache_entries, true),
    EM("pinhole_disk_cache_bytes", "Bytes of block records in --kv-disk-dir.", disk_cache_bytes, true),
    EM("pinhole_disk_cache_writes_queued",
       "Checkpoints and block records waiting for the writer threads (or being written).", disk_cache_queued, true),
    EM("pinhole_disk_cache_shared_records_total",
       "Block records fetched from the shared tier into --kv-disk-dir (each checked before it is kept).",
       disk_cache_shared_records, false),
    EM("pinhole_image_cache_shared_hits_total", "Picture embeddings found in the shared tier (part of hits).",
       picture_cache_shared_hits, false),
    EM("pinhole_shared_tier_gets_total", "Values asked of the shared tier.", shared_gets, false),
    EM("pinhole_shared_tier_found_total", "Values the shared tier returned (refused ones included).", shared_found,
       false),
    EM("pinhole_shared_tier_refused_total",
       "Values from the shared tier that failed a check (checksum, header, model, format, domain, provenance): "
       "never used.",
       shared_refused, false),
    EM("pinhole_shared_tier_errors_total", "Connections and commands to the shared tier that failed.", shared_errors,
       false),
    EM("pinhole_shared_tier_timeouts_total", "Replies of the shared tier past --shared-tier-timeout-ms.",
       shared_timeouts, false),
    EM("pinhole_shared_tier_skipped_total", "Reads not tried while the shared tier rests after an error.",
       shared_skipped, false),
    EM("pinhole_shared_tier_written_total", "Values written to the shared tier.", shared_written, false),
    EM("pinhole_shared_tier_dropped_total",
       "Values not written to the shared tier: its queue was full, or Redis refused or failed.", shared_dropped,
       false),
    EM("pinhole_shared_tier_read_bytes_total", "Bytes read from the shared tier.", shared_bytes_read, false),
    EM("pinhole_shared_tier_written_bytes_total", "Bytes written to the shared tier.", shared_bytes_written, false),
    EM("pinhole_shared_tier_queue_bytes", "Bytes of values waiting to be written to the shared tier.",
       shared_queue_bytes, true),
    EM("pinhole_shared_tier_connected", "Whether the shared tier's reading connection is up.", shared_connected,
       true),
    EM("pinhole_ram_cache_entries", "Resume points of displaced conversations held in RAM.", ram_cache_entries, true),
    EM("pinhole_ram_cache_bytes",
       "Bytes of displaced conversations' KV (all their rows) that the resume points hold.", ram_cache_bytes, true),
    EM("pinhole_kv_block_bytes", "Bytes of one KV block (64 rows).", kv_block_bytes, true),
    EM("pinhole_kv_pool_bytes", "Bytes of the KV pool's blocks (--kv-pool-mib).", kv_pool_bytes, true),
    EM("pinhole_kv_blocks_evicted_total", "Cached KV blocks taken for new ones.", kv_blocks_evicted, false),
    EM("pinhole_kv_bytes_copied_total", "KV bytes copied before a write into a shared or named block.",
       kv_bytes_copied, false),
};
#undef EM

char *metrics_render(metrics *m, const ph_engine_stats *st, const metrics_conns *cs) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&m->mu);
    fprintf(f, "# HELP pinhole_requests_total HTTP requests by endpoint and status.\n"
               "# TYPE pinhole_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        fprintf(f, "pinhole_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->req[i].endpoint,
                m->req[i].status, (unsigned long long)m->req[i].n);
    counter(f, "pinhole_prompt_tokens_total", "Prompt tokens (text and picture rows) of finished turns.",
            m->prompt_tokens);
    counter(f, "pinhole_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    counter(f, "pinhole_requests_queued_total", "Inference requests accepted into the worker's queue.", m->enqueued);
    counter(f, "pinhole_requests_cancelled_total", "Requests stopped because the client went away.", m->cancelled);
    counter(f, "pinhole_requests_timed_out_total", "Requests stopped by --request-timeout-s.", m->timed_out);
    fprintf(f, "# HELP pinhole_request_fields_ignored_total Request fields unknown to this server, accepted and "
               "ignored (see docs/api-fields.md).\n# TYPE pinhole_request_fields_ignored_total counter\n");
    for (int i = 0; i < m->n_ignored; i++) {
        fprintf(f, "pinhole_request_fields_ignored_total{api=\"%s\",field=\"", m->ignored[i].endpoint);
        label_value(f, m->ignored[i].name);
        fprintf(f, "\"} %llu\n", (unsigned long long)m->ignored[i].n);
    }
    for (int a = 0; a < 3; a++)
        if (m->ignored_other[a])
            fprintf(f, "pinhole_request_fields_ignored_total{api=\"%s\",field=\"other\"} %llu\n", field_apis[a],
                    (unsigned long long)m->ignored_other[a]);
    fprintf(f,
            "# HELP pinhole_queue_length Requests waiting for the inference worker.\n"
            "# TYPE pinhole_queue_length gauge\npinhole_queue_length %lld\n",
            (long long)m->queue);
    fprintf(f, "# HELP pinhole_time_to_first_token_seconds From the start of a turn to its first token.\n"
               "# TYPE pinhole_time_to_first_token_seconds histogram\n");
    for (int b = 0; b < METRICS_N_BUCKETS; b++)
        fprintf(f, "pinhole_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", ttft_le[b],
                (unsigned long long)m->ttft_bucket[b]);
    fprintf(f, "pinhole_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->ttft_count);
    fprintf(f, "pinhole_time_to_first_token_seconds_sum %.6f\npinhole_time_to_first_token_seconds_count %llu\n",
            m->ttft_sum, (unsigned long long)m->ttft_count);
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < sizeof engine_metrics / sizeof engine_metrics[0]; i++) {
        const engine_metric *em = &engine_metrics[i];
        metric(f, em->gauge ? "gauge" : "counter", em->name, em->help,
               *(const uint64_t *)(const void *)((const char *)st + em->offset));
    }
    fprintf(f, "# HELP pinhole_kv_blocks KV blocks of the pool by state: in_use (held by the live sequence or a "
               "resume point), cached (named, found by later requests until evicted), pinned (a parked "
               "conversation's), free.\n# TYPE pinhole_kv_blocks gauge\n");
    const char *kv_state[] = {"in_use", "cached", "pinned", "free"};
    const uint64_t kv_n[] = {st->kv_blocks_in_use, st->kv_blocks_cached, st->kv_blocks_pinned, st->kv_blocks_free};
    for (int i = 0; i < 4; i++)
        fprintf(f, "pinhole_kv_blocks{state=\"%s\"} %llu\n", kv_state[i], (unsigned long long)kv_n[i]);
    gauge(f, "pinhole_connections", "Open HTTP connections.", (uint64_t)(cs->open > 0 ? cs->open : 0));
    counter(
        f, "pinhole_connections_deadline_closed_total",
        "Connections closed for not sending a request head or body in time (--header-timeout-s, --body-timeout-s).",
        cs->closed_deadline);
    counter(f, "pinhole_connections_limit_closed_total",
            "Idle connections closed to make room for a new one (--max-connections, --max-connections-per-ip).",
            cs->closed_limit);
    counter(f, "pinhole_connections_refused_total",
            "New connections refused: every connection in their scope was busy.", cs->refused);
    counter(f, "pinhole_connections_send_timeout_closed_total",
            "Connections closed because their client read nothing of its answer for --send-timeout-s (a stream "
            "so closed is cancelled).",
            cs->closed_stalled);
    gauge(f, "pinhole_encoder_loaded", "Whether the vision encoder is in memory.", st->encoder_loaded ? 1 : 0);
    /* batching (docs/server.md, Parallel requests) */
    gauge(f, "pinhole_requests_running", "Requests running in a slot of the engine (--parallel).",
          st->requests_running);
    pthread_mutex_lock(&m->mu);
    const int64_t waiting = m->queue;
    pthread_mutex_unlock(&m->mu);
    gauge(f, "pinhole_requests_waiting", "Requests waiting in the queue for a worker (as pinhole_queue_length).",
          (uint64_t)(waiting > 0 ? waiting : 0));
    /* The names inference gateways read by default (the Gateway API inference
     * extension's endpoint picker, llm-d): vLLM's, with vLLM's meaning
     * (docs/cluster.md, Gauges for gateways). Usage counts the blocks that
     * sequences hold (an idle slot's last conversation too) or pin; cached
     * blocks are free to take, as vLLM's prefix-cached blocks are. */
    gauge(f, "vllm:num_requests_running", "Requests running (as pinhole_requests_running).", st->requests_running);
    gauge(f, "vllm:num_requests_waiting", "Requests waiting (as pinhole_requests_waiting).",
          (uint64_t)(waiting > 0 ? waiting : 0));
    const uint64_t kv_total = st->kv_blocks_in_use + st->kv_blocks_cached + st->kv_blocks_pinned + st->kv_blocks_free;
    fprintf(f,
            "# HELP vllm:kv_cache_usage_perc KV pool use, 1 meaning full: blocks in use or pinned over all "
            "blocks (pinhole_kv_blocks).\n# TYPE vllm:kv_cache_usage_perc gauge\n"
            "vllm:kv_cache_usage_perc %.6f\n",
            kv_total ? (double)(st->kv_blocks_in_use + st->kv_blocks_pinned) / (double)kv_total : 0.0);
    fprintf(f, "# HELP pinhole_batch_rows Rows per batch step (one forward pass over the rows of every running "
               "sequence).\n# TYPE pinhole_batch_rows histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < 8; b++) {
        cum += st->batch_rows_hist[b];
        fprintf(f, "pinhole_batch_rows_bucket{le=\"%d\"} %llu\n", (int)ph_batch_row_bounds[b],
                (unsigned long long)cum);
    }
    fprintf(
        f,
        "pinhole_batch_rows_bucket{le=\"+Inf\"} %llu\npinhole_batch_rows_sum %llu\npinhole_batch_rows_count %llu\n",
        (unsigned long long)st->batch_steps, (unsigned long long)(st->batch_prefill_rows + st->batch_decode_rows),
        (unsigned long long)st->batch_steps);
    counter(f, "pinhole_batch_steps_total", "Batch steps (forward passes).", st->batch_steps);
    counter(f, "pinhole_batch_steps_shared_total", "Batch steps with rows of more than one sequence.",
            st->batch_multi_steps);
    counter(f, "pinhole_batch_prefill_tokens_total", "Prompt rows (text and picture rows) evaluated in batch steps.",
            st->batch_prefill_rows);
    counter(f, "pinhole_batch_decode_tokens_total", "Decoded tokens evaluated in batch steps.",
            st->batch_decode_rows);
    counter(f, "pinhole_batch_slices_total", "Pieces of other work (picture encodes) run between batch steps.",
            st->batch_slices);
    counter(f, "pinhole_prefix_waits_total",
            "Requests that waited for another running request's prefill of the prefix they share, and took its "
            "blocks instead of computing them.",
            st->prefix_waits);
    counter(f, "pinhole_prompt_tokens_forked_total",
            "Prompt rows taken from another running request's KV blocks, its last, partial block included (part of "
            "reused).",
            st->prompt_tokens_forked);
    counter(f, "pinhole_picture_waits_total",
            "Pictures that waited for another running request's encode of them instead of encoding them again.",
            st->picture_waits);
    counter(f, "pinhole_requests_paused_total",
            "Answers paused because the KV pool ran out, until an older answer ended and gave its blocks back.",
            st->requests_paused);
    counter(
        f, "pinhole_requests_dropped_total",
        "Paused answers that gave their KV blocks back to an older one, and evaluated their rows again to resume.",
        st->requests_dropped);
    fprintf(f,
            "# HELP pinhole_batch_step_seconds_total Time in batch steps.\n"
            "# TYPE pinhole_batch_step_seconds_total counter\npinhole_batch_step_seconds_total %.6f\n",
            st->batch_step_s);
    fprintf(f,
            "# HELP pinhole_disk_cache_write_seconds_total Time the disk tier spent writing checkpoints (until their "
            "records were written).\n"
            "# TYPE pinhole_disk_cache_write_seconds_total counter\npinhole_disk_cache_write_seconds_total %.6f\n"
            "# HELP pinhole_disk_cache_read_seconds_total Time spent reading block records into the KV.\n"
            "# TYPE pinhole_disk_cache_read_seconds_total counter\npinhole_disk_cache_read_seconds_total %.6f\n",
            st->disk_cache_write_s, st->disk_cache_read_s);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}
