/* pinhole pull: fetches a model pair (the LLM of one quantization and its
 * mmproj) from a Hugging Face-style hub with libcurl into the cache folder
 * of hub.h. The hub's layout:
 *   GET {hub}/api/models/{repo}/tree/main   the files: [{"type": "file",
 *       "path", "size", "oid", "lfs": {"oid": SHA-256, "size"}}, ...]
 *   GET {hub}/{repo}/resolve/main/{file}    the file, usually through a
 *       redirect to a storage host; X-Linked-Etag / X-Linked-Size on the
 *       redirect carry the SHA-256 and size of a large (LFS) file.
 * A download goes to FILE.part, resumes it with a Range request, is checked
 * against the listed SHA-256 and size, and is renamed into place; a hidden
 * .FILE.hub beside it records what it was checked against, so that a file
 * the hub still lists the same is not fetched again. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/fs_space.h"
#include "base/grow.h"
#include "base/sha256.h"
#include "base/timeutil.h"
#include "cli/args.h"
#include "cli/hub.h"
#include "pinhole.h"

#define PULL_DEFAULT_HUB "https://huggingface.co"
#define PULL_LISTING_MAX ((size_t)32 << 20) /* bytes of a file listing */
#define PULL_TRIES       5                  /* transfers in a row that break without progress */

static void pull_usage(FILE *out) {
    fprintf(out, "usage: pinhole pull OWNER/NAME[:QUANT] [options]\n"
                 "Downloads a GGUF model and its vision file (mmproj) from a Hugging Face-style hub\n"
                 "into $XDG_CACHE_HOME/pinhole/models/OWNER/NAME/ (default ~/.cache/...), resuming\n"
                 "an interrupted download and checking the hub's SHA-256; then\n"
                 "`pinhole serve -m OWNER/NAME[:QUANT]` (also run, chat) uses them.\n"
                 "  QUANT                 the quantization, a word of the file name, any case (Q4_K_M,\n"
                 "                        q8_0, F16) or the whole file name (default: Q4_K_M, or\n"
                 "                        the only model of the repository)\n"
                 "  --mmproj-quant QUANT  the vision file's (default: the only one, else F16)\n"
                 "  --hub-url URL         the hub (default $PINHOLE_HUB_URL, else " PULL_DEFAULT_HUB ")\n"
                 "Environment: HF_TOKEN, an access token for gated and private repositories (sent\n"
                 "as Authorization: Bearer to the hub only, never printed); https_proxy and\n"
                 "no_proxy as for curl.\n");
}

/* A file of the repository, as the listing gives it. */
typedef struct remote_file {
    char *name;
    uint64_t size;   /* 0: not listed */
    char sha256[65]; /* lowercase hex; empty when not listed */
    char id[96];     /* what the cached copy is matched with: the SHA-256, else the git oid */
} remote_file;

typedef struct pull_ctx {
    const char *hub;
    hub_ref ref;
    CURL *curl;
    struct curl_slist *headers; /* the token's Authorization header, when HF_TOKEN is set */
    char *auth;                 /* its text, wiped at the end */
    char errbuf[CURL_ERROR_SIZE];
    bool tty;
} pull_ctx;

