/* runtime/vecdot_mxfp4.c - MXFP4 against Q8_0 activations, in the two
 * orders llama.cpp's x86 build computes it:
 *
 *   vec_dot (ggml_vec_dot_mxfp4_q8_0, __AVX2__ branch; matrices ggml does
 *     not repack): blocks in pairs, block 2i into eight float lanes acc1,
 *     block 2i + 1 into acc2, lane l taking the exact sum of weights
 *     4l..4l+3: acc[l] = fmaf(y.d * 2^(e-128), lane, acc[l]); then
 *     kiln_hsum8(acc1 + acc2); an odd last block is added after, as
 *     sumf + d * (float)sum (not fused).
 *   gemv (ggml-cpu/arch/x86/repack.cpp, gemv_q4_b32_8x8_q8_0_lut_avx and
 *     the gemm beside it: matrices of n_out % 8 == 0, every token, MoE
 *     experts too): one float per row, acc = fmaf((float)sum of the whole
 *     block, 2^(e-128) * y.d, acc). The gemm's 4-token groups take the
 *     same steps, on Q8_0 rows that ggml_quantize_mat_q8_0_4x8 makes with
 *     the same bytes as quantize_row_q8_0, so one order covers both.
 *
 * Here: the two reference dot products (kiln_qtype dot / dot_gemv), the
 * unpacking of up to 8 blocks to levels, and the AVX2 direct kernels the
 * table in kernels.c names, which give the references' bits. */
#include "vecdot.h"

#include "kernels.h"

#include "../codec/fp4.h"
#include "../core/fp16.h"

#include <math.h>
#include <string.h>

/* The 32 levels of one block (the doubled E2M1 values, -12..12). */
static inline void levels(const kiln_block_mxfp4 *b, int8_t q[KILN_QK]) {
    for (int j = 0; j < KILN_QK / 2; j++) {
        q[j] = kiln_e2m1_doubled[b->qs[j] & 15];
        q[j + KILN_QK / 2] = kiln_e2m1_doubled[b->qs[j] >> 4];
    }
}

void kiln_unpack_mxfp4(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_mxfp4 *b = blocks;
    for (int j = 0; j < n; j++) {
        levels(&b[j], out->q + KILN_QK * j);
        out->d[j] = kiln_e8m0_to_fp32_half(b[j].e);
    }
}

/* Lane l of one block against its activations: weights 4l..4l+3. */
static void block_lanes(const kiln_block_mxfp4 *b, const kiln_block_q8_0 *a, int32_t lane[8]) {
    int8_t q[KILN_QK];
    levels(b, q);
    for (int l = 0; l < 8; l++) {
        lane[l] = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++) lane[l] += q[j] * a->qs[j];
    }
}

float kiln_vec_dot_mxfp4(int64_t n, const void *w, const void *act) {
    const kiln_block_mxfp4 *x = w;
    const kiln_block_q8_0 *y = act;
    const int64_t nb = n / KILN_QK;
    float acc[2][8] = {{0}};
    int32_t lane[8];
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2)
        for (int h = 0; h < 2; h++) {
            const float d = kiln_fp16_to_fp32(y[ib + h].d) * kiln_e8m0_to_fp32_half(x[ib + h].e);
            block_lanes(&x[ib + h], &y[ib + h], lane);
            for (int l = 0; l < 8; l++) acc[h][l] = fmaf(d, (float)lane[l], acc[h][l]);
        }
    float sum[8];
    for (int l = 0; l < 8; l++) sum[l] = acc[0][l] + acc[1][l];
    float r = kiln_hsum8(sum);
    for (; ib < nb; ib++) {
        const float d = kiln_fp16_to_fp32(y[ib].d) * kiln_e8m0_to_fp32_half(x[ib].e);
        block_lanes(&x[ib], &y[ib], lane);
        int32_t s = 0;
        for (int l = 0; l < 8; l++) s += lane[l];
        r = r + d * (float)s;
    }
    return r;
}

