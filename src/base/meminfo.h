/* How much memory this process can still take: the kernel's MemAvailable,
 * capped by the cgroup v2 limit the process runs under (memory.max minus
 * memory.current), so that caches stop growing before the machine or the
 * container runs out. */
#ifndef PH_BASE_MEMINFO_H
#define PH_BASE_MEMINFO_H

#include <stdint.h>

/* Bytes available, or -1 when neither source can be read. */
int64_t ph_mem_available(void);

#endif
