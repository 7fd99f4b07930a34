/* tests/shared.h - what every cmocka suite includes: cmocka itself, and the
 * one helper that finds ../shared (the llama.cpp ground truth).
 *
 * kiln_shared() returns the directory named by KILN_SHARED (default
 * "../shared", relative to the repository root where tests run), or NULL
 * when it is absent. SKIP_WITHOUT_SHARED() makes a test report itself
 * skipped in that case; under CI=true a missing ../shared is a failure. */
#ifndef KILN_TESTS_SHARED_H
#define KILN_TESTS_SHARED_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

static inline const char *kiln_shared(void) {
    static char path[4096];
    const char *dir = getenv("KILN_SHARED");
    if (!dir || !*dir) dir = "../shared";
    snprintf(path, sizeof path, "%s/golden/README.md", dir);
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    snprintf(path, sizeof path, "%s", dir);
    return path;
}

/* Path of a file under ../shared, in a rotating static buffer (8 slots). */
static inline const char *kiln_shared_path(const char *rel) {
    static char bufs[8][8192];
    static int slot;
    char *b = bufs[slot++ & 7];
    snprintf(b, 8192, "%s/%s", kiln_shared() ? kiln_shared() : "../shared", rel);
    return b;
}

#define SKIP_WITHOUT_SHARED()                                                      \
    do {                                                                           \
        if (!kiln_shared()) {                                                      \
            const char *ci = getenv("CI");                                         \
            if (ci && !strcmp(ci, "true"))                                         \
                fail_msg("../shared is missing (set KILN_SHARED); required in CI"); \
            skip();                                                                \
        }                                                                          \
    } while (0)

/* A scratch directory for a test's output files, made once per process. */
static inline const char *kiln_test_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kiln-test-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    return dir;
}

#endif
