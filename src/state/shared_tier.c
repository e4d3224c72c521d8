/* The shared tier's Redis side: a reading connection with a deadline per
 * reply, a queue of copied values and the thread that writes them
 * (state/shared_tier.h). */
#include "state/shared_tier.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/log.h"
#include "base/sha256.h"
#include "base/timeutil.h"

#define KEY_PREFIX  "pinhole:1:"
#define KEY_LEN     (sizeof KEY_PREFIX - 1 + 2 + 64 + 1)
#define REST_S      1.0  /* after an error, no new connection for this long */
#define LOG_EVERY_S 10.0 /* at most one error line this often */
#define WRITE_TRIES 3    /* a write's reply may take this many timeouts (a large value on a busy link) */

typedef struct item {
    char key[KEY_LEN], parent_key[KEY_LEN], member[65];
    bool has_parent;
    void *val;
    size_t len;
    struct item *next;
} item;

/* One connection and when it may be tried again. */
typedef struct conn {
    redisContext *c;
    double rest_until;
} conn;

struct shared_tier {
    char *host, *password;
    int port, db, timeout_ms;
    uint64_t queue_max;
    pthread_mutex_t lock; /* stats, the queue, the log's clock */
    pthread_cond_t cv;
    pthread_mutex_t rlock; /* the reading connection */
    conn rd, wr;           /* wr: the writer thread's only */
    item *head, *tail;
    bool busy, stop;
    pthread_t thread;
    double logged_at;
    uint64_t log_skipped;
    shared_tier_stats st;
};

static void make_key(char out[KEY_LEN], char ns, const uint8_t name[32]) {
    char hex[65];
    hex_encode(name, 32, hex);
    snprintf(out, KEY_LEN, KEY_PREFIX "%c:%s", ns, hex);
}

/* Logs an error, at most once every LOG_EVERY_S (the rest counted). */
static void log_error(shared_tier *t, const char *what, const char *why) {
    pthread_mutex_lock(&t->lock);
    const double now = time_now_s();
    const bool say = now - t->logged_at >= LOG_EVERY_S;
    const uint64_t skipped = t->log_skipped;
    if (say) {
        t->logged_at = now;
        t->log_skipped = 0;
    } else {
        t->log_skipped++;
    }
    pthread_mutex_unlock(&t->lock);
    if (say)
        PH_WARN("shared tier (redis %s:%d): %s: %s%s (it costs cache hits, not answers)", t->host, t->port, what, why,
                skipped ? "; and more errors since the last line" : "");
}

static struct timeval tv_ms(int ms) { return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

static void count_error(shared_tier *t, bool timeout) {
    pthread_mutex_lock(&t->lock);
    t->st.errors++;
    if (timeout) t->st.timeouts++;
    pthread_mutex_unlock(&t->lock);
}

/* Drops a connection after an error (why), and rests. */
static void conn_fail(shared_tier *t, conn *k, const char *what) {
    const bool timeout = k->c && k->c->err == REDIS_ERR_IO && !strcmp(k->c->errstr, strerror(EAGAIN));
    log_error(t, what,
              k->c && k->c->err ? (timeout ? "no reply within --shared-tier-timeout-ms" : k->c->errstr)
                                : "connection failed");
    count_error(t, timeout);
    if (k->c) redisFree(k->c);
    k->c = NULL;
    k->rest_until = time_now_s() + REST_S;
}

/* A command's reply that must not be an error (what: for the log), freed;
 * false when it is one. */
static bool reply_ok(shared_tier *t, redisReply *r, const char *what) {
    const bool ok = r && r->type != REDIS_REPLY_ERROR;
    if (r && !ok) {
        log_error(t, what, r->str);
        count_error(t, false);
    }
    freeReplyObject(r);
    return ok;
}

/* A command of a new connection's set-up (AUTH, SELECT) with its one
 * argument: false (the connection dropped, resting) when it fails. */
static bool setup_cmd(shared_tier *t, conn *k, const char *cmd, const char *arg) {
    redisReply *r = redisCommand(k->c, "%s %s", cmd, arg);
    if (!r) {
        conn_fail(t, k, cmd);
        return false;
    }
    if (reply_ok(t, r, cmd)) return true;
    redisFree(k->c);
    k->c = NULL;
    k->rest_until = time_now_s() + REST_S;
    return false;
}

/* The connection, made (with AUTH and SELECT) if it is not up and not
 * resting: NULL when it cannot be had now. */
static redisContext *conn_get(shared_tier *t, conn *k, int timeout_ms) {
    if (k->c) {
        redisSetTimeout(k->c, tv_ms(timeout_ms));
        return k->c;
    }
    if (time_now_s() < k->rest_until) return NULL;
    k->c = redisConnectWithTimeout(t->host, t->port, tv_ms(t->timeout_ms));
    if (!k->c || k->c->err) {
        conn_fail(t, k, "cannot connect");
        return NULL;
    }
    redisSetTimeout(k->c, tv_ms(timeout_ms));
    char db[16];
    snprintf(db, sizeof db, "%d", t->db);
    if ((t->password && !setup_cmd(t, k, "AUTH", t->password)) || (t->db && !setup_cmd(t, k, "SELECT", db)))
        return NULL;
    return k->c;
}

/* ---- writes --------------------------------------------------------------- */

static void item_free(item *it) {
    if (!it) return;
    free(it->val);
    free(it);
}

/* Sends one value (and its parent's set membership) on the writer's
 * connection: true when Redis took it. */
static bool send_item(shared_tier *t, item *it) {
    redisContext *c = conn_get(t, &t->wr, t->timeout_ms * WRITE_TRIES);
    if (!c) return false;
    redisAppendCommand(c, "SET %s %b", it->key, it->val, it->len);
    if (it->has_parent) redisAppendCommand(c, "SADD %s %s", it->parent_key, it->member);
    bool ok = true;
    for (int i = 0; i < (it->has_parent ? 2 : 1); i++) {
        void *r = NULL;
        if (redisGetReply(c, &r) != REDIS_OK) {
            conn_fail(t, &t->wr, "writing a value");
            return false;
        }
        ok = reply_ok(t, r, "writing a value") && ok;
    }
    return ok;
}

static void *writer(void *arg) {
    shared_tier *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->head && !t->stop) pthread_cond_wait(&t->cv, &t->lock);
        if (!t->head) break;
        item *it = t->head;
        t->head = it->next;
        if (!t->head) t->tail = NULL;
        t->busy = true;
        pthread_mutex_unlock(&t->lock);
        const bool ok = send_item(t, it);
        pthread_mutex_lock(&t->lock);
        t->st.queue_bytes -= it->len;
        if (ok) {
            t->st.written++;
            t->st.bytes_written += it->len;
        } else {
            t->st.dropped++;
        }
        t->busy = false;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->lock);
        item_free(it);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

