/* How many threads to run by default: the physical cores this process may
 * use. Logical CPUs that are hyper-threads of one core share its arithmetic
 * units, so a thread each only makes them wait for one another; CPUs
 * outside the process's affinity mask, and CPU time past its cgroup's
 * quota, are not there to be used at all. */
#ifndef PH_BASE_CPUS_H
#define PH_BASE_CPUS_H

#include <sched.h>

/* The distinct cores (package, die, core id from
 * ROOT/sys/devices/system/cpu/cpuN/topology/) among the CPUs of allowed; a
 * CPU whose topology cannot be read counts as a core of its own. root: ""
 * for this machine, or a folder holding a made-up sys/ (tests). */
int cpus_cores(const char *root, const cpu_set_t *allowed);
/* The CPUs that the quota of the process's cgroup and its ancestors gives
 * (the v2 cpu.max "QUOTA PERIOD", or the v1 cpu controller's
 * cpu.cfs_quota_us / cpu.cfs_period_us), ceil(quota / period), the smallest
 * along the path; 0 when no quota applies. */
int cpus_quota(const char *root);
/* min(cpus_cores, cpus_quota when there is one), at least 1. */
int cpus_threads_in(const char *root, const cpu_set_t *allowed);
/* cpus_threads_in for this process (its sched_getaffinity mask, this
 * machine's files); computed once. */
int cpus_threads(void);

#endif
