/* The control groups this process runs in, as /proc/self/cgroup names them
 * and /sys/fs/cgroup shows their files: the unified (v2) hierarchy, and a
 * controller's own (v1) hierarchy mounted at /sys/fs/cgroup/CONTROLLER.
 * Every path is read under root ("" for this machine; a test gives a
 * folder that holds a made-up proc/ and sys/). */
#ifndef PH_BASE_CGROUP_H
#define PH_BASE_CGROUP_H

#include <stdbool.h>
#include <stddef.h>

/* The process's group in the hierarchy of controller (NULL: the unified
 * one, the "0::" line), relative to its mount, "" for the root ("/"): 0, or
 * -1 when there is none. */
int cgroup_self(const char *root, const char *controller, char *dir, size_t cap);
/* The parent of a group (dir cut at its last '/'); false for the root. */
bool cgroup_parent(char *dir);
/* The first line of file name of group dir (mount: "" for the unified
 * hierarchy, else "/CONTROLLER"), its line end cut: 0, or -1. */
int cgroup_read(const char *root, const char *mount, const char *dir, const char *name, char *buf, size_t cap);

#endif
