/* core/cpu.c - CPU feature detection and the KILN_SIMD override. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* F16C, from CPUID leaf 1 (clang's __builtin_cpu_supports lacks the name). */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int g_level = -1;

static kiln_simd_level detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma") && has_f16c())
        return KILN_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return KILN_SIMD_AVX2;
#endif
    return KILN_SIMD_SCALAR;
}

/* The CPU's level capped by KILN_SIMD, read on every call so that a test
 * can set it and see kiln_simd_set() honour it. */
static kiln_simd_level best_level(void) {
    kiln_simd_level lvl = detect();
    const char *cap = getenv("KILN_SIMD");
    if (cap) {
        kiln_simd_level want = lvl;
        if (!strcmp(cap, "scalar")) want = KILN_SIMD_SCALAR;
        else if (!strcmp(cap, "avx2")) want = KILN_SIMD_AVX2;
        else if (!strcmp(cap, "avx512")) want = KILN_SIMD_AVX512;
        if (want < lvl) lvl = want;
    }
    return lvl;
}

kiln_simd_level kiln_simd(void) {
    if (g_level < 0) g_level = (int)best_level();
    return (kiln_simd_level)g_level;
}

void kiln_simd_set(kiln_simd_level level) {
    kiln_simd_level best = best_level();
    g_level = (int)(level < best ? level : best);
}

bool kiln_cpu_has_vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return kiln_simd() >= KILN_SIMD_AVX512 && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

bool kiln_cpu_has_vbmi(void) {
#if defined(__x86_64__) || defined(__i386__)
    return kiln_cpu_has_vnni() && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg");
#else
    return false;
#endif
}

const char *kiln_simd_name(kiln_simd_level level) {
    switch (level) {
    case KILN_SIMD_AVX512: return "avx512";
    case KILN_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}
