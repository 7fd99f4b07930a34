/* codec/fp4.h - the OCP microscaling pieces MXFP4 is made of: the E2M1
 * 4-bit float values and the E8M0 power-of-two scale, as ggml computes
 * them. Header-only, no block layout (that is blocks_fp4.h), so that
 * convert/ can read checkpoints stored as E2M1 + E8M0 (gpt-oss) with the
 * same numbers the codec uses.
 *
 * ggml stores the E2M1 values doubled, as integers (0, 0.5, 1, 1.5, 2, 3,
 * 4, 6 -> 0, 1, 2, 3, 4, 6, 8, 12; bit 3 the sign), and halves the scale
 * instead: weight = kiln_e2m1_doubled[code] * kiln_e8m0_to_fp32_half(e). */
#ifndef KILN_FP4_H
#define KILN_FP4_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static const int8_t kiln_e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 127), the E8M0 scale; e = 0 gives 2^-127 (a subnormal). The
 * code 0xFF (NaN in OCP's spec) is read as 2^128 = infinity, as ggml
 * does. */
static inline float kiln_e8m0_to_fp32(uint8_t e) {
    const uint32_t bits = e ? (uint32_t)e << 23 : 0x00400000u;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* kiln_e8m0_to_fp32(e) / 2, exact (subnormal for e < 2): the scale of
 * the doubled E2M1 values. */
static inline float kiln_e8m0_to_fp32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The E8M0 exponent ggml gives a block whose largest magnitude is amax:
 * floor(log2(amax)) - 2 + 127, so that amax / 2^(e-127) < 8 and the
 * block's extreme lands near E2M1's top value 6; 0 for amax = 0. It
 * goes through log2f as ggml does (on a value just below a power of two
 * log2f may round up to the integer, and ggml's byte follows it), and
 * converts the float through int32 as x86 does: amax below 2^-125 wraps
 * around, as in ggml. */
static inline uint8_t kiln_e8m0_of_amax(float amax) {
    return amax > 0.0f ? (uint8_t)(int32_t)(floorf(log2f(amax)) - 2 + 127) : 0;
}

/* The E2M1 code whose doubled value times d is nearest x, the first code
 * on ties (so +0, never -0, and the smaller magnitude between two
 * neighbours): ggml's best_index_mxfp4, used by MXFP4 and NVFP4. */
static inline uint8_t kiln_e2m1_nearest(float x, float d) {
    uint8_t best = 0;
    float best_err = fabsf(kiln_e2m1_doubled[0] * d - x);
    for (uint8_t i = 1; i < 16; i++) {
        const float err = fabsf(kiln_e2m1_doubled[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

#endif
