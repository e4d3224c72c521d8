/* pinhole cache: looks after the disk tier's folder (the folder of
 * `pinhole serve --kv-disk-dir DIR`, its block store in DIR/blocks: see
 * docs/state-cache.md, Disk tier): lists its conversation ends, sums them
 * up, checks every record in full and removes the least recently used
 * ones.
 *
 *   pinhole cache ls DIR [--json]
 *   pinhole cache stats DIR
 *   pinhole cache verify DIR
 *   pinhole cache prune DIR --max-mb N
 *
 * Exit status: 0 done; 1 the folder could not be read, or verify found bad
 * records (they are dropped); 2 a usage error (unknown subcommand or flag, a
 * missing or nonexistent DIR, DIR not a folder, --max-mb not a number).
 *
 * A DIR that does not exist is refused, never created. A folder that holds
 * no block store (DIR/blocks) is reported as empty without opening it, so
 * that pointing the command at the wrong folder writes nothing there
 * (opening a folder as the disk tier does would create its store, and
 * remove the files of earlier versions). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/args.h"
#include "pinhole.h"

#define MIB 1048576.0

static const char *const usage_all =
    "usage: pinhole cache SUBCOMMAND DIR [options]\n"
    "  DIR is the disk cache folder of `pinhole serve --kv-disk-dir DIR`\n"
    "\n"
    "subcommands:\n"
    "  ls DIR [--json]          one line per conversation end, most recently used first\n"
    "  stats DIR                ends, bytes, rows, pictures, oldest and newest use, per model\n"
    "  verify DIR               check every record in full; bad ones are reported and dropped\n"
    "  prune DIR --max-mb N     remove least recently used records until at most N MiB remain\n"
    "\n"
    "exit status: 0 done; 1 the folder could not be read, or verify found bad records;\n"
    "2 usage error. 'pinhole cache SUBCOMMAND --help' describes a subcommand.\n";

static const char *const usage_ls = "usage: pinhole cache ls DIR [--json]\n"
                                    "  lists the conversation ends in DIR (a record no other one continues), most\n"
                                    "  recently used first: the rows and pictures of its chain, the chain's size\n"
                                    "  (MiB), last use (local time), model (first 12 hex digits of its model_id)\n"
                                    "  and the end record's name, under a header line\n"
                                    "  --json   one JSON object per line instead: name, rows, pictures, bytes,\n"
                                    "           last_use_ms, created_s, model_id (64 hex digits), format\n";

static const char *const usage_stats =
    "usage: pinhole cache stats DIR\n"
    "  prints the number of conversation ends in DIR, their chains' bytes (and MiB),\n"
    "  rows and pictures, the oldest and newest last use, and per model_id its ends\n"
    "  and bytes (a prefix that chains share counts in each)\n";

static const char *const usage_verify =
    "usage: pinhole cache verify DIR\n"
    "  reads and checks every record in DIR in full (header, sizes, checksum, and\n"
    "  its agreement with the index); prints each bad record with the reason and\n"
    "  drops it, then a summary line 'N ok, M bad (removed)'. Exit status 0 when\n"
    "  none was bad, 1 when any was.\n";

static const char *const usage_prune = "usage: pinhole cache prune DIR --max-mb N\n"
                                       "  removes the least recently used records of DIR, the ends of chains first,\n"
                                       "  until at most N MiB (N * 1048576 bytes; N may have a fraction, 0 removes\n"
                                       "  everything) remain, and prints each conversation end it removed\n";

/* ---- helpers ----------------------------------------------------------------- */

static void hex(const uint8_t *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Local time of a unix time in milliseconds, "2026-12-02 10:31". */
static void local_time(int64_t ms, char *out, size_t cap) {
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !localtime_r(&s, &tm) || !strftime(out, cap, "%Y-%m-%d %H:%M", &tm)) snprintf(out, cap, "-");
}

/* 0 when dir is an existing folder; else a message and 2. */
static int check_dir(const char *sub, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "pinhole cache %s: %s: %s\n", sub, dir, errno == ENOENT ? "no such folder" : strerror(errno));
        return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pinhole cache %s: %s: not a folder\n", sub, dir);
        return 2;
    }
    return 0;
}

/* Whether dir holds a block store (DIR/blocks), i.e. whether opening it
 * as the disk tier could find anything. */
static bool has_checkpoints(const char *dir) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/blocks", dir);
    struct stat st;
    return stat(sub, &st) == 0 || errno != ENOENT; /* (the library says why it cannot be read) */
}

/* A copy of what the library lists (its strings live only during the callback). */
typedef struct entry {
    char *name;
    uint8_t model_id[32];
    int32_t n_rows, n_pictures;
    uint64_t bytes;
    int64_t last_use_ms;
} entry;

typedef struct entries {
    entry *v;
    size_t n, cap;
    bool oom;
} entries;

