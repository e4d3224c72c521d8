/* pinhole serve: the HTTP server (src/server) over an engine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/args.h"
#include "cli/model_find.h"
#include "pinhole.h"
#include "server/access.h"
#include "server/server.h"

static void serve_usage(FILE *out) {
    fprintf(out, "usage: pinhole serve -m LLM.gguf|DIR [--mmproj MMPROJ.gguf] [options]\n");
    model_help(out, 28, HELP_CTX | HELP_BUDGET);
    fprintf(out, "  --host ADDR               IPv4 address to listen on (default 127.0.0.1)\n"
                 "  --port N                  port (default 8080; 0: any free port)\n"
                 "  --max-images N            most pictures per request (default 16)\n"
                 "  --max-queue N             most requests waiting for the model; past it 503 with\n"
                 "                            Retry-After (default 64; 0: no bound)\n"
                 "  --parallel N              requests answered at once, their rows evaluated together\n"
                 "                            (default 4; 1: one at a time)\n"
                 "  --batch-tokens N          most rows one batch step evaluates: every decoding request's\n"
                 "                            next token, then prompt rows (default 512)\n"
                 "  --max-pixels-in-flight N  most picture pixels (their headers' sizes) of the requests\n"
                 "                            queued and running; past it 503 with Retry-After, a request\n"
                 "                            over it alone 400 (default 268435456 = 256 Mpx, 768 MiB\n"
                 "                            decoded; 0: no bound)\n"
                 "  --max-body-mb N           largest request body in MiB (default 64)\n"
                 "  --request-timeout-s S     stop a request that has not finished S seconds after it arrived:\n"
                 "                            503, or an error event if it was streaming (default 0: none)\n"
                 "  --max-connections N       most open connections (default 256); a new one past it closes\n"
                 "                            the oldest connection still waiting for its request, or is\n"
                 "                            refused when every one is being answered\n"
                 "  --max-connections-per-ip N  the same, per client address (default 64)\n"
                 "  --header-timeout-s S      a connection must send a whole request head within S seconds\n"
                 "                            of opening (or of its previous answer), or it is closed\n"
                 "                            (default 10)\n"
                 "  --body-timeout-s S        and the whole body within S seconds of the head (default 60)\n"
                 "  --send-timeout-s S        close a connection whose client has read nothing of its answer\n"
                 "                            for S seconds while more of it waits (its receive buffer full):\n"
                 "                            a stream so closed is cancelled and the model goes on to the\n"
                 "                            next request (default 60; 0: no limit)\n"
                 "  --api-key KEY             require this key (Authorization: Bearer KEY or x-api-key: KEY)\n"
                 "                            on every request but GET /health and the web page (GET /); other\n"
                 "                            local users can read it in the process list: prefer\n"
                 "                            --api-key-file or PINHOLE_API_KEY\n"
                 "  --api-key-file FILE       the keys, one a line (blank lines and lines starting with #\n"
                 "                            are skipped; refused without a key; a warning if the file is\n"
                 "                            readable by group or others); with several keys, each key's\n"
                 "                            requests reuse no state or picture cached by another key's\n"
                 "                            Without either flag the environment variable PINHOLE_API_KEY,\n"
                 "                            when set, is the key.\n"
                 "  --cors-origin ORIGIN      let pages of ORIGIN (scheme://host[:port], or * for any) read\n"
                 "                            answers: CORS headers and preflights; may be given more than\n"
                 "                            once (default: no CORS headers, browsers block cross-origin reads)\n"
                 "  --allow-host HOST         accept requests whose Host header names HOST (with any port,\n"
                 "                            or only HOST:PORT if given so; * for any); may be given more\n"
                 "                            than once (default: only localhost, 127.x.x.x, [::1] and the\n"
                 "                            --host address; others get 403, against DNS rebinding)\n"
                 "  --alias NAME              the model's name in /v1/models (default: the file name); may be\n"
                 "                            given more than once: the first is listed, all are accepted\n"
                 "                            as a request's \"model\"\n"
                 "  --any-model               accept any \"model\" in requests (default: only the served\n"
                 "                            name and its aliases; any other gets 404)\n"
                 "  --allow-forced-output     a test switch: the body field \"forced_output\": \"TEXT\" makes TEXT\n"
                 "                            the model's output (its tokens go through the normal decode,\n"
                 "                            parse and stream path); refused with 400 without this flag\n"
                 "  --strict-fields           refuse (400) a request field this server does not know\n"
                 "                            (default: accepted, ignored, logged once, counted and named in\n"
                 "                            the X-Pinhole-Ignored-Fields header)\n"
                 "  --temp F                  default temperature, 0..2; 0 is greedy (default 1)\n"
                 "  --top-p F                 default top-p, above 0 and at most 1 (default 1: off)\n"
                 "  --top-k N                 default top-k (default 0: off)\n"
                 "  --max-tokens N            default token limit of an answer (default 4096; 0: until the\n"
                 "                            context is full)\n"
                 "                            These four apply to requests that leave the field out; a field\n"
                 "                            in the request always wins.\n"
                 "  --image-cache-entries N   picture embeddings kept in memory (default 32; 0: none)\n"
                 "  --image-cache-mib N       and at most this many MiB of them (default 128)\n"
                 "  --image-cache-dir DIR     also keep picture embeddings here, across restarts\n"
                 "  --image-cache-disk-mib N  and at most N MiB of files there (default 4096)\n"
                 "  --vision-idle-s N         load the vision encoder only when needed and release it\n"
                 "                            after N idle seconds (default: keep it loaded)\n"
                 "  --cache-ram-mib N         keep displaced conversations' KV in RAM, at most N MiB\n"
                 "                            beyond one context's (default 2048; 0: off)\n"
                 "  --kv-pool-mib N           the KV pool: every conversation's KV blocks, at most N MiB\n"
                 "                            (default: one context's KV plus --cache-ram-mib)\n"
                 "  --conversation-cache-mib N  park the primary conversation for auxiliary requests\n"
                 "                            (\"auxiliary\": true or X-Pinhole-Auxiliary: 1), at most N MiB\n"
                 "                            (default 2048; 0: off)\n"
                 "  --kv-disk-dir DIR         save conversations' KV blocks here, each once (at the end of\n"
                 "                            each prompt and turn, and at shutdown) and resume from them,\n"
                 "                            also after a restart (default: off)\n"
                 "  --kv-disk-space-mb N      at most N MiB of block records (default 16384)\n"
                 "  --checkpoint-every N      also checkpoint (Qwen3.5: snapshot) every N rows of a long prompt\n"
                 "                            (default 4096; 0: never)\n"
                 "  --shared-tier URL         share picture embeddings and (with --kv-disk-dir) KV blocks with\n"
                 "                            other replicas through Redis: redis://HOST[:PORT][/DB]; the link\n"
                 "                            is unencrypted: keep it on a private network (default: off)\n"
                 "  --shared-tier-password-file F  Redis's password: F's first line\n"
                 "  --shared-tier-timeout-ms N  a read waits at most N ms for each reply, then the turn goes\n"
                 "                            on without it (default 200)\n"
                 "  --no-reuse                evaluate every prompt from scratch (no live-state reuse)\n"
                 "  --no-cache                no reuse and no embedding cache (a cold run, for comparisons)\n"
                 "  --log-format FMT          text: each log line starts with an ISO-8601 UTC timestamp; json:\n"
                 "                            one JSON object a line (ts, level, id, client, method, path,\n"
                 "                            event, status, ms, msg, token counts) (default text)\n"
                 "  -v, --verbose             log more (and GET /health and /metrics requests)\n"
                 "Endpoints: POST /v1/chat/completions, /v1/responses, /v1/messages,\n"
                 "/v1/messages/count_tokens (bodies as Content-Type: application/json, else 415);\n"
                 "GET /v1/models, /health, /metrics. Pictures only as data: URIs (PNG, JPEG, WebP, GIF).\n"
                 "GET / is a web chat page: open http://HOST:PORT/ in a browser.\n"
                 "The port is bound before the model loads: until it is ready /health answers 503\n"
                 "{\"status\":\"loading\",\"progress\":F} and other requests 503. Every answer carries an\n"
                 "X-Request-Id (the client's, when 1 to 64 of A-Za-z0-9._-), named in the request's log lines.\n");
}

/* Loading: a line per step (not per report within one), and /health's
 * progress (ud: the server). */