/* A formatted string, malloc'd; NULL when memory is out. */
__attribute__((format(printf, 1, 2))) static char *str_printf(const char *fmt, ...) {
    va_list ap;
    char *s;
    va_start(ap, fmt);
    const int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

/* ---- HTTP ------------------------------------------------------------ */

/* What the headers of the answers to one request said (a redirect's too). */
typedef struct http_heads {
    long status;        /* of the latest answer */
    int64_t range_from; /* its Content-Range start; -1: none */
    char linked_etag[96];
    uint64_t linked_size;
} http_heads;

static void copy_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
    http_heads *h = ud;
    const size_t n = size * nmemb;
    char line[256];
    copy_value(line, sizeof line, p, n);
    const char *colon = strchr(line, ':');
    const char *v = colon ? colon + 1 + strspn(colon + 1, " \t") : NULL;
    if (!strncmp(line, "HTTP/", 5)) {
        const char *sp = strchr(line, ' ');
        h->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        h->range_from = -1;
    } else if (v && !strncasecmp(line, "content-range:", 14)) {
        unsigned long long from;
        if (sscanf(v, "bytes %llu-", &from) == 1) h->range_from = (int64_t)from;
    } else if (v && !strncasecmp(line, "x-linked-etag:", 14)) {
        copy_value(h->linked_etag, sizeof h->linked_etag, v, strlen(v));
    } else if (v && !strncasecmp(line, "x-linked-size:", 14)) {
        h->linked_size = strtoull(v, NULL, 10);
    }
    return n;
}

/* Sets the options of one GET of url: the body goes to write(ud), the
 * headers to heads; range NULL for the whole body. */
static void http_setup(pull_ctx *c, const char *url, curl_write_callback write, void *ud, http_heads *heads,
                       const char *range) {
    memset(heads, 0, sizeof *heads);
    heads->range_from = -1;
    c->errbuf[0] = '\0';
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, write);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, ud);
    curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, heads);
    curl_easy_setopt(c->curl, CURLOPT_RANGE, range);
}

/* The words for a transfer that failed in curl. */
static const char *curl_why(pull_ctx *c, CURLcode rc) { return c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc); }

/* Says why the hub answered status to a request for the file list (file
 * NULL) or for a file of the repository. */
static void http_refusal(pull_ctx *c, long status, const char *file) {
    char what[512];
    snprintf(what, sizeof what, "%s%s%s", file ? file : "", file ? " of " : "", c->ref.repo);
    if (status == 401 || status == 403) {
        fprintf(stderr,
                "pinhole pull: the hub refused access to %s (HTTP %ld): the repository is gated or "
                "private%s. Accept its terms on %s/%s and set HF_TOKEN to an access token of your "
                "account%s\n",
                what, status, status == 401 ? " (or does not exist)" : "", c->hub, c->ref.repo,
                c->auth ? " (HF_TOKEN is set, but the hub did not accept it for this repository)" : "");
    } else if (status == 404) {
        fprintf(stderr, "pinhole pull: %s not found on %s (HTTP 404)%s\n", what, c->hub,
                file ? "" : ": check OWNER/NAME");
    } else {
        fprintf(stderr, "pinhole pull: %s: the hub answered HTTP %ld\n", what, status);
    }
}

/* ---- the file list --------------------------------------------------- */

typedef struct mem_body {
    char *p;
    size_t n, cap;
} mem_body;

static size_t on_mem(char *p, size_t size, size_t nmemb, void *ud) {
    mem_body *b = ud;
    const size_t n = size * nmemb;
    if (b->n + n > PULL_LISTING_MAX) return 0;
    char *g = grow_array(b->p, &b->cap, b->n + n, 1, 4096);
    if (!g) return 0;
    b->p = g;
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return n;
}

static bool hex64(const char *s) {
    uint8_t tmp[PH_SHA256_LEN];
    return strlen(s) == 64 && hex_decode(s, PH_SHA256_LEN, tmp);
}

/* A name a file of ours may take: one path element, not hidden, no
 * control characters. */
