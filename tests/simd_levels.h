/* tests/simd_levels.h - one cmocka test case per SIMD level.
 *
 * The kernel suites hold every SIMD path to the scalar one. Each level is
 * its own test case, so that a level this CPU lacks shows in TAP as skipped
 * instead of passing unseen:
 *
 *     SIMD_LEVEL_TESTS(fn)   cases fn/scalar, fn/avx2, fn/avx512
 *     SIMD_VECTOR_TESTS(fn)  cases fn/avx2, fn/avx512 (for tests that
 *                            compare a level with scalar themselves)
 *
 * The case's state is its level; the test starts with
 * `kiln_simd_level lvl = simd_level_enter(state);`, which sets that level
 * or skips the case. The teardown puts the best level back, even when the
 * case failed. KILN_SIMD=avx2 or =scalar (core/cpu.h) caps every level, so
 * an AVX-512 machine shows the skip path too. */
#ifndef KILN_TESTS_SIMD_LEVELS_H
#define KILN_TESTS_SIMD_LEVELS_H

#include "shared.h"

#include "../core/cpu.h"

static const kiln_simd_level SIMD_LEVELS[] = {KILN_SIMD_SCALAR, KILN_SIMD_AVX2, KILN_SIMD_AVX512};

/* Sets the level the case was given, or skips the case (without
 * returning) when the CPU, or KILN_SIMD, does not allow it. */
static inline kiln_simd_level simd_level_enter(void **state) {
    const kiln_simd_level want = *(const kiln_simd_level *)*state;
    kiln_simd_set(want);
    if (kiln_simd() != want) skip();
    return want;
}

/* Teardown: the best level allowed again, for the cases that follow. */
static inline int simd_level_leave(void **state) {
    (void)state;
    kiln_simd_set(KILN_SIMD_AVX512);
    return 0;
}

#define SIMD_LEVEL_TEST(fn, i, name) {#fn "/" name, fn, NULL, simd_level_leave, (void *)&SIMD_LEVELS[i]}
#define SIMD_VECTOR_TESTS(fn) SIMD_LEVEL_TEST(fn, 1, "avx2"), SIMD_LEVEL_TEST(fn, 2, "avx512")
#define SIMD_LEVEL_TESTS(fn) SIMD_LEVEL_TEST(fn, 0, "scalar"), SIMD_VECTOR_TESTS(fn)

#endif
