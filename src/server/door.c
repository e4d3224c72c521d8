/* The door (door.h): accepts connections and checks each one's request
 * head before the HTTP library takes it. */
#include "server/door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/timeutil.h"
#include "server/api.h"

/* What a connection's head may cost the door: it is peeked at (read and
 * left in place) each time more of it arrives, so a head sent a byte at a
 * time would cost the square of its length. Past this many bytes peeked,
 * the connection is answered 400. A head sent in a few pieces peeks a few
 * times its length; a byte-a-time client is cut off after about 2.9 KiB. */
#define PEEK_BUDGET ((size_t)4 << 20)

/* Lingering closes (RFC 9112, 9.6): a connection answered before its
 * request's body was read would be reset by a plain close while the client
 * still sends, and the reset can destroy the answer before the client reads
 * it. Its socket, its sending side shut down after the answer, is read and
 * what comes dropped until the client closes, LINGER_IDLE_S pass without a
 * byte, or LINGER_ALL_S in all (nginx: lingering_timeout, lingering_time);
 * at most LINGER_MAX at once (past it, closed at once). */
#define LINGER_IDLE_S 5.0
#define LINGER_ALL_S  30.0
#define LINGER_MAX    64

/* What an epoll event of the door is about (the first member of each). */
enum { EV_WAITING = 1, EV_LINGER };

typedef struct lingerer {
    char kind; /* EV_LINGER */
    struct lingerer *next;
    int fd;
    double idle_until, until;
} lingerer;

typedef struct waiting {
    char kind; /* EV_WAITING */
    struct waiting *prev, *next;
    int fd;
    conn_rec *rec;
    struct sockaddr_storage addr;
    socklen_t len;
    size_t peeked; /* bytes peeked at so far (PEEK_BUDGET) */
} waiting;

struct door {
    int lfd, ep, wake;
    atomic_bool stop; /* door_close: the thread ends at its next wake */
    conns *table;
    door_hooks hooks;
    waiting *head;
    pthread_t thread;
    /* lingering closes: added by any thread, ended by the door's (under lmu) */
    pthread_mutex_t lmu;
    lingerer *lingering;
    int n_lingering;
};

static bool is_token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

int door_line_check(const char *buf, size_t len, size_t max_line) {
    size_t i = 0;
    while (i < len && (buf[i] == '\r' || buf[i] == '\n')) i++;
    const char *nl = i < len ? memchr(buf + i, '\n', len - i) : NULL;
    if (!nl) return len - i >= max_line ? -1 : 0;
    size_t end = (size_t)(nl - buf);
    if (end > i && buf[end - 1] == '\r') end--;
    size_t m = i;
    while (m < end && buf[m] != ' ' && buf[m] != '\0') {
        if (!is_token_char(buf[m])) return -1;
        m++;
    }
    if (m == i || m == end || buf[m] != ' ') return -1; /* no method, or nothing after it */
    while (m < end && buf[m] == ' ') m++;
    return m < end ? 1 : -1; /* a target */
}

static bool is_ctl(char c) { return (unsigned char)c < 0x20 || c == 0x7f; }

/* A header line's problem (the bytes [p, end), no line ending), or NULL. */
static const char *header_line_problem(const char *p, const char *end) {
    if (memchr(p, '\0', (size_t)(end - p))) return "a header line has a NUL byte";
    if (*p == ' ' || *p == '\t')
        return "a header line is folded onto the one before (obs-fold, RFC 9112 5.2): send each header on one line";
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (!colon) return "a header line has no colon (NAME: VALUE)";
    if (colon == p) return "a header line has no name before its colon";
    for (const char *c = p; c < colon; c++)
        if (!is_token_char(*c))
            return "a header name is not a token (no space may come before the colon, RFC 9112 5.1)";
    return NULL;
}

int door_head_check(const char *buf, size_t len, size_t max_head, const char **why) {
    *why = NULL;
    const int line = door_line_check(buf, len, max_head);
    if (line < 0) {
        *why = "the request line is not HTTP (METHOD TARGET VERSION)";
        return 400;
    }
    if (line == 0) return 0;
    size_t i = 0;
    while (buf[i] == '\r' || buf[i] == '\n') i++;
    const char *nl = memchr(buf + i, '\n', len - i);
    const char *le = nl > buf + i && nl[-1] == '\r' ? nl - 1 : nl;
    size_t spaces = 0;
    for (const char *c = buf + i; c < le; c++) {
        if (is_ctl(*c)) {
            *why = "the request line has a control character";
            return 400;
        }
        spaces += *c == ' ' && (c == buf + i || c[-1] != ' '); /* runs of spaces */
    }
    if (spaces < 2) return 1; /* METHOD TARGET: HTTP/0.9's shape, for the library to answer */
    for (const char *p = nl + 1;;) {
        const char *e = memchr(p, '\n', len - (size_t)(p - buf));
        if (!e && len < max_head) return 0;
        if (!e || (size_t)(e + 1 - buf) > max_head) {
            *why = "the request head is too long";
            return 431;
        }
        const char *end = e > p && e[-1] == '\r' ? e - 1 : e;
        if (end == p) return 1; /* the empty line: the head is whole */
        if ((*why = header_line_problem(p, end))) return 400;
        p = e + 1;
    }
}

