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
    conns_init(&t, 16, 16, 10, 60, 0);
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
    uint64_t dl, lim, ref, st;
    conns_stats(&t, &open, &dl, &lim, &ref, &st);
    CHECKF(open == 0 && dl == 3 && lim == 0 && ref == 0, "open %d, deadline %llu, limit %llu, refused %llu", open,
           (unsigned long long)dl, (unsigned long long)lim, (unsigned long long)ref);
    close_conn(&t, &head);
    close_conn(&t, &body);
    close_conn(&t, &busy);
    conns_free(&t);
}

static void test_limits(void) {
    conns t;
    conns_init(&t, 6, 3, 100, 100, 0);
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
    conns_init(&t2, 10, 2, 100, 100, 0);
    CHECK(open_conn(&t2, &d[0], "10.0.0.9", 0));
    CHECK(open_conn(&t2, &d[1], "10.0.0.9", 1));
    conns_set_phase(&t2, d[0].rec, CONN_BUSY, 2);
    conns_set_phase(&t2, d[1].rec, CONN_BODY, 2);
    conns_set_phase(&t2, d[1].rec, CONN_BUSY, 3);
    struct sockaddr_in in = ip("10.0.0.9");
    CHECK(!conns_admit(&t2, (struct sockaddr *)&in, 4));
    CHECK(!closed(&d[0]) && !closed(&d[1]));
    int open;
    uint64_t dl, lim, ref, st;
    conns_stats(&t2, &open, &dl, &lim, &ref, &st);
    CHECKF(open == 2 && ref == 1 && lim == 0, "open %d, refused %llu, limit %llu", open, (unsigned long long)ref,
           (unsigned long long)lim);
    conns_stats(&t, &open, &dl, &lim, &ref, &st);
    CHECKF(open == 6 && lim == 2 && dl == 0, "open %d, limit %llu, deadline %llu", open, (unsigned long long)lim,
           (unsigned long long)dl);
    for (int i = 0; i < 4; i++) close_conn(&t, &a[i]);
    for (int i = 0; i < 3; i++) close_conn(&t, &b[i]);
    close_conn(&t, &c);
    close_conn(&t2, &d[0]);
    close_conn(&t2, &d[1]);
    conns_stats(&t, &open, &dl, &lim, &ref, &st);
    CHECK(open == 0);
    conns_free(&t);
    conns_free(&t2);
}

/* A TCP connection on loopback (the sending rule reads TCP_INFO): srv is
 * the server's end, non-blocking; the client's receive buffer is small. */