float kiln_vec_dot_mxfp4_gemv(int64_t n, const void *w, const void *act) {
    const kiln_block_mxfp4 *x = w;
    const kiln_block_q8_0 *y = act;
    float acc = 0;
    int32_t lane[8];
    for (int64_t ib = 0; ib < n / KILN_QK; ib++) {
        block_lanes(&x[ib], &y[ib], lane);
        int32_t s = 0;
        for (int l = 0; l < 8; l++) s += lane[l];
        acc = fmaf((float)s, kiln_e8m0_to_fp32_half(x[ib].e) * kiln_fp16_to_fp32(y[ib].d), acc);
    }
    return acc;
}

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define GROUP 4 /* tokens per pass over a row */

/* One block's eight int32 lanes against one token: the levels looked up
 * with pshufb, then ggml's sign trick (|q| times a with q's sign; pair
 * sums stay far inside int16: 2 * 12 * 127). */
AVX2 static inline __m256i mx_lanes(__m256i q, const int8_t *a) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)a);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

AVX2 static inline __m256i mx_levels(const kiln_block_mxfp4 *b, __m128i table) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)b->qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(raw, 4), m4)),
                            _mm_shuffle_epi8(table, _mm_and_si128(raw, m4)));
}

AVX2 static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* Row w (nb blocks) against tokens [t0, t0 + nt), nt <= GROUP, in the
 * gemv order (gemv true) or the vec_dot order. */
AVX2 static inline void mx_row(bool gemv, const uint8_t *w, int64_t nb, const kiln_block_q8_0 *act, int64_t t0,
                               int nt, float *y, int64_t ldy) {
    const kiln_block_mxfp4 *x = (const kiln_block_mxfp4 *)w;
    const __m128i table = _mm_loadu_si128((const __m128i *)kiln_e2m1_doubled);
    __m256 acc[GROUP][2];
    float g[GROUP] = {0}, tail[GROUP];
    for (int k = 0; k < GROUP; k++) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    const int64_t paired = gemv ? nb : nb & ~(int64_t)1;
    for (int64_t ib = 0; ib < paired; ib++) {
        const __m256i q = mx_levels(&x[ib], table);
        const float ex = kiln_e8m0_to_fp32_half(x[ib].e);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *a = act + (t0 + k) * nb + ib;
            const __m256i lane = mx_lanes(q, a->qs);
            const float dy = kiln_fp16_to_fp32(a->d);
            if (gemv) g[k] = fmaf((float)hsum_i32(lane), ex * dy, g[k]);
            else acc[k][ib & 1] = _mm256_fmadd_ps(_mm256_set1_ps(dy * ex), _mm256_cvtepi32_ps(lane), acc[k][ib & 1]);
        }
    }
    if (gemv) {
        for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = g[k];
        return;
    }
    for (int k = 0; k < nt; k++) {
        float s[8];
        _mm256_storeu_ps(s, _mm256_add_ps(acc[k][0], acc[k][1]));
        tail[k] = kiln_hsum8(s);
    }
    if (nb & 1) {
        const int64_t ib = nb - 1;
        const __m256i q = mx_levels(&x[ib], table);
        const float ex = kiln_e8m0_to_fp32_half(x[ib].e);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *a = act + (t0 + k) * nb + ib;
            const float d = kiln_fp16_to_fp32(a->d) * ex;
            tail[k] = tail[k] + d * (float)hsum_i32(mx_lanes(q, a->qs));
        }
    }
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = tail[k];
}

/* kiln_direct_rows hands out at most 4 tokens per call (its GROUP). */
AVX2 void kiln_kdirect_mxfp4(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                             int nt, float *y, int64_t ldy) {
    (void)qt;
    mx_row(false, w, nb, act, t0, nt, y, ldy);
}

AVX2 void kiln_kdirect_mxfp4_gemv(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                                  int nt, float *y, int64_t ldy) {
    (void)qt;
    mx_row(true, w, nb, act, t0, nt, y, ldy);
}
#endif
