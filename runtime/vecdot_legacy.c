/* runtime/vecdot_legacy.c - reference dot products of the 32-weight
 * formats (Q8_0, Q4_0, Q5_0, IQ4_NL) against Q8_0 activations, and their
 * blocks unpacked to integer levels for the panel kernels.
 *
 * Each dot product is ggml's scalar vec_dot for the type: an exact integer
 * sum per block, then one float update per block, with ggml's operand
 * order (it differs between types and decides the last bit). Q8_0 is the
 * exception: it has ggml's x86 order (eight lanes, see below), the one
 * llama.cpp's x86 builds actually compute. The panel
 * kernels (vecdot_qgemm.c) repeat these float steps lane by lane. */
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"

#include <math.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

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

/* Q8_0 follows ggml's x86 (AVX2) vec_dot, which is also the order of
 * llamafile's tinyBLAS for Q8_0 batches, not the generic scalar one:
 * eight float lanes; in every block lane l takes the exact integer sum of
 * the four products of weights 4l..4l+3 and does acc[l] = fmaf(dx * dy,
 * (float)sum, acc[l]); at the end hsum_float_8's tree: the two 128-bit
 * halves added (l + l+4), then lanes 0+2 and 1+3, then those two. */
float kiln_vec_dot_q8_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q8_0 *x = w, *y = act;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        const float d = kiln_fp16_to_fp32(x[i].d) * kiln_fp16_to_fp32(y[i].d);
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s += x[i].qs[j] * y[i].qs[j];
            acc[l] = fmaf(d, (float)s, acc[l]);
        }
    }
    return kiln_hsum8(acc);
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

/* ---- unpacking for the panel kernels ----------------------------------- */

#ifdef __x86_64__
/* 16 packed bytes -> 32 levels: low nibbles, then high nibbles. */
AVX2 static inline __m256i nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0xF);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Bit j of the 32-bit qh as 0x10 in byte j (Q5_0's fifth bit). */
AVX2 static inline __m256i fifth_bits(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

AVX2 static void unpack_avx2(uint32_t type, const void *blocks, int n, kiln_qblock *out) {
    const __m128i nl = _mm_loadu_si128((const __m128i *)kiln_iq4nl_values);
    const __m256i table = _mm256_set_m128i(nl, nl);
    for (int i = 0; i < n; i++) {
        __m256i q;
        kiln_half d;
        if (type == KILN_Q4_0) {
            const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)blocks + i;
            q = _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8));
            d = b->d;
        } else if (type == KILN_Q5_0) {
            const kiln_block_q5_0 *b = (const kiln_block_q5_0 *)blocks + i;
            q = _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), fifth_bits(b->qh)), _mm256_set1_epi8(16));
            d = b->d;
        } else {
            const kiln_block_iq4_nl *b = (const kiln_block_iq4_nl *)blocks + i;
            q = _mm256_shuffle_epi8(table, nibbles(b->qs));
            d = b->d;
        }
        _mm256_storeu_si256((__m256i *)(out->q + 32 * i), q);
        out->d[i] = kiln_fp16_to_fp32(d);
    }
}
#endif

static void unpack_scalar(uint32_t type, const void *blocks, int n, kiln_qblock *out) {
    for (int i = 0; i < n; i++) {
        if (type == KILN_Q4_0) {
            const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)blocks + i;
            levels_q4_0(b, out->q + 32 * i);
            out->d[i] = kiln_fp16_to_fp32(b->d);
        } else if (type == KILN_Q5_0) {
            const kiln_block_q5_0 *b = (const kiln_block_q5_0 *)blocks + i;
            levels_q5_0(b, out->q + 32 * i);
            out->d[i] = kiln_fp16_to_fp32(b->d);
        } else {
            const kiln_block_iq4_nl *b = (const kiln_block_iq4_nl *)blocks + i;
            levels_iq4_nl(b, out->q + 32 * i);
            out->d[i] = kiln_fp16_to_fp32(b->d);
        }
    }
}

static void unpack(uint32_t type, const void *blocks, int n, kiln_qblock *out) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX2) {
        unpack_avx2(type, blocks, n, out);
        return;
    }
#endif
    unpack_scalar(type, blocks, n, out);
}

void kiln_unpack_q8_0(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_q8_0 *b = blocks;
    for (int i = 0; i < n; i++) {
        memcpy(out->q + 32 * i, b[i].qs, KILN_QK);
        out->d[i] = kiln_fp16_to_fp32(b[i].d);
    }
}

void kiln_unpack_q4_0(const void *blocks, int n, kiln_qblock *out) {
    unpack(KILN_Q4_0, blocks, n, out);
}

void kiln_unpack_q5_0(const void *blocks, int n, kiln_qblock *out) {
    unpack(KILN_Q5_0, blocks, n, out);
}

void kiln_unpack_iq4_nl(const void *blocks, int n, kiln_qblock *out) {
    unpack(KILN_IQ4_NL, blocks, n, out);
}
