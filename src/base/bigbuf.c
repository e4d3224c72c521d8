#include "base/bigbuf.h"

#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *big_alloc(size_t n) {
    if (n == 0) n = 1;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_PAGE) (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: no error matters */
#endif
    return p;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

int big_populate(void *p, size_t n) { return n && madvise(p, n, MADV_POPULATE_WRITE) ? -1 : 0; }

void big_free(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}
