/* runtime/kernel_alloc.c - the two things every kernel file may ask of
 * the kernel table's world without depending on the table itself: the ISA
 * level to run (kiln_isa_now) and aligned buffers with the tests' failure
 * hook (kiln_kernel_alloc). A leaf: it calls no other runtime file, so the
 * table (kernels.c) can name the kernels and the kernels can use these
 * without a circle (see kernels.h). */
#include "kernels.h"

#include <stdlib.h>

#include "../core/cpu.h"

kiln_isa kiln_isa_now(void) {
    switch (kiln_simd()) {
    case KILN_SIMD_AVX512: return kiln_cpu_has_vnni() ? KILN_ISA_VNNI : KILN_ISA_AVX512;
    case KILN_SIMD_AVX2: return KILN_ISA_AVX2;
    default: return KILN_ISA_SCALAR;
    }
}

/* Test hook (kiln_kernel_alloc_fail_after); the kernels allocate only
 * outside their OpenMP regions, so one thread at a time counts. */
static int fail_after = -1;

void kiln_kernel_alloc_fail_after(int n) {
    fail_after = n;
}

void *kiln_kernel_alloc(size_t n) {
    if (fail_after >= 0 && fail_after-- == 0) return NULL;
    return aligned_alloc(64, n ? (n + 63) / 64 * 64 : 64);
}
