#include "base/meminfo.h"

#include <stdio.h>
#include <string.h>

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
    char path[640];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

static int64_t cgroup_headroom(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[512], dir[512] = "";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) { /* the v2 hierarchy */
            line[strcspn(line, "\n")] = '\0';
            snprintf(dir, sizeof dir, "%s", line + 3);
            break;
        }
    fclose(f);
    if (!dir[0]) return -1;
    if (!strcmp(dir, "/")) dir[0] = '\0';
    int64_t max = cgroup_value(dir, "memory.max"), cur = cgroup_value(dir, "memory.current");
    if (max < 0 || cur < 0) return -1;
    return max > cur ? max - cur : 0;
}

int64_t ph_mem_available(void) {
    int64_t avail = meminfo_field("MemAvailable:"), cg = cgroup_headroom();
    if (avail < 0) return cg;
    return cg >= 0 && cg < avail ? cg : avail;
}
