/* runtime/vecdot_k.c - reference dot products of the k-quants (Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K) against Q8_K activations, and their super-blocks
 * unpacked to integer levels and scales.
 *
 * ggml's scalar k-quant dot products differ in their float steps, which
 * kiln copies exactly (kiln_kdot_ref):
 *   Q2_K      one integer sum and one bsums-times-mins sum per super-block,
 *             sumf += dall * isum - dmin * summs;
 *   Q3_K Q6_K eight integer lanes aux32[l] (weights at position l mod 8)
 *             per super-block, sums[l] += d * aux32[l], then
 *             sumf = 0 + sums[0] + ... + sums[7];
 *   Q4_K Q5_K the same lanes, plus sumf -= dmin * sumi per super-block.
 * The integer sums are exact, so computing them from unpacked levels
 * (weight = d * sc * q - dmin * mn) gives ggml's integers. */
#include "vecdot.h"

#include "../core/fp16.h"
#include "../quantize/kscales.h"

#include <string.h>

KILN_UNPACK_CLONES void kiln_unpack_q2_k(const void *block, kiln_qblock *out) {
    /* a local copy cannot alias *out: lets the loops vectorize */
    const kiln_block_q2_k blk = *(const kiln_block_q2_k *)block, *b = &blk;
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++) {
            int8_t *q = out->q + 128 * h + 32 * s;
            const uint8_t *src = b->qs + 32 * h;
            for (int l = 0; l < 32; l++) q[l] = (int8_t)((src[l] >> (2 * s)) & 3);
        }
    for (int j = 0; j < 16; j++) {
        out->sc[j] = b->scales[j] & 0xF;
        out->mn[j] = b->scales[j] >> 4;
    }
    out->d = kiln_fp16_to_fp32(b->d);
    out->dmin = kiln_fp16_to_fp32(b->dmin);
}

KILN_UNPACK_CLONES void kiln_unpack_q3_k(const void *block, kiln_qblock *out) {
    /* a local copy cannot alias *out: lets the loops vectorize */
    const kiln_block_q3_k blk = *(const kiln_block_q3_k *)block, *b = &blk;
    /* weight 128h + 32s + l: bits 2s of qs[32h + l], and bit 4h + s of
     * hmask[l] clear means 4 is subtracted */
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++) {
            int8_t *q = out->q + 128 * h + 32 * s;
            const uint8_t *src = b->qs + 32 * h, *hm = b->hmask;
            const int bit = 4 * h + s;
            for (int l = 0; l < 32; l++)
                q[l] = (int8_t)(((src[l] >> (2 * s)) & 3) - 4 + 4 * ((hm[l] >> bit) & 1));
        }
    /* 6-bit scales: low nibbles in bytes 0..7 (j and j + 8 share one),
     * high bit pairs of scale j in byte 8 + j % 4 at bit 2 * (j / 4) */
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? b->scales[j] & 0xF : b->scales[j - 8] >> 4;
        int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        out->sc[j] = (int16_t)((lo | hi << 4) - 32);
        out->mn[j] = 0;
    }
    out->d = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

/* Q4_K and Q5_K: a 6-bit scale and min per 32 weights, given to both of
 * its 16-weight halves. */
static inline void unpack_kscales(kiln_half d, kiln_half dmin, const uint8_t *scales,
                                  kiln_qblock *out) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kiln_kscale_get(j, scales, &sc, &m);
        out->sc[2 * j] = out->sc[2 * j + 1] = sc;
        out->mn[2 * j] = out->mn[2 * j + 1] = m;
    }
    out->d = kiln_fp16_to_fp32(d);
    out->dmin = kiln_fp16_to_fp32(dmin);
}

/* Weight 64c + l is the low nibble of qs[32c + l], 64c + 32 + l the high
 * one; Q5_K adds bit 2c (2c + 1) of qh[l] as bit 4. */
