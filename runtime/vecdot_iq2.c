/* runtime/vecdot_iq2.c - the 2-bit grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S)
 * against Q8_K activations: the unpacking of a super-block to signed
 * levels, from which the reference dot product (kiln_kdot_ref) and the
 * fast kernels take their integer sums.
 *
 * ggml's ggml_vec_dot_iq2_{xxs,xs,s}_q8_K (AVX2 branch, the one llama.cpp
 * runs on x86 with AVX2 or AVX-512) sum grid * q8 * sign per 16 or 32
 * weights and weight each sum by ls = 2 * (scale nibble) + 1 - one nibble
 * per 32 weights for IQ2_XXS, per 16 for IQ2_XS and IQ2_S; the float steps
 * are those of the k-quants' vec_dot order (vecdot_korder.c), the total
 * scaled by 1/8 at the end (the grid is in eighths). Unpacked, a level is
 * the signed grid coordinate (+-8, 25 or 43) and sc is ls. */
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/iq2_tables.h"

#include <string.h>

/* Levels of 32 weights: four grid points, each with its 8-bit sign mask
 * (bit j set: coordinate j negative). */
static void levels32_scalar(const uint64_t grid[4], const uint8_t signs[4], int8_t *q) {
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 8; j++) {
            int v = (int)((grid[l] >> (8 * j)) & 0xFF);
            q[8 * l + j] = (int8_t)(signs[l] >> j & 1 ? -v : v);
        }
}

#ifdef __x86_64__
#include <immintrin.h>

__attribute__((target("avx2"))) static void levels32_avx2(const uint64_t grid[4], const uint8_t signs[4],
                                                          int8_t *q) {
    const __m256i g = _mm256_loadu_si256((const __m256i *)grid);
    uint32_t sg;
    memcpy(&sg, signs, 4);
    /* bit j of sign byte l -> 0xFF in byte j of point l, then negate those bytes */
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)sg),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg));
}
#endif

/* The level writer for the current SIMD level. */
typedef void (*levels32_fn)(const uint64_t grid[4], const uint8_t signs[4], int8_t *q);
static levels32_fn levels32_pick(void) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX2) return levels32_avx2;
#endif
    return levels32_scalar;
}

void kiln_unpack_iq2_xxs(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq2_xxs *b = blocks;
    const levels32_fn levels32 = levels32_pick();
    (void)n;
    for (int g = 0; g < 8; g++) {
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * g, 8);
        uint64_t grid[4];
        uint8_t signs[4];
        for (int l = 0; l < 4; l++) {
            grid[l] = kiln_iq2xxs_grid[(aux[0] >> 8 * l) & 255];
            signs[l] = kiln_iq2_signs[(aux[1] >> 7 * l) & 127];
        }
        levels32(grid, signs, out->q + 32 * g);
        out->sc[2 * g] = out->sc[2 * g + 1] = (int16_t)(2 * (aux[1] >> 28) + 1);
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

/* The 4-bit scales of IQ2_XS and IQ2_S, one per 16 weights, as ls. */
static void scales16(const uint8_t scales[8], kiln_qblock *out) {
    for (int g = 0; g < 8; g++) {
        out->sc[2 * g] = (int16_t)(2 * (scales[g] & 15) + 1);
        out->sc[2 * g + 1] = (int16_t)(2 * (scales[g] >> 4) + 1);
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
}

void kiln_unpack_iq2_xs(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq2_xs *b = blocks;
    const levels32_fn levels32 = levels32_pick();
    (void)n;
    for (int g = 0; g < 8; g++) {
        uint64_t grid[4];
        uint8_t signs[4];
        for (int l = 0; l < 4; l++) {
            const uint16_t v = b->qs[4 * g + l];
            grid[l] = kiln_iq2xs_grid[v & 511];
            signs[l] = kiln_iq2_signs[v >> 9];
        }
        levels32(grid, signs, out->q + 32 * g);
    }
    scales16(b->scales, out);
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

void kiln_unpack_iq2_s(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq2_s *b = blocks;
    const levels32_fn levels32 = levels32_pick();
    (void)n;
    for (int g = 0; g < 8; g++) {
        uint64_t grid[4];
        for (int l = 0; l < 4; l++) grid[l] = kiln_iq2s_grid[b->qs[4 * g + l] | ((b->qh[g] >> 2 * l) & 3) << 8];
        levels32(grid, b->qs + KILN_QK_K / 8 + 4 * g, out->q + 32 * g);
    }
    scales16(b->scales, out);
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}