bool shared_tier_put(shared_tier *t, char ns, const uint8_t name[32], const uint8_t *parent, const void *const *parts,
                     const size_t *lens, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) len += lens[i];
    /* the room is taken now, so that writers at once never pass the bound */
    pthread_mutex_lock(&t->lock);
    const bool room = t->st.queue_bytes + len <= t->queue_max && !t->stop;
    if (room) t->st.queue_bytes += len;
    else t->st.dropped++;
    pthread_mutex_unlock(&t->lock);
    if (!room) return false;
    item *it = calloc(1, sizeof *it);
    if (it) it->val = malloc(len ? len : 1);
    if (!it || !it->val) {
        item_free(it);
        pthread_mutex_lock(&t->lock);
        t->st.queue_bytes -= len;
        t->st.dropped++;
        pthread_mutex_unlock(&t->lock);
        return false;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i]) memcpy((uint8_t *)it->val + at, parts[i], lens[i]);
        at += lens[i];
    }
    it->len = len;
    make_key(it->key, ns, name);
    if (parent) {
        it->has_parent = true;
        make_key(it->parent_key, 'c', parent);
        hex_encode(name, 32, it->member);
    }
    pthread_mutex_lock(&t->lock);
    if (t->tail) t->tail->next = it;
    else t->head = it;
    t->tail = it;
    t->st.queued++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    return true;
}

