/* The table of open connections: deadlines and limits (see conns.h). */
#include "server/conns.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/log.h"

void conns_init(conns *t, int max_total, int max_per_ip, double header_s, double body_s, double send_s) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->last_said = -1e9;
    t->max_total = max_total;
    t->max_per_ip = max_per_ip;
    t->header_s = header_s;
    t->body_s = body_s;
    t->send_s = send_s;
}

void conns_free(conns *t) {
    conn_rec *r = t->head;
    while (r) {
        conn_rec *next = r->next;
        free(r);
        r = next;
    }
    pthread_mutex_destroy(&t->mu);
}

/* An address as 16 bytes (IPv4 as ::ffff:a.b.c.d), so both families compare. */
void conns_addr_text(const struct sockaddr *sa, char *out, size_t cap) {
    const void *a = NULL;
    if (sa && sa->sa_family == AF_INET) a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa && sa->sa_family == AF_INET6) a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (!a || !inet_ntop(sa->sa_family, a, out, (socklen_t)cap)) snprintf(out, cap, "?");
}

static void addr_key(const struct sockaddr *sa, uint8_t out[16]) {
    memset(out, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(out, &in6->sin6_addr, 16);
    }
}

static void close_rec(conns *t, conn_rec *r) {
    r->closing = true;
    t->n--;
    shutdown(r->fd, SHUT_RDWR);
}

/* Makes room in a scope (addr: one address; NULL: all) holding `limit`:
 * true when there is room, closing the oldest waiting connection if need be. */
static bool make_room(conns *t, const uint8_t *addr, int limit) {
    if (limit <= 0) return true;
    int n = 0;
    conn_rec *oldest = NULL;
    for (conn_rec *r = t->head; r; r = r->next) {
        if (r->closing || (addr && memcmp(r->addr, addr, 16))) continue;
        n++;
        if (r->phase != CONN_BUSY && (!oldest || r->since < oldest->since)) oldest = r;
    }
    if (n < limit) return true;
    if (!oldest) return false;
    close_rec(t, oldest);
    t->closed_limit++;
    return true;
}

bool conns_admit(conns *t, const struct sockaddr *addr, double now) {
    uint8_t key[16];
    addr_key(addr, key);
    pthread_mutex_lock(&t->mu);
    bool ok = make_room(t, key, t->max_per_ip) && make_room(t, NULL, t->max_total);
    bool say = false;
    if (!ok) {
        t->refused++;
        say = now - t->last_said >= 10; /* a flood is logged once in 10 s */
        if (say) t->last_said = now;
    }
    uint64_t refused = t->refused;
    pthread_mutex_unlock(&t->mu);
    if (say)
        PH_INFO("refused a connection: every connection in its scope is busy (--max-connections, "
                "--max-connections-per-ip; %llu refused so far)",
                (unsigned long long)refused);
    return ok;
}

conn_rec *conns_add(conns *t, int fd, const struct sockaddr *addr, double now) {
    conn_rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->fd = fd;
    addr_key(addr, r->addr);
    r->phase = CONN_HEAD;
    r->since = now;
    pthread_mutex_lock(&t->mu);
    r->next = t->head;
    if (t->head) t->head->prev = r;
    t->head = r;
    t->n++;
    pthread_mutex_unlock(&t->mu);
    return r;
}

static void unlink_locked(conns *t, conn_rec *r) {
    if (r->prev) r->prev->next = r->next;
    else t->head = r->next;
    if (r->next) r->next->prev = r->prev;
    if (!r->closing) t->n--;
}

void conns_remove(conns *t, conn_rec *r) {
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    unlink_locked(t, r);
    pthread_mutex_unlock(&t->mu);
    free(r);
}

static conn_rec *find_fd_locked(conns *t, int fd) {
    for (conn_rec *r = t->head; r; r = r->next)
        if (r->fd == fd) return r;
    return NULL;
}

conn_rec *conns_find_fd(conns *t, int fd) {
    pthread_mutex_lock(&t->mu);
    conn_rec *r = find_fd_locked(t, fd);
    pthread_mutex_unlock(&t->mu);
    return r;
}

void conns_remove_fd(conns *t, int fd) {
    pthread_mutex_lock(&t->mu);
    conn_rec *r = find_fd_locked(t, fd);
    if (r) unlink_locked(t, r);
    pthread_mutex_unlock(&t->mu);
    free(r);
}

void conns_set_phase(conns *t, conn_rec *r, conn_phase p, double now) {
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    r->phase = p;
    r->since = now;
    r->acked = UINT64_MAX; /* not read yet: the first look starts the clock */
    r->acked_at = now;
    pthread_mutex_unlock(&t->mu);
}

/* How far the answer on socket fd has gone: the bytes the client's kernel
 * acknowledged, and whether some wait to be (sent and) acknowledged.
 * False when the socket tells neither (not TCP). */
static bool send_progress(int fd, uint64_t *acked, bool *waiting) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    int outq = 0;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked || ioctl(fd, SIOCOUTQ, &outq))
        return false;
    *acked = ti.tcpi_bytes_acked;
    *waiting = outq > 0;
    return true;
}

/* A connection being answered whose client reads nothing (t->mu held). */
static void sweep_busy(conns *t, conn_rec *r, double now) {
    uint64_t acked;
    bool waiting;
    if (t->send_s <= 0 || !send_progress(r->fd, &acked, &waiting)) return;
    if (!waiting || acked != r->acked) {
        r->acked = acked;
        r->acked_at = now;
    } else if (now - r->acked_at > t->send_s) {
        close_rec(t, r);
        r->marks |= CONN_STALLED;
        t->closed_stalled++;
    }
}

void conns_sweep(conns *t, double now) {
    pthread_mutex_lock(&t->mu);
    for (conn_rec *r = t->head; r; r = r->next) {
        if (r->closing) continue;
        if (r->phase == CONN_BUSY) {
            sweep_busy(t, r, now);
            continue;
        }
        double limit = r->phase == CONN_HEAD ? t->header_s : t->body_s;
        if (limit > 0 && now - r->since > limit) {
            close_rec(t, r);
            t->closed_deadline++;
        }
    }
    pthread_mutex_unlock(&t->mu);
}

void conns_mark(conns *t, conn_rec *r, conn_mark m) {
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    r->marks |= (unsigned)m;
    pthread_mutex_unlock(&t->mu);
}

bool conns_marked(conns *t, const conn_rec *r, conn_mark m) {
    if (!r) return false;
    pthread_mutex_lock(&t->mu);
    const bool marked = r->marks & (unsigned)m;
    pthread_mutex_unlock(&t->mu);
    return marked;
}

void conns_stats(conns *t, int *open, uint64_t *closed_deadline, uint64_t *closed_limit, uint64_t *refused,
                 uint64_t *closed_stalled) {
    pthread_mutex_lock(&t->mu);
    *open = t->n;
    *closed_deadline = t->closed_deadline;
    *closed_limit = t->closed_limit;
    *refused = t->refused;
    *closed_stalled = t->closed_stalled;
    pthread_mutex_unlock(&t->mu);
}
