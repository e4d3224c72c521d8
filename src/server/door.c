/* The door (door.h): accepts connections and checks each one's request
 * line before the HTTP library takes it. */
#include "server/door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/timeutil.h"
#include "server/api.h"

#define MAX_LINE 16384 /* a longer request line is not served */

typedef struct waiting {
    struct waiting *prev, *next;
    int fd;
    conn_rec *rec;
    struct sockaddr_storage addr;
    socklen_t len;
} waiting;

struct door {
    int lfd, ep, wake;
    conns *table;
    door_hooks hooks;
    waiting *head;
    pthread_t thread;
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

/* 400 in the OpenAI error shape (the API is not known yet), then closed. */
static void refuse(door *d, waiting *w) {
    static const char body[] = "{\"error\":{\"message\":\"the request line is not HTTP (METHOD TARGET VERSION)\","
                               "\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
    char msg[512], id[17];
    api_make_id(id, sizeof id, ""); /* 16 hex digits */
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "X-Request-Id: %s\r\nContent-Length: %zu\r\n\r\n%s",
                     id, sizeof body - 1, body);
    char client[48];
    conns_addr_text((const struct sockaddr *)&w->addr, client, sizeof client);
    const log_ctx lc = {.id = id, .client = client, .status = 400};
    log_line(LOG_INFO, &lc, "answered 400 to a connection whose request line is not HTTP");
    char sink[4096]; /* what was sent is read, so that closing does not reset the answer away */
    while (recv(w->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
    if (send(w->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) PH_DEBUG("door: %s", strerror(errno));
    shutdown(w->fd, SHUT_WR);
    if (d->hooks.refused) d->hooks.refused(d->hooks.ud);
    close_waiting(d, w);
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
    char buf[MAX_LINE];
    ssize_t n = recv(w->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* closed by the client, or shut down by the table (a deadline, a limit) */
        close_waiting(d, w);
        return;
    }
    int c = door_line_check(buf, (size_t)n, sizeof buf);
    if (c < 0) {
        refuse(d, w);
    } else if (c > 0) {
        drop(d, w);
        d->hooks.hand(d->hooks.ud, w->fd, (struct sockaddr *)&w->addr, w->len, w->rec);
        free(w);
    }
}

static void *door_main(void *arg) {
    door *d = arg;
    for (;;) {
        struct epoll_event ev[64];
        int n = epoll_wait(d->ep, ev, 64, -1);
        if (n < 0 && errno != EINTR) {
            PH_WARN("door: epoll_wait: %s", strerror(errno));
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &d->wake) return NULL;
            if (ev[i].data.ptr == d) accept_all(d);
            else look(d, ev[i].data.ptr);
        }
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
    free(d);
    return NULL;
}

void door_close(door *d) {
    if (!d) return;
    const uint64_t one = 1;
    if (write(d->wake, &one, sizeof one) != (ssize_t)sizeof one) PH_WARN("door: cannot wake its thread");
    pthread_join(d->thread, NULL);
    while (d->head) close_waiting(d, d->head);
    close(d->lfd);
    close(d->ep);
    close(d->wake);
    free(d);
}