void shared_tier_flush(shared_tier *t) {
    pthread_mutex_lock(&t->lock);
    while (t->head || t->busy) pthread_cond_wait(&t->cv, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

/* ---- reads ---------------------------------------------------------------- */

/* A command on the reading connection (rlock held): its reply, or NULL
 * (counted, logged, the connection dropped; or skipped while resting). */
static redisReply *read_cmd(shared_tier *t, const char *what, const char *fmt, const char *key) {
    redisContext *c = conn_get(t, &t->rd, t->timeout_ms);
    if (!c) {
        pthread_mutex_lock(&t->lock);
        t->st.skipped++;
        pthread_mutex_unlock(&t->lock);
        return NULL;
    }
    redisReply *r = redisCommand(c, fmt, key);
    if (!r) conn_fail(t, &t->rd, what);
    return r;
}

int shared_tier_get(shared_tier *t, char ns, const uint8_t name[32], void **val, size_t *len) {
    char key[KEY_LEN];
    make_key(key, ns, name);
    *val = NULL;
    *len = 0;
    pthread_mutex_lock(&t->rlock);
    redisReply *r = read_cmd(t, "reading a value", "GET %s", key);
    pthread_mutex_unlock(&t->rlock);
    int rc = 0;
    if (r && r->type == REDIS_REPLY_STRING && (*val = malloc(r->len ? r->len : 1))) {
        memcpy(*val, r->str, r->len);
        *len = r->len;
        rc = 1;
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_error(t, "reading a value", r->str);
        count_error(t, false);
    }
    freeReplyObject(r);
    pthread_mutex_lock(&t->lock);
    t->st.gets++;
    if (rc) {
        t->st.found++;
        t->st.bytes_read += *len;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int shared_tier_children(shared_tier *t, const uint8_t parent[32], uint8_t (*names)[32], int max) {
    char key[KEY_LEN];
    make_key(key, 'c', parent);
    pthread_mutex_lock(&t->rlock);
    redisReply *r = read_cmd(t, "reading a set of children", "SMEMBERS %s", key);
    pthread_mutex_unlock(&t->rlock);
    int n = 0;
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements && n < max; i++) {
            const redisReply *e = r->element[i];
            if (e->type == REDIS_REPLY_STRING && e->len == 64 && hex_decode(e->str, 32, names[n])) n++;
        }
    freeReplyObject(r);
    return n;
}

void shared_tier_refused(shared_tier *t, char ns, const uint8_t name[32], const char *why) {
    char key[KEY_LEN];
    make_key(key, ns, name);
    PH_WARN("shared tier: %s refused, not used: %s", key, why);
    pthread_mutex_lock(&t->lock);
    t->st.refused++;
    pthread_mutex_unlock(&t->lock);
}

void shared_tier_get_stats(shared_tier *t, shared_tier_stats *st) {
    pthread_mutex_lock(&t->lock);
    *st = t->st;
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_lock(&t->rlock);
    st->connected = t->rd.c != NULL;
    pthread_mutex_unlock(&t->rlock);
}

/* ---- opening and closing ---------------------------------------------------- */

/* redis://[:PASSWORD@]HOST[:PORT][/DB] into t: 0, or -1 with err set. */
static int parse_url(shared_tier *t, const char *url, ph_err *err) {
    static const char scheme[] = "redis://";
    if (strncmp(url, scheme, sizeof scheme - 1))
        return err_set(err, "--shared-tier %s: not a redis://HOST[:PORT][/DB] URL", url);
    const char *p = url + sizeof scheme - 1, *at = strchr(p, '@'), *slash;
    if (at) {
        const char *pw = memchr(p, ':', (size_t)(at - p));
        if (pw && !(t->password = strndup(pw + 1, (size_t)(at - pw - 1)))) return err_set(err, "out of memory");
        p = at + 1;
    }
    slash = strchr(p, '/');
    const char *end = slash ? slash : p + strlen(p), *colon = memchr(p, ':', (size_t)(end - p));
    const char *host_end = colon ? colon : end;
    if (host_end == p) return err_set(err, "--shared-tier %s: no host", url);
    if (!(t->host = strndup(p, (size_t)(host_end - p)))) return err_set(err, "out of memory");
    t->port = 6379;
    if (colon) {
        char *e = NULL;
        const long port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) return err_set(err, "--shared-tier %s: bad port", url);
        t->port = (int)port;
    }
    if (slash && slash[1]) {
        char *e = NULL;
        const long db = strtol(slash + 1, &e, 10);
        if (*e || db < 0 || db > 65535) return err_set(err, "--shared-tier %s: bad database number", url);
        t->db = (int)db;
    }
    return 0;
}

shared_tier *shared_tier_open(const char *url, const char *password, int timeout_ms, uint64_t queue_bytes,
                              ph_err *err) {
    shared_tier *t = calloc(1, sizeof *t);
    if (!t) {
        err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->rlock, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    t->queue_max = queue_bytes;
    t->logged_at = -LOG_EVERY_S;
    if (parse_url(t, url, err)) goto fail;
    if (password) {
        free(t->password);
        if (!(t->password = strdup(password))) {
            err_set(err, "out of memory");
            goto fail;
        }
    }
    if (pthread_create(&t->thread, NULL, writer, t)) {
        err_set(err, "shared tier: cannot start its writer thread");
        goto fail;
    }
    pthread_mutex_lock(&t->rlock);
    const bool up = conn_get(t, &t->rd, t->timeout_ms) != NULL;
    pthread_mutex_unlock(&t->rlock);
    PH_INFO("shared tier: redis %s:%d db %d %s", t->host, t->port, t->db,
            up ? "connected" : "not reachable now (tried again on use)");
    return t;
fail:
    free(t->host);
    free(t->password);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->rlock);
    pthread_cond_destroy(&t->cv);
    free(t);
    return NULL;
}

void shared_tier_close(shared_tier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    if (t->rd.c) redisFree(t->rd.c);
    if (t->wr.c) redisFree(t->wr.c);
    free(t->host);
    if (t->password) memset(t->password, 0, strlen(t->password));
    free(t->password);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->rlock);
    pthread_cond_destroy(&t->cv);
    free(t);
}
