/* runtime/vecdot_kbits.h - the k-quants' levels and scales taken out of
 * their GGUF bit layouts, shared by the unpackers (vecdot_k.c, which store
 * them into a kiln_qblock) and the direct decode kernels
 * (vecdot_kdirect.c, which keep them in registers). Internal to the
 * runtime; include after vecdot.h.
 *
 * Levels come as eight 256-bit registers, register c holding weights
 * 32c .. 32c + 31 as bytes, with the same values as vecdot_k.c's scalar
 * unpackers (Q3_K's signed -4..3, the others unsigned). */
#ifndef KILN_VECDOT_KBITS_H
#define KILN_VECDOT_KBITS_H

#include <stdint.h>
#include <string.h>

#include "../codec/blocks.h"

/* 12 bytes as three little-endian 32-bit words, on any host (a plain copy
 * on little-endian ones: gcc leaves the byte loop as twelve loads and
 * shifts, which a one-token decode of Q4_K felt). */
static inline void kiln_kbits_words(const uint8_t *p, uint32_t u[3]) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(u, p, 12);
#else
    for (int i = 0; i < 3; i++)
        u[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
#endif
}

/* Q4_K / Q5_K's 12 packed scale bytes (kiln_kscale_get's layout), four
 * sub-blocks at a time in little-endian 32-bit words: byte j of sc[h]
 * (mn[h]) is sub-block 4h + j's scale (min). Bytes 0..3 hold scales 0..3
 * and the top bits of scales 4..7, bytes 4..7 the same for the mins,
 * bytes 8..11 the low nibbles of scales (low) and mins (high) 4..7. */
static inline void kiln_kscale_words(const uint8_t *scales, uint32_t sc[2], uint32_t mn[2]) {
    uint32_t u[3];
    kiln_kbits_words(scales, u);
    sc[0] = u[0] & 0x3F3F3F3F;
    mn[0] = u[1] & 0x3F3F3F3F;
    sc[1] = (u[2] & 0x0F0F0F0F) | (u[0] >> 6 & 0x03030303) << 4;
    mn[1] = (u[2] >> 4 & 0x0F0F0F0F) | (u[1] >> 6 & 0x03030303) << 4;
}

/* Q3_K's 16 6-bit scales (stored + 32) from its 12 bytes, as bytes
 * 4h + j of w[h] = scale 4h + j + 32: low nibbles in bytes 0..7 (scale j
 * and j + 8 share byte j % 8), the top two bits of scale j in byte
 * 8 + j % 4 at bit 2 * (j / 4). */
static inline void kiln_q3k_scale_words(const uint8_t *scales, uint32_t w[4]) {
    uint32_t u[3];
    kiln_kbits_words(scales, u);
    for (int h = 0; h < 4; h++)
        w[h] = (u[h % 2] >> (4 * (h / 2)) & 0x0F0F0F0F) | (u[2] >> (2 * h) & 0x03030303) << 4;
}

#ifdef __x86_64__
#include <immintrin.h>

#define KILN_KBITS static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Field k (bits k..k+width-1) of every byte: 16-bit shifts carry bits
 * across bytes, the mask drops them again. */
KILN_KBITS __m256i kiln_kbits_field(__m256i v, int k, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, k), _mm256_set1_epi8((char)mask));
}

KILN_KBITS __m256i kiln_kbits_load(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}

/* weight 128h + 32s + l: bits 2s of qs[32h + l] */
KILN_KBITS void kiln_kbits_q2_k(const kiln_block_q2_k *b, __m256i q[8]) {
    for (int h = 0; h < 2; h++) {
        const __m256i v = kiln_kbits_load(b->qs + 32 * h);
        for (int s = 0; s < 4; s++) q[4 * h + s] = kiln_kbits_field(v, 2 * s, 3);
    }
}

/* as Q2_K, minus 4 where bit 4h + s of hmask[l] is clear */
KILN_KBITS void kiln_kbits_q3_k(const kiln_block_q3_k *b, __m256i q[8]) {
    const __m256i hm = kiln_kbits_load(b->hmask), four = _mm256_set1_epi8(4);
    for (int h = 0; h < 2; h++) {
        const __m256i v = kiln_kbits_load(b->qs + 32 * h);
        for (int s = 0; s < 4; s++) {
            const __m256i hi = _mm256_slli_epi16(kiln_kbits_field(hm, 4 * h + s, 1), 2);
            q[4 * h + s] = _mm256_sub_epi8(_mm256_or_si256(kiln_kbits_field(v, 2 * s, 3), hi), four);
        }
    }
}

/* Q4_K (qh NULL) and Q5_K: weight 64c + l is the low nibble of
 * qs[32c + l], 64c + 32 + l the high one; bit 2c (2c + 1) of qh[l] is
 * their bit 4 */
KILN_KBITS void kiln_kbits_q4q5_k(const uint8_t *qs, const uint8_t *qh, __m256i q[8]) {
    const __m256i h = qh ? kiln_kbits_load(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i v = kiln_kbits_load(qs + 32 * c);
        __m256i lo = kiln_kbits_field(v, 0, 0xF), hi = kiln_kbits_field(v, 4, 0xF);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(kiln_kbits_field(h, 2 * c, 1), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(kiln_kbits_field(h, 2 * c + 1, 1), 4));
        }
        q[2 * c] = lo;
        q[2 * c + 1] = hi;
    }
}

/* Q6_K levels 0..63: four bits from ql, two from qh */
KILN_KBITS void kiln_kbits_q6_k(const kiln_block_q6_k *b, __m256i q[8]) {
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = kiln_kbits_load(b->ql + 64 * h), l1 = kiln_kbits_load(b->ql + 64 * h + 32);
        const __m256i qh = kiln_kbits_load(b->qh + 32 * h);
        const __m256i lows[4] = {kiln_kbits_field(l0, 0, 0xF), kiln_kbits_field(l1, 0, 0xF),
                                 kiln_kbits_field(l0, 4, 0xF), kiln_kbits_field(l1, 4, 0xF)};
        for (int s = 0; s < 4; s++)
            q[4 * h + s] = _mm256_or_si256(lows[s], _mm256_slli_epi16(kiln_kbits_field(qh, 2 * s, 3), 4));
    }
}
#endif

#endif
