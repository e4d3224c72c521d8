#include "base/cgroup.h"

#include <stdio.h>
#include <string.h>

/* Whether the comma-separated list (len bytes) holds name. */
static bool list_has(const char *list, size_t len, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list, *end = list + len; p < end;) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        const char *item_end = c ? c : end;
        if ((size_t)(item_end - p) == n && !memcmp(p, name, n)) return true;
        p = item_end + 1;
    }
    return false;
}

int cgroup_self(const char *root, const char *controller, char *dir, size_t cap) {
    char path[4096], line[1024];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int rc = -1;
    while (rc && fgets(line, sizeof line, f)) { /* ID:CONTROLLERS:PATH */
        line[strcspn(line, "\n")] = '\0';
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        const bool match = controller ? list_has(a + 1, (size_t)(b - a - 1), controller) : !strncmp(line, "0::", 3);
        if (!match || b[1] != '/') continue;
        snprintf(dir, cap, "%s", strcmp(b + 1, "/") ? b + 1 : "");
        rc = 0;
    }
    fclose(f);
    return rc;
}

bool cgroup_parent(char *dir) {
    char *slash = strrchr(dir, '/');
    if (!dir[0] || !slash) return false;
    *slash = '\0';
    return true;
}

int cgroup_read(const char *root, const char *mount, const char *dir, const char *name, char *buf, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sys/fs/cgroup%s%s/%s", root, mount, dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int rc = fgets(buf, (int)cap, f) ? 0 : -1;
    fclose(f);
    if (rc == 0) buf[strcspn(buf, "\n")] = '\0';
    return rc;
}
