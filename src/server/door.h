/* The door: the server's listening socket, and a first look at each new
 * connection before the HTTP library takes it (issue 13, items 2 and 8).
 *
 * A thread accepts connections (room is made for each within the
 * connection limits, conns.h), waits without a thread per connection
 * (epoll) for each one's request line, and answers 400 itself to a line
 * that is not HTTP (no method and target, or a method that is not a token:
 * the HTTP library would close such a connection without a word). A sound
 * line hands the connection over (hand), the bytes still unread. A
 * connection that closes, or that the table closes (a deadline or a
 * limit), before its line is in is dropped. */
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

/* Whether the start of what a connection sent (len bytes) holds a whole
 * request line: 1 sound, -1 not HTTP, 0 not yet whole. Leading empty lines
 * are skipped, as HTTP allows. Pure, for tests. */
int door_line_check(const char *buf, size_t len, size_t max_line);

#endif
