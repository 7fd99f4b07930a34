/* runtime/vecdot_iq1.c - IQ1_S and IQ1_M against Q8_K activations: the
 * reference dot products and the direct kernels (decode, prefill).
 *
 * Neither fits the k-quants' unpacked form (vecdot_korder.c): besides the
 * grid levels times the scales, each sums the +-1/8 shifts apart, and
 * ggml's x86 code (ggml-cpu/arch/x86/quants.c, the __AVX2__ branches,
 * which llama.cpp's AVX-512 build runs; neither type is repacked) turns
 * the two into floats separately:
 *
 *   IQ1_S  eight int32 lanes, lane l summing ls * grid * a over the
 *          weights p with (p / 4) % 8 == l (ls = 2s + 1 per 32 weights),
 *          acc[l] = fmaf(d, lane[l], acc[l]) with d = y.d * x.d; the
 *          shifts as one integer, sum of ls * sign * (the group's two
 *          bsums), accum1 = fmaf(d, that, accum1) (gcc fuses ggml's
 *          accum1 += d * sumi1); result kiln_hsum8(acc) + accum1 / 8.
 *   IQ1_M  the same lanes with the scale of each 16 weights (acc1), and
 *          eight more lanes summing scale * sign * a, the sign per 8
 *          weights (acc2), both through fmaf(d, lane, acc) with d =
 *          y.d * D; result kiln_hsum8(acc1) + kiln_hsum8(acc2) / 8.
 *
 * The integer sums are exact whatever instructions take them (ggml's byte
 * products of levels -1..1 never saturate), so the AVX2 kernels below
 * equal the reference bit for bit (tests/test_quant_iq1.c). */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#include "../codec/iq1_tables.h"
#include "../core/fp16.h"

#include <math.h>
#include <string.h>

/* IQ1_M's fp16 super-block scale, from the top nibbles of its 4 words. */
static float iq1m_scale(const kiln_block_iq1_m *b, uint16_t sc[4]) {
    for (int w = 0; w < 4; w++) sc[w] = (uint16_t)(b->scales[2 * w] | b->scales[2 * w + 1] << 8);
    return kiln_fp16_to_fp32((kiln_half)((sc[0] >> 12) | (sc[1] >> 8 & 0x00f0) | (sc[2] >> 4 & 0x0f00) |
                                         (sc[3] & 0xf000)));
}

/* One super-block decoded: 8-weight group g's grid index, its scale
 * (2s + 1) and its shift sign (+1 / -1). */
typedef struct iq1_groups {
    uint16_t index[32];
    int16_t scale[32];
    int8_t sign[32];
    float d;
} iq1_groups;

static void groups_iq1_s(const kiln_block_iq1_s *b, iq1_groups *g) {
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t h = b->qh[ib];
        for (int l = 0; l < 4; l++) {
            g->index[4 * ib + l] = (uint16_t)(b->qs[4 * ib + l] | ((h >> 3 * l) & 7) << 8);
            g->scale[4 * ib + l] = (int16_t)(2 * ((h >> 12) & 7) + 1);
            g->sign[4 * ib + l] = h & 0x8000 ? -1 : 1;
        }
    }
    g->d = kiln_fp16_to_fp32(b->d);
}

static void groups_iq1_m(const kiln_block_iq1_m *b, iq1_groups *g) {
    uint16_t sc[4];
    g->d = iq1m_scale(b, sc);
    for (int k = 0; k < 32; k++) {
        const uint8_t h = b->qh[k / 2] >> 4 * (k % 2);
        g->index[k] = (uint16_t)(b->qs[k] | (h & 7) << 8);
        g->scale[k] = (int16_t)(2 * (sc[k / 8] >> 3 * (k / 2 % 4) & 7) + 1);
        g->sign[k] = h & 8 ? -1 : 1;
    }
}

