/* Large buffers (KV checkpoints): mapped on their own and advised for
 * transparent huge pages where the kernel offers them, so that filling and
 * reading tens of megabytes takes few page faults and TLB misses (on a
 * virtual machine a first touch of 4 KiB pages costs several times the
 * copy itself). */
#ifndef PH_BASE_BIGBUF_H
#define PH_BASE_BIGBUF_H

#include <stddef.h>

/* n bytes (zeroed, page aligned), or NULL. */
void *big_alloc(size_t n);
/* Backs the pages of [p, p + n) now (p page aligned), as a first write
 * would, leaving the bytes of pages already backed as they are, so it may
 * run while other threads use the buffer: 0, or -1 (the kernel has no
 * MADV_POPULATE_WRITE, before Linux 5.14: nothing done). */
int big_populate(void *p, size_t n);
/* Frees what big_alloc(n) returned (NULL is allowed). */
void big_free(void *p, size_t n);

#endif
