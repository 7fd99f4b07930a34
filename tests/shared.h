/* tests/shared.h - what every cmocka suite includes: cmocka itself, the
 * helper that finds ../shared (the llama.cpp ground truth), and the small
 * file and random-number helpers the suites have in common.
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
#include <math.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../core/fileio.h"

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

/* True under KILN_TEST_LIGHT=1 (`make check KILN_TEST_LIGHT=1`): the
 * slowest suites (those that run whole forward passes) then check fewer
 * fixtures, should the run under ASan + UBSan outgrow CI's time budget. */
static inline bool kiln_test_light(void) {
    const char *v = getenv("KILN_TEST_LIGHT");
    return v && *v && strcmp(v, "0") != 0;
}

/* A scratch directory for a test's output files, made once per process. */
static inline const char *kiln_test_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kiln-test-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    return dir;
}

/* Path of `name` inside kiln_test_tmpdir(), in a rotating static buffer
 * (8 slots, so a few can be alive at once). */
static inline const char *kiln_test_tmp_path(const char *name) {
    static char bufs[8][512];
    static int slot;
    char *b = bufs[slot++ & 7];
    snprintf(b, 512, "%s/%s", kiln_test_tmpdir(), name);
    return b;
}

static inline bool kiln_test_exists(const char *path) { return access(path, F_OK) == 0; }

/* The whole of a file, malloc'd, with a NUL after its *len bytes (text can
 * be used as a string); NULL when it cannot be read. Returns void * so it
 * assigns to char * and uint8_t * alike. */
static inline void *kiln_test_read_file(const char *path, size_t *len) {
    return kiln_read_text(path, len, NULL);
}

/* Writes a file in one go; any failure fails the test. */
static inline void kiln_test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Both files exist and hold the same bytes. */
static inline bool kiln_test_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *pa = kiln_test_read_file(a, &na), *pb = kiln_test_read_file(b, &nb);
    bool same = pa && pb && na == nb && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return same;
}

/* Marsaglia's xorshift64 (13, 7, 17): the suites' deterministic source of
 * test data. Advances *s (never 0) and returns the new state. */
static inline uint64_t kiln_test_xorshift64(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A uniform double strictly inside (0, 1), from the top 53 bits. */
static inline double kiln_test_uniform(uint64_t *s) {
    return ((kiln_test_xorshift64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* A standard normal value (Box-Muller), and 0.02 * Student-t with 3
 * degrees of freedom built from four of them: the heavy tails real
 * weights have. */
static inline double kiln_test_gauss(uint64_t *s) {
    double u1 = kiln_test_uniform(s), u2 = kiln_test_uniform(s);
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
/* The float Box-Muller of the kernel suites (test_matmul,
 * test_kquant_order, test_kdirect): u in [1e-7, 1 + 1e-7), v in [0, 1). */
static inline float kiln_test_gaussf(uint64_t *s) {
    float u = (float)((kiln_test_xorshift64(s) >> 11) * (1.0 / 9007199254740992.0)) + 1e-7f;
    float v = (float)((kiln_test_xorshift64(s) >> 11) * (1.0 / 9007199254740992.0));
    /* u rounds to 1.0f (+1e-7f) once in ~2^25 draws: log(u) > 0 made NaN */
    return sqrtf(-2.0f * logf(fminf(u, 1.0f))) * cosf(6.2831853f * v);
}
/* n of kiln_test_gaussf's values times scale, in a new buffer. */
static inline float *kiln_test_gauss_vec(uint64_t *s, int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = scale * kiln_test_gaussf(s);
    return v;
}
static inline float kiln_test_heavy(uint64_t *s) {
    double z = kiln_test_gauss(s), c = 0;
    for (int i = 0; i < 3; i++) {
        double g = kiln_test_gauss(s);
        c += g * g;
    }
    return (float)(0.02 * z / sqrt(c / 3));
}

/* sqrt(sum w (x - y)^2 / sum w) over `rows` rows of n columns, with one
 * weight per column: the error an importance matrix asks to minimise. */
static inline double kiln_test_wrmse(const float *x, const float *y, const float *w, int64_t rows, int64_t n) {
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double d = (double)x[r * n + j] - y[r * n + j];
            num += w[j] * d * d;
            den += w[j];
        }
    return sqrt(num / den);
}

#endif
