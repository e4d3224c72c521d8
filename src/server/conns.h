/* The server's open connections (issue 13, item 2): how many, from where,
 * and what each is doing, so that a client that sends slowly or opens
 * many connections cannot lock the others out.
 *
 * - Deadlines: a connection that has not sent a whole request head within
 *   header_s of its start (accepted, or its previous answer sent), or the
 *   whole body within body_s of the head, is closed. Both are absolute:
 *   sending a byte now and then does not extend them.
 * - Sending: a connection being answered whose client reads nothing for
 *   send_s (its kernel acknowledges no more of the answer while some of it
 *   waits to be sent: the client's receive buffer is full) is closed, so
 *   that the answer's work stops (a stream is cancelled) and the worker is
 *   free for the next request. Sent bytes are read from TCP_INFO; on a
 *   socket that has none (not TCP) the rule does not apply.
 * - Limits: at most max_total connections, at most max_per_ip from one
 *   address. A new connection past a limit closes the oldest connection of
 *   the limit's scope that is still waiting for its request (head or body);
 *   when every one of them is being answered, the new one is refused. So
 *   a flood of idle connections can delay a real client by no more than
 *   the time to accept it.
 *
 * Closing is shutdown(2) on the socket: the HTTP library sees the end of
 * the connection and releases it, then calls conns_remove. Thread-safe. */
#ifndef PH_SERVER_CONNS_H
#define PH_SERVER_CONNS_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef enum conn_phase {
    CONN_HEAD, /* waiting for a request head (a new or kept-alive connection) */
    CONN_BODY, /* reading a request body */
    CONN_BUSY, /* the request is being answered */
} conn_phase;

/* What happened to a connection, for its end. */
typedef enum conn_mark {
    CONN_STALLED = 1, /* closed because its client read nothing of its answer for send_s */
    CONN_LINGER = 2,  /* answered before its request's body was read: to be closed in stages (door_linger) */
} conn_mark;

typedef struct conn_rec {
    struct conn_rec *prev, *next;
    int fd;
    uint8_t addr[16]; /* the peer's address (IPv4 mapped into IPv6) */
    conn_phase phase;
    double since; /* when the phase began */
    bool closing; /* shut down by a deadline or a limit: no longer counted */
    /* CONN_BUSY: the bytes of the answer the client's kernel acknowledged,
     * when that count last moved (or nothing waited to be sent), and
     * whether the connection was closed for standing still (send_s) */
    uint64_t acked;
    double acked_at;
    unsigned marks; /* conn_mark bits */
} conn_rec;

typedef struct conns {
    pthread_mutex_t mu;
    conn_rec *head; /* in no particular order: the oldest is found by `since` */
    int n;          /* records not closing */
    int max_total, max_per_ip;
    double header_s, body_s, send_s;
    uint64_t closed_deadline, closed_limit, refused, closed_stalled; /* counters for /metrics */
    double last_said;                                                /* when a refusal was last logged */
} conns;

/* send_s: the sending rule's time (0: none). */
void conns_init(conns *t, int max_total, int max_per_ip, double header_s, double body_s, double send_s);
void conns_free(conns *t);

/* A connection from addr is about to be accepted: makes room (closing the
 * oldest waiting connection of a full scope) and says whether it may be. */
/* A client's address as text ("?" when it is neither IPv4 nor IPv6; sa may be NULL). */
void conns_addr_text(const struct sockaddr *sa, char *out, size_t cap);
bool conns_admit(conns *t, const struct sockaddr *addr, double now);
/* An accepted connection: its record (NULL: out of memory, not tracked). */
conn_rec *conns_add(conns *t, int fd, const struct sockaddr *addr, double now);
void conns_remove(conns *t, conn_rec *r);
/* The record of the connection on socket fd (NULL: none). */
conn_rec *conns_find_fd(conns *t, int fd);
/* Removes the record of the connection on socket fd, if there is one. */
void conns_remove_fd(conns *t, int fd);
void conns_set_phase(conns *t, conn_rec *r, conn_phase p, double now);
/* Closes the connections past their deadline, and those whose client has
 * read nothing of their answer for send_s. */
void conns_sweep(conns *t, double now);
/* Marks a connection (r may be NULL), and whether it has the mark. */
void conns_mark(conns *t, conn_rec *r, conn_mark m);
bool conns_marked(conns *t, const conn_rec *r, conn_mark m);
/* The numbers for /metrics. */
void conns_stats(conns *t, int *open, uint64_t *closed_deadline, uint64_t *closed_limit, uint64_t *refused,
                 uint64_t *closed_stalled);

#endif