static void on_progress(void *ud, const char *what, double f) {
    static const char *last;
    if (!last || strcmp(last, what)) PH_INFO("[%3.0f%%] %s", f * 100.0, what);
    last = what;
    server_loading(ud, f);
}

/* API keys read from a file (freed with keys_free). */
typedef struct key_list {
    char **v;
    size_t n;
} key_list;

static void keys_free(key_list *k) {
    for (size_t i = 0; i < k->n; i++) {
        explicit_bzero(k->v[i], strlen(k->v[i]));
        free(k->v[i]);
    }
    free(k->v);
    memset(k, 0, sizeof *k);
}

/* Why the key of a line (its line ending stripped) cannot be one: NULL
 * when it can. */
static const char *line_key_problem(const key_list *keys, const char *key) {
    const char *why = access_key_problem(key);
    for (size_t i = 0; !why && i < keys->n; i++)
        if (!strcmp(keys->v[i], key)) why = "the same key as an earlier line";
    return why;
}

/* Opens the file of secrets path (flag: the option that named it), saying
 * why on stderr when it cannot; warns when group or others can read it. */
static FILE *open_secret(const char *flag, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "pinhole serve: %s %s: %s\n", flag, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
        PH_WARN("%s %s can be read by group or others (mode %03o); chmod 600 it", flag, path,
                (unsigned)(st.st_mode & 0777));
    return f;
}

