/* The door: the server's listening socket, and a first look at each new
 * connection before the HTTP library takes it (issue 13, items 2 and 8;
 * issue 23, item 7).
 *
 * A thread accepts connections (room is made for each within the
 * connection limits, conns.h), waits without a thread per connection
 * (epoll) for each one's request head, and answers it itself when the
 * head is not sound HTTP in a way the library would hide or answer with
 * silence: a request line that is not HTTP (no method and target, a method
 * that is not a token), a control character in it, a header line folded
 * onto the one before (obs-fold), a header line without a colon or whose
 * name is not a token (whitespace before the colon), a NUL byte, or a head
 * past DOOR_MAX_HEAD bytes (431). A sound head hands the connection over
 * (hand), its bytes still unread (they are only peeked at). A connection
 * that closes, or that the table closes (a deadline or a limit), before
 * its head is in is dropped.
 *
 * Only a connection's first head passes the door: the library reads the
 * later ones of a kept-alive connection (the server checks those heads'
 * header names, which a folded line also spoils). */
#ifndef PH_SERVER_DOOR_H
#define PH_SERVER_DOOR_H

#include <stdint.h>
#include <sys/socket.h>

#include "base/error.h"
#include "server/conns.h"

typedef struct door door;

typedef struct door_hooks {
    /* takes the connection fd (its record in the table is rec) */
    void (*hand)(void *ud, int fd, const struct sockaddr *addr, socklen_t len, conn_rec *rec);
    /* a connection was answered 400 at the door */
    void (*refused)(void *ud);
    void *ud;
} door_hooks;

/* Listens on host (IPv4) and port (0: any free one); *port_out: the port. */
door *door_open(const char *host, int port, conns *table, const door_hooks *hooks, int *port_out, ph_err *err);
/* Stops accepting, closes the connections still at the door. */
void door_close(door *d);

/* Closes fd in stages (RFC 9112, 9.6): fd is a connection answered before
 * its request's body was read, its sending side shut down after the
 * answer; what the client still sends is read and dropped until it closes,
 * 5 s pass without a byte or 30 s in all, so that a close with unread bytes
 * does not reset the connection and destroy the answer before the client
 * has read it. Takes fd (closes it at once past 64 such). Any thread. */
void door_linger(door *d, int fd);

/* Whether the start of what a connection sent (len bytes) holds a whole
 * request line: 1 sound, -1 not HTTP, 0 not yet whole. Leading empty lines
 * are skipped, as HTTP allows. Pure, for tests. */
int door_line_check(const char *buf, size_t len, size_t max_line);

/* The longest request head the door takes (request line and headers). */
#define DOOR_MAX_HEAD 32768

/* Whether the start of what a connection sent (len bytes) holds a whole,
 * sound request head (the request line as door_line_check, then header
 * lines up to an empty one): 0 not yet whole; 1 sound (also a request line
 * without a version, HTTP/0.9's shape, which the library answers); else
 * the status to answer, 400 or 431 (a head longer than max_head), with
 * *why saying why. Pure, for tests. */
int door_head_check(const char *buf, size_t len, size_t max_head, const char **why);

#endif
