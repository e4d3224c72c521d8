/* The server's connection table (src/server/conns): deadlines that a
 * trickle of bytes does not extend, and limits that close the oldest idle
 * connection of the full scope, never a busy one; and the door's check of
 * a request line (src/server/door). Sockets are socketpairs:
 * a connection the table closes reads as ended at the other end. */
#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/conns.h"
#include "server/door.h"
#include "test.h"

typedef struct pair {
    int srv, cli;
    conn_rec *rec;
} pair;

static struct sockaddr_in ip(const char *a) {
    struct sockaddr_in in = {.sin_family = AF_INET};
    inet_pton(AF_INET, a, &in.sin_addr);
    return in;
}

/* Whether the table shut the server side down: the client reads the end. */
static bool closed(const pair *p) {
    char b;
    return recv(p->cli, &b, 1, MSG_DONTWAIT) == 0;
}

static bool open_conn(conns *t, pair *p, const char *addr, double now) {
    struct sockaddr_in in = ip(addr);
    if (!conns_admit(t, (struct sockaddr *)&in, now)) return false;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return false;
    p->srv = sv[0];
    p->cli = sv[1];
    p->rec = conns_add(t, p->srv, (struct sockaddr *)&in, now);
    return p->rec != NULL;
}

static void close_conn(conns *t, pair *p) {
    conns_remove(t, p->rec);
    close(p->srv);
    close(p->cli);
}

static void test_deadlines(void) {
    conns t;
    conns_init(&t, 16, 16, 10, 60);
    pair head, body, busy;
    CHECK(open_conn(&t, &head, "10.0.0.1", 0));
    CHECK(open_conn(&t, &body, "10.0.0.1", 0));
    CHECK(open_conn(&t, &busy, "10.0.0.1", 0));
    conns_set_phase(&t, body.rec, CONN_BODY, 5);
    conns_set_phase(&t, busy.rec, CONN_BUSY, 5);
    conns_sweep(&t, 9.9);
    CHECK(!closed(&head) && !closed(&body) && !closed(&busy));
    conns_sweep(&t, 10.1); /* the head's 10 s are up, however many bytes came */
    CHECK(closed(&head));
    CHECK(!closed(&body) && !closed(&busy));
    conns_sweep(&t, 64.9);
    CHECK(!closed(&body));
    conns_sweep(&t, 65.1); /* the body's 60 s from the head */
    CHECK(closed(&body));
    conns_sweep(&t, 1e6); /* a request being answered has no deadline here */
    CHECK(!closed(&busy));
    /* kept alive after its answer: a new head deadline */
    conns_set_phase(&t, busy.rec, CONN_HEAD, 2000);
    conns_sweep(&t, 2009);
    CHECK(!closed(&busy));
    conns_sweep(&t, 2011);
    CHECK(closed(&busy));
    int open;
    uint64_t dl, lim, ref;
    conns_stats(&t, &open, &dl, &lim, &ref);
    CHECKF(open == 0 && dl == 3 && lim == 0 && ref == 0, "open %d, deadline %llu, limit %llu, refused %llu", open,
           (unsigned long long)dl, (unsigned long long)lim, (unsigned long long)ref);
    close_conn(&t, &head);
    close_conn(&t, &body);
    close_conn(&t, &busy);
    conns_free(&t);
}