/* Reads the keys of path, one a line (line endings stripped; lines that
 * are blank or start with '#' skipped), into *keys. Refuses a file without
 * a key, a bad key and a key given twice; warns when the file is readable
 * by group or others. Returns 0 or 2. */
static int read_key_file(const char *path, key_list *keys) {
    FILE *f = open_secret("--api-key-file", path);
    if (!f) return 2;
    char *line = NULL;
    size_t cap = 0, line_no = 0;
    ssize_t n;
    int rc = 0;
    errno = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        line_no++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        line[n] = '\0';
        const size_t lead = strspn(line, " \t");
        if (!line[lead] || line[lead] == '#') continue;
        const char *why = line_key_problem(keys, line);
        char **v = why ? NULL : realloc(keys->v, (keys->n + 1) * sizeof *v);
        if (why) {
            fprintf(stderr, "pinhole serve: --api-key-file %s: line %zu: %s\n", path, line_no, why);
            rc = 2;
        } else if (!v || !(v[keys->n] = strdup(line))) {
            if (v) keys->v = v;
            fprintf(stderr, "pinhole serve: out of memory\n");
            rc = 2;
        } else {
            keys->v = v;
            keys->n++;
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "pinhole serve: --api-key-file %s: %s\n", path, strerror(errno ? errno : EIO));
        rc = 2;
    }
    if (rc == 0 && keys->n == 0) {
        fprintf(stderr,
                "pinhole serve: --api-key-file %s: no key in it (it is empty, or has only blank lines "
                "and comments)\n",
                path);
        rc = 2;
    }
    fclose(f);
    if (line) explicit_bzero(line, cap);
    free(line);
    return rc;
}

/* What serve_main's option table hands its handler: the lists and the
 * options that need more than a store. */
typedef struct serve_args {
    srv_config *cfg;
    ph_engine_params *ep;
    const char **aliases, **cors, **hosts; /* room for argc names each */
    const char *key, *key_file;
    const char *shared_password_file;
    log_format log_fmt;
} serve_args;

#define SECRET_MAX 512

/* The first line of path (its line ending stripped), the shared tier's
 * password, into out (SECRET_MAX + 1 bytes). Warns when the file is
 * readable by group or others. Returns 0 or 2. */
static int read_secret_file(const char *path, char out[SECRET_MAX + 1]) {
    FILE *f = open_secret("--shared-tier-password-file", path);
    if (!f) return 2;
    const bool got = fgets(out, SECRET_MAX + 1, f) != NULL;
    fclose(f);
    size_t n = got ? strlen(out) : 0;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r')) out[--n] = '\0';
    if (!n) {
        fprintf(stderr, "pinhole serve: --shared-tier-password-file %s: no password on its first line\n", path);
        return 2;
    }
    return 0;
}

