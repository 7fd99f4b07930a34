/* runtime/vecdot_k.c - the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and
 * IQ4_XS (IQ4_NL's table under Q3_K-like signed scales): their
 * super-blocks unpacked to integer levels and scales (weight = d * sc * q
 * - dmin * mn), and their reference dot products against Q8_K
 * activations in ggml's vec_dot order (vecdot_korder.c holds the orders).
 * The integer sums are exact, so computing them from unpacked levels gives
 * ggml's integers. */
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "vecdot_kbits.h"

#ifdef __x86_64__
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

/* ---- unpacking, portable ------------------------------------------------ */

static void q2_k_scalar(const kiln_block_q2_k *b, kiln_qblock *out) {
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++)
                out->q[128 * h + 32 * s + l] = (int8_t)((b->qs[32 * h + l] >> (2 * s)) & 3);
}

/* weight 128h + 32s + l: bits 2s of qs[32h + l]; bit 4h + s of hmask[l]
 * clear means 4 is subtracted */
static void q3_k_scalar(const kiln_block_q3_k *b, kiln_qblock *out) {
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++)
                out->q[128 * h + 32 * s + l] = (int8_t)(((b->qs[32 * h + l] >> (2 * s)) & 3) - 4 +
                                                        4 * ((b->hmask[l] >> (4 * h + s)) & 1));
}

/* weight 64c + l: low nibble of qs[32c + l], 64c + 32 + l: the high one;
 * with qh (Q5_K), bit 2c (2c + 1) of qh[l] is their bit 4 */
static void kscale_levels_scalar(const uint8_t *qs, const uint8_t *qh, kiln_qblock *out) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            out->q[64 * c + l] = (int8_t)lo;
            out->q[64 * c + 32 + l] = (int8_t)hi;
        }
}

static void q6_k_scalar(const kiln_block_q6_k *b, kiln_qblock *out) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *q = out->q + 128 * h;
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            q[l + 32] = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            q[l + 64] = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            q[l + 96] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

/* ---- unpacking, AVX2 (the same integers; vecdot_kbits.h) ------------- */

#ifdef __x86_64__
AVX2 static void store8(const __m256i q[8], kiln_qblock *out) {
    for (int c = 0; c < 8; c++) _mm256_storeu_si256((__m256i *)(out->q + 32 * c), q[c]);
}

AVX2 static void q2_k_avx2(const kiln_block_q2_k *b, kiln_qblock *out) {
    __m256i q[8];
    kiln_kbits_q2_k(b, q);
    store8(q, out);
}

AVX2 static void q3_k_avx2(const kiln_block_q3_k *b, kiln_qblock *out) {
    __m256i q[8];
    kiln_kbits_q3_k(b, q);
    store8(q, out);
}

AVX2 static void kscale_levels_avx2(const uint8_t *qs, const uint8_t *qh, kiln_qblock *out) {
    __m256i q[8];
    kiln_kbits_q4q5_k(qs, qh, q);
    store8(q, out);
}

AVX2 static void q6_k_avx2(const kiln_block_q6_k *b, kiln_qblock *out) {
    __m256i q[8];
    kiln_kbits_q6_k(b, q);
    store8(q, out);
}

#define HAVE_AVX2 (kiln_simd() >= KILN_SIMD_AVX2)
#else
#define HAVE_AVX2 false
#define q2_k_avx2 q2_k_scalar
#define q3_k_avx2 q3_k_scalar
#define kscale_levels_avx2 kscale_levels_scalar
#define q6_k_avx2 q6_k_scalar
#endif

/* ---- the exported unpackers: levels, then scales ----------------------- */

void kiln_unpack_q2_k(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q2_k *b = blocks;
    (void)n;
    if (HAVE_AVX2) q2_k_avx2(b, out);
    else q2_k_scalar(b, out);
    for (int j = 0; j < 16; j++) {
        out->sc[j] = b->scales[j] & 0xF;
        out->mn[j] = b->scales[j] >> 4;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = kiln_fp16_to_fp32(b->dmin);
}

void kiln_unpack_q3_k(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q3_k *b = blocks;
    (void)n;
    if (HAVE_AVX2) q3_k_avx2(b, out);
    else q3_k_scalar(b, out);
    uint32_t w[4];
    kiln_q3k_scale_words(b->scales, w);
    for (int j = 0; j < 16; j++) {
        out->sc[j] = (int16_t)((int)(w[j / 4] >> (8 * (j % 4)) & 0xFF) - 32);
        out->mn[j] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

/* Q4_K and Q5_K: a 6-bit scale and min per 32 weights, given to both of
 * its 16-weight halves. */
static void kscales(kiln_half d, kiln_half dmin, const uint8_t *scales, kiln_qblock *out) {
    uint32_t sc[2], mn[2];
    kiln_kscale_words(scales, sc, mn);
    for (int j = 0; j < 8; j++) {
        out->sc[2 * j] = out->sc[2 * j + 1] = (int16_t)(sc[j / 4] >> (8 * (j % 4)) & 0xFF);
        out->mn[2 * j] = out->mn[2 * j + 1] = (int16_t)(mn[j / 4] >> (8 * (j % 4)) & 0xFF);
    }
    out->d[0] = kiln_fp16_to_fp32(d);
    out->dmin = kiln_fp16_to_fp32(dmin);
}

void kiln_unpack_q4_k(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q4_k *b = blocks;
    (void)n;
    if (HAVE_AVX2) kscale_levels_avx2(b->qs, NULL, out);
    else kscale_levels_scalar(b->qs, NULL, out);
    kscales(b->d, b->dmin, b->scales, out);
}

void kiln_unpack_q5_k(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q5_k *b = blocks;
    (void)n;
    if (HAVE_AVX2) kscale_levels_avx2(b->qs, b->qh, out);
    else kscale_levels_scalar(b->qs, b->qh, out);
    kscales(b->d, b->dmin, b->scales, out);
}

void kiln_unpack_q6_k(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q6_k *b = blocks;
    (void)n;
    if (HAVE_AVX2) q6_k_avx2(b, out);
    else q6_k_scalar(b, out);
    /* the levels' offset of 32 as a min (see vecdot.h) */
    for (int j = 0; j < 16; j++) {
        out->sc[j] = b->scales[j];
        out->mn[j] = (int16_t)(32 * b->scales[j]);
    }
    out->d[0] = out->dmin = kiln_fp16_to_fp32(b->d);
}


/* IQ4_XS: the table values as levels, each 32-weight sub-block's signed
 * scale ls - 32 given to both of its 16-weight halves, no mins. ggml's
 * AVX2 vec_dot sums exactly these integers per 4-weight lane (KILN_COMB_K). */
void kiln_unpack_iq4_xs(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq4_xs *b = blocks;
    (void)n;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        const uint8_t *qs = b->qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            out->q[32 * ib + j] = kiln_iq4nl_values[qs[j] & 0xF];
            out->q[32 * ib + 16 + j] = kiln_iq4nl_values[qs[j] >> 4];
        }
        const int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((b->scales_h >> 2 * ib) & 3) << 4;
        out->sc[2 * ib] = out->sc[2 * ib + 1] = (int16_t)(ls - 32);
        out->mn[2 * ib] = out->mn[2 * ib + 1] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}
