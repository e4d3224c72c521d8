/* `pinhole cache` on a real disk cache folder: block records are made
 * through the library (an engine with a disk tier on the oracle's tiny
 * model, one short turn per conversation: a full block and a resume point
 * each), then ls, ls --json, stats, verify (clean, then with a damaged
 * record), prune (partly, then all) are
 * run through the built binary; and the refusals: a missing folder (never
 * created), a file instead of a folder, unknown subcommands and flags. */
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pinhole.h"
#include "test.h"
#include "test_util.h"

#define LLM    PH_ORACLE_DIR "/models/tiny-f16.gguf"
#define MMPROJ PH_ORACLE_DIR "/models/tiny-f16-mmproj.gguf"
#define MIB    1048576.0

static char idcache[64];

/* `pinhole cache ARGS` with stdout in *out (stderr to /dev/null, or into
 * *out too with err). */
static int cache(char **out, bool err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int cache(char **out, bool err, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s cache %s %s", PH_PINHOLE_BIN, args, err ? "2>&1" : "2>/dev/null");
    return t_run(cmd, out);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The segment files in dir/blocks, in the order they were made (their
 * ids): how many, their paths in seg (up to max). */
static int segments(const char *dir, char seg[][600], int max) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/blocks", dir);
    DIR *d = opendir(sub);
    if (!d) return 0;
    long ids[16];
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (!strncmp(de->d_name, "seg-", 4) && n < 16) ids[n++] = atol(de->d_name + 4);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            long x = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = x;
        }
    for (int i = 0; i < n && i < max; i++) snprintf(seg[i], 600, "%s/seg-%ld.phbs", sub, ids[i]);
    return n;
}

static int ignore(void *ud, const ph_gen_event *ev) {
    (void)ud;
    (void)ev;
    return 0;
}

/* One turn of a fresh engine with a disk tier on dir (one token generated,
 * so the checkpoint holds exactly the prompt's rows), then a clean
 * shutdown, which writes everything queued. Fills *r; -1 on failure. */
static int one_turn(const char *dir, const char *system, const char *user, const char *picture, ph_turn_report *r) {
    ph_engine_params p;
    ph_engine_params_default(&p);
    p.model_path = LLM;
    p.mmproj_path = MMPROJ;
    p.n_ctx = 2048;
    p.n_threads = 2;
    p.picture_cache_entries = 0;
    p.id_cache_dir = idcache;
    p.kv_disk_dir = dir;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    if (!e) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return -1;
    }
    ph_picture *im = NULL;
    if (picture) {
        FILE *f = fopen(picture, "rb");
        char buf[1 << 16];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        if (!(im = ph_picture_new(buf, n, picture, &err))) fprintf(stderr, "picture: %s\n", err.msg);
    }
    ph_chat_part sp = {.text = system, .len = strlen(system)};
    ph_chat_part up[2] = {{.picture = im}, {.text = user, .len = strlen(user)}};
    ph_chat_msg msgs[2] = {{.role = PH_ROLE_SYSTEM, .parts = &sp, .n_parts = 1},
                           {.role = PH_ROLE_USER, .parts = im ? up : up + 1, .n_parts = im ? 2u : 1u}};
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.max_tokens = 1;
    memset(r, 0, sizeof *r);
    int rc = ph_engine_chat(e, msgs, 2, &g, ignore, NULL, r, &err);
    if (rc) fprintf(stderr, "turn: %s\n", err.msg);
    ph_engine_free(e);
    ph_picture_free(im);
    return rc;
}

/* The data lines of `ls` output (after its header): rows, pictures, MiB,
 * model (12 hex) and name of each. */
typedef struct ls_line {
    int rows, pics;
    double mib;
    char model[16], name[80];
} ls_line;

static int parse_ls(const char *out, ls_line *v, int max) {
    const char *p = strchr(out, '\n');
    CHECKF(p && !strncmp(out + strspn(out, " "), "ROWS", 4), "ls header: '%.80s'", out);
    if (!p) return -1;
    int n = 0;
    for (p++; *p && n < max; p = strchr(p, '\n') + 1) {
        char date[16], time[16];
        ls_line *l = &v[n];
        int k =
            sscanf(p, "%d %d %lf %15s %15s %15s %79s", &l->rows, &l->pics, &l->mib, date, time, l->model, l->name);
        CHECKF(k == 7 && strlen(date) == 10 && strlen(time) == 5, "ls line: '%.120s'", p);
        n++;
        if (!strchr(p, '\n')) break;
    }
    return n;
}

