/* runtime/vecdot_frows.c - ggml_vec_dot_f32 / _f16 / _bf16 (AVX-512) for
 * consecutive weight rows against one activation row: the one-token
 * products (decode) of F32 / F16 / BF16 weights in KILN_NUM_GGML mode,
 * and the vec order's batches (experts, shapes tinyBLAS declines) one
 * token at a time; kiln_fggml_vec_avx512 (vecdot_float.c) hands it blocks
 * of rows from its `omp for`.
 *
 * Each row is summed exactly as ggml's function sums it - the same
 * accumulators over the same blocks, (a0 + a2) + (a1 + a3), the same
 * reduction tree, the same tail - so every output has the bits of
 * vecdot_float.c's scalar reference. Only the schedule depends on where
 * the rows come from:
 *   - cached rows (small matrices, the fixtures' models in L3): FROWS
 *     rows side by side, so that one activation load serves FROWS rows
 *     and the FROWS reductions share their shuffles (reduce4_avx512);
 *     the loop is then bound by loads and conversions, not memory
 *     (one 2048 x 2048 F16 matrix from L3, 2 threads: 62 -> 81 GB/s;
 *     F32 256 x 512: 73 -> 78);
 *   - streamed rows (matrices past the caller's DEC_CACHED_BYTES): one
 *     row after the other, so that each thread reads a single sequential
 *     stream, which the hardware prefetchers keep ahead of the loads; four
 *     rows at once are four streams and measured a third slower (2048 x
 *     8192 F16 from memory: 43 GB/s one row, 32 four rows). F16 / BF16
 *     rows also prefetch into L2 KILN_STREAM_AHEAD bytes on, which keeps more
 *     lines in flight where the memory can serve them. They hold the activation
 *     in the weight's 16 bits, as ggml does: half the activation bytes
 *     compete with the weights in L1 (the 1B F16 model, tg32: 13.0 -> 16.4 t/s).
 *
 * Not here: the row blocks and the threads (the caller's `omp for`), the
 * activation rounding (matmul.c), tinyBLAS's order (vecdot_float.c). */
#include "kernels.h"

#include "../core/fp16.h"
#include "../core/types.h"

#include <stdbool.h>

#ifdef __x86_64__
#include "vecdot_simd.h"

#define INLINE static inline __attribute__((always_inline))
/* The lines of bytes [at, at + bytes) of a streamed row,
 * KILN_STREAM_AHEAD further on (the next rows follow in memory), into L2. */
KILN_AVX512 INLINE void stream_prefetch(const uint8_t *w, int64_t at, int bytes) {
    for (int l = 0; l < bytes; l += 64) _mm_prefetch((const char *)w + at + KILN_STREAM_AHEAD + l, _MM_HINT_T1);
}
#define FROWS 4               /* rows per pass from cache (F32 / F16: 16 accumulators) */
#define FROWS_HALF_MAX 16384 /* longest activation copied to 16 bits (32 KiB of stack) */

/* Lane r of the result is reduce16(v[r]) (vecdot_float.c): the tree of
 * gcc's _mm512_reduce_add_ps - 256-bit halves, 128-bit halves, lanes 0+2
 * and 1+3, then those two - for four vectors in one set of registers,
 * vector r in 128-bit chunk r from the second step on. */
KILN_AVX512 INLINE __m128 reduce4_avx512(const __m512 v[4]) {
    /* h_r = low half + high half: rows 0, 1 in one register, 2, 3 in another */
    const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44), _mm512_shuffle_f32x4(v[0], v[1], 0xee));
    const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44), _mm512_shuffle_f32x4(v[2], v[3], 0xee));
    /* q_r = h_r[0..3] + h_r[4..7]: chunk r of q */
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xdd));
    /* lane 0 of each chunk: (q0 + q2) + (q1 + q3) */
    const __m512 e = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4e));
    const __m512 f = _mm512_add_ps(e, _mm512_permute_ps(e, 0xb1));
    const __m512i lane0 = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0, f));
}

/* The activation's 16 values at k: from x, or with `half` from xh, x's
 * values in the weight's 16-bit format (exact: x is already rounded to it). */
KILN_AVX512 INLINE __m512 xload(uint32_t type, bool half, const float *x, const uint16_t *xh, int64_t k) {
    return half ? kiln_fwiden16(type, xh, k) : _mm512_loadu_ps(x + k);
}

/* ggml_vec_dot_f32 / _f16 over R rows (R <= FROWS; R and half constant in
 * each instance): four 16-lane accumulators per row over blocks of 64,
 * combined (a0 + a2) + (a1 + a3) and reduced, then the leftovers - F32's
 * onto the float sum (kiln_vec_dot_f32_tail), F16's products added in
 * double. */
KILN_AVX512 INLINE void rows_f(uint32_t type, int R, bool half, const uint8_t *w, int64_t row_bytes, const float *x,
                               const uint16_t *xh, int64_t n, float *y) {
    __m512 a[FROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) a[r][j] = _mm512_setzero_ps();
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64) {
        if (half) stream_prefetch(w, 2 * i, 128); /* half: streamed_rows' one row */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512 xv = xload(type, half, x, xh, i + 16 * j);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                a[r][j] = _mm512_fmadd_ps(kiln_fwiden16(type, w + r * row_bytes, i + 16 * j), xv, a[r][j]);
        }
    }
    __m512 v[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        v[r] = r < R ? _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][2]), _mm512_add_ps(a[r][1], a[r][3]))
                     : _mm512_setzero_ps();
    float head[4];
    _mm_storeu_ps(head, reduce4_avx512(v));
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        if (type == KILN_F32) {
            y[r] = kiln_vec_dot_f32_tail(head[r], (const float *)(w + r * row_bytes), x, np, n);
        } else {
            const uint16_t *h = (const uint16_t *)(w + r * row_bytes);
            double s = head[r];
            for (int64_t i = np; i < n; i++) s += (double)(kiln_fp16_to_fp32(h[i]) * x[i]);
            y[r] = (float)s;
        }
    }
}

