/* codec/blocks_iq.h - block structs of the i-quants (see blocks.h).
 *
 * The i-quants do not store one integer level per weight. They cut a block
 * into groups of 8 weights and store, per group, an index into a fixed
 * codebook ("grid") of 8-dimensional points with non-negative coordinates,
 * plus the signs separately. The codebooks live in quantize/iq2_tables.h.
 * IQ4_XS, last here, is IQ4_NL's table under k-quant-style scales. */
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

#endif
