/* runtime/vecdot_legacy.c - reference dot products of the 32-weight
 * formats (Q8_0, Q4_0, Q5_0, IQ4_NL) against Q8_0 activations and Q4_1,
 * Q5_1 against Q8_1, and the Q8_0 ones' blocks unpacked to integer levels
 * for the panel kernels.
 *
 * Each dot product is one of the orders llama.cpp's x86 (AVX2 / AVX-512)
 * builds compute, exact integer sums then ggml's float steps:
 *
 *   lanes8  eight float lanes, lane l taking the 4-weight sums of weights
 *           4l..4l+3 of every block with one fmaf by dx * dy, then
 *           hsum_float_8: ggml_vec_dot of Q8_0, Q4_0 and Q5_0, and
 *           llamafile's tinyBLAS_Q0_AVX (ggml_mul_mat of 2+ tokens) of all
 *           four types;
 *   pairs   IQ4_NL's vec_dot: blocks in pairs into two such lane sets,
 *           added lane by lane before the hsum, an odd last block added
 *           after it as d * sum;
 *   fma     one fmaf per block of its whole sum by dx * dy: the gemv and
 *           gemm kernels of the Q4_0 / IQ4_NL matrices ggml-cpu repacks
 *           (q4_0_8x8, iq4_nl_8x8: 2-D weights and experts of n_out % 8
 *           == 0 on AVX2 CPUs).
 *
 * Which product takes which order is the table's business (kernels.c,
 * matmul.c). The panel kernels (vecdot_qgemm.c) and the direct ones
 * (vecdot_q0direct.c) repeat these float steps lane by lane. */
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

/* The levels of block i of a row of `type` into q; returns its scale. */
static float block_levels(uint32_t type, const void *w, int64_t i, int8_t q[KILN_QK]) {
    switch (type) {
    case KILN_Q4_0:
        levels_q4_0((const kiln_block_q4_0 *)w + i, q);
        return kiln_fp16_to_fp32(((const kiln_block_q4_0 *)w)[i].d);
    case KILN_Q5_0:
        levels_q5_0((const kiln_block_q5_0 *)w + i, q);
        return kiln_fp16_to_fp32(((const kiln_block_q5_0 *)w)[i].d);
    case KILN_IQ4_NL:
        levels_iq4_nl((const kiln_block_iq4_nl *)w + i, q);
        return kiln_fp16_to_fp32(((const kiln_block_iq4_nl *)w)[i].d);
    default:
        memcpy(q, ((const kiln_block_q8_0 *)w)[i].qs, KILN_QK);
        return kiln_fp16_to_fp32(((const kiln_block_q8_0 *)w)[i].d);
    }
}

/* One block into eight lanes: acc[l] = fmaf(d, sum of weights 4l..4l+3, acc[l]). */
static inline void lanes_step(float acc[8], const int8_t *q, const int8_t *a, float d) {
    for (int l = 0; l < 8; l++) {
        int s = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++) s += q[j] * a[j];
        acc[l] = fmaf(d, (float)s, acc[l]);
    }
}

static float dot_lanes8(uint32_t type, int64_t n, const void *w, const kiln_block_q8_0 *y) {
    float acc[8] = {0};
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int8_t q[KILN_QK];
        const float dx = block_levels(type, w, i, q);
        lanes_step(acc, q, y[i].qs, dx * kiln_fp16_to_fp32(y[i].d));
    }
    return kiln_hsum8(acc);
}

static float dot_fma(uint32_t type, int64_t n, const void *w, const kiln_block_q8_0 *y) {
    float acc = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++) {
        int8_t q[KILN_QK];
        const float dx = block_levels(type, w, i, q);
        acc = fmaf((float)block_sum(q, y[i].qs), dx * kiln_fp16_to_fp32(y[i].d), acc);
    }
    return acc;
}

/* Q8_0 (also the order of llamafile's tinyBLAS for Q8_0 batches). */
float kiln_vec_dot_q8_0(int64_t n, const void *w, const void *act) {
    return dot_lanes8(KILN_Q8_0, n, w, act);
}

float kiln_vec_dot_q4_0(int64_t n, const void *w, const void *act) {
    return dot_lanes8(KILN_Q4_0, n, w, act);
}

float kiln_vec_dot_q5_0(int64_t n, const void *w, const void *act) {
    return dot_lanes8(KILN_Q5_0, n, w, act);
}

/* IQ4_NL's vec_dot: blocks 2k into lanes a, 2k+1 into lanes b, an odd
 * last block on its own after the hsum (ggml's scalar tail). */