static int collect(void *ud, const ph_kv_file *f) {
    entries *es = ud;
    if (es->n == es->cap) {
        size_t cap = es->cap ? es->cap * 2 : 32;
        entry *v = realloc(es->v, cap * sizeof *v);
        if (!v) {
            es->oom = true;
            return 1;
        }
        es->v = v;
        es->cap = cap;
    }
    entry *e = &es->v[es->n];
    if (!(e->name = strdup(f->name))) {
        es->oom = true;
        return 1;
    }
    memcpy(e->model_id, f->model_id, 32);
    e->n_rows = f->n_rows;
    e->n_pictures = f->n_pictures;
    e->bytes = f->bytes;
    e->last_use_ms = f->last_use_ms;
    es->n++;
    return 0;
}

static void entries_free(entries *es) {
    for (size_t i = 0; i < es->n; i++) free(es->v[i].name);
    free(es->v);
    memset(es, 0, sizeof *es);
}

/* Every file of dir (most recently used first): 0, or a message and 1. */
static int list_all(const char *sub, const char *dir, entries *es) {
    memset(es, 0, sizeof *es);
    if (!has_checkpoints(dir)) return 0;
    ph_err err = {0};
    if (ph_kv_disk_list(dir, collect, es, &err) || es->oom) {
        fprintf(stderr, "pinhole cache %s: %s\n", sub, es->oom ? "out of memory" : err.msg);
        entries_free(es);
        return 1;
    }
    return 0;
}

/* ---- ls ------------------------------------------------------------------------ */

typedef struct ls_ctx {
    bool json, oom;
} ls_ctx;

static int ls_line(void *ud, const ph_kv_file *f) {
    ls_ctx *c = ud;
    char id[65];
    hex(f->model_id, 32, id);
    if (c->json) {
        json_t *o =
            json_pack("{s:s, s:i, s:i, s:I, s:I, s:I, s:s, s:s}", "name", f->name, "rows", (int)f->n_rows, "pictures",
                      (int)f->n_pictures, "bytes", (json_int_t)f->bytes, "last_use_ms", (json_int_t)f->last_use_ms,
                      "created_s", (json_int_t)f->created_s, "model_id", id, "format", f->format ? f->format : "");
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!s) {
            c->oom = true;
            return 1;
        }
        printf("%s\n", s);
        free(s);
        return 0;
    }
    char when[32];
    local_time(f->last_use_ms, when, sizeof when);
    id[12] = '\0';
    printf("%8" PRId32 " %8" PRId32 " %10.2f  %-16s  %-12s  %s\n", f->n_rows, f->n_pictures, (double)f->bytes / MIB,
           when, id, f->name);
    return 0;
}

static int cache_ls(const char *dir, bool json) {
    if (!json) printf("%8s %8s %10s  %-16s  %-12s  %s\n", "ROWS", "PICTURES", "MiB", "LAST USE", "MODEL", "END");
    if (!has_checkpoints(dir)) {
        fprintf(stderr, "pinhole cache ls: %s holds no checkpoints\n", dir);
        return 0;
    }
    ls_ctx c = {json, false};
    ph_err err = {0};
    if (ph_kv_disk_list(dir, ls_line, &c, &err) || c.oom) {
        fprintf(stderr, "pinhole cache ls: %s\n", c.oom ? "out of memory" : err.msg);
        return 1;
    }
    return 0;
}

/* ---- stats --------------------------------------------------------------------- */

typedef struct model_sum {
    uint8_t id[32];
    uint64_t files, bytes;
} model_sum;

static int cache_stats(const char *dir) {
    entries es;
    if (list_all("stats", dir, &es)) return 1;
    uint64_t bytes = 0, rows = 0, pictures = 0;
    int64_t oldest = 0, newest = 0;
    model_sum *ms = NULL;
    size_t n_ms = 0;
    for (size_t i = 0; i < es.n; i++) {
        const entry *e = &es.v[i];
        bytes += e->bytes;
        rows += (uint64_t)(e->n_rows > 0 ? e->n_rows : 0);
        pictures += (uint64_t)(e->n_pictures > 0 ? e->n_pictures : 0);
        if (i == 0 || e->last_use_ms < oldest) oldest = e->last_use_ms;
        if (i == 0 || e->last_use_ms > newest) newest = e->last_use_ms;
        size_t k = 0;
        while (k < n_ms && memcmp(ms[k].id, e->model_id, 32)) k++;
        if (k == n_ms) {
            model_sum *v = realloc(ms, (n_ms + 1) * sizeof *v);
            if (!v) {
                fprintf(stderr, "pinhole cache stats: out of memory\n");
                free(ms);
                entries_free(&es);
                return 1;
            }
            ms = v;
            memset(&ms[n_ms], 0, sizeof *ms);
            memcpy(ms[n_ms++].id, e->model_id, 32);
        }
        ms[k].files++;
        ms[k].bytes += e->bytes;
    }
    char old_s[32], new_s[32];
    local_time(oldest, old_s, sizeof old_s);
    local_time(newest, new_s, sizeof new_s);
    printf("folder      %s\n", dir);
    printf("ends        %zu\n", es.n);
    printf("bytes       %" PRIu64 " (%.2f MiB)\n", bytes, (double)bytes / MIB);
    printf("rows        %" PRIu64 "\n", rows);
    printf("pictures    %" PRIu64 "\n", pictures);
    printf("oldest use  %s\n", old_s);
    printf("newest use  %s\n", new_s);
    if (n_ms) printf("models      %-64s  %6s  %14s  %10s\n", "MODEL_ID", "ENDS", "BYTES", "MiB");
    for (size_t k = 0; k < n_ms; k++) {
        char id[65];
        hex(ms[k].id, 32, id);
        printf("            %-64s  %6" PRIu64 "  %14" PRIu64 "  %10.2f\n", id, ms[k].files, ms[k].bytes,
               (double)ms[k].bytes / MIB);
    }
    free(ms);
    entries_free(&es);
    return 0;
}

