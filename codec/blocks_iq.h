/* codec/blocks_iq.h - block structs of the i-quants (see blocks.h).
 *
 * The i-quants do not store one integer level per weight. They cut a block
 * into groups of 8 weights and store, per group, an index into a fixed
 * codebook ("grid") of 8-dimensional points with non-negative coordinates,
 * plus the signs separately. The codebooks live in codec/iq2_tables.h.
 * IQ4_XS is IQ4_NL's table under k-quant-style scales; IQ1_S and IQ1_M,
 * last here, index a grid of 2048 points in {-1, 0, 1}^8 plus a shift. */
#ifndef KILN_BLOCKS_IQ_H
#define KILN_BLOCKS_IQ_H

/* IQ2_XXS: 256 weights in 66 bytes = 2.0625 bits per weight (ggml type 16).
 *
 *   byte 0      2                                                        66
 *        +------+--------+--------+--------+----- ... -----+--------+
 *        |  d   | group0 | group1 | group2 |               | group7 |
 *        | fp16 | 8 bytes| 8 bytes| 8 bytes|               | 8 bytes|
 *        +------+--------+--------+--------+----- ... -----+--------+
 *
 * qs[] is read as 8 groups of 32 weights; group g owns qs[4g..4g+3], i.e.
 * two little-endian 32-bit words:
 *
 *   word 0:  bits  0..7   grid index of weights  0..7   (0..255)
 *            bits  8..15  grid index of weights  8..15
 *            bits 16..23  grid index of weights 16..23
 *            bits 24..31  grid index of weights 24..31
 *   word 1:  bits  0..6   sign index of weights  0..7   (0..127)
 *            bits  7..13  sign index of weights  8..15
 *            bits 14..20  sign index of weights 16..23
 *            bits 21..27  sign index of weights 24..31
 *            bits 28..31  group scale ls (0..15)
 *
 * A sign index holds the signs of the first 7 weights of its 8; the eighth
 * sign makes the count of negative weights even (the quantizer flips the
 * least important weight to keep that true), so 7 bits carry 8 signs.
 *
 *   weight = d * (0.5 + ls) / 4 * grid[index][j] * (sign_j ? -1 : 1)
 *
 * with grid coordinates in {8, 25, 43}. Every product is exact in fp32. */
typedef struct kiln_block_iq2_xxs {
    kiln_half d;
    uint16_t qs[KILN_QK_K / 8];
} kiln_block_iq2_xxs;
static_assert(sizeof(kiln_block_iq2_xxs) == 2 + KILN_QK_K / 4, "IQ2_XXS block is 66 bytes");

/* IQ2_XS: 256 weights in 74 bytes = 2.3125 bits per weight (ggml type 17).
 * IQ2_XXS's idea with a 512-point grid and a scale per 16 weights.
 *
 *   byte 0      2                                   66          74
 *        +------+-------------------------------------+-----------+
 *        |  d   | qs[32]: one uint16 per 8 weights    | scales[8] |
 *        | fp16 | bits 0..8 grid index, 9..15 signs   | 2 x 4 bit |
 *        +------+-------------------------------------+-----------+
 *
 * qs[k] covers weights 8k..8k+7: grid index (0..511) in its low 9 bits, a
 * sign index (0..127, kiln_iq2_signs, the eighth sign by parity as in
 * IQ2_XXS) in the top 7. scales[ib] holds the 4-bit scales of weights
 * 32ib..32ib+15 (low nibble) and 32ib+16..32ib+31 (high nibble).
 *
 *   weight = d * (0.5 + ls) / 4 * grid[index][j] * (sign_j ? -1 : 1)
 *
 * with grid coordinates in {8, 25, 43}. */
typedef struct kiln_block_iq2_xs {
    kiln_half d;
    uint16_t qs[KILN_QK_K / 8];
    uint8_t scales[KILN_QK_K / 32];
} kiln_block_iq2_xs;
static_assert(sizeof(kiln_block_iq2_xs) == 2 + KILN_QK_K / 4 + KILN_QK_K / 32, "IQ2_XS block is 74 bytes");

