/* codec/blocks_tq.h - the ternary and binary block structs (see
 * blocks.h): TQ1_0 and TQ2_0, made for BitNet b1.58 and TriLM weights,
 * where every weight is -d, 0 or +d with one fp16 d per 256 weights (d =
 * the block's largest |x|; the two differ only in how the trits are
 * packed), and the small-block Q1_0 (+-d) and Q2_0 (-d, 0, d, 2d). */
#ifndef KILN_BLOCKS_TQ_H
#define KILN_BLOCKS_TQ_H

/* TQ1_0: 256 weights in 54 bytes = 1.6875 bits per weight (ggml type 34).
 *
 *   byte 0                                 48        52     54
 *        +---------------------------------+---------+------+
 *        | qs[48]: 5 trits per byte        | qh[4]:  |  d   |
 *        |                                 | 4 trits | fp16 |
 *        +---------------------------------+---------+------+
 *
 * A byte holding trits t0..t4 (t = level + 1, in 0..2; t0 the most
 * significant) stores ceil(256 * (t0 t1 t2 t3 t4 in base 3) / 243), so
 * that trit n comes back as the top two bits of ((byte * 3^n) mod 256) * 3
 * (a multiply, not a division). Weight order:
 *   qs[m],      m < 32: weights 32n + m        (trit n)
 *   qs[32 + m], m < 16: weights 160 + 16n + m  (trit n)
 *   qh[j],      j < 4:  weights 240 + 4n + j   (trit n of 4; a fifth,
 *                                               always 0, pads the byte)
 *
 *   weight = d * (t - 1) */
typedef struct kiln_block_tq1_0 {
    uint8_t qs[(KILN_QK_K - 4 * KILN_QK_K / 64) / 5];
    uint8_t qh[KILN_QK_K / 64];
    kiln_half d;
} kiln_block_tq1_0;
static_assert(sizeof(kiln_block_tq1_0) == 54, "TQ1_0 block is 54 bytes");

/* TQ2_0: 256 weights in 66 bytes = 2.0625 bits per weight (ggml type 35).
 *
 *   byte 0                                            64     66
 *        +--------------------------------------------+------+
 *        | qs[64]: 4 levels per byte, 2 bits each     |  d   |
 *        +--------------------------------------------+------+
 *
 * qs[32c + m] holds weights 128c + 32n + m in bits 2n..2n+1 (n = 0..3),
 * as t = level + 1 in 0..2 (3 never occurs).
 *
 *   weight = d * (t - 1) */
typedef struct kiln_block_tq2_0 {
    uint8_t qs[KILN_QK_K / 4];
    kiln_half d;
} kiln_block_tq2_0;
static_assert(sizeof(kiln_block_tq2_0) == 66, "TQ2_0 block is 66 bytes");

/* Q1_0: 128 weights in 18 bytes = 1.125 bits per weight (ggml type 41).
 *
 *   0     2                                   18
 *   +-----+-----------------------------------+
 *   |  d  | qs[16]: bit j % 8 of qs[j / 8]    |
 *   +-----+-----------------------------------+
 *
 *   weight = bit ? d : -d    (d = mean |x| of the block) */
typedef struct kiln_block_q1_0 {
    kiln_half d;
    uint8_t qs[128 / 8];
} kiln_block_q1_0;
static_assert(sizeof(kiln_block_q1_0) == 18, "Q1_0 block is 18 bytes");

/* Q2_0: 64 weights in 18 bytes = 2.25 bits per weight (ggml type 42).
 *
 *   0     2                                   18
 *   +-----+-----------------------------------+
 *   |  d  | qs[16]: bits 2(j%4).. of qs[j/4]  |
 *   +-----+-----------------------------------+
 *
 *   weight = d * (q - 1), q in 0..3    (d = the block's largest |x|) */
typedef struct kiln_block_q2_0 {
    kiln_half d;
    uint8_t qs[64 / 4];
} kiln_block_q2_0;
static_assert(sizeof(kiln_block_q2_0) == 18, "Q2_0 block is 18 bytes");

#endif
