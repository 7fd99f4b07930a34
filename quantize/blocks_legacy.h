/* quantize/blocks_legacy.h - the 32-weight block structs (see blocks.h):
 * Q8_0, Q4_0, Q5_0 and the non-linear IQ4_NL.
 *
 * Each block is one fp16 scale d followed by the 32 levels, and every
 * weight is d times a small integer. The layouts are ggml's byte for byte
 * (GGUF files go both ways). Bits per weight count every byte of the block.
 * Diagrams give byte offsets.
 *
 * It also declares what the family's codec files share: the IQ4_NL level
 * table, the level search of Q4_0 and Q5_0 (both "d = max / -nmax, levels
 * 0..2*nmax-1") and the dequantizer of Q4_0 / IQ4_NL's identical layout. */
#ifndef KILN_BLOCKS_LEGACY_H
#define KILN_BLOCKS_LEGACY_H

/* Q8_0: x = d * q, q a signed byte in -127..127. 8.5 bits per weight.
 *
 *   0     2                                  34
 *   +-----+----------------------------------+
 *   |  d  | qs[32] (int8, weight j = qs[j])  |
 *   +-----+----------------------------------+ */
typedef struct kiln_block_q8_0 {
    kiln_half d;
    int8_t qs[KILN_QK];
} kiln_block_q8_0;
static_assert(sizeof(kiln_block_q8_0) == 34, "block_q8_0 is 34 bytes");

/* Q4_0: x = d * (q - 8), q in 0..15. 4.5 bits per weight.
 *
 *   0     2                                  18
 *   +-----+----------------------------------+
 *   |  d  | qs[16]                           |
 *   +-----+----------------------------------+
 *   qs[j] = q(weight j) | q(weight j + 16) << 4 */
typedef struct kiln_block_q4_0 {
    kiln_half d;
    uint8_t qs[KILN_QK / 2];
} kiln_block_q4_0;
static_assert(sizeof(kiln_block_q4_0) == 18, "block_q4_0 is 18 bytes");

/* Q5_0: x = d * (q - 16), q in 0..31. 5.5 bits per weight.
 *
 *   0     2       6                          22
 *   +-----+-------+--------------------------+
 *   |  d  | qh[4] | qs[16]                   |
 *   +-----+-------+--------------------------+
 *   low nibbles as in Q4_0; bit j of the little-endian u32 qh is bit 4
 *   of q(weight j). qh is bytes, not a u32, so the block stays 2-aligned
 *   and 22 bytes long. */
typedef struct kiln_block_q5_0 {
    kiln_half d;
    uint8_t qh[4];
    uint8_t qs[KILN_QK / 2];
} kiln_block_q5_0;
static_assert(sizeof(kiln_block_q5_0) == 22, "block_q5_0 is 22 bytes");

/* IQ4_NL: x = d * kiln_iq4nl_values[q], q in 0..15: 4-bit indices into a
 * fixed non-uniform table that follows the bell shape of weights.
 * 4.5 bits per weight; same bytes as Q4_0.
 *
 *   0     2                                  18
 *   +-----+----------------------------------+
 *   |  d  | qs[16]                           |
 *   +-----+----------------------------------+
 *   qs[j] = q(weight j) | q(weight j + 16) << 4 */
typedef struct kiln_block_iq4_nl {
    kiln_half d;
    uint8_t qs[KILN_QK / 2];
} kiln_block_iq4_nl;
static_assert(sizeof(kiln_block_iq4_nl) == 18, "block_iq4_nl is 18 bytes");

/* ggml's kvalues_iq4nl: the 16 levels of IQ4_NL (and IQ4_XS), ascending. */
extern const int8_t kiln_iq4nl_values[16];

/* Levels of one 32-weight block for Q4_0 (nmax 8) and Q5_0 (nmax 16), as
 * ggml's reference quantizers pick them: d = max / -nmax where max is the
 * value of largest magnitude, levels q = x / d + nmax in 0..2*nmax-1.
 * Writes the 32 levels to L and returns d. Defined in q4_0.c. */
float kiln_legacy_levels_ref(const float *x, int nmax, uint8_t *L);

/* The same with importance weights (ggml's quantize_row_q4_0_impl /
 * q5_0_impl): weight qw[j] * sqrt(sigma2 + x[j]^2), scale by
 * kiln_make_qx_quants. sigma2 is the mean x^2 of the whole row. */
float kiln_legacy_levels_imatrix(const float *x, const float *qw, float sigma2, int nmax,
                                 uint8_t *L);

/* Mean x^2 of a row, summed in ggml's order (the imatrix paths' sigma2). */
float kiln_legacy_row_sigma2(const float *x, int64_t n);

/* Dequantizes n weights (a multiple of 32) of blocks laid out as Q4_0 and
 * IQ4_NL are: weight = d * table[4-bit index]. Defined in q4_0.c. */
void kiln_dequantize_nibble_blocks(const void *src, const int8_t *table, float *dst, int64_t n);

#endif
