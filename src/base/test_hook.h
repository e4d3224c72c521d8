/* Test hooks: the faults and slowness a test asks for through the
 * environment (PINHOLE_TEST_DISK_KILL, PINHOLE_TEST_DISK_ENOSPC,
 * PINHOLE_TEST_LOAD_DELAY_MS, PINHOLE_TEST_PREFILL_DELAY_MS,
 * PINHOLE_TEST_SLICE_DELAY_MS). Only test
 * builds read them, as SQLite's SQLITE_TEST, chosen when a binary is linked
 * rather than when the library is compiled: the library's test_hook
 * (base/test_hook.c) is a weak definition that answers NULL, which the
 * shipped pinhole keeps; the test programs and the test server
 * (pinhole-test) link tests/hooks_on.c, whose test_hook reads the
 * environment. */
#ifndef PH_BASE_TEST_HOOK_H
#define PH_BASE_TEST_HOOK_H

/* The value a test set for hook name, or NULL (always NULL outside tests). */
const char *test_hook(const char *name);

/* A hook's value as milliseconds (0 when unset). */
int test_hook_ms(const char *name);

#endif