static void drop(door *d, waiting *w) {
    epoll_ctl(d->ep, EPOLL_CTL_DEL, w->fd, NULL);
    if (w->prev) w->prev->next = w->next;
    else d->head = w->next;
    if (w->next) w->next->prev = w->prev;
}

static void close_waiting(door *d, waiting *w) {
    drop(d, w);
    conns_remove(d->table, w->rec);
    close(w->fd);
    free(w);
}

static void wake(door *d) {
    const uint64_t one = 1;
    if (write(d->wake, &one, sizeof one) != (ssize_t)sizeof one) PH_WARN("door: cannot wake its thread");
}

void door_linger(door *d, int fd) {
    lingerer *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return;
    }
    const double now = time_now_s();
    l->kind = EV_LINGER;
    l->fd = fd;
    l->idle_until = now + LINGER_IDLE_S;
    l->until = now + LINGER_ALL_S;
    pthread_mutex_lock(&d->lmu);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = l};
    if (d->n_lingering >= LINGER_MAX || epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev)) {
        pthread_mutex_unlock(&d->lmu);
        free(l);
        close(fd);
        return;
    }
    l->next = d->lingering;
    d->lingering = l;
    d->n_lingering++;
    pthread_mutex_unlock(&d->lmu);
    wake(d); /* its deadlines count from now */
}

/* Ends a lingering close (the door's thread; d->lmu held). */
static void linger_end(door *d, lingerer *l) {
    for (lingerer **p = &d->lingering; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    d->n_lingering--;
    epoll_ctl(d->ep, EPOLL_CTL_DEL, l->fd, NULL);
    close(l->fd);
    free(l);
}

/* A lingering socket is readable: what came is dropped (1 MiB at most a
 * turn: the events are level-triggered); its end ends it. */
static void linger_read(door *d, lingerer *l) {
    static char sink[65536]; /* the door's thread only */
    ssize_t n = 0;
    for (int i = 0; i < 16 && (n = recv(l->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0; i++) {}
    pthread_mutex_lock(&d->lmu);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) linger_end(d, l);
    else l->idle_until = time_now_s() + LINGER_IDLE_S;
    pthread_mutex_unlock(&d->lmu);
}

/* Ends the lingering closes past their time; the milliseconds until the
 * next one's (-1: none). */
static int linger_sweep(door *d) {
    const double now = time_now_s();
    double next = -1;
    pthread_mutex_lock(&d->lmu);
    for (lingerer *l = d->lingering, *after; l; l = after) {
        after = l->next;
        const double t = l->idle_until < l->until ? l->idle_until : l->until;
        if (now >= t) linger_end(d, l);
        else if (next < 0 || t < next) next = t;
    }
    pthread_mutex_unlock(&d->lmu);
    return next < 0 ? -1 : (int)((next - now) * 1e3) + 1;
}

/* status (400 or 431) in the OpenAI error shape (the API is not known
 * yet), why its message (a constant without quotes or backslashes), then
 * closed. */
static void refuse(door *d, waiting *w, int status, const char *why) {
    char body[512], msg[1024], id[17];
    const int bn = snprintf(body, sizeof body,
                            "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,"
                            "\"code\":null}}",
                            why);
    api_make_id(id, sizeof id, ""); /* 16 hex digits */
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
                     status, status == 431 ? "Request Header Fields Too Large" : "Bad Request", id, bn, body);
    char client[48];
    conns_addr_text((const struct sockaddr *)&w->addr, client, sizeof client);
    const log_ctx lc = {
        .id = id, .client = client, .status = status, .error_type = "invalid_request_error", .error = why};
    log_line(LOG_INFO, &lc, "%s", "answered at the door");
    if (send(w->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) PH_DEBUG("door: %s", strerror(errno));
    shutdown(w->fd, SHUT_WR);
    if (d->hooks.refused) d->hooks.refused(d->hooks.ud);
    /* what the client still sends is read and dropped, so that closing
     * does not reset the answer away */
    drop(d, w);
    conns_remove(d->table, w->rec);
    door_linger(d, w->fd);
    free(w);
}

static void accept_all(door *d) {
    for (;;) {
        struct sockaddr_storage a;
        socklen_t len = sizeof a;
        int fd = accept4(d->lfd, (struct sockaddr *)&a, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) PH_WARN("door: cannot accept a connection: %s", strerror(errno));
            return; /* EAGAIN: all taken */
        }
        const double now = time_now_s();
        waiting *w = calloc(1, sizeof *w);
        if (!w || !conns_admit(d->table, (struct sockaddr *)&a, now) ||
            !(w->rec = conns_add(d->table, fd, (struct sockaddr *)&a, now))) {
            free(w);
            close(fd);
            continue;
        }
        w->kind = EV_WAITING;
        w->fd = fd;
        w->addr = a;
        w->len = len;
        /* edge-triggered: what is only peeked at stays readable */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = w};
        if (epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev)) {
            conns_remove(d->table, w->rec);
            close(fd);
            free(w);
            continue;
        }
        w->next = d->head;
        if (d->head) d->head->prev = w;
        d->head = w;
    }
}

