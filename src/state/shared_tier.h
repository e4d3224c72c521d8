/* The shared tier (docs/cluster.md, Shared tier): named values in a Redis
 * that several servers share, so that a picture encoded by one replica and
 * the KV blocks of a conversation one replica computed are found by the
 * others, also after that replica is gone.
 *
 * This file is the Redis side only: values are opaque bytes under a
 * namespace and a 32-byte name (key "pinhole:1:<ns>:<64 hex>"), and a
 * record's name may be added to its parent's set of children (key
 * "pinhole:1:c:<64 hex of parent>"), so that a reader finds what follows a
 * name it knows. What a value holds, and checking it before use, is the
 * callers' (state/disk_tier.c: block records as the block store writes
 * them; state/embed_cache.c: embedding files): a value that does not
 * verify is theirs to refuse and count (shared_tier_refused).
 *
 * Redis is a cache here: a Redis that is down, slow, full, read-only or
 * flushed costs hits, never an error. Reads wait at most the timeout for
 * each reply (then the connection is dropped and the tier rests a second
 * before it tries again, so that a dead Redis costs one timeout, not one per
 * lookup); writes are copied and queued (at most queue_bytes; beyond that
 * they are dropped and counted), and a thread of the tier's own sends them:
 * never on a request's path. Errors are counted and logged (at most one
 * line every ten seconds).
 *
 * Threads: every function may be called from any thread. */
#ifndef PH_STATE_SHARED_TIER_H
#define PH_STATE_SHARED_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct shared_tier shared_tier;

/* The namespaces of values. */
enum { SHARED_RECORD = 'r', SHARED_EMBED = 'e' };

typedef struct shared_tier_stats {
    uint64_t gets;     /* values asked for */
    uint64_t found;    /* of those, returned (refused ones included) */
    uint64_t refused;  /* values found that the caller refused (checksum, header, provenance) */
    uint64_t errors;   /* connections and commands that failed (timeouts included) */
    uint64_t timeouts; /* of those, replies that did not come within the timeout */
    uint64_t skipped;  /* reads not tried: the tier rests after an error */
    uint64_t queued;   /* values queued to be written */
    uint64_t written;  /* values written */
    uint64_t dropped;  /* values not written: the queue was full, or Redis refused or failed */
    uint64_t bytes_read, bytes_written;
    uint64_t queue_bytes; /* bytes waiting to be written now */
    bool connected;       /* the reading connection is up now */
} shared_tier_stats;

/* url: redis://[:PASSWORD@]HOST[:PORT][/DB] (port 6379, db 0 by default);
 * password (may be NULL) wins over one in the URL. A URL that does not
 * parse is an error; a Redis that does not answer is not (logged: the
 * tier tries again later). */
shared_tier *shared_tier_open(const char *url, const char *password, int timeout_ms, uint64_t queue_bytes,
                              ph_err *err);
/* Sends what is queued (each write within a few timeouts), then closes. */
void shared_tier_close(shared_tier *t);

/* Queues the value made of n parts under ns:name, and name as a child of
 * parent (NULL: none). The parts are copied. false when it is dropped. */
bool shared_tier_put(shared_tier *t, char ns, const uint8_t name[32], const uint8_t *parent, const void *const *parts,
                     const size_t *lens, int n);
/* Waits until everything queued is sent (or dropped). */
void shared_tier_flush(shared_tier *t);

/* The value under ns:name: 1 with *val (malloc'd; free it) of *len bytes;
 * 0 when there is none, or Redis failed or did not answer in time. */
int shared_tier_get(shared_tier *t, char ns, const uint8_t name[32], void **val, size_t *len);
/* Up to max names of parent's children into names: how many (0 on any
 * failure). */
int shared_tier_children(shared_tier *t, const uint8_t parent[32], uint8_t (*names)[32], int max);
/* The caller refused a value it got (why: for the log). */
void shared_tier_refused(shared_tier *t, char ns, const uint8_t name[32], const char *why);

void shared_tier_get_stats(shared_tier *t, shared_tier_stats *st);

#endif