/* ---- verify -------------------------------------------------------------------- */

static void on_bad(void *ud, const char *name, const char *why) {
    (void)ud;
    printf("bad  %s: %s\n", name, why);
    fflush(stdout);
}

static int cache_verify(const char *dir) {
    uint64_t n_ok = 0, n_bad = 0;
    if (has_checkpoints(dir)) {
        ph_err err = {0};
        if (ph_kv_disk_verify(dir, on_bad, NULL, &n_ok, &n_bad, &err)) {
            fprintf(stderr, "pinhole cache verify: %s\n", err.msg);
            return 1;
        }
    }
    printf("%" PRIu64 " ok, %" PRIu64 " bad (removed)\n", n_ok, n_bad);
    return n_bad ? 1 : 0;
}

/* ---- prune --------------------------------------------------------------------- */

static int cache_prune(const char *dir, uint64_t max_bytes) {
    entries before, after;
    if (list_all("prune", dir, &before)) return 1;
    uint64_t n_removed = 0, bytes_removed = 0;
    if (before.n) {
        ph_err err = {0};
        if (ph_kv_disk_prune(dir, max_bytes, &n_removed, &bytes_removed, &err)) {
            fprintf(stderr, "pinhole cache prune: %s\n", err.msg);
            entries_free(&before);
            return 1;
        }
    }
    if (list_all("prune", dir, &after)) {
        entries_free(&before);
        return 1;
    }
    /* what was listed before and is gone now, least recently used first */
    for (size_t i = before.n; i-- > 0;) {
        const entry *e = &before.v[i];
        bool kept = false;
        for (size_t j = 0; j < after.n && !kept; j++) kept = !strcmp(after.v[j].name, e->name);
        if (kept) continue;
        char when[32], id[65];
        local_time(e->last_use_ms, when, sizeof when);
        hex(e->model_id, 32, id);
        id[12] = '\0';
        printf("removed %s  %" PRId32 " rows, %" PRId32 " pictures, %.2f MiB, last use %s, model %s\n", e->name,
               e->n_rows, e->n_pictures, (double)e->bytes / MIB, when, id);
    }
    uint64_t left = 0;
    for (size_t j = 0; j < after.n; j++) left += after.v[j].bytes;
    printf("removed %" PRIu64 " record%s (%.2f MiB); %zu conversation end%s (%.2f MiB) remain\n", n_removed,
           n_removed == 1 ? "" : "s", (double)bytes_removed / MIB, after.n, after.n == 1 ? "" : "s",
           (double)left / MIB);
    entries_free(&before);
    entries_free(&after);
    return 0;
}

/* ---- the command ----------------------------------------------------------------- */

int cmd_cache(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_all, stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        fputs(usage_all, stdout);
        return 0;
    }
    const char *usage = !strcmp(sub, "ls")       ? usage_ls
                        : !strcmp(sub, "stats")  ? usage_stats
                        : !strcmp(sub, "verify") ? usage_verify
                        : !strcmp(sub, "prune")  ? usage_prune
                                                 : NULL;
    if (!usage) {
        fprintf(stderr, "pinhole cache: unknown subcommand '%s'\n\n", sub);
        fputs(usage_all, stderr);
        return 2;
    }
    const char *dir = NULL;
    bool json = false, have_max = false;
    double max_mb = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(sub, "ls") && !strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(sub, "prune") && !strcmp(a, "--max-mb")) {
            const char *v = arg_value(argc, argv, &i);
            if (!v || arg_float(a, v, 0, 1e12, &max_mb)) return 2;
            have_max = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pinhole cache %s: unknown option '%s'\n", sub, a);
            return 2;
        } else if (dir) {
            fprintf(stderr, "pinhole cache %s: unexpected argument '%s'\n", sub, a);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "pinhole cache %s: DIR is required\n", sub);
        fputs(usage, stderr);
        return 2;
    }
    if (!strcmp(sub, "prune") && !have_max) {
        fprintf(stderr, "pinhole cache prune: --max-mb N is required\n");
        fputs(usage, stderr);
        return 2;
    }
    int rc = check_dir(sub, dir);
    if (rc) return rc;
    if (!strcmp(sub, "ls")) return cache_ls(dir, json);
    if (!strcmp(sub, "stats")) return cache_stats(dir);
    if (!strcmp(sub, "verify")) return cache_verify(dir);
    return cache_prune(dir, (uint64_t)(max_mb * MIB));
}
