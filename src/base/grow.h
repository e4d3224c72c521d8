/* Growable arrays: the one doubling rule the project's lists share. */
#ifndef PH_BASE_GROW_H
#define PH_BASE_GROW_H

#include <stddef.h>

/* Makes items (of *cap elements of elem bytes) hold at least n + 1
 * elements, doubling from first: returns the array (perhaps moved; store
 * it), or NULL when memory is out or the size would overflow (then items
 * and *cap are unchanged). */
void *grow_array(void *items, size_t *cap, size_t n, size_t elem, size_t first);

#endif