/* The integer sums of one super-block (see the header): lane[l] of the
 * grid products, shift[l] of the signed activations (IQ1_M's lanes), and
 * IQ1_S's single shift sum from the bsums. */
static void block_sums(const kiln_iq1_tables *t, const iq1_groups *g, const kiln_block_q8_k *y, int32_t lane[8],
                       int32_t shift[8], int32_t *shift_bsums) {
    memset(lane, 0, 8 * sizeof *lane);
    memset(shift, 0, 8 * sizeof *shift);
    *shift_bsums = 0;
    for (int k = 0; k < 32; k++) {
        const uint64_t grid = t->grid[g->index[k]];
        for (int j = 0; j < 8; j++) {
            const int p = 8 * k + j, a = y->qs[p];
            lane[(p / 4) % 8] += g->scale[k] * ((int8_t)(grid >> 8 * j) * a);
            shift[(p / 4) % 8] += g->scale[k] * (g->sign[k] * a);
        }
        if (k % 4 == 0) /* IQ1_S: one sign and scale per 32 weights = two bsums */
            *shift_bsums += (y->bsums[k / 2] + y->bsums[k / 2 + 1]) * g->sign[k] * g->scale[k];
    }
}

float kiln_vec_dot_iq1_s(int64_t n, const void *w, const void *act) {
    const kiln_iq1_tables *t = kiln_iq1_tables_get();
    const kiln_block_iq1_s *x = w;
    const kiln_block_q8_k *y = act;
    float acc[8] = {0}, accum1 = 0;
    for (int64_t i = 0; i < n / KILN_QK_K; i++) {
        iq1_groups g;
        int32_t lane[8], shift[8], sb;
        groups_iq1_s(&x[i], &g);
        block_sums(t, &g, &y[i], lane, shift, &sb);
        const float d = y[i].d * g.d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
        accum1 = fmaf(d, (float)sb, accum1);
    }
    return kiln_hsum8(acc) + KILN_IQ1_DELTA * accum1;
}

float kiln_vec_dot_iq1_m(int64_t n, const void *w, const void *act) {
    const kiln_iq1_tables *t = kiln_iq1_tables_get();
    const kiln_block_iq1_m *x = w;
    const kiln_block_q8_k *y = act;
    float acc1[8] = {0}, acc2[8] = {0};
    for (int64_t i = 0; i < n / KILN_QK_K; i++) {
        iq1_groups g;
        int32_t lane[8], shift[8], sb;
        groups_iq1_m(&x[i], &g);
        block_sums(t, &g, &y[i], lane, shift, &sb);
        const float d = y[i].d * g.d;
        for (int l = 0; l < 8; l++) {
            acc1[l] = fmaf(d, (float)lane[l], acc1[l]);
            acc2[l] = fmaf(d, (float)shift[l], acc2[l]);
        }
    }
    return kiln_hsum8(acc1) + KILN_IQ1_DELTA * kiln_hsum8(acc2);
}

/* ---- the direct kernels (AVX2) ------------------------------------------ */

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define TOKENS 4 /* kiln_direct_rows passes at most this many */

/* A super-block in registers: chunk c = weights 32c..32c+31 (4 groups) as
 * grid bytes, the shift signs as +-1 bytes, the scales of its two halves
 * as int16 (low / high 128 bits). */
typedef struct iq1_regs {
    __m256i q[8], sign[8], sc[8];
} iq1_regs;

