/* Test runner shared by every unit and integration test binary.
 * A binary holds one module's cases; CTest runs each case by name
 * (`test_queue drop_old_evicts_oldest`), and with no argument all of them run. */
#ifndef FX_TEST_H
#define FX_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Exit code CTest reads as "skipped" (SKIP_RETURN_CODE). */
#define FX_TEST_SKIP_CODE 77

/* Reports the test skipped with |reason| and ends the process. Use only for
 * missing environment (no shared vectors, no TSan support), never to hide a
 * failure. */
static inline void fx_test_skip(const char *reason)
{
    fprintf(stderr, "SKIPPED: %s\n", reason);
    fflush(stderr);
    exit(FX_TEST_SKIP_CODE);
}

static inline int fx_test_run(const char *group, const struct CMUnitTest *tests, size_t n,
                              int argc, char **argv)
{
    if (argc < 2)
        return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
    const char *want = argv[1];
    for (size_t i = 0; i < n; i++) {
        const char *name = tests[i].name;
        if (strncmp(name, "test_", 5) == 0)
            name += 5;
        if (strcmp(name, want) == 0)
            return _cmocka_run_group_tests(group, &tests[i], 1, NULL, NULL);
    }
    fprintf(stderr, "%s: no test case named '%s'\n", group, want);
    return 2;
}

/* Defines main() for a test binary from an array of cmocka_unit_test(). */
#define FX_TEST_MAIN(tests)                                                                        \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        return fx_test_run(__FILE__, tests, sizeof(tests) / sizeof((tests)[0]), argc, argv);      \
    }

#endif
