/* convert/ternary.c - BitNet b1.58's absmean ternarization of its linear
 * weights at convert time (llama.cpp's BitnetModel.weight_quant), so that
 * a latent full-precision checkpoint becomes exact {-s, 0, +s} values per
 * tensor, which TQ1_0 / TQ2_0 then store losslessly.
 *
 * torch computes, in float32: s = clamp(mean(|w|), min=1e-5); is = 1 / s;
 * q = clamp(round(w * is), -1, 1) / is; then casts q back to the source
 * dtype. round is round-half-to-even (rintf here), and a small negative
 * weight keeps its sign as -0.0, which the cast keeps too. The converter
 * turns every dtype but F16 and F32 (BF16, FP8) into F32 before this, so
 * only an F16 tensor is rounded back (to F16).
 *
 * The mean must be torch's float32 sum to the last bit (an ulp of s moves
 * every output of an F32 conversion), so torch_abs_sum() sums as torch
 * 1.13's CPU kernel does (aten/src/ATen/native/cpu/SumKernel.cpp:
 * cascade_sum -> row_sum -> multi_row_sum) with its AVX2 vectors of 8
 * floats on one thread, which is how Debian's torch runs llama.cpp's
 * converter here. A torch using AVX-512 kernels (16 lanes) or several
 * threads (a tensor split into per-thread chunks of at least 32768
 * elements) groups the sum differently, and its converter's F32 output
 * can then differ from kiln's (and from itself elsewhere) by an ulp of s.
 * TQ1_0/TQ2_0/BF16/F16 outputs almost always round that ulp away. */
#include "ternary.h"

#include <math.h>

#include "../core/fp16.h"

enum { TORCH_ILP = 4, TORCH_LEVELS = 4, TORCH_MAX_LANES = 8 };

/* c10::utils::CeilLog2 */
static int64_t ceil_log2(int64_t x) {
    if (x <= 2) return 1;
    int64_t r = 0;
    for (uint64_t v = (uint64_t)x - 1; v > 1; v >>= 1) r++;
    return r + 1;
}

/* torch's sum of |x[i]| for i < n, in float32: rows of TORCH_ILP vectors
 * of `lanes` floats summed into a cascade of TORCH_LEVELS accumulators
 * (multi_row_sum), leftover vectors into the first, the ILP accumulators
 * folded into the first, then the scalar tail and the lanes, in order,
 * into one float (vectorized_inner_sum; lanes 1 is its scalar path). */
static float torch_abs_sum(const float *x, int64_t n, int lanes) {
    float acc[TORCH_LEVELS][TORCH_ILP][TORCH_MAX_LANES] = {{{0}}};
    const int64_t nvec = n / lanes, rows = nvec / TORCH_ILP;
    const int64_t lg = ceil_log2(rows) / TORCH_LEVELS, power = lg > 4 ? lg : 4;
    const int64_t step = (int64_t)1 << power, mask = step - 1;
#define ADD_ROW(dst, row)                                                                                    \
    for (int k = 0; k < TORCH_ILP; k++)                                                                      \
        for (int l = 0; l < lanes; l++) (dst)[k][l] += fabsf(x[((row) * TORCH_ILP + k) * lanes + l])
    int64_t i = 0;
    while (i + step <= rows) {
        for (int64_t j = 0; j < step; j++, i++) ADD_ROW(acc[0], i);
        for (int j = 1; j < TORCH_LEVELS; j++) {
            for (int k = 0; k < TORCH_ILP; k++)
                for (int l = 0; l < lanes; l++) {
                    acc[j][k][l] += acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0.0f;
                }
            if (i & (mask << (j * power))) break;
        }
    }
    for (; i < rows; i++) ADD_ROW(acc[0], i);
#undef ADD_ROW
    for (int j = 1; j < TORCH_LEVELS; j++)
        for (int k = 0; k < TORCH_ILP; k++)
            for (int l = 0; l < lanes; l++) acc[0][k][l] += acc[j][k][l];
    for (int64_t v = rows * TORCH_ILP; v < nvec; v++)
        for (int l = 0; l < lanes; l++) acc[0][0][l] += fabsf(x[v * lanes + l]);
    for (int k = 1; k < TORCH_ILP; k++)
        for (int l = 0; l < lanes; l++) acc[0][0][l] += acc[0][k][l];
    float total = 0.0f;
    for (int64_t t = nvec * lanes; t < n; t++) total += fabsf(x[t]);
    for (int l = 0; l < lanes; l++) total += acc[0][0][l];
    return total;
}

void cv_ternarize(float *w, int64_t n, kiln_st_dtype dtype) {
    /* torch takes the vector path for rows of at least one vector */
    float s = n > 0 ? torch_abs_sum(w, n, n >= TORCH_MAX_LANES ? TORCH_MAX_LANES : 1) / (float)n : 0.0f;
    if (s < 1e-5f) s = 1e-5f; /* clamp(min=1e-5); a NaN stays NaN, as in torch */
    const float is = 1.0f / s;
    for (int64_t i = 0; i < n; i++) {
        float q = rintf(w[i] * is);
        q = q > 1.0f ? 1.0f : q < -1.0f ? -1.0f : q;
        q = q / is;
        if (dtype == KILN_ST_F16) q = kiln_fp16_to_fp32(kiln_fp32_to_fp16(q));
        w[i] = q;
    }
}