KILN_UNPACK_CLONES void kiln_unpack_q4_k(const void *block, kiln_qblock *out) {
    /* a local copy cannot alias *out: lets the loops vectorize */
    const kiln_block_q4_k blk = *(const kiln_block_q4_k *)block;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            out->q[64 * c + l] = (int8_t)(blk.qs[32 * c + l] & 0xF);
            out->q[64 * c + 32 + l] = (int8_t)(blk.qs[32 * c + l] >> 4);
        }
    unpack_kscales(blk.d, blk.dmin, blk.scales, out);
}

KILN_UNPACK_CLONES void kiln_unpack_q5_k(const void *block, kiln_qblock *out) {
    const kiln_block_q5_k blk = *(const kiln_block_q5_k *)block;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            out->q[64 * c + l] = (int8_t)((blk.qs[32 * c + l] & 0xF) | ((blk.qh[l] >> (2 * c)) & 1) << 4);
            out->q[64 * c + 32 + l] = (int8_t)((blk.qs[32 * c + l] >> 4) | ((blk.qh[l] >> (2 * c + 1)) & 1) << 4);
        }
    unpack_kscales(blk.d, blk.dmin, blk.scales, out);
}

KILN_UNPACK_CLONES void kiln_unpack_q6_k(const void *block, kiln_qblock *out) {
    /* a local copy cannot alias *out: lets the loops vectorize */
    const kiln_block_q6_k blk = *(const kiln_block_q6_k *)block, *b = &blk;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *q = out->q + 128 * h;
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
    for (int j = 0; j < 16; j++) {
        out->sc[j] = b->scales[j];
        out->mn[j] = 0;
    }
    out->d = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

float kiln_kdot_ref(int64_t n, const void *w, size_t block_bytes, kiln_unpack_fn unpack,
                    kiln_combine comb, const kiln_block_q8_k *y) {
    const uint8_t *x = w;
    float sums[8] = {0};
    float sumf = 0;
    kiln_qblock b;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += block_bytes) {
        unpack(x, &b);
        int32_t aux32[8] = {0};
        for (int p = 0; p < KILN_QK_K; p++) aux32[p % 8] += b.sc[p / 16] * (b.q[p] * y[i].qs[p]);
        int32_t summ = 0;
        for (int j = 0; j < 16; j++) summ += y[i].bsums[j] * b.mn[j];
        int32_t isum = 0;
        for (int l = 0; l < 8; l++) isum += aux32[l];

        switch (comb) {
        case KILN_COMB_Q2_K: {
            const float dall = y[i].d * b.d, dmin = y[i].d * b.dmin;
            sumf += dall * (float)isum - dmin * (float)summ;
            break;
        }
        case KILN_COMB_LANES_MIN:
            sumf -= (b.dmin * y[i].d) * (float)summ;
            /* fall through */
        case KILN_COMB_LANES: {
            const float d = b.d * y[i].d;
            for (int l = 0; l < 8; l++) sums[l] += d * (float)aux32[l];
            break;
        }
        case KILN_COMB_IQ2:
            sumf += (b.d * y[i].d) * (float)isum;
            break;
        default:
            break;
        }
    }
    if (comb == KILN_COMB_LANES || comb == KILN_COMB_LANES_MIN)
        for (int l = 0; l < 8; l++) sumf += sums[l];
    if (comb == KILN_COMB_IQ2) sumf = 0.125f * sumf;
    return sumf;
}

float kiln_vec_dot_q2_k(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_q2_k), kiln_unpack_q2_k, KILN_COMB_Q2_K, act);
}

float kiln_vec_dot_q3_k(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_q3_k), kiln_unpack_q3_k, KILN_COMB_LANES, act);
}

float kiln_vec_dot_q4_k(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_q4_k), kiln_unpack_q4_k, KILN_COMB_LANES_MIN, act);
}

float kiln_vec_dot_q5_k(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_q5_k), kiln_unpack_q5_k, KILN_COMB_LANES_MIN, act);
}

float kiln_vec_dot_q6_k(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_q6_k), kiln_unpack_q6_k, KILN_COMB_LANES, act);
}
