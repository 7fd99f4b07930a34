/* runtime/vecdot_fdecode.c - one token (decode) against F32 / F16 / BF16
 * weights, read in place.
 *
 * The numbers are kiln_fdot_chain's, as everywhere in the f32 path: one
 * serial fmaf chain per row. A single token leaves nothing to reuse, so
 * the repacking of vecdot_float.c would only add passes over memory;
 * instead 16 x 16 tiles of four 16-row groups are loaded, widened and
 * transposed in registers, and each column feeds its group's chain. Four
 * groups keep four chains in flight to cover the FMA latency. The weights
 * are read once, row by row in 64-byte pieces.
 *
 * Not here: several tokens (kiln_fgemm) and quantized weights in
 * KILN_NUM_EXACT mode (dequantized through kiln_fgemm); the table in
 * kernels.c names this kernel for the AVX-512 levels. */
#include "kernels.h"

#include "../core/cpu.h"
#include "../core/types.h"
#include "vecdot_simd.h"

#include <string.h>

#ifdef __x86_64__
#define INLINE static inline __attribute__((always_inline))
#define GROUPS 2 /* 16-row groups in flight */

/* 16 weights of one row at p (n < 16: the first n, zeros after), widened
 * exactly to f32. */
KILN_AVX512 INLINE __m512 load16(uint32_t type, const uint8_t *p, int n) {
    const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    if (type == KILN_F32) return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (type == KILN_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows [r0, r0 + 16 * GROUPS), of which the first `valid` exist (their
 * sums alone are stored; missing rows are masked loads of nothing). */
KILN_AVX512 INLINE void groups(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t n_in,
                               int64_t r0, int valid, const float *x, float *y) {
    const int esz = type == KILN_F32 ? 4 : 2;
    __m512 acc[GROUPS];
#pragma GCC unroll 16
    for (int g = 0; g < GROUPS; g++) acc[g] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n_in; k += 16) {
        const int n = n_in - k < 16 ? (int)(n_in - k) : 16;
#pragma GCC unroll 16
        for (int g = 0; g < GROUPS; g++) {
            const uint8_t *p = w + (r0 + 16 * g) * row_bytes + k * esz;
            __m512 r[16], c[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = load16(type, p + i * row_bytes, 16 * g + i < valid ? n : 0);
            kiln_transpose16(r, c);
            if (n == 16) {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) acc[g] = _mm512_fmadd_ps(c[i], _mm512_set1_ps(x[k + i]), acc[g]);
            } else {
                for (int i = 0; i < n; i++) acc[g] = _mm512_fmadd_ps(c[i], _mm512_set1_ps(x[k + i]), acc[g]);
            }
        }
    }
#pragma GCC unroll 16
    for (int g = 0; g < GROUPS; g++) {
        const int left = valid - 16 * g;
        if (left <= 0) break;
        _mm512_mask_storeu_ps(y + r0 + 16 * g, (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1), acc[g]);
    }
}

KILN_AVX512 static void fdecode_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, int64_t n_in,
                                       int64_t n_out, const float *x, float *y) {
    const int64_t step = 16 * GROUPS;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t r0 = 0; r0 < n_out; r0 += step) {
        /* one instance per type (and for whole blocks), so that the loads
         * inline and the row masks fold away */
        const int valid = n_out - r0 < step ? (int)(n_out - r0) : (int)step;
        if (valid < step) groups(type, w, row_bytes, n_in, r0, valid, x, y);
        else if (type == KILN_F16) groups(KILN_F16, w, row_bytes, n_in, r0, step, x, y);
        else if (type == KILN_BF16) groups(KILN_BF16, w, row_bytes, n_in, r0, step, x, y);
        else groups(KILN_F32, w, row_bytes, n_in, r0, step, x, y);
    }
}

/* The table's exact_decode for F32 / F16 / BF16 at the AVX-512 levels. */
void kiln_fdecode_avx512(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x, float *y) {
    fdecode_avx512(type, w, (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in), n_in, n_out, x, y);
}
#endif
