/* core/cpu.h - run-time choice of SIMD paths.
 *
 * Hot loops in kiln have a scalar reference and AVX2 / AVX-512 variants
 * compiled with __attribute__((target(...))). kiln_simd() says which one to
 * run. The environment variable KILN_SIMD=scalar|avx2|avx512 caps the level,
 * which is how the tests prove every SIMD path equals the scalar one. */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include <stdbool.h>

typedef enum kiln_simd_level {
    KILN_SIMD_SCALAR = 0,
    KILN_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KILN_SIMD_AVX512 = 2, /* AVX-512 F, BW, VL, DQ */
} kiln_simd_level;

/* Best level this CPU supports, capped by KILN_SIMD. Cached after the
 * first call; kiln_simd_set() overrides it (tests use it), still capped by
 * the CPU and by KILN_SIMD, so that KILN_SIMD=avx2 makes any run, tests
 * included, behave as on an AVX2 machine. */
kiln_simd_level kiln_simd(void);
void kiln_simd_set(kiln_simd_level level);

/* True when the CPU has AVX512-VNNI (integer dot products). */
bool kiln_cpu_has_vnni(void);

/* True when it also has AVX512-VBMI and BITALG (byte permutes and
 * popcounts: IQ2_XXS's table-free decode, runtime/vecdot_kvnni.c). */
bool kiln_cpu_has_vbmi(void);

/* Name of a level, for benchmarks and --version. */
const char *kiln_simd_name(kiln_simd_level level);

#endif