static bool tcp_pair(int *srv, int *cli) {
    struct sockaddr_in a = ip("127.0.0.1");
    socklen_t len = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    *cli = socket(AF_INET, SOCK_STREAM, 0);
    const int small = 4096;
    setsockopt(*cli, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    bool ok = l >= 0 && *cli >= 0 && !bind(l, (struct sockaddr *)&a, sizeof a) && !listen(l, 1) &&
              !getsockname(l, (struct sockaddr *)&a, &len) && !connect(*cli, (struct sockaddr *)&a, sizeof a) &&
              (*srv = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0;
    close(l);
    return ok;
}

/* Writes to fd until the socket takes no more: the bytes written. */
static size_t fill(int fd) {
    static char block[4096];
    size_t n = 0;
    ssize_t w;
    for (int idle = 0; idle < 20; idle++) { /* the kernel may take a little more a moment later */
        while ((w = send(fd, block, sizeof block, MSG_NOSIGNAL)) > 0) n += (size_t)w;
        usleep(1000);
    }
    return n;
}

/* The sending rule: a connection being answered whose client reads
 * nothing of the answer for send_s is closed and counted; one whose client
 * reads, or that has nothing waiting to be sent, is not. */
static void test_stalled(void) {
    conns t;
    conns_init(&t, 16, 16, 10, 60, 5);
    struct sockaddr_in lo = ip("127.0.0.1");
    int s1, c1, s2, c2;
    CHECK(tcp_pair(&s1, &c1) && tcp_pair(&s2, &c2));
    conn_rec *stuck = conns_add(&t, s1, (struct sockaddr *)&lo, 0);
    conn_rec *reader = conns_add(&t, s2, (struct sockaddr *)&lo, 0);
    conns_set_phase(&t, stuck, CONN_BUSY, 100);
    conns_set_phase(&t, reader, CONN_BUSY, 100);
    conns_sweep(&t, 200); /* nothing sent yet: nothing waits, however long */
    CHECK(!conns_marked(&t, stuck, CONN_STALLED));
    CHECK(fill(s1) > 0); /* the client of s1 reads nothing */
    usleep(100000);      /* the last acknowledgements of what its buffer took */
    conns_sweep(&t, 300);
    conns_sweep(&t, 304.9);
    CHECK(!conns_marked(&t, stuck, CONN_STALLED));
    /* the reader's client reads what it is sent */
    char buf[8192];
    CHECK(send(s2, buf, sizeof buf, MSG_NOSIGNAL) == (ssize_t)sizeof buf);
    size_t got = 0;
    for (ssize_t r; got < sizeof buf && (r = recv(c2, buf, sizeof buf, 0)) > 0;) got += (size_t)r;
    usleep(20000); /* its acknowledgement */
    conns_sweep(&t, 305.1);
    CHECK(conns_marked(&t, stuck, CONN_STALLED)); /* 5 s without a byte acknowledged while some wait */
    CHECK(!conns_marked(&t, reader, CONN_STALLED));
    conns_sweep(&t, 1000);
    CHECK(!conns_marked(&t, reader, CONN_STALLED));
    int open;
    uint64_t dl, lim, ref, st;
    conns_stats(&t, &open, &dl, &lim, &ref, &st);
    CHECKF(open == 1 && st == 1 && dl == 0, "open %d, stalled %llu, deadline %llu", open, (unsigned long long)st,
           (unsigned long long)dl);
    /* the rule off (0): never */
    conns t0;
    conns_init(&t0, 16, 16, 10, 60, 0);
    int s3, c3;
    CHECK(tcp_pair(&s3, &c3));
    conn_rec *r3 = conns_add(&t0, s3, (struct sockaddr *)&lo, 0);
    conns_set_phase(&t0, r3, CONN_BUSY, 0);
    fill(s3);
    conns_sweep(&t0, 1);
    conns_sweep(&t0, 1e6);
    CHECK(!conns_marked(&t0, r3, CONN_STALLED));
    conns_remove(&t, stuck);
    conns_remove(&t, reader);
    conns_remove(&t0, r3);
    conns_free(&t);
    conns_free(&t0);
    const int fds[] = {s1, c1, s2, c2, s3, c3};
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) close(fds[i]);
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

/* The door's look at a whole head: what the HTTP library would hide
 * (folded lines joined, a NUL cutting a value) or answer with silence. */
static void test_request_head(void) {
    struct {
        const char *in;
        int want;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1},
        {"GET / HTTP/1.1\nHost: x\n\n", 1},
        {"\r\nPOST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 1},
        {"GET / HTTP/1.1\r\n\r\n", 1},
        {"GET /x\n", 1},                      /* HTTP/0.9's shape: the library answers it */
        {"GET / HTTP/1.1\r\nHost: x\r\n", 0}, /* not whole yet */
        {"GET / HTTP/1.1\r\nHost: x\r\nX-Long: abc", 0},
        {"GET / HTTP/1.1\r\nHost: x\r\nX-No-Colon-Yet", 0}, /* a line is judged when whole */
        {"G@T / HTTP/1.1\r\n\r\n", 400},
        {"GET /a\x01b HTTP/1.1\r\n\r\n", 400},                      /* a control character in the target */
        {"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n", 400}, /* obs-fold */
        {"GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n\tc\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400}, /* folded onto the request line */
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400}, /* whitespace before the colon */
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: empty name\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX(y): z\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *why = NULL;
        int got = door_head_check(cases[i].in, strlen(cases[i].in), 256, &why);
        CHECKF(got == cases[i].want, "%zu: %d, not %d", i, got, cases[i].want);
        CHECKF((got > 1) == (why != NULL), "%zu: a refusal says why, only a refusal", i);
    }
    const char *why = NULL;
    const char nul[] = "GET / HTTP/1.1\r\nX-A: b\0c\r\n\r\n";
    CHECK(door_head_check(nul, sizeof nul - 1, 256, &why) == 400 && strstr(why, "NUL"));
    char fold[] = "GET / HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n";
    CHECK(door_head_check(fold, strlen(fold), 256, &why) == 400 && strstr(why, "obs-fold"));
    /* a head past the limit: 431, whole or not */
    char big[600];
    int n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX-Big: ");
    memset(big + n, 'a', sizeof big - (size_t)n);
    CHECK(door_head_check(big, 255, 256, &why) == 0);
    CHECK(door_head_check(big, 256, 256, &why) == 431);
    memcpy(big + 400, "\r\n\r\n", 4);
    CHECK(door_head_check(big, 404, 256, &why) == 431);
    CHECK(door_head_check(big, 404, 512, &why) == 1);
}

int main(void) {
    test_deadlines();
    test_limits();
    test_request_line();
    test_request_head();
    test_stalled();
    TEST_END();
}