/* A waiting connection has something to read (or has closed). */
static void look(door *d, waiting *w) {
    char buf[DOOR_MAX_HEAD];
    ssize_t n = recv(w->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* closed by the client, or shut down by the table (a deadline, a limit) */
        close_waiting(d, w);
        return;
    }
    const char *why;
    int c = door_head_check(buf, (size_t)n, sizeof buf, &why);
    if (c == 0 && (w->peeked += (size_t)n) > PEEK_BUDGET) {
        c = 400;
        why = "the request head came in too many small pieces";
    }
    if (c > 1) {
        refuse(d, w, c, why);
    } else if (c == 1) {
        drop(d, w);
        d->hooks.hand(d->hooks.ud, w->fd, (struct sockaddr *)&w->addr, w->len, w->rec);
        free(w);
    }
}

static void *door_main(void *arg) {
    door *d = arg;
    int timeout = -1;
    for (;;) {
        struct epoll_event ev[64];
        int n = epoll_wait(d->ep, ev, 64, timeout);
        if (n < 0 && errno != EINTR) {
            PH_WARN("door: epoll_wait: %s", strerror(errno));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &d->wake) {
                uint64_t v;
                if (read(d->wake, &v, sizeof v) < 0) PH_DEBUG("door: %s", strerror(errno));
                if (atomic_load(&d->stop)) return NULL;
            } else if (p == d) {
                accept_all(d);
            } else if (*(const char *)p == EV_LINGER) {
                linger_read(d, p);
            } else {
                look(d, p);
            }
        }
        timeout = linger_sweep(d);
    }
}

door *door_open(const char *host, int port, conns *table, const door_hooks *hooks, int *port_out, ph_err *err) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        err_set(err, "--host %s is not an IPv4 address", host);
        return NULL;
    }
    door *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(err, "out of memory");
        return NULL;
    }
    d->table = table;
    d->hooks = *hooks;
    pthread_mutex_init(&d->lmu, NULL);
    d->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    d->ep = epoll_create1(EPOLL_CLOEXEC);
    d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int on = 1;
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    struct epoll_event el = {.events = EPOLLIN, .data.ptr = d}, ew = {.events = EPOLLIN, .data.ptr = &d->wake};
    if (d->lfd < 0 || d->ep < 0 || d->wake < 0 || setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) ||
        bind(d->lfd, (struct sockaddr *)&addr, sizeof addr) || listen(d->lfd, 511) ||
        getsockname(d->lfd, (struct sockaddr *)&bound, &blen) || epoll_ctl(d->ep, EPOLL_CTL_ADD, d->lfd, &el) ||
        epoll_ctl(d->ep, EPOLL_CTL_ADD, d->wake, &ew)) {
        const int why = errno;
        err_set(err, "cannot listen on %s:%d: %s%s", host, port, strerror(why),
                why == EADDRINUSE ? " (another program listens there: stop it or give another --port)" : "");
        goto fail;
    }
    if (pthread_create(&d->thread, NULL, door_main, d) != 0) {
        err_set(err, "cannot start the thread that accepts connections");
        goto fail;
    }
    *port_out = ntohs(bound.sin_port);
    return d;
fail:
    if (d->lfd >= 0) close(d->lfd);
    if (d->ep >= 0) close(d->ep);
    if (d->wake >= 0) close(d->wake);
    pthread_mutex_destroy(&d->lmu);
    free(d);
    return NULL;
}

void door_close(door *d) {
    if (!d) return;
    atomic_store(&d->stop, true);
    wake(d);
    pthread_join(d->thread, NULL);
    while (d->head) close_waiting(d, d->head);
    while (d->lingering) linger_end(d, d->lingering);
    pthread_mutex_destroy(&d->lmu);
    close(d->lfd);
    close(d->ep);
    close(d->wake);
    free(d);
}