/* IQ2_S: 256 weights in 82 bytes = 2.5625 bits per weight (ggml type 22).
 * A 1024-point grid, all 8 signs stored, a scale per 16 weights.
 *
 *   byte 0      2          34          66      74          82
 *        +------+----------+-----------+-------+-----------+
 *        |  d   | qs[32]   | signs[32] | qh[8] | scales[8] |
 *        | fp16 | idx low 8| 8 bits    | 4 x 2 | 2 x 4 bit |
 *        +------+----------+-----------+-------+-----------+
 *
 * Group k (weights 8k..8k+7): grid index qs[k] | ((qh[k / 4] >> 2 (k % 4))
 * & 3) << 8 (0..1023), sign bits qs[32 + k] (bit j set: weight j
 * negative). scales[] as in IQ2_XS.
 *
 *   weight = d * (0.5 + ls) / 4 * grid[index][j] * (sign_j ? -1 : 1) */
typedef struct kiln_block_iq2_s {
    kiln_half d;
    uint8_t qs[KILN_QK_K / 4];
    uint8_t qh[KILN_QK_K / 32];
    uint8_t scales[KILN_QK_K / 32];
} kiln_block_iq2_s;
static_assert(sizeof(kiln_block_iq2_s) == 2 + KILN_QK_K / 4 + KILN_QK_K / 16, "IQ2_S block is 82 bytes");

/* IQ4_XS: 256 weights in 136 bytes = 4.25 bits per weight (ggml type 23).
 * Not a grid format: IQ4_NL's 16-entry table (kiln_iq4nl_values) per
 * weight, with a 6-bit signed scale per 32 weights under one fp16 scale.
 *
 *   byte 0      2          4            8                              136
 *        +------+----------+------------+------------------------------+
 *        |  d   | scales_h | scales_l[4]| qs[128]                      |
 *        | fp16 | 2 x 8 bit| 8 x 4 bit  | 8 sub-blocks of 16 bytes     |
 *        +------+----------+------------+------------------------------+
 *
 * Sub-block ib (weights 32ib..32ib+31): its scale ls (0..63) has the low
 * nibble in scales_l[ib / 2] (bits 4 * (ib % 2)) and the top two bits in
 * scales_h (bits 2 * ib); its indices are qs[16ib + j], weight j in the
 * low nibble, weight j + 16 in the high one, as in IQ4_NL.
 *
 *   weight = d * (ls - 32) * kiln_iq4nl_values[index] */
