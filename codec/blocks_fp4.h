/* codec/blocks_fp4.h - the 4-bit float block structs (see blocks.h):
 * MXFP4, OCP's microscaling format (gpt-oss ships its experts in it). The
 * E2M1 values and the E8M0 scale are in fp4.h. */
#ifndef KILN_BLOCKS_FP4_H
#define KILN_BLOCKS_FP4_H

/* MXFP4: 32 weights in 17 bytes = 4.25 bits per weight (ggml type 39).
 *
 *   byte 0   1                                   17
 *        +---+-----------------------------------+
 *        | e | qs[16]                            |
 *        +---+-----------------------------------+
 *   qs[j] = code(weight j) | code(weight j + 16) << 4, as Q4_0
 *
 *   weight = kiln_e2m1_doubled[code] * 2^(e - 128)
 *
 * (the E2M1 value times the E8M0 scale 2^(e - 127); the table is doubled
 * so the scale is halved). */
typedef struct kiln_block_mxfp4 {
    uint8_t e;
    uint8_t qs[KILN_QK / 2];
} kiln_block_mxfp4;
static_assert(sizeof(kiln_block_mxfp4) == 17, "MXFP4 block is 17 bytes");

#endif
