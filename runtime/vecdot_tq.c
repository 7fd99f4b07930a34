/* runtime/vecdot_tq.c - TQ1_0 and TQ2_0 against Q8_K activations: their
 * super-blocks unpacked to integer levels, which is all they need, since
 * ggml's AVX2 products (ggml_vec_dot_tq1_0_q8_K / _tq2_0_q8_K) are the
 * Q6_K order (vecdot_korder.c, KILN_COMB_K_Q6) in disguise:
 *
 *   they multiply the unsigned trits t = level + 1 (0..2) with the
 *   activations in eight int32 lanes of 4-weight groups, take the bsums
 *   out of the lanes (lane l minus bsums[2l] + bsums[2l + 1]: the "+1"),
 *   and per super-block do acc[l] = fmaf(y.d * x.d, lane[l], acc[l])
 *   (gcc fuses ggml's mul and add), kiln_hsum8 at the end.
 *
 * So a TQ block unpacks as levels t in 0..2 with every sub-block scale 1
 * and every min 1 (mn = sc, the Q6_K convention for an offset of 1), and
 * d = dmin = the block's d: kiln_kdot_ref and the Q6_K panel kernels then
 * give ggml's bits. The weight order is the dequantizer's (codec/tq.c),
 * which is also the order in which ggml's registers meet the activations. */
#include "vecdot.h"

#include "../core/fp16.h"

/* Trit k (k = 0 the most significant) of a byte packed 5 (or 4) to a
 * byte: the top bits of (q * 3^k mod 256) * 3. */
static inline int8_t trit(uint8_t q, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (int8_t)(((uint8_t)(q * pow3[k]) * 3) >> 8);
}

static void unit_scales(kiln_qblock *out, float d) {
    for (int j = 0; j < 16; j++) out->sc[j] = out->mn[j] = 1;
    out->d[0] = out->dmin = d;
}

void kiln_unpack_tq1_0(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_tq1_0 *b = blocks;
    (void)n;
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 32; m++) out->q[32 * k + m] = trit(b->qs[m], k);
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 16; m++) out->q[160 + 16 * k + m] = trit(b->qs[32 + m], k);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) out->q[240 + 4 * k + j] = trit(b->qh[j], k);
    unit_scales(out, kiln_fp16_to_fp32(b->d));
}

void kiln_unpack_tq2_0(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_tq2_0 *b = blocks;
    (void)n;
    for (int p = 0; p < KILN_QK_K; p++)
        out->q[p] = (int8_t)((b->qs[32 * (p / 128) + p % 32] >> 2 * (p / 32 % 4)) & 3);
    unit_scales(out, kiln_fp16_to_fp32(b->d));
}