static int serve_option(void *ud, const arg_opt *o, const char *flag, const char *v) {
    serve_args *sa = ud;
    srv_config *cfg = sa->cfg;
    const char *n = o->name;
    if (!strcmp(n, "verbose")) log_set_level(LOG_DEBUG);
    else if (!strcmp(n, "no-reuse")) sa->ep->reuse = false;
    else if (!strcmp(n, "no-cache")) {
        sa->ep->reuse = false;
        sa->ep->picture_cache_entries = 0;
    } else if (!strcmp(n, "log-format")) {
        if (log_parse_format(v, &sa->log_fmt)) {
            fprintf(stderr, "pinhole serve: --log-format '%s': give text or json\n", v);
            return -1;
        }
    } else if (!strcmp(n, "api-key")) sa->key = v;
    else if (!strcmp(n, "cors-origin")) {
        if (!access_origin_valid(v)) {
            fprintf(stderr,
                    "pinhole serve: --cors-origin '%s' is not an origin: give scheme://host[:port] "
                    "(no path, as in http://localhost:3000) or *\n",
                    v);
            return -1;
        }
        sa->cors[cfg->n_cors_origins++] = v;
    } else if (!strcmp(n, "allow-host")) {
        if (!*v || strchr(v, '/') || strchr(v, ' ')) {
            fprintf(stderr, "pinhole serve: --allow-host '%s' is not a host name (NAME, NAME:PORT or *)\n", v);
            return -1;
        }
        sa->hosts[cfg->n_allow_hosts++] = v;
    } else if (!strcmp(n, "alias")) {
        if (!*v) {
            fprintf(stderr, "pinhole serve: --alias needs a name\n");
            return -1;
        }
        sa->aliases[cfg->n_aliases++] = v;
    } else if (!strcmp(n, "top-p")) {
        double d;
        if (arg_float(flag, v, 0, 1, &d)) return -1;
        if (!(d > 0)) {
            fprintf(stderr, "pinhole: %s: '%s' must be above 0 (at most 1)\n", flag, v);
            return -1;
        }
        cfg->top_p = d;
    }
    return 0;
}

/* aliases, cors, hosts: room for argc names each (the --alias,
 * --cors-origin and --allow-host values). file_keys: the keys read from a
 * file (freed by the caller). */
