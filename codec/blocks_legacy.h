/* codec/blocks_legacy.h - the 32-weight block structs (see blocks.h):
 * Q8_0, Q4_0, Q5_0 and the non-linear IQ4_NL, the "_1" types with a
 * minimum, Q4_1 and Q5_1, and Q8_1, the activations those multiply with.
 *
 * Each block is one fp16 scale d (and for the _1 types an fp16 minimum
 * m) followed by the 32 levels, and every weight is d times a small
 * integer (plus m). The layouts are ggml's byte for byte
 * (GGUF files go both ways). Bits per weight count every byte of the block.
 * Diagrams give byte offsets.
 *
 * It also declares what the family's codec files share: the IQ4_NL level
 * table, the nibble packing, the quantizer of Q4_0 and Q5_0 (both "d = max
 * / -nmax, levels 0..2*nmax-1"), the one of Q4_1 and Q5_1 ("d = range /
 * nmax, m = min") and the dequantizer of Q4_0 / IQ4_NL's identical
 * layout. */
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

/* Q4_1: x = d * q + m, q in 0..15. 5 bits per weight.
 *
 *   0     2     4                            20
 *   +-----+-----+----------------------------+
 *   |  d  |  m  | qs[16]                     |
 *   +-----+-----+----------------------------+
 *   qs[j] = q(weight j) | q(weight j + 16) << 4, as in Q4_0 */
typedef struct kiln_block_q4_1 {
    kiln_half d;
    kiln_half m;
    uint8_t qs[KILN_QK / 2];
} kiln_block_q4_1;
static_assert(sizeof(kiln_block_q4_1) == 20, "block_q4_1 is 20 bytes");

/* Q5_1: x = d * q + m, q in 0..31. 6 bits per weight.
 *
 *   0     2     4       8                    24
 *   +-----+-----+-------+--------------------+
 *   |  d  |  m  | qh[4] | qs[16]             |
 *   +-----+-----+-------+--------------------+
 *   low nibbles and qh as in Q5_0 */
typedef struct kiln_block_q5_1 {
    kiln_half d;
    kiln_half m;
    uint8_t qh[4];
    uint8_t qs[KILN_QK / 2];
} kiln_block_q5_1;
static_assert(sizeof(kiln_block_q5_1) == 24, "block_q5_1 is 24 bytes");

/* Q8_1: x = d * q, q in -127..127, with s = d * sum(q) stored beside, so
 * that a dot product with a _1 block adds m * s for the minimum. Only an
 * activation format (ggml's vec_dot_type of Q4_1 and Q5_1). 9 bits per
 * weight.
 *
 *   0     2     4                            36
 *   +-----+-----+----------------------------+
 *   |  d  |  s  | qs[32] (int8)              |
 *   +-----+-----+----------------------------+ */
typedef struct kiln_block_q8_1 {
    kiln_half d;
    kiln_half s;
    int8_t qs[KILN_QK];
} kiln_block_q8_1;
static_assert(sizeof(kiln_block_q8_1) == 36, "block_q8_1 is 36 bytes");

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

/* Q4_0 and IQ4_NL differ only in what a 4-bit index means, so one packer
 * and one dequantizer (in q4_0.c) serve both: "nibble blocks". */
static_assert(offsetof(kiln_block_iq4_nl, d) == offsetof(kiln_block_q4_0, d) &&
                  offsetof(kiln_block_iq4_nl, qs) == offsetof(kiln_block_q4_0, qs) &&
                  sizeof(kiln_block_iq4_nl) == sizeof(kiln_block_q4_0),
              "IQ4_NL and Q4_0 share one layout");

/* ggml's kvalues_iq4nl: the 16 levels of IQ4_NL (and IQ4_XS), ascending. */
extern const int8_t kiln_iq4nl_values[16];

/* Packs 32 levels into a block's 16 qs bytes: weight j in the low nibble
 * of qs[j], weight j + 16 in the high one. Bits above the fourth are
 * dropped (Q5_0 stores them in qh). restrict lets the compiler pack all 16
 * bytes as one vector. */
static inline void kiln_pack_nibbles(const uint8_t *restrict L, uint8_t *restrict qs) {
    for (int j = 0; j < KILN_QK / 2; j++) qs[j] = (uint8_t)((L[j] & 15) | (L[j + 16] & 15) << 4);
}

/* Writes one block of a legacy format from its scale d and 32 levels. */
typedef void (*kiln_legacy_pack_fn)(float d, const uint8_t *L, void *block);

/* The kiln_legacy_pack_fn of nibble blocks (Q4_0, IQ4_NL): levels 0..15.
 * Defined in q4_0.c. */
void kiln_pack_nibble_block(float d, const uint8_t *L, void *block);

/* Quantizes rows to Q4_0 (nmax 8) or Q5_0 (nmax 16), which pick their
 * levels alike, as ggml's reference quantizers do: d = max / -nmax where
 * max is the value of largest magnitude, levels q = x / d + nmax in
 * 0..2*nmax-1. With an imatrix, ggml's quantize_row_q4_0_impl / q5_0_impl:
 * weights qw[j] * sqrt(sigma2 + x[j]^2), sigma2 the row's mean x^2, and the
 * scale searched by kiln_make_qx_quants. `pack` writes each block of
 * block_bytes bytes. Returns the bytes written. Defined in q4_0.c. */
size_t kiln_legacy_quantize(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix, int nmax, kiln_legacy_pack_fn pack,
                            size_t block_bytes);

/* Dequantizes n weights (a multiple of 32) of nibble blocks:
 * weight = d * table[4-bit index]. Defined in q4_0.c. */
void kiln_dequantize_nibble_blocks(const void *src, const int8_t *table, float *dst, int64_t n);

/* Quantizes rows to Q4_1 (nmax 15) or Q5_1 (nmax 31), which pick their
 * levels alike, as ggml's quantize_row_q4_1_ref / q5_1_ref: d = (max -
 * min) / nmax, m = min, levels (x - min) / d + 0.5 truncated. With an
 * imatrix, ggml's quantize_row_q4_1_impl / q5_1_impl: weights qw[j] *
 * sqrt(sigma2 + x[j]^2), sigma2 the row's mean x^2, scale and minimum
 * searched by kiln_make_qkx3_quants. `pack` writes each block (d, m and
 * the levels) of block_bytes bytes. Returns the bytes written. Defined in
 * q4_1.c. */
typedef void (*kiln_legacy1_pack_fn)(float d, float m, const uint8_t *L, void *block);
size_t kiln_legacy1_quantize(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                             const float *imatrix, int nmax, kiln_legacy1_pack_fn pack,
                             size_t block_bytes);

#endif
