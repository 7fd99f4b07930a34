/* core/fp16.h - IEEE half and bfloat16 conversions, bit-identical to ggml.
 *
 * fp32 -> fp16 rounds to nearest even, overflows to infinity and keeps NaN
 * quiet with its payload truncated: exactly what the F16C instruction (and
 * so ggml on x86) produces. fp32 -> bf16 rounds to nearest even and turns a
 * NaN into a quiet NaN by setting bit 6, as ggml_compute_fp32_to_bf16 does.
 * The row functions choose F16C / AVX2 / AVX-512 code at run time; every
 * path gives the same bits as the scalar one. */
#ifndef KILN_FP16_H
#define KILN_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t kiln_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float kiln_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float kiln_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return kiln_bits_f32(sign | 0x7f800000 | (mant << 13));
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return kiln_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t kiln_fp32_to_fp16(float f) {
    uint32_t x = kiln_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) /* NaN: quiet, payload truncated */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000) /* rounds to (or is) infinity */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000) {
        /* Result is subnormal or zero. Adding 0.5 lines the half's
         * subnormal step up with the float's last mantissa bit, so the FPU
         * does the round-to-nearest-even for us. */
        float t = kiln_bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (kiln_f32_bits(t) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* rebias exponent 127 -> 15, round to even */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float kiln_bf16_to_fp32(uint16_t h) {
    return kiln_bits_f32((uint32_t)h << 16);
}

static inline uint16_t kiln_fp32_to_bf16(float f) {
    uint32_t u = kiln_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* Row conversions, SIMD where the CPU has it. */
void kiln_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n);
void kiln_fp32_to_fp16_row(const float *src, uint16_t *dst, int64_t n);
void kiln_bf16_to_fp32_row(const uint16_t *src, float *dst, int64_t n);
void kiln_fp32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
