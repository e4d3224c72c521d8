#include "base/cpus.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cgroup.h"

/* A topology number of cpu, or -1 when it cannot be read. */
static long topology(const char *root, int cpu, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sys/devices/system/cpu/cpu%d/topology/%s", root, cpu, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v;
    if (fscanf(f, "%ld", &v) != 1 || v < 0) v = -1;
    fclose(f);
    return v;
}

typedef struct core_key {
    long package, die, core;
} core_key;

int cpus_cores(const char *root, const cpu_set_t *allowed) {
    const int n_cpus = CPU_COUNT_S(sizeof *allowed, allowed);
    core_key *seen = malloc((size_t)(n_cpus > 0 ? n_cpus : 1) * sizeof *seen);
    if (!seen) return n_cpus > 0 ? n_cpus : 1;
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET_S((size_t)cpu, sizeof *allowed, allowed)) continue;
        core_key k = {topology(root, cpu, "physical_package_id"), topology(root, cpu, "die_id"),
                      topology(root, cpu, "core_id")};
        if (k.package < 0 || k.core < 0) k = (core_key){-1, -1, -1 - cpu}; /* unknown: a core of its own */
        if (k.die < 0) k.die = 0;                                          /* kernels before 5.2 have no die_id */
        bool known = false;
        for (int i = 0; i < n && !known; i++)
            known = seen[i].package == k.package && seen[i].die == k.die && seen[i].core == k.core;
        if (!known) seen[n++] = k;
    }
    free(seen);
    return n;
}

/* ceil(quota / period) of a v2 cpu.max line ("max 100000": none): 0 when
 * none. */
static long quota_v2(const char *line) {
    long long quota, period;
    if (sscanf(line, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
    return (long)((quota + period - 1) / period);
}

/* The smallest quota along the path from dir up to the root of one
 * hierarchy (mount "" for v2, "/cpu" for v1), 0 when none. */
static long quota_along(const char *root, const char *mount, char *dir) {
    long best = 0;
    do {
        char a[128], b[128];
        long q = 0;
        if (!*mount) {
            if (cgroup_read(root, mount, dir, "cpu.max", a, sizeof a) == 0) q = quota_v2(a);
        } else if (cgroup_read(root, mount, dir, "cpu.cfs_quota_us", a, sizeof a) == 0 &&
                   cgroup_read(root, mount, dir, "cpu.cfs_period_us", b, sizeof b) == 0) {
            char line[260];
            snprintf(line, sizeof line, "%s %s", a, b);
            q = quota_v2(line); /* the v1 quota is -1 when none */
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
    } while (cgroup_parent(dir));
    return best;
}

int cpus_quota(const char *root) {
    char dir[1024];
    long q2 = cgroup_self(root, NULL, dir, sizeof dir) == 0 ? quota_along(root, "", dir) : 0;
    long q1 = cgroup_self(root, "cpu", dir, sizeof dir) == 0 ? quota_along(root, "/cpu", dir) : 0;
    long q = q1 > 0 && (q2 == 0 || q1 < q2) ? q1 : q2;
    return q > 65536 ? 65536 : (int)q;
}

int cpus_threads_in(const char *root, const cpu_set_t *allowed) {
    int n = cpus_cores(root, allowed);
    const int q = cpus_quota(root);
    if (q > 0 && q < n) n = q;
    return n > 0 ? n : 1;
}

static int threads_default;

static void threads_init(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set)) { /* then the online CPUs */
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        CPU_ZERO(&set);
        for (long i = 0; i < (n > 0 ? n : 1) && i < CPU_SETSIZE; i++) CPU_SET((size_t)i, &set);
    }
    threads_default = cpus_threads_in("", &set);
}

int cpus_threads(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, threads_init);
    return threads_default;
}