/* ggml_vec_dot_bf16 on AVX-512F without AVX512_BF16 over R rows: two
 * 16-lane accumulators per row over blocks of 32, each reduced and added
 * to a double that starts at 0.0 (so that -0 sums come out as ggml's),
 * then the leftover products in double. */
KILN_AVX512 INLINE void rows_bf16(int R, bool half, const uint8_t *w, int64_t row_bytes, const float *x,
                                  const uint16_t *xh, int64_t n, float *y) {
    __m512 c[FROWS][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        if (half) stream_prefetch(w, 2 * i, 64);
        const __m512 x0 = xload(KILN_BF16, half, x, xh, i), x1 = xload(KILN_BF16, half, x, xh, i + 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            c[r][0] = _mm512_fmadd_ps(kiln_fwiden16(KILN_BF16, w + r * row_bytes, i), x0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(kiln_fwiden16(KILN_BF16, w + r * row_bytes, i + 16), x1, c[r][1]);
        }
    }
    /* rows 0, 1 then 2, 3: both accumulators of two rows per reduction */
    float sums[FROWS][2];
#pragma GCC unroll 2
    for (int r0 = 0; r0 < R; r0 += 2) {
        const __m512 z = _mm512_setzero_ps();
        const __m512 v[4] = {c[r0][0], c[r0][1], r0 + 1 < R ? c[r0 + 1][0] : z, r0 + 1 < R ? c[r0 + 1][1] : z};
        float s4[4];
        _mm_storeu_ps(s4, reduce4_avx512(v));
        sums[r0][0] = s4[0], sums[r0][1] = s4[1];
        if (r0 + 1 < R) sums[r0 + 1][0] = s4[2], sums[r0 + 1][1] = s4[3];
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const uint16_t *h = (const uint16_t *)(w + r * row_bytes);
        double s = 0.0;
        s += (double)sums[r][0];
        s += (double)sums[r][1];
        for (int64_t k = i; k < n; k++) s += (double)(kiln_bf16_to_fp32(h[k]) * x[k]);
        y[r] = (float)s;
    }
}

/* R rows of one type; one instance per (type, R, half), so that the
 * loads inline and the loops unroll. */
KILN_AVX512 INLINE void rows_any(uint32_t type, int R, bool half, const uint8_t *w, int64_t row_bytes,
                                 const float *x, const uint16_t *xh, int64_t n, float *y) {
    if (type == KILN_BF16) rows_bf16(R, half, w, row_bytes, x, xh, n, y);
    else rows_f(type, R, half, w, row_bytes, x, xh, n, y);
}

/* Rows from cache: FROWS at a time, f32 activations. */
KILN_AVX512 INLINE void cached_rows(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                                    int64_t n_rows, float *y) {
    int64_t r = 0;
    for (; r + FROWS <= n_rows; r += FROWS)
        rows_any(type, FROWS, false, w + r * row_bytes, row_bytes, x, NULL, n, y + r);
    switch (n_rows - r) {
    case 3: rows_any(type, 3, false, w + r * row_bytes, row_bytes, x, NULL, n, y + r); break;
    case 2: rows_any(type, 2, false, w + r * row_bytes, row_bytes, x, NULL, n, y + r); break;
    case 1: rows_any(type, 1, false, w + r * row_bytes, row_bytes, x, NULL, n, y + r); break;
    default: break;
    }
}

/* Rows from memory: one at a time, so that each thread reads one
 * sequential stream, with the activation copied to the weight's 16-bit
 * format when it fits the stack (F16 / BF16). */
KILN_AVX512 INLINE void streamed_rows(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                                      int64_t n_rows, float *y) {
    if (type == KILN_F32 || n > FROWS_HALF_MAX) {
        for (int64_t r = 0; r < n_rows; r++) rows_any(type, 1, false, w + r * row_bytes, row_bytes, x, NULL, n, y + r);
        return;
    }
    uint16_t xh[FROWS_HALF_MAX] __attribute__((aligned(64)));
    for (int64_t k = 0; k < n; k += 16) {
        const __mmask16 m = (__mmask16)(n - k >= 16 ? 0xFFFF : (1u << (n - k)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
        /* exact either way: x holds f16 / bf16 values */
        const __m256i h = type == KILN_F16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)
                                           : _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
        _mm256_mask_storeu_epi16(xh + k, m, h);
    }
    for (int64_t r = 0; r < n_rows; r++) rows_any(type, 1, true, w + r * row_bytes, row_bytes, x, xh, n, y + r);
}

KILN_AVX512 void kiln_frows_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                                   int64_t n_rows, bool streamed, float *y) {
    if (streamed) {
        if (type == KILN_F16) streamed_rows(KILN_F16, w, row_bytes, x, n, n_rows, y);
        else if (type == KILN_BF16) streamed_rows(KILN_BF16, w, row_bytes, x, n, n_rows, y);
        else streamed_rows(KILN_F32, w, row_bytes, x, n, n_rows, y);
    } else {
        if (type == KILN_F16) cached_rows(KILN_F16, w, row_bytes, x, n, n_rows, y);
        else if (type == KILN_BF16) cached_rows(KILN_BF16, w, row_bytes, x, n, n_rows, y);
        else cached_rows(KILN_F32, w, row_bytes, x, n, n_rows, y);
    }
}
#endif
