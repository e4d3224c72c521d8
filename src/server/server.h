/* pinhole serve: an HTTP server for the OpenAI Chat Completions, OpenAI
 * Responses and Anthropic Messages APIs (docs/architecture.md, Server). A pool of HTTP threads
 * parse, validate, fingerprint pictures and read their headers; one
 * inference worker runs requests in arrival order (and decodes their
 * pictures). */
#ifndef PH_SERVER_SERVER_H
#define PH_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinhole.h"

typedef struct srv_config {
    const char *host;         /* the IPv4 address to listen on */
    int port;                 /* 0: any free port */
    int max_images;           /* per request */
    int max_queue;            /* requests waiting for the worker; past it 503 (0: no bound) */
    int parallel;             /* worker threads, each running one request (the engine's n_parallel) */
    double request_timeout_s; /* a request unfinished this long after it arrived is stopped (0: none) */
    /* connections (issue 13): at most max_connections, max_connections_per_ip
     * from one address (a new one past a limit closes the oldest idle one);
     * a request head must arrive within header_timeout_s, its body within
     * body_timeout_s */
    int max_connections;
    int max_connections_per_ip;
    double header_timeout_s;
    double body_timeout_s;
    /* a connection whose client has read nothing of its answer for
     * send_timeout_s while more of it waits is closed; a stream so closed
     * is cancelled (0: no limit) */
    double send_timeout_s;
    uint64_t max_pixels_in_flight; /* the pictures of the queued and running requests, in pixels
                                    * (their headers' sizes); past it 503 (0: no bound) */
    size_t max_body;               /* bytes */
    /* the API keys (none: no key needed); else every request but GET
     * /health, the web page (GET /) and CORS preflights must carry one of them. With more than
     * one, each key is an isolation domain of its own: its requests reuse
     * no state or picture embedding made by another key's */
    const char *const *api_keys;
    size_t n_api_keys;
    /* --cors-origin: the origins whose pages may read answers ("*": any);
     * none: no CORS headers at all */
    const char *const *cors_origins;
    size_t n_cors_origins;
    /* --allow-host: Host values accepted besides the loopback names and
     * the bound address ("*": any) */
    const char *const *allow_hosts;
    size_t n_allow_hosts;
    const char *model_name; /* the id in /v1/models and responses */
    /* the names a request's "model" may give: model_name and these (the
     * --alias names; model_name is the first of them when there are any) */
    const char *const *aliases;
    size_t n_aliases;
    bool any_model;           /* --any-model: accept any "model" */
    bool allow_forced_output; /* --allow-forced-output: a test switch (docs/server.md) */
    bool strict_fields;       /* --strict-fields: a request field in no list is refused (else ignored, named) */
    /* sampling defaults for requests that leave these fields out (--temp,
     * --top-p, --top-k, --max-tokens); a field in the request always wins */
    double temperature; /* >= 0; 0: greedy */
    double top_p;       /* (0, 1] */
    int top_k;          /* 0: off */
    int max_tokens;     /* 0: until the context is full */
} srv_config;

/* The defaults (the flags' documented ones): 127.0.0.1:8080, 16 pictures
 * a request, a queue of 64, 256 Mpx of pictures in flight, 64 MiB bodies,
 * 256 connections (64 an address), 10 s for a head, 60 s for a body and for
 * a client that reads nothing, temperature 1, top-p 1, top-k off, and
 * SERVER_MAX_TOKENS tokens an answer; no keys, origins, hosts or aliases. */
void server_config_default(srv_config *c);

/* The default token limit of an answer when the request gives none: a
 * bound on a model that loops or never emits its end token, which would
 * otherwise generate until the context is full (minutes on a long context,
 * with the single worker busy), and far more than a normal answer,
 * reasoning included, needs. */
enum { SERVER_MAX_TOKENS = 4096 };

typedef struct srv srv;

/* Binds the port and starts the HTTP threads before the model is loaded
 * (a port taken fails at once): until server_run, GET /health answers 503
 * {"status":"loading","progress":F} and every other request 503 with
 * Retry-After. Logs "bound to URL". NULL (err set) on failure. */
srv *server_open(const srv_config *c, ph_err *err);
/* How far the loading is, 0 to 1 (for /health). */
void server_loading(srv *s, double fraction);
/* Frees a server that never ran (the model did not load). */
void server_close(srv *s);
/* Serves over the loaded engine until SIGINT or SIGTERM, then frees s.
 * Logs "listening on URL" when ready. Returns 0 after a clean stop. */
int server_run(srv *s, ph_engine *e);

#endif
