/* codec/q8_k.c - the Q8_K codec: 8-bit levels with an fp32 scale per
 * 256 values and per-16 sums (layout in blocks_k.h).
 *
 * Q8_K is not a storage format: the runtime quantizes activations to it
 * for the k-quant dot products, so kiln_quantize_row_q8_k_ref must give
 * ggml's quantize_row_q8_K_ref bytes (including its sign convention and
 * the bsums). There is no imatrix variant; ggml has none either. */
/* ggml rounds every product before adding it. -std=c11 already forbids
 * fusing them into FMAs, but a build in GNU mode would fuse them inside
 * the AVX-512 functions and change the bytes. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "blocks.h"
#include "quants.h"
#include "search.h"

#include "../core/cpu.h"

#include <string.h>

static void dequant_scalar(const kiln_block_q8_k *b, float *y) {
    for (int j = 0; j < KILN_QK_K; ++j) y[j] = b->d * b->qs[j];
}

#ifdef KILN_X86
KILN_AVX2 static void dequant_avx2(const kiln_block_q8_k *b, float *y) {
    __m256 d = _mm256_set1_ps(b->d);
    for (int j = 0; j < KILN_QK_K; j += 8) {
        __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + j)));
        _mm256_storeu_ps(y + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
    }
}

KILN_AVX512 static void dequant_avx512(const kiln_block_q8_k *b, float *y) {
    __m512 d = _mm512_set1_ps(b->d);
    for (int j = 0; j < KILN_QK_K; j += 16) {
        __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + j)));
        _mm512_storeu_ps(y + j, _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)));
    }
}
#endif

void kiln_dequantize_row_q8_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q8_k *b = src;
    void (*dequant)(const kiln_block_q8_k *, float *) = KILN_SIMD_PICK(dequant);
    for (int64_t i = 0; i < n / KILN_QK_K; ++i) dequant(&b[i], dst + i * KILN_QK_K);
}

/* One block (a kiln_block_quantizer; there is no imatrix to use). iscale =
 * -127/max with max the signed value of largest magnitude, only the upper
 * end clamped: ggml's choices, kept so the runtime's dot products see
 * ggml's activations. */
static void quantize_block(const float *x, const float *qw, void *dst, const void *ctx) {
    kiln_block_q8_k *y = dst;
    float amax, max = kiln_max_magnitude(x, KILN_QK_K, &amax);
    if (!amax) {
        /* ggml leaves bsums untouched here; zero is what they sum to. */
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < KILN_QK_K; ++j) {
        int v = kiln_nearest_int(iscale * x[j]);
        y->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < KILN_QK_K / 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += y->qs[16 * j + i];
        y->bsums[j] = (int16_t)sum;
    }
    y->d = 1 / iscale;
}

void kiln_quantize_row_q8_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q8_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q8_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK_K,
                                sizeof(kiln_block_q8_k), quantize_block, NULL);
}
