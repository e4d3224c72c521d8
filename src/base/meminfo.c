#include "base/meminfo.h"

#include <stdio.h>
#include <string.h>

#include "base/cgroup.h"

/* The first number after key in /proc/meminfo, in bytes, or -1. */
static int64_t meminfo_field(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f)) {
        long long kb;
        if (!strncmp(line, key, n) && sscanf(line + n, " %lld kB", &kb) == 1) {
            v = (int64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

/* A one-number file of the process's cgroup v2 folder, or -1 ("max" too). */
static int64_t cgroup_value(const char *dir, const char *name) {
    char buf[64];
    long long v;
    if (cgroup_read("", "", dir, name, buf, sizeof buf) || sscanf(buf, "%lld", &v) != 1) return -1;
    return v;
}

static int64_t cgroup_headroom(void) {
    char dir[512];
    if (cgroup_self("", NULL, dir, sizeof dir)) return -1;
    int64_t max = cgroup_value(dir, "memory.max"), cur = cgroup_value(dir, "memory.current");
    if (max < 0 || cur < 0) return -1;
    return max > cur ? max - cur : 0;
}

int64_t ph_mem_available(void) {
    int64_t avail = meminfo_field("MemAvailable:"), cg = cgroup_headroom();
    if (avail < 0) return cg;
    return cg >= 0 && cg < avail ? cg : avail;
}
