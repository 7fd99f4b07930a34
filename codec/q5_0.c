/* codec/q5_0.c - Q5_0: 32 weights as 5-bit levels times one fp16 scale
 * (block layout in blocks_legacy.h).
 *
 * The quantizer is Q4_0's with nmax = 16 (kiln_legacy_quantize in q4_0.c,
 * ggml's quantize_row_q5_0_ref / q5_0_impl); this file only splits each
 * level into a low nibble and a fifth bit, and back. */
#include "blocks.h"
#include "quants.h"

#include "../core/cpu.h"
#include "../core/fp16.h"


/* A kiln_legacy_pack_fn: low nibbles as in Q4_0, bit 4 of level j in bit j
 * of qh (stored little-endian byte by byte). */
static void q5_0_pack(float d, const uint8_t *L, void *dst) {
    kiln_block_q5_0 *y = dst;
    uint32_t qh = 0;
    y->d = kiln_fp32_to_fp16(d);
    kiln_pack_nibbles(L, y->qs);
    for (int j = 0; j < KILN_QK; j++) qh |= (uint32_t)(L[j] >> 4) << j;
    y->qh[0] = (uint8_t)qh;
    y->qh[1] = (uint8_t)(qh >> 8);
    y->qh[2] = (uint8_t)(qh >> 16);
    y->qh[3] = (uint8_t)(qh >> 24);
}

static inline uint32_t q5_0_qh(const kiln_block_q5_0 *b) {
    return b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 | (uint32_t)b->qh[3] << 24;
}

static void q5_0_dequant_scalar(const kiln_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        float d = kiln_fp16_to_fp32(x[i].d);
        uint32_t qh = q5_0_qh(&x[i]);
        for (int j = 0; j < KILN_QK / 2; j++) {
            int q0 = (x[i].qs[j] & 15) | ((qh >> j) & 1) << 4;
            int q1 = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            y[j] = (q0 - 16) * d;
            y[j + 16] = (q1 - 16) * d;
        }
    }
}

#ifdef KILN_X86
/* The 32 signed levels (q - 16) of a block as bytes in weight order: low
 * half in the first register, high half in the second. Bit j of qh is
 * spread to byte j by broadcasting qh's byte j/8 and testing bit j%8. */
KILN_AVX2 static inline void q5_0_levels(const kiln_block_q5_0 *b, __m128i *lo, __m128i *hi) {
    const __m128i low = _mm_set1_epi8(15), sixteen = _mm_set1_epi8(16);
    const __m128i bits = _mm_set1_epi64x((long long)0x8040201008040201ull);
    __m128i qh = _mm_set1_epi32((int)q5_0_qh(b));
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m128i h0 = _mm_shuffle_epi8(qh, _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    __m128i h1 = _mm_shuffle_epi8(qh, _mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    h0 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h0, bits), bits), sixteen);
    h1 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h1, bits), bits), sixteen);
    *lo = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(q, low), h0), sixteen);
    *hi = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), low), h1), sixteen);
}

KILN_AVX2 static void q5_0_dequant_avx2(const kiln_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        __m128i v[2];
        q5_0_levels(&x[i], &v[0], &v[1]);
        for (int h = 0; h < 2; h++) {
            __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[h]));
            __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v[h], 8)));
            _mm256_storeu_ps(y + 16 * h, _mm256_mul_ps(f0, d));
            _mm256_storeu_ps(y + 16 * h + 8, _mm256_mul_ps(f1, d));
        }
    }
}

KILN_AVX512 static void q5_0_dequant_avx512(const kiln_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        __m128i lo, hi;
        q5_0_levels(&x[i], &lo, &hi);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
    }
}
#endif

void kiln_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    KILN_SIMD_PICK(q5_0_dequant)(src, dst, n / KILN_QK);
}

void kiln_quantize_row_q5_0_ref(const float *src, void *dst, int64_t n) {
    kiln_legacy_quantize(src, dst, 1, n, NULL, 16, q5_0_pack, sizeof(kiln_block_q5_0));
}

size_t kiln_quantize_q5_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_legacy_quantize(src, dst, nrows, n_per_row, imatrix, 16, q5_0_pack,
                                sizeof(kiln_block_q5_0));
}