float kiln_vec_dot_iq4_nl(int64_t n, const void *w, const void *act) {
    const kiln_block_q8_0 *y = act;
    const int64_t nb = n / KILN_QK;
    float a[8] = {0}, b[8] = {0};
    int8_t q[KILN_QK];
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        float dx = block_levels(KILN_IQ4_NL, w, i, q);
        lanes_step(a, q, y[i].qs, kiln_fp16_to_fp32(y[i].d) * dx);
        dx = block_levels(KILN_IQ4_NL, w, i + 1, q);
        lanes_step(b, q, y[i + 1].qs, kiln_fp16_to_fp32(y[i + 1].d) * dx);
    }
    for (int l = 0; l < 8; l++) a[l] += b[l];
    float sumf = kiln_hsum8(a);
    if (i < nb) {
        const float dx = block_levels(KILN_IQ4_NL, w, i, q);
        sumf += (kiln_fp16_to_fp32(y[i].d) * dx) * (float)block_sum(q, y[i].qs);
    }
    return sumf;
}

float kiln_vec_dot_iq4_nl_tiny(int64_t n, const void *w, const void *act) {
    return dot_lanes8(KILN_IQ4_NL, n, w, act);
}

float kiln_vec_dot_q4_0_gemv(int64_t n, const void *w, const void *act) {
    return dot_fma(KILN_Q4_0, n, w, act);
}

float kiln_vec_dot_iq4_nl_gemv(int64_t n, const void *w, const void *act) {
    return dot_fma(KILN_IQ4_NL, n, w, act);
}

/* Q4_1 and Q5_1 against Q8_1 follow ggml's x86 AVX2 vec_dot (the one its
 * AVX-512 builds compile; llamafile's tinyBLAS and the repacked kernels
 * leave these types alone): Q8_0's eight lanes over unsigned levels,
 * acc[l] = fmaf(dx * dy, (float)sum, acc[l]), while the minimum's share,
 * m * s, goes to one float added block by block; the result is
 * kiln_hsum8(acc) + that sum. `levels` gives a block's 32 levels. */
static float dot_q8_1(int64_t n, const uint8_t *w, size_t block_bytes, const kiln_block_q8_1 *y,
                      void (*levels)(const uint8_t *block, int8_t *q)) {
    float acc[8] = {0}, summs = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++, w += block_bytes) {
        const kiln_half *dm = (const kiln_half *)w; /* d, m lead both blocks */
        int8_t q[KILN_QK];
        levels(w, q);
        summs += kiln_fp16_to_fp32(dm[1]) * kiln_fp16_to_fp32(y[i].s);
        const float d = kiln_fp16_to_fp32(dm[0]) * kiln_fp16_to_fp32(y[i].d);
        for (int l = 0; l < 8; l++) {
            int s = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s += q[j] * y[i].qs[j];
            acc[l] = fmaf(d, (float)s, acc[l]);
        }
    }
    return kiln_hsum8(acc) + summs;
}

static void levels_q4_1(const uint8_t *block, int8_t *q) {
    const kiln_block_q4_1 *b = (const kiln_block_q4_1 *)block;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(b->qs[j] & 0xF);
        q[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
}

static void levels_q5_1(const uint8_t *block, int8_t *q) {
    const kiln_block_q5_1 *b = (const kiln_block_q5_1 *)block;
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0xF) | ((qh >> j) & 1) << 4);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
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

/* ---- Q4_1 / Q5_1 dot products, dispatched by SIMD level ---- */

#ifdef __x86_64__
/* The same operations as ggml's AVX2 loop, hence dot_q8_1's bits: the
 * levels as unsigned bytes (low nibbles = weights 0..15, high = 16..31,
 * Q5_1's fifth bit or'ed in), vpmaddubsw + vpmaddwd give lane l the exact
 * sum over weights 4l..4l+3 (|pair| <= 2 * 31 * 128, no saturation), one
 * fma per block with d = dx * dy broadcast. */
AVX2 static float dot_q8_1_avx2(int64_t n, const uint8_t *w, size_t block_bytes, bool fifth,
                                const kiln_block_q8_1 *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < n / KILN_QK; i++, w += block_bytes) {
        const kiln_half *dm = (const kiln_half *)w;
        summs += kiln_fp16_to_fp32(dm[1]) * kiln_fp16_to_fp32(y[i].s);
        const __m256 d = _mm256_set1_ps(kiln_fp16_to_fp32(dm[0]) * kiln_fp16_to_fp32(y[i].d));
        __m256i qx;
        if (fifth) {
            const kiln_block_q5_1 *b = (const kiln_block_q5_1 *)w;
            qx = _mm256_or_si256(nibbles(b->qs), fifth_bits(b->qh));
        } else {
            qx = nibbles(((const kiln_block_q4_1 *)w)->qs);
        }
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(qx, qy), ones);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    return kiln_hsum8(lanes) + summs;
}
#endif

float kiln_vec_dot_q4_1(int64_t n, const void *w, const void *act) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX2) return dot_q8_1_avx2(n, w, sizeof(kiln_block_q4_1), false, act);
#endif
    return dot_q8_1(n, w, sizeof(kiln_block_q4_1), act, levels_q4_1);
}

float kiln_vec_dot_q5_1(int64_t n, const void *w, const void *act) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX2) return dot_q8_1_avx2(n, w, sizeof(kiln_block_q5_1), true, act);
#endif
    return dot_q8_1(n, w, sizeof(kiln_block_q5_1), act, levels_q5_1);
}

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
