/* Test hooks, off (base/test_hook.h): what the shipped binary links. */
#include "base/test_hook.h"

#include <stdlib.h>

__attribute__((weak)) const char *test_hook(const char *name) {
    (void)name;
    return NULL;
}

int test_hook_ms(const char *name) {
    const char *v = test_hook(name);
    return v && *v ? atoi(v) : 0;
}