/* The lines of stdout that start with a prefix: whether one contains want. */
static bool has_line(const char *out, const char *prefix, const char *want) {
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (strncmp(p, prefix, strlen(prefix))) continue;
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < 511 ? len : 511), p);
        if (strstr(line, want)) return true;
    }
    return false;
}

static void check_refusals(const char *dir) {
    char *out;
    char missing[600], afile[600];
    snprintf(missing, sizeof missing, "%s/not-here/deeper", dir);
    snprintf(afile, sizeof afile, "%s/plain-file", dir);
    FILE *f = fopen(afile, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    static const char *const subs[] = {"ls", "stats", "verify", "prune --max-mb 1 "};
    for (int i = 0; i < 4; i++) {
        int rc = cache(&out, true, "%s %s", subs[i], missing);
        CHECKF(rc == 2 && strstr(out, "no such folder"), "%s on a missing folder: exit %d, '%s'", subs[i], rc, out);
        free(out);
        char parent[600];
        snprintf(parent, sizeof parent, "%s/not-here", dir);
        CHECKF(!exists(missing) && !exists(parent), "%s created the missing folder", subs[i]);
        rc = cache(&out, true, "%s %s", subs[i], afile);
        CHECKF(rc == 2 && strstr(out, "not a folder"), "%s on a file: exit %d, '%s'", subs[i], rc, out);
        free(out);
    }
    /* usage errors */
    const char *bad[][2] = {
        {"", "usage: pinhole cache"},
        {"frob %s", "unknown subcommand"},
        {"ls", "DIR is required"},
        {"ls %s --bogus", "unknown option"},
        {"ls %s %s", "unexpected argument"},
        {"stats %s --json", "unknown option"},
        {"verify %s -x", "unknown option"},
        {"prune %s", "--max-mb N is required"},
        {"prune %s --max-mb", "needs a value"},
        {"prune %s --max-mb abc", "not a number"},
        {"prune %s --max-mb 12x", "not a number"},
        {"prune %s --max-mb -1", "not a number"},
        {"prune %s --max-mb nan", "not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[2048];
        snprintf(args, sizeof args, bad[i][0], dir, dir);
        int rc = cache(&out, true, "%s", args);
        CHECKF(rc == 2 && strstr(out, bad[i][1]), "'pinhole cache %s': exit %d, '%s', wanted '%s'", args, rc, out,
               bad[i][1]);
        free(out);
    }
    /* help: stdout, exit 0 */
    static const char *const helps[][2] = {{"--help", "usage: pinhole cache SUBCOMMAND"},
                                           {"ls -h", "usage: pinhole cache ls"},
                                           {"stats --help", "usage: pinhole cache stats"},
                                           {"verify -h", "usage: pinhole cache verify"},
                                           {"prune --help", "usage: pinhole cache prune"}};
    for (int i = 0; i < 5; i++) {
        int rc = cache(&out, false, "%s", helps[i][0]);
        CHECKF(rc == 0 && strstr(out, helps[i][1]), "'pinhole cache %s': exit %d, '%s'", helps[i][0], rc, out);
        free(out);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --help", PH_PINHOLE_BIN);
    CHECK(t_run(cmd, &out) == 0 && strstr(out, "cache ls|stats|verify|prune"));
    free(out);
    /* a folder without checkpoints is empty, and is left untouched */
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    CHECK(mkdir(empty, 0755) == 0);
    int rc = cache(&out, false, "ls %s", empty);
    ls_line v[4];
    CHECKF(rc == 0 && parse_ls(out, v, 4) == 0, "ls of an empty folder: exit %d, '%s'", rc, out);
    free(out);
    rc = cache(&out, false, "stats %s", empty);
    CHECKF(rc == 0 && has_line(out, "ends", " 0"), "stats of an empty folder: exit %d, '%s'", rc, out);
    free(out);
    rc = cache(&out, false, "verify %s", empty);
    CHECKF(rc == 0 && strstr(out, "0 ok, 0 bad (removed)"), "verify of an empty folder: exit %d, '%s'", rc, out);
    free(out);
    rc = cache(&out, false, "prune %s --max-mb 0", empty);
    CHECKF(rc == 0 && strstr(out, "removed 0 records"), "prune of an empty folder: exit %d, '%s'", rc, out);
    free(out);
    char idx[700];
    snprintf(idx, sizeof idx, "%s/blocks", empty);
    CHECKF(!exists(idx), "a block store was created in a folder without one");
    rmdir(empty);
    unlink(afile);
}

int main(void) {
    snprintf(idcache, sizeof idcache, "/tmp/ph-ids-XXXXXX");
    char base[] = "/tmp/ph-cache-cli-XXXXXX";
    if (!mkdtemp(idcache) || !mkdtemp(base)) return 1;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/kv", base);
    CHECK(mkdir(dir, 0755) == 0);

    /* three conversations (different from their first token on), one a
     * picture; each from an engine of its own, so their last uses differ */
    ph_turn_report ra, rb, rc_;
    CHECK(one_turn(dir,
                   "You are a storyteller. Your stories are long, calm and full of small details about the sea, the "
                   "weather, the light and the animals that live by the shore.",
                   "Please write a long story about a lighthouse keeper who finds a message in a bottle, with many "
                   "details about the sea, the weather and the keeper's cat.",
                   NULL, &ra) == 0);
    CHECK(one_turn(dir, "Describe pictures carefully, with their colours, their shapes and what they might show.",
                   "What is in this picture? Please list every colour you can see in it, from the top left corner "
                   "to the bottom right corner, and say where each one is.",
                   PH_ORACLE_DIR "/img/small.png", &rb) == 0);
    CHECK(one_turn(dir,
                   "Answer questions about history in plain words, with dates, places and the names of the people "
                   "who were there, and say when something is not known for certain.",
                   "When was the first lighthouse built, who built it, and how did the keepers of the first "
                   "lighthouses keep the light burning through the long winter nights?",
                   NULL, &rc_) == 0);
    printf("prompts: %d, %d (%d picture), %d rows\n", ra.n_prompt, rb.n_prompt, rb.n_pictures, rc_.n_prompt);
    CHECKF(ra.n_prompt > 64 && rb.n_prompt > 64 && rc_.n_prompt > 64 && rb.n_pictures == 1, "prompts %d %d %d",
           ra.n_prompt, rb.n_prompt, rc_.n_prompt);
    char seg[4][600];
    CHECKF(segments(dir, seg, 4) == 3, "%d segment files", segments(dir, seg, 4));

    /* ls: most recently used first: c, b, a */
    char *out;
    int rc = cache(&out, false, "ls %s", dir);
    printf("%s", out);
    ls_line l[8];
    int n = parse_ls(out, l, 8);
    free(out);
    CHECKF(rc == 0 && n == 3, "ls: exit %d, %d lines", rc, n);
    const ph_turn_report *order[3] = {&rc_, &rb, &ra};
    for (int i = 0; i < n && i < 3; i++) {
        CHECKF(l[i].rows == order[i]->n_prompt && l[i].pics == order[i]->n_pictures,
               "ls line %d: %d rows %d pictures, expected %d and %d", i, l[i].rows, l[i].pics, order[i]->n_prompt,
               order[i]->n_pictures);
        CHECKF(!strcmp(l[i].model, "82496f4bcb69"), "ls line %d: model %s", i, l[i].model);
        CHECKF(l[i].mib > 0 && strlen(l[i].name) == 64, "ls line %d: %s: %.2f MiB", i, l[i].name, l[i].mib);
    }
    char name_a[80] = "", name_b[80] = "", name_c[80] = "";
    if (n == 3) {
        snprintf(name_c, sizeof name_c, "%s", l[0].name);
        snprintf(name_b, sizeof name_b, "%s", l[1].name);
        snprintf(name_a, sizeof name_a, "%s", l[2].name);
    }

    /* ls --json */
    rc = cache(&out, false, "ls %s --json", dir);
    int n_json = 0;
    long long prev_use = -1, total = 0, size_c = 0;
    for (char *p = out, *nl; *p; p = nl + 1) {
        if (!(nl = strchr(p, '\n'))) break;
        *nl = '\0';
        json_error_t je;
        json_t *o = json_loads(p, 0, &je);
        CHECKF(o != NULL, "ls --json: not JSON: '%s'", p);
        if (!o) continue;
        const char *nm = json_string_value(json_object_get(o, "name"));
        long long bytes = json_integer_value(json_object_get(o, "bytes"));
        long long use = json_integer_value(json_object_get(o, "last_use_ms"));
        CHECKF(n_json < 3 && nm && !strcmp(nm, l[n_json].name), "ls --json line %d: name %s", n_json, nm);
        if (n_json < 3) {
            CHECK(json_integer_value(json_object_get(o, "rows")) == order[n_json]->n_prompt);
            CHECK(json_integer_value(json_object_get(o, "pictures")) == order[n_json]->n_pictures);
        }
        CHECKF(bytes > 0 && (bytes / MIB - l[n_json % 3].mib) < 0.006 && (l[n_json % 3].mib - bytes / MIB) < 0.006,
               "ls --json: %s: %lld bytes", nm, bytes);
        if (n_json == 0) size_c = bytes;
        const char *id = json_string_value(json_object_get(o, "model_id"));
        CHECKF(id && !strcmp(id, "82496f4bcb69d57e6ac6b0537c4dfd454995dd1c424852953459e241576237c2"),
               "ls --json: model_id %s", id ? id : "(none)");
        CHECK(json_integer_value(json_object_get(o, "created_s")) > 1600000000);
        CHECK(use > 1600000000000LL && (prev_use < 0 || use <= prev_use));
        const char *fmt = json_string_value(json_object_get(o, "format"));
        CHECK(fmt && *fmt);
        prev_use = use;
        total += bytes;
        json_decref(o);
        n_json++;
    }
    free(out);
    CHECKF(rc == 0 && n_json == 3, "ls --json: exit %d, %d lines", rc, n_json);

    /* stats */
    rc = cache(&out, false, "stats %s", dir);
    printf("%s", out);
    char want[256];
    CHECK(rc == 0 && has_line(out, "ends", " 3"));
    snprintf(want, sizeof want, " %lld (", total);
    CHECKF(has_line(out, "bytes", want), "stats: total bytes %lld", total);
    snprintf(want, sizeof want, " %d", ra.n_prompt + rb.n_prompt + rc_.n_prompt);
    CHECKF(has_line(out, "rows", want), "stats: rows %s", want);
    CHECK(has_line(out, "pictures", " 1"));
    CHECK(has_line(out, "oldest use", "-") && has_line(out, "newest use", ":"));
    snprintf(want, sizeof want, "82496f4bcb69d57e6ac6b0537c4dfd454995dd1c424852953459e241576237c2       3  %14lld",
             total);
    CHECKF(has_line(out, " ", want), "stats: per model '%s'", want);
    free(out);

    /* verify: clean (a full block and a resume point each) */
    rc = cache(&out, false, "verify %s", dir);
    CHECKF(rc == 0 && strstr(out, "6 ok, 0 bad (removed)"), "verify: exit %d, '%s'", rc, out);
    free(out);

    /* verify: b's resume point (the last record of its segment) damaged */
    CHECK(t_flip_byte_from_end(seg[1], 16) == 0);
    rc = cache(&out, false, "verify %s", dir);
    printf("%s", out);
    snprintf(want, sizeof want, "bad  %s: ", name_b);
    CHECKF(rc == 1 && strstr(out, want) && strstr(out, "5 ok, 1 bad (removed)"), "verify (damaged): exit %d, '%s'",
           rc, out);
    free(out);
    /* b's chain now ends at its full block */
    rc = cache(&out, false, "ls %s", dir);
    n = parse_ls(out, l, 8);
    free(out);
    CHECKF(rc == 0 && n == 3 && !strcmp(l[0].name, name_c) && l[1].rows == 64 && strcmp(l[1].name, name_b) &&
               !strcmp(l[2].name, name_a),
           "ls after verify: exit %d, %d lines", rc, n);
    rc = cache(&out, false, "verify %s", dir);
    CHECKF(rc == 0 && strstr(out, "5 ok, 0 bad (removed)"), "verify again: exit %d, '%s'", rc, out);
    free(out);

    /* prune: room for c only: a and what is left of b (least recently used) go */
    rc = cache(&out, false, "prune %s --max-mb %.6f", dir, (size_c + 1024) / MIB);
    printf("%s", out);
    snprintf(want, sizeof want, "removed %s", name_a);
    CHECKF(rc == 0 && strstr(out, want) && !strstr(out, name_c) && strstr(out, "removed 3 records ("),
           "prune to c's size: exit %d, '%s'", rc, out);
    free(out);
    rc = cache(&out, false, "ls %s", dir);
    n = parse_ls(out, l, 8);
    free(out);
    CHECKF(rc == 0 && n == 1 && !strcmp(l[0].name, name_c), "ls after a partial prune: %d lines", n);

    /* prune: everything */
    rc = cache(&out, false, "prune %s --max-mb 0", dir);
    snprintf(want, sizeof want, "removed %s", name_c);
    CHECKF(rc == 0 && strstr(out, want) && strstr(out, "0 conversation ends (0.00 MiB) remain"),
           "prune to 0: exit %d, '%s'", rc, out);
    free(out);
    rc = cache(&out, false, "ls %s", dir);
    n = parse_ls(out, l, 8);
    free(out);
    CHECKF(rc == 0 && n == 0, "ls after prune --max-mb 0: exit %d, %d lines", rc, n);
    CHECK(segments(dir, seg, 4) == 0); /* every segment deleted */

    check_refusals(base);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", base, idcache);
    CHECK(system(cmd) == 0);
    TEST_END();
}