static void test_limits(void) {
    conns t;
    conns_init(&t, 6, 3, 100, 100);
    pair a[4], b[3];
    /* one address: the fourth connection closes the oldest idle one */
    for (int i = 0; i < 3; i++) CHECK(open_conn(&t, &a[i], "10.0.0.1", i));
    conns_set_phase(&t, a[0].rec, CONN_BUSY, 3); /* being answered: never closed for room */
    CHECK(open_conn(&t, &a[3], "10.0.0.1", 4));
    CHECK(!closed(&a[0]));
    CHECK(closed(&a[1])); /* the oldest waiting one */
    CHECK(!closed(&a[2]) && !closed(&a[3]));
    /* another address is not touched by the first one's limit */
    for (int i = 0; i < 3; i++) CHECK(open_conn(&t, &b[i], "10.0.0.2", 10 + i));
    for (int i = 0; i < 3; i++) CHECK(!closed(&b[i]));
    /* the total (6): a new one from a third address closes the oldest
     * waiting connection of all (a[2], since 2) */
    pair c;
    CHECK(open_conn(&t, &c, "10.0.0.3", 20));
    CHECK(closed(&a[2]));
    CHECK(!closed(&a[3]) && !closed(&b[0]));
    /* every connection of a full scope busy: refused, nothing closed */
    pair d[3];
    conns t2;
    conns_init(&t2, 10, 2, 100, 100);
    CHECK(open_conn(&t2, &d[0], "10.0.0.9", 0));
    CHECK(open_conn(&t2, &d[1], "10.0.0.9", 1));
    conns_set_phase(&t2, d[0].rec, CONN_BUSY, 2);
    conns_set_phase(&t2, d[1].rec, CONN_BODY, 2);
    conns_set_phase(&t2, d[1].rec, CONN_BUSY, 3);
    struct sockaddr_in in = ip("10.0.0.9");
    CHECK(!conns_admit(&t2, (struct sockaddr *)&in, 4));
    CHECK(!closed(&d[0]) && !closed(&d[1]));
    int open;
    uint64_t dl, lim, ref;
    conns_stats(&t2, &open, &dl, &lim, &ref);
    CHECKF(open == 2 && ref == 1 && lim == 0, "open %d, refused %llu, limit %llu", open, (unsigned long long)ref,
           (unsigned long long)lim);
    conns_stats(&t, &open, &dl, &lim, &ref);
    CHECKF(open == 6 && lim == 2 && dl == 0, "open %d, limit %llu, deadline %llu", open, (unsigned long long)lim,
           (unsigned long long)dl);
    for (int i = 0; i < 4; i++) close_conn(&t, &a[i]);
    for (int i = 0; i < 3; i++) close_conn(&t, &b[i]);
    close_conn(&t, &c);
    close_conn(&t2, &d[0]);
    close_conn(&t2, &d[1]);
    conns_stats(&t, &open, &dl, &lim, &ref);
    CHECK(open == 0);
    conns_free(&t);
    conns_free(&t2);
}

/* The door's first look at a connection: a whole, sound request line. */
static void test_request_line(void) {
    struct {
        const char *in;
        int want;
    } cases[] = {
        {"GET / HTTP/1.1\r\n", 1},
        {"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", 1},
        {"\r\n\r\nGET /health HTTP/1.1\r\n", 1}, /* empty lines first are allowed */
        {"GET /x\n", 1},                         /* HTTP/0.9's shape: the library answers it */
        {"GET / HTTP/1.1", 0},                   /* not whole yet */
        {"", 0},
        {"\r\n", 0},
        {"GARBAGE\r\n", -1}, /* no target */
        {"GET\r\n", -1},
        {"GET \r\n", -1},
        {" / HTTP/1.1\r\n", -1},                        /* no method */
        {"G@T / HTTP/1.1\r\n", -1},                     /* not a token */
        {"\x16\x03\x01\x02\x05\x01\xfc\x03\x03\n", -1}, /* TLS to a plain HTTP port */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = door_line_check(cases[i].in, strlen(cases[i].in), 64);
        CHECKF(got == cases[i].want, "%zu: %d, not %d", i, got, cases[i].want);
    }
    const char nul[] = "GE\0T / HTTP/1.1\r\n";
    CHECK(door_line_check(nul, sizeof nul - 1, 64) == -1);
    char longline[100];
    memset(longline, 'a', sizeof longline);
    CHECK(door_line_check(longline, sizeof longline, 64) == -1); /* past the longest line, still no end */
    CHECK(door_line_check(longline, 63, 64) == 0);
}

int main(void) {
    test_deadlines();
    test_limits();
    test_request_line();
    TEST_END();
}