AVX2 INLINE void load_regs(const kiln_iq1_tables *t, const iq1_groups *g, iq1_regs *r) {
    for (int c = 0; c < 8; c++) {
        const int k = 4 * c;
        r->q[c] = _mm256_set_epi64x((long long)t->grid[g->index[k + 3]], (long long)t->grid[g->index[k + 2]],
                                    (long long)t->grid[g->index[k + 1]], (long long)t->grid[g->index[k]]);
        r->sign[c] = _mm256_set_epi8(
            g->sign[k + 3], g->sign[k + 3], g->sign[k + 3], g->sign[k + 3], g->sign[k + 3], g->sign[k + 3],
            g->sign[k + 3], g->sign[k + 3], g->sign[k + 2], g->sign[k + 2], g->sign[k + 2], g->sign[k + 2],
            g->sign[k + 2], g->sign[k + 2], g->sign[k + 2], g->sign[k + 2], g->sign[k + 1], g->sign[k + 1],
            g->sign[k + 1], g->sign[k + 1], g->sign[k + 1], g->sign[k + 1], g->sign[k + 1], g->sign[k + 1],
            g->sign[k], g->sign[k], g->sign[k], g->sign[k], g->sign[k], g->sign[k], g->sign[k], g->sign[k]);
        r->sc[c] = _mm256_set_m128i(_mm_set1_epi16(g->scale[k + 2]), _mm_set1_epi16(g->scale[k]));
    }
}

/* Lanes of sum scale * v * a over a super-block, v in {-1, 0, 1} bytes
 * (ggml's sign trick: |v| times a with v's sign; pair sums <= 254). */
AVX2 INLINE __m256i lanes(const __m256i v[8], const __m256i sc[8], const int8_t *a) {
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(a + 32 * c));
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v[c], v[c]), _mm256_sign_epi8(x, v[c]));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, sc[c]));
    }
    return s;
}

AVX2 INLINE float hsum8_ps(__m256 v) {
    float a[8];
    _mm256_storeu_ps(a, v);
    return kiln_hsum8(a);
}

/* One row against tokens t0..t0+nt-1; m = 0 for IQ1_S, 1 for IQ1_M. */
AVX2 INLINE void iq1_row(int m, const uint8_t *w, int64_t nb, const kiln_block_q8_k *act, int64_t t0, int nt,
                         float *y, int64_t ldy) {
    const kiln_iq1_tables *t = kiln_iq1_tables_get();
    __m256 acc[TOKENS], acc2[TOKENS];
    float accum1[TOKENS];
    for (int k = 0; k < nt; k++) {
        acc[k] = acc2[k] = _mm256_setzero_ps();
        accum1[k] = 0;
    }
    const int bytes = m ? (int)sizeof(kiln_block_iq1_m) : (int)sizeof(kiln_block_iq1_s);
    for (int64_t i = 0; i < nb; i++) {
        iq1_groups g;
        iq1_regs r;
        if (m) groups_iq1_m((const kiln_block_iq1_m *)(w + i * bytes), &g);
        else groups_iq1_s((const kiln_block_iq1_s *)(w + i * bytes), &g);
        load_regs(t, &g, &r);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_k *a = act + (t0 + k) * nb + i;
            const __m256 d = _mm256_set1_ps(a->d * g.d);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(r.q, r.sc, a->qs)), acc[k]);
            if (m) {
                acc2[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(r.sign, r.sc, a->qs)), acc2[k]);
            } else {
                int32_t sb = 0;
                for (int c = 0; c < 8; c++)
                    sb += (a->bsums[2 * c] + a->bsums[2 * c + 1]) * g.sign[4 * c] * g.scale[4 * c];
                accum1[k] = _mm_cvtss_f32(_mm_fmadd_ss(_mm256_castps256_ps128(d), _mm_set_ss((float)sb),
                                                       _mm_set_ss(accum1[k])));
            }
        }
    }
    for (int k = 0; k < nt; k++)
        y[(t0 + k) * ldy] = hsum8_ps(acc[k]) + KILN_IQ1_DELTA * (m ? hsum8_ps(acc2[k]) : accum1[k]);
}

AVX2 void kiln_kdirect_iq1_s(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                             int nt, float *y, int64_t ldy) {
    iq1_row(0, w, nb, act, t0, nt, y, ldy);
}

AVX2 void kiln_kdirect_iq1_m(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                             int nt, float *y, int64_t ldy) {
    iq1_row(1, w, nb, act, t0, nt, y, ldy);
}
#endif
