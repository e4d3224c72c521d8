#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

void *grow_array(void *items, size_t *cap, size_t n, size_t elem, size_t first) {
    if (n < *cap) return items;
    size_t c = *cap ? *cap : first;
    while (c <= n) {
        if (c > SIZE_MAX / 2) return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem) return NULL;
    void *p = realloc(items, c * elem);
    if (p) *cap = c;
    return p;
}
