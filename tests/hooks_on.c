/* Test hooks, on (src/base/test_hook.h): linked into the test programs and
 * the test server, pinhole-test, over the library's weak definition. */
#include <stdlib.h>

#include "base/test_hook.h"

const char *test_hook(const char *name) { return getenv(name); }