static int serve_main(int argc, char **argv, const char **aliases, const char **cors, const char **hosts,
                      key_list *file_keys, model_files *files) {
    ph_engine_params ep;
    ph_engine_params_default(&ep);
    model_args ma = {0};
    srv_config cfg;
    server_config_default(&cfg);
    serve_args sa = {.cfg = &cfg, .ep = &ep, .aliases = aliases, .cors = cors, .hosts = hosts, .log_fmt = LOG_TEXT};
    arg_opt opts[64] = {
        {"model", 'm', ARG_STR, &ma.model, 0, 0},
        {"mmproj", 0, ARG_STR, &ma.mmproj, 0, 0},
        {"no-mmproj", 0, ARG_SET, &ma.no_mmproj, 0, 0},
        {"host", 0, ARG_STR, &cfg.host, 0, 0},
        {"port", 0, ARG_INT, &cfg.port, 0, 65535},
        {"max-images", 0, ARG_INT, &cfg.max_images, 0, 4096},
        {"max-queue", 0, ARG_INT, &cfg.max_queue, 0, 1 << 20},
        {"parallel", 0, ARG_INT, &cfg.parallel, 1, 256},
        {"batch-tokens", 0, ARG_I32, &ep.batch_tokens, 1, 1 << 16},
        {"max-pixels-in-flight", 0, ARG_U64, &cfg.max_pixels_in_flight, 0, 0},
        {"max-body-mb", 0, ARG_MIB, &cfg.max_body, 1, 1 << 20},
        {"request-timeout-s", 0, ARG_F64, &cfg.request_timeout_s, 0, 1e9},
        {"max-connections", 0, ARG_INT, &cfg.max_connections, 8, 1 << 20},
        {"max-connections-per-ip", 0, ARG_INT, &cfg.max_connections_per_ip, 1, 1 << 20},
        {"header-timeout-s", 0, ARG_F64, &cfg.header_timeout_s, 0.1, 1e6},
        {"body-timeout-s", 0, ARG_F64, &cfg.body_timeout_s, 0.1, 1e6},
        {"send-timeout-s", 0, ARG_F64, &cfg.send_timeout_s, 0, 1e6},
        {"api-key", 0, ARG_CALL, NULL, 0, 0},
        {"api-key-file", 0, ARG_STR, &sa.key_file, 0, 0},
        {"cors-origin", 0, ARG_CALL, NULL, 0, 0},
        {"allow-host", 0, ARG_CALL, NULL, 0, 0},
        {"alias", 0, ARG_CALL, NULL, 0, 0},
        {"any-model", 0, ARG_SET, &cfg.any_model, 0, 0},
        {"allow-forced-output", 0, ARG_SET, &cfg.allow_forced_output, 0, 0},
        {"strict-fields", 0, ARG_SET, &cfg.strict_fields, 0, 0},
        {"temp", 0, ARG_F64, &cfg.temperature, 0, 2},
        {"top-p", 0, ARG_CALL, NULL, 0, 0},
        {"top-k", 0, ARG_INT, &cfg.top_k, 0, INT32_MAX},
        {"max-tokens", 0, ARG_INT, &cfg.max_tokens, 0, INT32_MAX},
        {"image-cache-entries", 0, ARG_INT, &ep.picture_cache_entries, 0, 1 << 20},
        {"image-cache-mib", 0, ARG_MIB, &ep.picture_cache_bytes, 0, 1 << 24},
        {"image-cache-dir", 0, ARG_STR, &ep.picture_cache_dir, 0, 0},
        {"image-cache-disk-mib", 0, ARG_MIB_U64, &ep.picture_cache_disk_bytes, 1, 1 << 30},
        {"conversation-cache-mib", 0, ARG_MIB, &ep.conversation_cache_bytes, 0, 1 << 30},
        {"cache-ram-mib", 0, ARG_MIB, &ep.ram_cache_bytes, 0, 1 << 30},
        {"kv-pool-mib", 0, ARG_MIB, &ep.kv_pool_bytes, 1, 1 << 30},
        {"kv-disk-dir", 0, ARG_STR, &ep.kv_disk_dir, 0, 0},
        {"kv-disk-space-mb", 0, ARG_MIB_U64, &ep.kv_disk_bytes, 1, 1L << 30},
        {"checkpoint-every", 0, ARG_I32, &ep.checkpoint_every, 0, 1 << 22},
        {"shared-tier", 0, ARG_STR, &ep.shared_tier, 0, 0},
        {"shared-tier-password-file", 0, ARG_STR, &sa.shared_password_file, 0, 0},
        {"shared-tier-timeout-ms", 0, ARG_INT, &ep.shared_tier_timeout_ms, 1, 600000},
        {"vision-idle-s", 0, ARG_F64, &ep.vision_idle_s, 0.001, 1e9},
        {"no-reuse", 0, ARG_CALL_FLAG, NULL, 0, 0},
        {"no-cache", 0, ARG_CALL_FLAG, NULL, 0, 0},
        {"log-format", 0, ARG_CALL, NULL, 0, 0},
        {"verbose", 'v', ARG_CALL_FLAG, NULL, 0, 0},
    };
    size_t n = 0;
    while (n < sizeof opts / sizeof *opts && opts[n].name) n++;
    n += arg_engine_opts(opts + n, &ep);
    const int parsed = arg_parse("serve", argc, argv, opts, n, serve_option, &sa);
    if (parsed == 1) serve_usage(stdout);
    if (parsed) return parsed < 0 ? 2 : 0;
    if (!ma.model) {
        fprintf(stderr, "pinhole serve: -m MODEL is required (see pinhole serve --help)\n");
        return 2;
    }
    const char *key_file = sa.key_file, *one_key[1] = {sa.key};
    const bool key_flag = sa.key != NULL;
    const log_format log_fmt = sa.log_fmt;
    log_set_format(log_fmt);
    /* the key: --api-key, --api-key-file, or PINHOLE_API_KEY */
    if (key_flag && key_file) {
        fprintf(stderr, "pinhole serve: give the key once: --api-key or --api-key-file, not both\n");
        return 2;
    }
    const char *key_from = NULL;
    if (key_file) {
        if (read_key_file(key_file, file_keys)) return 2;
        cfg.api_keys = (const char *const *)file_keys->v;
        cfg.n_api_keys = file_keys->n;
        key_from = "--api-key-file";
    } else {
        if (!key_flag) one_key[0] = getenv("PINHOLE_API_KEY");
        key_from = key_flag ? "--api-key" : one_key[0] ? "PINHOLE_API_KEY" : NULL;
        const char *why = key_from ? access_key_problem(one_key[0]) : NULL;
        if (why) {
            fprintf(stderr, "pinhole serve: the API key (%s): %s\n", key_from, why);
            return 2;
        }
        cfg.api_keys = one_key;
        cfg.n_api_keys = key_from ? 1 : 0;
    }
    cfg.cors_origins = cors;
    cfg.allow_hosts = hosts;
    char shared_password[SECRET_MAX + 1];
    if (sa.shared_password_file) {
        if (read_secret_file(sa.shared_password_file, shared_password)) return 2;
        ep.shared_tier_password = shared_password;
    }
    if (ep.shared_tier && !ep.reuse) {
        fprintf(stderr, "pinhole serve: --shared-tier shares state for reuse; it cannot go with --no-reuse or "
                        "--no-cache\n");
        return 2;
    }
    if (ep.kv_disk_dir && !ep.reuse) {
        fprintf(stderr,
                "pinhole serve: --kv-disk-dir saves state for reuse; it cannot go with --no-reuse or --no-cache\n");
        return 2;
    }
    if (model_find(&ma, true, "pinhole serve", files)) return 2;
    ep.model_path = files->model;
    ep.mmproj_path = files->mmproj[0] ? files->mmproj : NULL;
    char name[256];
    cfg.aliases = aliases;
    if (cfg.n_aliases) cfg.model_name = aliases[0];
    else {
        model_name(&ma, files, name, sizeof name);
        cfg.model_name = name;
    }
    ph_err err = {0};
    /* the port first: one that is taken fails before the seconds of loading */
    srv *s = server_open(&cfg, &err);
    if (!s) {
        PH_ERROR("%s", err.msg);
        return 1;
    }
    ep.progress = on_progress;
    ep.progress_ud = s;
    ep.n_parallel = cfg.parallel;
    ph_engine *e = ph_engine_new(&ep, &err);
    explicit_bzero(shared_password, sizeof shared_password); /* the tier keeps its own copy */
    if (!e) {
        PH_ERROR("%s", err.msg);
        server_close(s);
        return 1;
    }
    model_files_say(files, ph_engine_has_vision(e), ep.vision_idle_s > 0 ? "encoder loaded on demand" : NULL);
    model_say_setup(e, cfg.model_name, ep.n_threads);
    if (cfg.n_api_keys > 1)
        PH_INFO("one of %zu API keys is required (from %s); each key's requests are isolated from the others'",
                cfg.n_api_keys, key_from);
    else if (key_from) PH_INFO("an API key is required (from %s)", key_from);
    if (cfg.n_cors_origins)
        PH_INFO("CORS: pages of %s%s may read answers", cors[0],
                cfg.n_cors_origins > 1 ? " and the other --cors-origin values" : "");
    int rc = server_run(s, e);
    ph_engine_free(e);
    return rc;
}

int cmd_serve(int argc, char **argv) {
    size_t n = argc > 0 ? (size_t)argc : 1;
    const char **aliases = calloc(n, sizeof *aliases), **cors = calloc(n, sizeof *cors),
               **hosts = calloc(n, sizeof *hosts);
    key_list keys = {0};
    model_files *files = malloc(sizeof *files);
    int rc = 1;
    if (!aliases || !cors || !hosts || !files) fprintf(stderr, "pinhole: out of memory\n");
    else rc = serve_main(argc, argv, aliases, cors, hosts, &keys, files);
    keys_free(&keys);
    free(files);
    free(aliases);
    free(cors);
    free(hosts);
    return rc;
}
