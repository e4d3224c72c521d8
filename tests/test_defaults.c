/* The defaults a user gets without asking: threads (the physical cores
 * the process may use, read from made-up sysfs and cgroup trees), the
 * context (the trained one, capped by memory) and the picture budget (at
 * most half the context, and a picture that does not fit named). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cpus.h"
#include "engine/session.h"
#include "image/image.h"
#include "pinhole.h"
#include "test.h"
#include "test_util.h"

static char root[] = "/tmp/pinhole-defaultsXXXXXX";

/* Writes text to root/<path> (folders made as needed). */
static void put(const char *text, const char *fmt, ...) {
    char rel[512], path[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    CHECKF(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void clear(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s/sys %s/proc", root, root);
    CHECK(system(cmd) == 0);
}

/* CPU cpu as core `core` of package `pkg`. */
static void cpu(int n, int pkg, int core) {
    char v[32];
    snprintf(v, sizeof v, "%d\n", pkg);
    put(v, "sys/devices/system/cpu/cpu%d/topology/physical_package_id", n);
    snprintf(v, sizeof v, "%d\n", core);
    put(v, "sys/devices/system/cpu/cpu%d/topology/core_id", n);
}

static cpu_set_t cpus(int n, ...) {
    cpu_set_t s;
    CPU_ZERO(&s);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) CPU_SET((size_t)va_arg(ap, int), &s);
    va_end(ap);
    return s;
}

static void test_threads(void) {
    /* 4 cores with 2 hyper-threads each: CPUs i and i + 4 are one core */
    clear();
    for (int i = 0; i < 8; i++) cpu(i, 0, i % 4);
    cpu_set_t all = cpus(8, 0, 1, 2, 3, 4, 5, 6, 7), pair = cpus(2, 1, 5), two = cpus(2, 0, 1);
    CHECK(cpus_cores(root, &all) == 4);
    CHECK(cpus_cores(root, &pair) == 1); /* two threads of one core */
    CHECK(cpus_cores(root, &two) == 2);
    CHECK(cpus_quota(root) == 0); /* no cgroup files: no quota */
    CHECK(cpus_threads_in(root, &all) == 4);
    CHECK(cpus_threads_in(root, &pair) == 1);

    /* cgroup v2: 1.5 CPUs of quota is 2 threads; an ancestor's tighter quota wins */
    put("0::/box/job\n", "proc/self/cgroup");
    put("150000 100000\n", "sys/fs/cgroup/box/job/cpu.max");
    CHECK(cpus_quota(root) == 2);
    CHECK(cpus_threads_in(root, &all) == 2);
    CHECK(cpus_threads_in(root, &pair) == 1); /* and never more than the cores */
    put("100000 100000\n", "sys/fs/cgroup/box/cpu.max");
    CHECK(cpus_quota(root) == 1);
    put("max 100000\n", "sys/fs/cgroup/box/cpu.max");
    put("max 100000\n", "sys/fs/cgroup/box/job/cpu.max");
    CHECK(cpus_quota(root) == 0);
    CHECK(cpus_threads_in(root, &all) == 4);
    /* the root of a container's namespace ("0::/") */
    put("0::/\n", "proc/self/cgroup");
    put("300000 100000\n", "sys/fs/cgroup/cpu.max");
    CHECK(cpus_quota(root) == 3);
    CHECK(cpus_threads_in(root, &all) == 3);

    /* cgroup v1: the cpu controller's hierarchy */
    clear();
    for (int i = 0; i < 8; i++) cpu(i, 0, i % 4);
    put("4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n", "proc/self/cgroup");
    put("250000\n", "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us");
    put("100000\n", "sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us");
    put("-1\n", "sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us");
    put("100000\n", "sys/fs/cgroup/cpu/docker/cpu.cfs_period_us");
    CHECK(cpus_quota(root) == 3);
    CHECK(cpus_threads_in(root, &all) == 3);

    /* two packages with the same core ids; a CPU without topology is a core of its own */
    clear();
    cpu(0, 0, 0);
    cpu(1, 0, 1);
    cpu(2, 1, 0);
    cpu(3, 1, 1);
    cpu(4, 1, 1);
    cpu_set_t five = cpus(6, 0, 1, 2, 3, 4, 9);
    CHECK(cpus_cores(root, &five) == 5);

    /* this machine: at least 1, at most its CPUs */
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECKF(ph_cpu_threads() >= 1 && ph_cpu_threads() <= online, "%d threads of %ld CPUs", ph_cpu_threads(), online);
}

static void test_context(void) {
    ph_ctx_choice c;
    const uint64_t row = 147456; /* 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes */
    const int64_t gib = (int64_t)1 << 30;
    /* 12 GiB: its half holds 43690 rows, 43008 in whole thousands */
    session_ctx_choose(262144, row, 12 * gib, &c);
    CHECK(c.n_ctx == 43008 && c.capped && !c.given && c.n_ctx_train == 262144);
    CHECKF(!strcmp(c.why, "trained 262144, capped by 12.0 GiB available memory"), "%s", c.why);
    /* plenty: the trained context */
    session_ctx_choose(262144, row, 100 * gib, &c);
    CHECK(c.n_ctx == 262144 && !c.capped);
    CHECKF(!strcmp(c.why, "trained; 100.0 GiB memory available"), "%s", c.why);
    /* very little: never below 4096 */
    session_ctx_choose(262144, row, gib / 4, &c);
    CHECK(c.n_ctx == 4096 && c.capped);
    CHECKF(strstr(c.why, "at least 4096 though only 0.2 GiB") != NULL, "%s", c.why);
    /* a model trained on less keeps its own */
    session_ctx_choose(2048, row, gib / 4, &c);
    CHECK(c.n_ctx == 2048 && !c.capped);
    /* memory unknown: as before, 4096 */
    session_ctx_choose(262144, row, -1, &c);
    CHECK(c.n_ctx == 4096 && c.capped);
    CHECKF(strstr(c.why, "available memory unknown") != NULL, "%s", c.why);
    /* past what a session takes */
    session_ctx_choose(1 << 30, 1, 100 * gib, &c);
    CHECK(c.n_ctx == 1 << 22);
    CHECKF(strstr(c.why, "the most pinhole takes") != NULL, "%s", c.why);
}

static int on_event(void *ud, const ph_gen_event *ev) {
    (void)ud;
    (void)ev;
    return 0;
}

static void test_picture_budget(void) {
    prep_params p = {.min_tokens = 8, .max_tokens = 4096};
    prep_cap_tokens(&p, 2048);
    CHECK(p.min_tokens == 8 && p.max_tokens == 2048);
    prep_cap_tokens(&p, 4);
    CHECK(p.min_tokens == 4 && p.max_tokens == 4);
    prep_cap_tokens(&p, 0);
    CHECK(p.min_tokens == 1 && p.max_tokens == 1);

    /* an engine of 256 rows takes pictures of at most 128 */
    ph_engine_params ep;
    ph_engine_params_default(&ep);
    char ids[512];
    snprintf(ids, sizeof ids, "%s/ids", root);
    ep.model_path = PH_ORACLE_DIR "/models/tiny-f16.gguf";
    ep.mmproj_path = PH_ORACLE_DIR "/models/tiny-f16-mmproj.gguf";
    ep.n_threads = 1;
    ep.id_cache_dir = ids;
    ep.n_ctx = 256;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&ep, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    CHECK(ph_engine_picture_max_tokens(e) == 128);
    CHECK(ph_engine_ctx(e)->given && ph_engine_ctx(e)->n_ctx == 256);
    FILE *f = fopen(PH_ORACLE_DIR "/img/large.png", "rb");
    static unsigned char png[1 << 22];
    const size_t n = f ? fread(png, 1, sizeof png, f) : 0;
    if (f) fclose(f);
    ph_picture *a = ph_picture_new(png, n, "picture 1", &err), *b = ph_picture_new(png, n, "picture 2", &err),
               *c = ph_picture_new(png, n, "picture 3", &err);
    CHECKF(a && b && c, "%s", err.msg);
    if (a && b && c) {
        /* 1400 x 1000 would be over a thousand rows: capped at 128 */
        const int32_t rows = ph_engine_picture_rows(e, a);
        CHECKF(rows <= 128 && rows > 64, "%d rows", rows);
        /* two fit, the third does not: named, with its rows */
        ph_chat_part parts[4] = {
            {.picture = a}, {.picture = b}, {.picture = c}, {.text = "Which is larger?", .len = 16}};
        ph_chat_msg msg = {.role = PH_ROLE_USER, .parts = parts, .n_parts = 4};
        ph_gen_params g;
        ph_gen_params_default(&g);
        g.max_tokens = 1;
        ph_turn_report r;
        char want[128];
        snprintf(want, sizeof want, "picture 3 (%d tokens) does not fit: the prompt through it is ",
                 ph_engine_picture_rows(e, c));
        CHECK(ph_engine_chat(e, &msg, 1, &g, on_event, NULL, &r, &err) != 0);
        CHECKF(err.code == PH_ERR_TOO_LONG && strstr(err.msg, want) && strstr(err.msg, "the context holds 256"), "%s",
               err.msg);
    }
    ph_picture_free(a);
    ph_picture_free(b);
    ph_picture_free(c);
    ph_engine_free(e);

    /* by default, the context the model was trained on (4096 for this one) */
    ep.n_ctx = 0;
    e = ph_engine_new(&ep, &err);
    CHECKF(e != NULL, "%s", err.msg);
    if (!e) return;
    CHECK(ph_engine_n_ctx(e) == 4096 && !ph_engine_ctx(e)->given && ph_engine_picture_max_tokens(e) == 2048);
    CHECKF(!strncmp(ph_engine_ctx(e)->why, "trained; ", 9), "%s", ph_engine_ctx(e)->why);
    ph_engine_free(e);
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    test_threads();
    test_context();
    test_picture_budget();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    TEST_END();
}
