/* codec/blocks_k.h - the k-quant super-block structs (see blocks.h).
 *
 * Every k-quant covers KILN_QK_K = 256 weights, split into sub-blocks that
 * carry small integer scales, themselves scaled by one or two fp16 super-block
 * factors. The layouts are ggml's byte for byte: GGUF files written by either
 * tool must read in the other. Bits per weight below count every byte of the
 * block (size * 8 / 256). Diagrams give byte offsets. */
#ifndef KILN_BLOCKS_K_H
#define KILN_BLOCKS_K_H

/* Q2_K: 16 sub-blocks of 16 weights, x = d * sc * q - dmin * m,
 * with q in 0..3 and 4-bit sc, m per sub-block. 2.625 bits per weight.
 *
 *   0        16                      80      82      84
 *   +--------+-----------------------+-------+-------+
 *   | scales | qs (4 weights a byte) |   d   | dmin  |
 *   +--------+-----------------------+-------+-------+
 *   scales[j] = sc (low nibble) | m << 4 (high nibble)
 *   qs: weight 128*h + 32*s + l sits in qs[32*h + l] at bits 2*s..2*s+1 */
typedef struct kiln_block_q2_k {
    uint8_t scales[KILN_QK_K / 16];
    uint8_t qs[KILN_QK_K / 4];
    kiln_half d;
    kiln_half dmin;
} kiln_block_q2_k;
static_assert(sizeof(kiln_block_q2_k) == 84, "block_q2_K is 84 bytes");

/* Q3_K: 16 sub-blocks of 16 weights, x = d * (sc - 32) * (q - 4),
 * q in 0..7 (2 low bits in qs, the third in hmask, set = no -4 offset),
 * sc a 6-bit scale. 3.4375 bits per weight.
 *
 *   0        32                      96         108   110
 *   +--------+-----------------------+----------+-----+
 *   | hmask  | qs (low 2 bits each)  |  scales  |  d  |
 *   +--------+-----------------------+----------+-----+
 *   hmask: weight 32*b + l has its high bit in hmask[l] bit b
 *   scales: 16 6-bit values; low nibbles in bytes 0..7 (j and j+8 share a
 *   byte), high 2-bit pairs packed four to a byte in bytes 8..11 */
typedef struct kiln_block_q3_k {
    uint8_t hmask[KILN_QK_K / 8];
    uint8_t qs[KILN_QK_K / 4];
    uint8_t scales[12];
    kiln_half d;
} kiln_block_q3_k;
static_assert(sizeof(kiln_block_q3_k) == 110, "block_q3_K is 110 bytes");

/* Packs 256 levels 0..3 into Q2_K's / Q3_K's qs layout (see above). */
static inline void kiln_pack_2bit_k(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < KILN_QK_K; h += 128)
        for (int l = 0; l < 32; ++l)
            qs[h / 4 + l] = (uint8_t)(L[h + l] | (L[h + l + 32] << 2) | (L[h + l + 64] << 4) |
                                      (L[h + l + 96] << 6));
}

/* Q4_K: 8 sub-blocks of 32 weights, x = d * sc * q - dmin * m,
 * q in 0..15, sc and m 6-bit. 4.5 bits per weight.
 *
 *   0       2       4          16                      144
 *   +-------+-------+----------+-----------------------+
 *   |   d   | dmin  |  scales  | qs (2 weights a byte) |
 *   +-------+-------+----------+-----------------------+
 *   scales: 8 (sc, m) pairs of 6 bits in 12 bytes (ggml's get_scale_min_k4
 *   packing); qs: byte 32*c + l holds weight 64*c + l low, 64*c + 32 + l high */
typedef struct kiln_block_q4_k {
    kiln_half d;
    kiln_half dmin;
    uint8_t scales[12];
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_q4_k;
static_assert(sizeof(kiln_block_q4_k) == 144, "block_q4_K is 144 bytes");

/* Q5_K: as Q4_K with a fifth bit per weight in qh, q in 0..31.
 * 5.5 bits per weight.
 *
 *   0       2       4          16       48                      176
 *   +-------+-------+----------+--------+-----------------------+
 *   |   d   | dmin  |  scales  |   qh   | qs (low 4 bits each)  |
 *   +-------+-------+----------+--------+-----------------------+
 *   qh: weight 32*b + l has its fifth bit in qh[l] bit b */
typedef struct kiln_block_q5_k {
    kiln_half d;
    kiln_half dmin;
    uint8_t scales[12];
    uint8_t qh[KILN_QK_K / 8];
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_q5_k;
static_assert(sizeof(kiln_block_q5_k) == 176, "block_q5_K is 176 bytes");

/* Q6_K: 16 sub-blocks of 16 weights, x = d * sc * (q - 32), q in 0..63
 * (low 4 bits in ql, high 2 in qh), sc a signed 8-bit scale.
 * 6.5625 bits per weight.
 *
 *   0                        128            192      208   210
 *   +------------------------+--------------+--------+-----+
 *   | ql (low nibbles)       | qh (2 bits)  | scales |  d  |
 *   +------------------------+--------------+--------+-----+
 *   weight 128*h + 32*s + l: low 4 bits in ql[64*h + 32*(s&1) + l] (the
 *   high nibble when s >= 2), top 2 bits in qh[32*h + l] at bit 2*s;
 *   scales[j] belongs to weights 16*j..16*j+15 */
typedef struct kiln_block_q6_k {
    uint8_t ql[KILN_QK_K / 2];
    uint8_t qh[KILN_QK_K / 4];
    int8_t scales[KILN_QK_K / 16];
    kiln_half d;
} kiln_block_q6_k;
static_assert(sizeof(kiln_block_q6_k) == 210, "block_q6_K is 210 bytes");

/* Q8_K: the activation format for k-quant dot products, x = d * q with an
 * fp32 d, q in -127..127 (d is negative when the largest |x| is positive:
 * ggml's sign convention, kept for identical bytes), and bsums = sums of
 * each 16 q's, which the dot products use to fold in the weights' minimums.
 * 9.125 bits per weight.
 *
 *   0     4                                260                292
 *   +-----+----------------------------------+------------------+
 *   |  d  | qs (int8, one per weight)        | bsums (16 x i16) |
 *   +-----+----------------------------------+------------------+ */
typedef struct kiln_block_q8_k {
    float d;
    int8_t qs[KILN_QK_K];
    int16_t bsums[KILN_QK_K / 16];
} kiln_block_q8_k;
static_assert(sizeof(kiln_block_q8_k) == 292, "block_q8_K is 292 bytes");

#endif
