/* runtime/vecdot_legacy.c - reference dot products of the 32-weight
 * formats (Q8_0, Q4_0, Q5_0, IQ4_NL) against Q8_0 activations, and their
 * blocks unpacked to integer levels for the panel kernels.
 *
 * Each dot product is ggml's scalar vec_dot for the type: an exact integer
 * sum per block, then one float update per block, with ggml's operand
 * order (it differs between types and decides the last bit). The panel
 * kernels (vecdot_qgemm.c) repeat these float steps lane by lane. */
#include "vecdot.h"

#include "../core/fp16.h"

#include <string.h>

/* Levels of one 32-weight block, position order. */
static inline void levels_q4_0(const kiln_block_q4_0 *restrict b, int8_t *restrict q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0xF) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

static inline void levels_q5_0(const kiln_block_q5_0 *restrict b, int8_t *restrict q) {
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((b->qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16);
        q[j + 16] = (int8_t)(((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
}

static inline void levels_iq4_nl(const kiln_block_iq4_nl *restrict b, int8_t *restrict q) {
    for (int j = 0; j < 16; j++) {
        q[j] = kiln_iq4nl_values[b->qs[j] & 0xF];
        q[j + 16] = kiln_iq4nl_values[b->qs[j] >> 4];
    }
}

static inline int block_sum(const int8_t *q, const int8_t *a) {
    int s = 0;
    for (int j = 0; j < KILN_QK; j++) s += q[j] * a[j];
    return s;
}

float kiln_vec_dot_q8_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q8_0 *x = w, *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int sumi = block_sum(x[i].qs, y[i].qs);
        sumf += (float)sumi * (kiln_fp16_to_fp32(x[i].d) * kiln_fp16_to_fp32(y[i].d));
    }
    return sumf;
}

float kiln_vec_dot_q4_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q4_0 *x = w;
    const kiln_block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int8_t q[KILN_QK];
        levels_q4_0(&x[i], q);
        int sumi = block_sum(q, y[i].qs);
        sumf += (float)sumi * kiln_fp16_to_fp32(x[i].d) * kiln_fp16_to_fp32(y[i].d);
    }
    return sumf;
}

float kiln_vec_dot_q5_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q5_0 *x = w;
    const kiln_block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int8_t q[KILN_QK];
        levels_q5_0(&x[i], q);
        int sumi = block_sum(q, y[i].qs);
        sumf += (kiln_fp16_to_fp32(x[i].d) * kiln_fp16_to_fp32(y[i].d)) * (float)sumi;
    }
    return sumf;
}

float kiln_vec_dot_iq4_nl(int64_t n, const void *w, const void *act) {
    const kiln_block_iq4_nl *x = w;
    const kiln_block_q8_0 *y = act;
    float sumf = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int8_t q[KILN_QK];
        levels_iq4_nl(&x[i], q);
        const float d = kiln_fp16_to_fp32(y[i].d) * kiln_fp16_to_fp32(x[i].d);
        sumf += d * (float)block_sum(q, y[i].qs);
    }
    return sumf;
}

KILN_UNPACK_CLONES void kiln_unpack_q8_0(const void *block, kiln_qblock *out) {
    const kiln_block_q8_0 *b = block;
    memcpy(out->q, b->qs, KILN_QK);
    out->d = kiln_fp16_to_fp32(b->d);
}

KILN_UNPACK_CLONES void kiln_unpack_q4_0(const void *block, kiln_qblock *out) {
    const kiln_block_q4_0 *b = block;
    levels_q4_0(b, out->q);
    out->d = kiln_fp16_to_fp32(b->d);
}

KILN_UNPACK_CLONES void kiln_unpack_q5_0(const void *block, kiln_qblock *out) {
    const kiln_block_q5_0 *b = block;
    levels_q5_0(b, out->q);
    out->d = kiln_fp16_to_fp32(b->d);
}

KILN_UNPACK_CLONES void kiln_unpack_iq4_nl(const void *block, kiln_qblock *out) {
    const kiln_block_iq4_nl *b = block;
    levels_iq4_nl(b, out->q);
    out->d = kiln_fp16_to_fp32(b->d);
}