static bool safe_name(const char *s) {
    if (!*s || *s == '.' || strlen(s) > 200) return false;
    for (; *s; s++)
        if (*s == '/' || (unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

/* The top-level files of a tree listing into *files; 0, or -1 when the
 * body is not one. */
static int parse_listing(const char *body, size_t n, remote_file **files, size_t *n_files) {
    json_t *root = json_loadb(body, n, 0, NULL);
    size_t i, cnt = 0;
    json_t *it;
    if (!json_is_array(root)) {
        json_decref(root);
        return -1;
    }
    remote_file *v = calloc(json_array_size(root) + 1, sizeof *v);
    json_array_foreach(root, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *path = json_string_value(json_object_get(it, "path"));
        const char *oid = json_string_value(json_object_get(it, "oid"));
        json_t *lfs = json_object_get(it, "lfs"), *size = json_object_get(it, "size");
        if (!v || !path || (type && strcmp(type, "file")) || !safe_name(path)) continue;
        remote_file *f = &v[cnt];
        if (!(f->name = strdup(path))) continue;
        cnt++;
        if (json_is_integer(size) && json_integer_value(size) > 0) f->size = (uint64_t)json_integer_value(size);
        const char *sha = json_string_value(json_object_get(lfs, "sha256"));
        if (!sha) sha = json_string_value(json_object_get(lfs, "oid"));
        json_t *lsize = json_object_get(lfs, "size");
        if (json_is_integer(lsize) && json_integer_value(lsize) > 0) f->size = (uint64_t)json_integer_value(lsize);
        if (sha && hex64(sha)) snprintf(f->sha256, sizeof f->sha256, "%s", sha);
        for (char *p = f->sha256; *p; p++) *p = (char)(*p >= 'A' && *p <= 'F' ? *p + 32 : *p);
        snprintf(f->id, sizeof f->id, "%s", f->sha256[0] ? f->sha256 : oid && strlen(oid) < sizeof f->id ? oid : "");
    }
    json_decref(root);
    if (!v) return -1;
    *files = v;
    *n_files = cnt;
    return 0;
}

/* Fetches the repository's file list. Returns 0, or -1 after saying why. */
static int fetch_listing(pull_ctx *c, remote_file **files, size_t *n_files) {
    char *url = str_printf("%s/api/models/%s/tree/main", c->hub, c->ref.repo);
    mem_body body = {0};
    http_heads heads;
    int rc = -1;
    if (!url) {
        fprintf(stderr, "pinhole pull: out of memory\n");
        return -1;
    }
    http_setup(c, url, on_mem, &body, &heads, NULL);
    CURLcode cr = curl_easy_perform(c->curl);
    long status = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    if (cr == CURLE_WRITE_ERROR)
        fprintf(stderr, "pinhole pull: the file list of %s is over %zu MiB (or memory is out)\n", c->ref.repo,
                PULL_LISTING_MAX >> 20);
    else if (cr != CURLE_OK)
        fprintf(stderr, "pinhole pull: cannot reach the hub at %s: %s\n", c->hub, curl_why(c, cr));
    else if (status != 200) http_refusal(c, status, NULL);
    else if (parse_listing(body.p ? body.p : "", body.n, files, n_files))
        fprintf(stderr, "pinhole pull: %s is not a hub's file list (expected a JSON array of files)\n", url);
    else rc = 0;
    free(body.p);
    free(url);
    return rc;
}

/* ---- progress ------------------------------------------------------- */

typedef struct progress {
    const char *name;
    uint64_t total;   /* 0: not known */
    uint64_t start;   /* bytes there when this run began */
    double t0, drawn; /* start time, last drawing */
} progress;

/* One line on the terminal, redrawn in place (at most 10 times a second):
 * bytes, percent, rate, time left. */
static void progress_draw(progress *p, uint64_t have) {
    const double now = time_now_s();
    if (now - p->drawn < 0.1) return;
    p->drawn = now;
    const double dt = now - p->t0, rate = dt > 0 ? (double)(have - p->start) / dt : 0;
    char got[32], all[32], speed[32], eta[32] = "";
    hub_size_text(got, sizeof got, (double)have);
    hub_size_text(all, sizeof all, (double)p->total);
    hub_size_text(speed, sizeof speed, rate);
    if (p->total && rate > 0 && have <= p->total && dt >= 1.0) { /* the first second's rate says little */
        const unsigned long s = (unsigned long)((double)(p->total - have) / rate);
        snprintf(eta, sizeof eta, "  ETA %lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    }
    if (p->total)
        fprintf(stderr, "\r  %s  %s / %s  %3.0f%%  %s/s%s\033[K", p->name, got, all,
                100.0 * (double)have / (double)p->total, speed, eta);
    else fprintf(stderr, "\r  %s  %s  %s/s\033[K", p->name, got, speed);
}

/* ---- one file -------------------------------------------------------- */

typedef struct download {
    int fd;
    sha256_ctx sha;
    uint64_t have;    /* bytes in the .part file (all hashed) */
    uint64_t fetched; /* bytes received in this run */
    http_heads heads;
    bool body_began, bad_range, restarted;
    int write_errno;
    pull_ctx *c;
    progress prog;
} download;

/* Empties the .part file and the digest: the download starts over. */
static int download_restart(download *d) {
    sha256_discard(&d->sha);
    if (ftruncate(d->fd, 0) || lseek(d->fd, 0, SEEK_SET) < 0 || sha256_init(&d->sha)) {
        d->write_errno = errno ? errno : ENOMEM;
        return -1;
    }
    d->have = 0;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    download *d = ud;
    const size_t n = size * nmemb;
    const long st = d->heads.status;
    if (st != 200 && st != 206) return n; /* a redirect's or an error's body */
    if (!d->body_began) {
        d->body_began = true;
        if (st == 206 && d->heads.range_from != (int64_t)d->have) {
            d->bad_range = true;
            return 0;
        }
        if (st == 200 && d->have) {
            d->restarted = true;
            if (download_restart(d)) return 0;
        }
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(d->fd, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            d->write_errno = w < 0 ? errno : EIO;
            return 0;
        }
        done += (size_t)w;
    }
    sha256_update(&d->sha, p, n);
    d->have += n;
    d->fetched += n;
    if (d->c->tty) progress_draw(&d->prog, d->have);
    return n;
}

/* Feeds the first n bytes of fd to the digest. Returns 0, or -1 (errno). */
static int hash_fd(int fd, uint64_t n, sha256_ctx *sha) {
    static char buf[1 << 16];
    for (uint64_t off = 0; off < n;) {
        size_t want = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return -1;
        }
        sha256_update(sha, buf, (size_t)r);
        off += (uint64_t)r;
    }
    return 0;
}

/* The SHA-256 (hex) of the file at path; 0, or -1. */
static int hash_path(const char *path, char hex[65]) {
    sha256_ctx sha;
    uint8_t dig[PH_SHA256_LEN];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || sha256_init(&sha)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    int rc = fstat(fd, &st) || hash_fd(fd, (uint64_t)st.st_size, &sha) ? -1 : 0;
    close(fd);
    if (rc) sha256_discard(&sha);
    else if (sha256_final(&sha, dig)) rc = -1;
    else hex_encode(dig, PH_SHA256_LEN, hex);
    return rc;
}

/* The record of what a pulled file was checked against: "ID SIZE\n". */
static void record_line(const remote_file *f, uint64_t size, char *out, size_t cap) {
    snprintf(out, cap, "%s %" PRIu64 "\n", f->id, size);
}

static int write_record(const char *side, const remote_file *f, uint64_t size) {
    char line[160];
    record_line(f, size, line, sizeof line);
    const void *parts[1] = {line};
    const size_t lens[1] = {strlen(line)};
    ph_err err = {0};
    if (file_write_atomic(side, parts, lens, 1, &err)) {
        fprintf(stderr, "pinhole pull: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Whether path already holds the file the hub lists (by the record beside
 * it, or by its SHA-256, which then is recorded). */
static bool up_to_date(const char *path, const char *side, const remote_file *f) {
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode) || (f->size && (uint64_t)st.st_size != f->size)) return false;
    char want[160], hex[65];
    record_line(f, (uint64_t)st.st_size, want, sizeof want);
    void *have = NULL;
    size_t n = 0;
    ph_err err = {0};
    bool same = f->id[0] && !file_read_all(side, 256, &have, &n, &err) && !strcmp(have, want);
    free(have);
    if (same || !f->sha256[0]) return same;
    fprintf(stderr, "  %s: checking the copy already here\n", f->name);
    return !hash_path(path, hex) && !strcmp(hex, f->sha256) && !write_record(side, f, (uint64_t)st.st_size);
}

static bool transient(CURLcode rc, long status) {
    switch (rc) {
    case CURLE_OK: return status == 429 || status >= 500;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
    }
}

/* The transfers of one file into d's .part file, resumed after breaks,
 * until it is whole. Returns 0, or -1 after saying why (the .part kept). */
static int transfer(pull_ctx *c, download *d, const char *url, const remote_file *f) {
    for (int fails = 0;;) {
        char range[48];
        snprintf(range, sizeof range, "%" PRIu64 "-", d->have);
        const uint64_t before = d->have;
        http_setup(c, url, on_body, d, &d->heads, d->have ? range : NULL);
        d->body_began = d->bad_range = false;
        CURLcode rc = curl_easy_perform(c->curl);
        long status = 0;
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
        if (c->tty) fputs("\r\033[K", stderr);
        if (d->restarted) {
            fprintf(stderr,
                    "  %s: the hub answered the range request with the whole file: fetching it from the "
                    "start\n",
                    f->name);
            d->restarted = false;
        }
        const char *why = rc != CURLE_OK ? curl_why(c, rc) : "the body ended early";
        if (d->bad_range) {
            why = "the hub answered another range than the one asked for: starting over";
            download_restart(d);
        } else if (rc == CURLE_OK && status == 416) {
            if (f->size && d->have >= f->size) return 0; /* the .part was whole already */
            why = "the hub cannot resume this download: starting over";
            download_restart(d);
        } else if (rc == CURLE_OK && (status == 200 || status == 206)) {
            if (!f->size || d->have >= f->size) return 0;
        } else if (!d->write_errno && !transient(rc, status)) {
            if (rc != CURLE_OK) fprintf(stderr, "pinhole pull: %s: %s\n", f->name, curl_why(c, rc));
            else http_refusal(c, status, f->name);
            return -1;
        } else if (rc == CURLE_OK) {
            why = "the hub is busy";
        }
        if (d->write_errno) {
            const int e = d->write_errno;
            fprintf(stderr, "pinhole pull: %s: cannot write %s.part: %s%s\n", f->name, f->name, strerror(e),
                    e == ENOSPC || e == EDQUOT ? " (the disk is full: make room and pull again to resume)" : "");
            return -1;
        }
        fails = d->have > before ? 1 : fails + 1;
        if (fails >= PULL_TRIES) {
            fprintf(stderr, "pinhole pull: %s: %d attempts in a row failed (%s); pull again later to resume\n",
                    f->name, fails, why);
            return -1;
        }
        char at[32];
        hub_size_text(at, sizeof at, (double)d->have);
        fprintf(stderr, "pinhole pull: %s: the transfer stopped at %s (%s); resuming in %d s\n", f->name, at, why,
                fails);
        sleep((unsigned)fails);
    }
}

/* Checks the whole .part against the hub's digest and size, renames it
 * into place and records it. Returns 0, or -1 (the .part removed when its
 * content is wrong). */
static int finish(download *d, const remote_file *f, const char *part, const char *path, const char *side) {
    uint8_t dig[PH_SHA256_LEN];
    char hex[65];
    const char *want = f->sha256[0] ? f->sha256 : hex64(d->heads.linked_etag) ? d->heads.linked_etag : NULL;
    const uint64_t size = f->size ? f->size : d->heads.linked_size;
    if (sha256_final(&d->sha, dig)) {
        fprintf(stderr, "pinhole pull: %s: the SHA-256 could not be computed (out of memory)\n", f->name);
        return -1;
    }
    hex_encode(dig, PH_SHA256_LEN, hex);
    if ((size && d->have != size) || (want && strcasecmp(hex, want))) {
        unlink(part);
        if (size && d->have != size)
            fprintf(stderr,
                    "pinhole pull: %s: got %" PRIu64 " bytes, the hub lists %" PRIu64 "; the download was "
                    "removed, pull again\n",
                    f->name, d->have, size);
        else
            fprintf(stderr,
                    "pinhole pull: %s: checksum mismatch: SHA-256 %s, the hub lists %s; the download was "
                    "removed, pull again\n",
                    f->name, hex, want);
        return -1;
    }
    if (fsync(d->fd)) {
        fprintf(stderr, "pinhole pull: %s: %s\n", part, strerror(errno));
        return -1;
    }
    if (rename(part, path)) {
        fprintf(stderr, "pinhole pull: cannot rename %s to %s: %s\n", part, path, strerror(errno));
        return -1;
    }
    fsync_parent_dir(path);
    /* After the rename: a record never names a file that is not there. Without
     * it, the next pull checks the file's SHA-256 instead. */
    write_record(side, f, d->have);
    char got[32], speed[32];
    const double dt = time_now_s() - d->prog.t0;
    hub_size_text(got, sizeof got, (double)d->fetched);
    hub_size_text(speed, sizeof speed, dt > 0 ? (double)d->fetched / dt : 0);
    fprintf(stderr, "  %s: %s fetched in %.1f s (%s/s), %s\n", f->name, got, dt, speed,
            want ? "SHA-256 checked" : "size checked (the hub lists no SHA-256)");
    return 0;
}

/* Opens (creating) the .part file, locked against a second pull, and the
 * digest of what it holds. Returns 0, or -1 after saying why. */
static int download_open(download *d, const char *part, const remote_file *f) {
    d->fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (d->fd < 0 || fstat(d->fd, &st)) {
        fprintf(stderr, "pinhole pull: %s: %s\n", part, strerror(errno));
        return -1;
    }
    if (flock(d->fd, LOCK_EX | LOCK_NB)) {
        fprintf(stderr, "pinhole pull: %s: another pinhole pull is downloading it\n", part);
        return -1;
    }
    if (sha256_init(&d->sha)) {
        fprintf(stderr, "pinhole pull: out of memory\n");
        return -1;
    }
    d->have = (uint64_t)st.st_size;
    if (f->size && d->have > f->size && download_restart(d)) {
        fprintf(stderr, "pinhole pull: %s: %s\n", part, strerror(d->write_errno));
        return -1;
    }
    if (d->have && (hash_fd(d->fd, d->have, &d->sha) || lseek(d->fd, 0, SEEK_END) < 0)) {
        fprintf(stderr, "pinhole pull: %s: %s\n", part, strerror(errno));
        return -1;
    }
    return 0;
}

/* Checks that dir's file system has room for need more bytes. */
static int room_for(const char *dir, const remote_file *f, uint64_t need) {
    uint64_t avail, total;
    if (!need || fs_space_get(dir, &avail, &total) || avail >= need) return 0;
    char a[32], b[32];
    hub_size_text(a, sizeof a, (double)need);
    hub_size_text(b, sizeof b, (double)avail);
    fprintf(stderr, "pinhole pull: %s needs %s more, and %s has %s free (the disk is full)\n", f->name, a, dir, b);
    return -1;
}

/* Makes dir/f->name the hub's file: nothing when it already is, else a
 * download, resumed from a .part when one is there. */
static int pull_file(pull_ctx *c, const char *dir, const remote_file *f) {
    char *path = str_printf("%s/%s", dir, f->name), *part = str_printf("%s/%s.part", dir, f->name);
    char *side = str_printf("%s/.%s.hub", dir, f->name);
    char *esc = curl_easy_escape(c->curl, f->name, 0);
    char *url = esc ? str_printf("%s/%s/resolve/main/%s", c->hub, c->ref.repo, esc) : NULL;
    download d = {.fd = -1, .c = c, .prog = {.name = f->name, .total = f->size}};
    int rc = -1;
    if (!path || !part || !side || !esc || !url) {
        fprintf(stderr, "pinhole pull: out of memory\n");
        goto out;
    }
    if (up_to_date(path, side, f)) {
        fprintf(stderr, "  %s: up to date\n", f->name);
        rc = 0;
        goto out;
    }
    if (download_open(&d, part, f)) goto out;
    if (!room_for(dir, f, f->size > d.have ? f->size - d.have : 0)) {
        if (d.have) {
            char at[32];
            hub_size_text(at, sizeof at, (double)d.have);
            fprintf(stderr, "  %s: resuming at %s\n", f->name, at);
        }
        d.prog.start = d.have;
        d.prog.t0 = time_now_s();
        if (!transfer(c, &d, url, f)) rc = finish(&d, f, part, path, side);
    }
    if (rc && !d.have) unlink(part); /* nothing fetched: no empty .part left behind */
out:
    sha256_discard(&d.sha);
    if (d.fd >= 0) close(d.fd);
    curl_free(esc);
    free(url);
    free(path);
    free(part);
    free(side);
    return rc;
}

/* ---- the command ------------------------------------------------------ */

/* The hub's base URL: flag, else PINHOLE_HUB_URL, else the default; its
 * trailing slashes cut. NULL (said why) when it is not http(s). */
static char *hub_base(const char *flag) {
    const char *env = getenv("PINHOLE_HUB_URL");
    const char *u = flag ? flag : env && *env ? env : PULL_DEFAULT_HUB;
    if (strncmp(u, "https://", 8) && strncmp(u, "http://", 7)) {
        fprintf(stderr, "pinhole pull: the hub URL '%s' (%s) is not http:// or https://\n", u,
                flag ? "--hub-url" : "PINHOLE_HUB_URL");
        return NULL;
    }
    char *s = strdup(u);
    for (size_t n = s ? strlen(s) : 0; n && s[n - 1] == '/'; n--) s[n - 1] = '\0';
    if (!s) fprintf(stderr, "pinhole pull: out of memory\n");
    return s;
}

/* The curl handle and the token's header. Returns 0, or -1 (said why). */
static int pull_connect(pull_ctx *c) {
    if (!(c->curl = curl_easy_init())) {
        fprintf(stderr, "pinhole pull: libcurl cannot start\n");
        return -1;
    }
    const char *token = getenv("HF_TOKEN");
    if (token && *token) {
        if (strpbrk(token, "\r\n")) {
            fprintf(stderr, "pinhole pull: HF_TOKEN holds a line break: it cannot be sent\n");
            return -1;
        }
        struct curl_slist *h =
            (c->auth = str_printf("Authorization: Bearer %s", token)) ? curl_slist_append(NULL, c->auth) : NULL;
        if (!h) {
            fprintf(stderr, "pinhole pull: out of memory\n");
            return -1;
        }
        c->headers = h;
    }
    CURL *k = c->curl;
    curl_easy_setopt(k, CURLOPT_USERAGENT, "pinhole/" PINHOLE_VERSION);
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(k, CURLOPT_MAXREDIRS, 10L);
    /* The token goes to the hub only, not to the storage host a download
     * is redirected to (libcurl's default; said here to be sure). */
    curl_easy_setopt(k, CURLOPT_UNRESTRICTED_AUTH, 0L);
    /* from an https hub, redirects to https only */
    const char *protocols = strncmp(c->hub, "https:", 6) ? "http,https" : "https";
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, protocols);
    curl_easy_setopt(k, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a transfer stalled for a minute is broken */
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, c->errbuf);
    return 0;
}

static void pull_close(pull_ctx *c) {
    if (c->curl) curl_easy_cleanup(c->curl);
    for (struct curl_slist *h = c->headers; h; h = h->next) explicit_bzero(h->data, strlen(h->data));
    curl_slist_free_all(c->headers);
    if (c->auth) explicit_bzero(c->auth, strlen(c->auth));
    free(c->auth);
    hub_ref_free(&c->ref);
}

static int pull_main(pull_ctx *c, const char *mm_quant) {
    remote_file *files = NULL;
    size_t n = 0;
    hub_name *names = NULL;
    char *dir = NULL;
    int rc = 1, li = -1, mi = -1;
    fprintf(stderr, "pinhole pull: %s from %s\n", c->ref.repo, c->hub);
    if (pull_connect(c) || fetch_listing(c, &files, &n)) goto out;
    if (!(names = calloc(n + 1, sizeof *names))) goto out;
    for (size_t i = 0; i < n; i++) names[i] = (hub_name){files[i].name, files[i].size};
    if (hub_choose(&c->ref, names, n, mm_quant, NULL, &li, &mi)) {
        rc = 2;
        goto out;
    }
    ph_err err = {0};
    if (!(dir = hub_repo_dir(c->ref.repo))) goto out;
    if (mkdir_p(dir, &err)) {
        fprintf(stderr, "pinhole pull: %s\n", err.msg);
        goto out;
    }
    if (mi < 0)
        fprintf(stderr, "pinhole pull: %s has no vision file (mmproj): the model will read text only\n", c->ref.repo);
    if (pull_file(c, dir, &files[li]) || (mi >= 0 && pull_file(c, dir, &files[mi]))) goto out;
    printf("%s/%s\n", dir, files[li].name);
    if (mi >= 0) printf("%s/%s\n", dir, files[mi].name);
    fprintf(stderr, "pinhole pull: done; start it with: pinhole serve -m %s%s%s\n", c->ref.repo,
            c->ref.quant ? ":" : "", c->ref.quant ? c->ref.quant : "");
    rc = 0;
out:
    for (size_t i = 0; i < n; i++) free(files[i].name);
    free(files);
    free(names);
    free(dir);
    return rc;
}

int cmd_pull(int argc, char **argv) {
    const char *ref = NULL, *mm_quant = NULL, *hub_flag = NULL;
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"mmproj-quant", required_argument, NULL, 'q'},
                                         {"hub-url", required_argument, NULL, 'u'},
                                         {NULL, 0, NULL, 0}};
    arg_state st = {0};
    const char *a, *v;
    for (int o; (o = arg_next("pull", argc, argv, "h", opts, &st, &a, &v)) != -1;) {
        switch (o) {
        case -2: return 2;
        case 'h': pull_usage(stdout); return 0;
        case 'q': mm_quant = v; break;
        case 'u': hub_flag = v; break;
        }
    }
    for (int i = arg_rest(); i < argc; i++) {
        if (ref) {
            fprintf(stderr, "pinhole pull: one model at a time ('%s' and '%s' given)\n", ref, argv[i]);
            return 2;
        }
        ref = argv[i];
    }
    if (!ref) {
        fprintf(stderr, "pinhole pull: which model? give OWNER/NAME[:QUANT] (see pinhole pull --help)\n");
        return 2;
    }
    pull_ctx c = {.tty = isatty(STDERR_FILENO)};
    if (hub_ref_parse(ref, true, &c.ref)) return 2;
    char *hub = hub_base(hub_flag);
    if (!hub) {
        hub_ref_free(&c.ref);
        return 2;
    }
    c.hub = hub;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "pinhole pull: libcurl cannot start\n");
        hub_ref_free(&c.ref);
        free(hub);
        return 1;
    }
    int rc = pull_main(&c, mm_quant);
    pull_close(&c);
    curl_global_cleanup();
    free(hub);
    return rc;
}