typedef struct kiln_block_iq4_xs {
    kiln_half d;
    uint16_t scales_h;
    uint8_t scales_l[KILN_QK_K / 64];
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_iq4_xs;
static_assert(sizeof(kiln_block_iq4_xs) == 2 + 2 + KILN_QK_K / 64 + KILN_QK_K / 2, "IQ4_XS block is 136 bytes");

/* IQ1_S: 256 weights in 50 bytes = 1.5625 bits per weight (ggml type 19).
 * Grid format (codec/iq1_tables.h: 2048 points of coordinates -1, 0, 1).
 *
 *   byte 0      2                      34                              50
 *        +------+----------------------+-------------------------------+
 *        |  d   | qs[32]               | qh[8]                         |
 *        | fp16 | low 8 bits of the 32 | one uint16 per 32 weights     |
 *        |      | grid indices         |                               |
 *        +------+----------------------+-------------------------------+
 *
 * Sub-block ib (weights 32ib..32ib+31) has four groups of 8, l = 0..3:
 *   index of group l = qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8
 *   qh[ib] bits 12..14: scale s (0..7); bit 15: the shift's sign.
 *
 *   weight = d * (2s + 1) * (grid[index][j] + (bit 15 ? -1/8 : +1/8)) */
typedef struct kiln_block_iq1_s {
    kiln_half d;
    uint8_t qs[KILN_QK_K / 8];
    uint16_t qh[KILN_QK_K / 32];
} kiln_block_iq1_s;
static_assert(sizeof(kiln_block_iq1_s) == 2 + KILN_QK_K / 8 + KILN_QK_K / 16, "IQ1_S block is 50 bytes");

/* IQ1_M: 256 weights in 56 bytes = 1.75 bits per weight (ggml type 29).
 * IQ1_S's grid, with a scale per 16 weights and a shift sign per 8, and
 * no fp16 field of its own: the super-block scale's 16 bits are spread
 * over the top nibbles of the four scale words.
 *
 *   byte 0                       32             48                 56
 *        +------------------------+--------------+------------------+
 *        | qs[32]                 | qh[16]       | scales[8]        |
 *        | low 8 bits of indices  | 2 per byte   | 4 x uint16 words |
 *        +------------------------+--------------+------------------+
 *
 * Group g (weights 8g..8g+7): index = qs[g] | (qh[g / 2] >> 4 * (g % 2) & 7) << 8,
 * shift sign = bit 3 + 4 (g % 2) of qh[g / 2].
 * Scale word w = scales[2w] | scales[2w+1] << 8 (w = 0..3): bits 3m..3m+2
 * hold the scale s of 16-weight sub-block 4w + m, bits 12..15 nibble w of
 * the fp16 super-block scale D.
 *
 *   weight = D * (2s + 1) * (grid[index][j] + (sign ? -1/8 : +1/8)) */
typedef struct kiln_block_iq1_m {
    uint8_t qs[KILN_QK_K / 8];
    uint8_t qh[KILN_QK_K / 16];
    uint8_t scales[KILN_QK_K / 32];
} kiln_block_iq1_m;
static_assert(sizeof(kiln_block_iq1_m) == KILN_QK_K / 8 + KILN_QK_K / 16 + KILN_QK_K / 32, "IQ1_M block is 56 bytes");

/* IQ3_XXS: 256 weights in 98 bytes = 3.0625 bits per weight (ggml type 18).
 *
 *   byte 0      2                    66                              98
 *        +------+--------------------+-------------------------------+
 *        |  d   | qs[64]: grid index | 8 words: signs + group scale  |
 *        | fp16 | per 4 weights      | one uint32 per 32 weights     |
 *        +------+--------------------+-------------------------------+
 *
 * Group g (weights 32g..32g+31) has grid indices qs[8g..8g+7] (4 weights
 * each, into kiln_iq3xxs_grid) and the little-endian word at qs[64 + 4g]:
 * bits 7l..7l+6 the sign index (kiln_iq2_signs: 7 signs stored, the
 * eighth by parity) of weights 8l..8l+7, bits 28..31 the scale ls.
 *
 *   weight = d * (0.5 + ls) / 2 * grid[index][j] * (sign_j ? -1 : 1) */
typedef struct kiln_block_iq3_xxs {
    kiln_half d;
    uint8_t qs[3 * KILN_QK_K / 8];
} kiln_block_iq3_xxs;
static_assert(sizeof(kiln_block_iq3_xxs) == 2 + 3 * KILN_QK_K / 8, "IQ3_XXS block is 98 bytes");

/* IQ3_S: 256 weights in 110 bytes = 3.4375 bits per weight (ggml type 21).
 *
 *   byte 0      2          66       74             106        110
 *        +------+----------+--------+--------------+----------+
 *        |  d   | qs[64]   | qh[8]  | signs[32]    | scales[4]|
 *        | fp16 | index lo | bit 8  | 1 bit/weight | 2 x 4 bit|
 *        +------+----------+--------+--------------+----------+
 *
 * Group g (weights 32g..32g+31): 4 weights k (0..7) take grid index
 * qs[8g + k] | (bit k of qh[g]) << 8 into kiln_iq3s_grid; weight 8l + j
 * is negative when bit j of signs[4g + l] is set (all 8 signs stored);
 * its scale ls is the low nibble of scales[g / 2] for even g, the high
 * one for odd g.
 *
 *   weight = d * (1 + 2 ls) * grid[index][j] * (sign_j ? -1 : 1) */
typedef struct kiln_block_iq3_s {
    kiln_half d;
    uint8_t qs[KILN_QK_K / 4];
    uint8_t qh[KILN_QK_K / 32];
    uint8_t signs[KILN_QK_K / 8];
    uint8_t scales[KILN_QK_K / 64];
} kiln_block_iq3_s;
static_assert(sizeof(kiln_block_iq3_s) == 2 + 13 * KILN_QK_K / 32 + KILN_QK_K / 64, "IQ3_S block is 110 bytes");

#endif
