#include "base/fs_space.h"

#include <stdatomic.h>
#include <stddef.h>
#include <sys/statvfs.h>

typedef int (*space_fn)(const char *dir, uint64_t *avail, uint64_t *total);
static _Atomic(space_fn) g_hook;

int fs_space_get(const char *dir, uint64_t *avail, uint64_t *total) {
    space_fn hook = atomic_load(&g_hook);
    if (hook) return hook(dir, avail, total);
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return -1;
    *avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    *total = (uint64_t)v.f_blocks * (uint64_t)v.f_frsize;
    return 0;
}

uint64_t fs_floor(uint64_t total) {
    uint64_t f = total / 20;
    if (f < PH_FS_FLOOR_MIN) f = PH_FS_FLOOR_MIN;
    if (f > total / 4) f = total / 4;
    return f;
}

void fs_space_set_test_hook(space_fn fn) { atomic_store(&g_hook, fn); }
