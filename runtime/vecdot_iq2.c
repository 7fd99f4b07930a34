/* runtime/vecdot_iq2.c - IQ2_XXS against Q8_K activations: the reference
 * dot product and the unpacking of a super-block to signed levels.
 *
 * ggml's ggml_vec_dot_iq2_xxs_q8_K sums grid * q8 * sign per 32 weights
 * and weights each sum by ls = 2 * (scale nibble) + 1; the float steps
 * are those of the k-quants' vec_dot order (vecdot_korder.c), the total
 * scaled by 1/8 at the end (the grid is in eighths). Unpacked, a level is
 * the signed grid coordinate (+-8, 25 or 43) and sc is ls. */
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/iq2_tables.h"

#include <string.h>

/* Levels of group g (weights 32g..32g+31): grid coordinates with the
 * signs of the group's four sign indices. */
static void group_scalar(uint32_t grids, uint32_t signs, int8_t *q) {
    for (int l = 0; l < 4; l++) {
        const uint64_t grid = kiln_iq2xxs_grid[(grids >> (8 * l)) & 255];
        const uint8_t sg = kiln_iq2_signs[(signs >> (7 * l)) & 127];
        for (int j = 0; j < 8; j++) {
            int v = (int)((grid >> (8 * j)) & 0xFF);
            q[8 * l + j] = (int8_t)(sg >> j & 1 ? -v : v);
        }
    }
}

#ifdef __x86_64__
#include <immintrin.h>

__attribute__((target("avx2"))) static void group_avx2(uint32_t grids, uint32_t signs, int8_t *q) {
    const __m256i g = _mm256_set_epi64x((long long)kiln_iq2xxs_grid[grids >> 24],
                                        (long long)kiln_iq2xxs_grid[(grids >> 16) & 255],
                                        (long long)kiln_iq2xxs_grid[(grids >> 8) & 255],
                                        (long long)kiln_iq2xxs_grid[grids & 255]);
    const uint32_t sg = (uint32_t)kiln_iq2_signs[signs & 127] | (uint32_t)kiln_iq2_signs[(signs >> 7) & 127] << 8 |
                        (uint32_t)kiln_iq2_signs[(signs >> 14) & 127] << 16 |
                        (uint32_t)kiln_iq2_signs[(signs >> 21) & 127] << 24;
    /* bit j of sg -> 0xFF in byte j, then negate those bytes */
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)sg),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg));
}
#endif

void kiln_unpack_iq2_xxs(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq2_xxs *b = blocks;
    (void)n;
#ifdef __x86_64__
    const bool avx2 = kiln_simd() >= KILN_SIMD_AVX2;
#endif
    for (int g = 0; g < 8; g++) {
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * g, 8);
#ifdef __x86_64__
        if (avx2) group_avx2(aux[0], aux[1], out->q + 32 * g);
        else
#endif
            group_scalar(aux[0], aux[1], out->q + 32 * g);
        out->sc[2 * g] = out->sc[2 * g + 1] = (int16_t)(2 * (aux[1] >> 28) + 1);
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}
