/* runtime/kernel_alloc.c - the things every kernel file may ask of the
 * kernel table's world without depending on the table itself: the ISA
 * level to run (kiln_isa_now), aligned buffers with the tests' failure
 * hook (kiln_kernel_alloc) and the calling thread's reusable arena
 * (kiln_kernel_arena), so that a product in the hot path allocates
 * nothing. A leaf: it calls no other runtime file, so the
 * table (kernels.c) can name the kernels and the kernels can use these
 * without a circle (see kernels.h). */
#include "kernels.h"

#include <pthread.h>
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

/* The arena of the calling thread: grown (never shrunk) by
 * kiln_kernel_arena. Thread-local, so two threads that each run products
 * (each with its own OpenMP team) never share it; within a product the
 * team reads it through the pointer its caller took. The key's
 * destructor frees it when a thread other than the main one ends. */
static _Thread_local struct {
    void *p;
    size_t cap;
} arena;
static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static int arena_key_ok;

static void arena_key_make(void) {
    arena_key_ok = pthread_key_create(&arena_key, free) == 0;
}

void *kiln_kernel_arena(size_t n) {
    if (arena.p && n <= arena.cap) return arena.p;
    pthread_once(&arena_once, arena_key_make);
    if (!arena_key_ok) return NULL;
    /* a quarter more than asked, so that a slowly growing batch does not
     * reallocate on every product */
    const size_t want = n + n / 4;
    void *p = kiln_kernel_alloc(want);
    if (!p) return NULL;
    if (pthread_setspecific(arena_key, p) != 0) {
        free(p);
        return NULL;
    }
    free(arena.p);
    arena.p = p;
    arena.cap = want;
    return p;
}
