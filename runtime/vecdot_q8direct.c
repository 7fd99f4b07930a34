/* runtime/vecdot_q8direct.c - Q8_0 weights against Q8_0 activations for a
 * few tokens (decode), read straight from the GGUF blocks: each 34-byte
 * block is loaded once, its levels go to the integer products of every
 * token of the group in registers, nothing is copied to scratch.
 *
 * Why a file of its own: the generic direct kernel for the 32-weight
 * formats (vecdot_kdirect.c, lrow_group) first unpacks 8 blocks through
 * qt->unpack into a kiln_qblock on the stack and then reads them back,
 * so a one-token Q8_0 product read every weight twice and spent most of
 * its time in the copy. Q8_0 blocks already hold the levels as signed
 * bytes; there is nothing to decode.
 *
 * The order is kiln_vec_dot_q8_0's (vecdot_legacy.c), ggml's x86
 * ggml_vec_dot_q8_0_q8_0: per block, lane l (l < 8) holds the exact
 * integer sum of the products of weights 4l..4l+3, then acc[l] =
 * fmaf(dx * dy, (float)lane[l], acc[l]) block after block, and at the end
 * kiln_hsum8. Integer sums are exact however they are taken (pair sums of
 * |q| <= 128 by |a| <= 127 stay within int16; vpdpbusd sums in int32),
 * dx * dy is one float multiply, and the update is one vfmadd per block
 * and lane in block order - so the outputs equal kiln_vec_dot_q8_0 bit for
 * bit (tests/test_vecdot_q8direct.c).
 *
 * Levels: AVX2, one block per ymm (also the kernel of AVX-512 CPUs
 * without VNNI); VNNI, two blocks per zmm for the integer products of 2+
 * tokens, vpdpbusd in one instruction (the float updates stay two 8-lane
 * steps in block order: the chain of a lane cannot be split). Measured on
 * a Xeon with AVX-512 VNNI, single thread, 2048-wide rows: one token is
 * bound by its chain of one fmaf per block, where the AVX2 row is ~5%
 * faster than the 512-bit one (which also costs clock), so the VNNI
 * kernel takes it for one token; 4 tokens are bound by the integer work,
 * where VNNI is ~10% faster than AVX2, and a 512-bit kernel without VNNI
 * (vpmaddubsw + vpmaddwd) gained ~3%, too little for a kernel of its own.
 * Called per row by kiln_direct_rows (vecdot_kdirect.c) for up to
 * GROUP = 4 tokens; the table in kernels.c names these kernels. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* The tokens one call takes at most (kiln_direct_rows' group). */
#define MAX_TOKENS 4

/* A block's fp16 factor as float. F16C converts every finite value and
 * infinity exactly as kiln_fp16_to_fp32 does; a NaN comes out quiet,
 * which the reference's first float operation does to it anyway. */
AVX2 INLINE float half_at(const kiln_block_q8_0 *b) {
    return _cvtsh_ss(b->d);
}

/* The eight lanes of the reference's last step, hsum_float_8's tree. */
AVX2 INLINE float finish(__m256 acc) {
    float a[8];
    _mm256_storeu_ps(a, acc);
    return kiln_hsum8(a);
}

/* Every kernel below is a row function taking a constant token count
 * (so that the accumulators live in registers: an array indexed by a
 * variable count goes through memory, and the store-to-load forwarding
 * then lengthens the fmaf chain of every block) and a public kernel that
 * calls it for up to MAX_TOKENS tokens at a time. */
#define BY_TOKENS(ROW, w, nb, act, t0, nt, y, ldy)                          \
    for (int k0 = 0; k0 < (nt); k0 += MAX_TOKENS) {                         \
        switch ((nt) - k0 < MAX_TOKENS ? (nt) - k0 : MAX_TOKENS) {          \
        case 1: ROW(1, w, nb, act, (t0) + k0, y, ldy); break;               \
        case 2: ROW(2, w, nb, act, (t0) + k0, y, ldy); break;               \
        case 3: ROW(3, w, nb, act, (t0) + k0, y, ldy); break;               \
        default: ROW(MAX_TOKENS, w, nb, act, (t0) + k0, y, ldy); break;     \
        }                                                                   \
    }

/* ---- AVX2: one block per register ------------------------------------- */

/* The eight 4-weight lane sums of |q| times a with q's sign (ggml's sign
 * trick; |q| = 128 for -128 is exact as an unsigned byte). */
AVX2 INLINE __m256i lanes_avx2(__m256i wabs, __m256i wsign, const int8_t *a) {
    const __m256i x = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a), wsign);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, x), _mm256_set1_epi16(1));
}

/* Block i's update of nt tokens' accumulators (the reference's step). */
AVX2 INLINE void step_avx2(const kiln_block_q8_0 *x, const kiln_block_q8_0 *const *a, int64_t i, int nt,
                           __m256 *acc) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)x[i].qs), qabs = _mm256_abs_epi8(q);
    const float dx = half_at(&x[i]);
    for (int k = 0; k < nt; k++) {
        const __m256 d = _mm256_set1_ps(dx * half_at(&a[k][i]));
        acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes_avx2(qabs, q, a[k][i].qs)), acc[k]);
    }
}

/* Each token's activation row and a zeroed accumulator. */
AVX2 INLINE void row_start(const void *act, int64_t nb, int64_t t0, int nt, const kiln_block_q8_0 *a[MAX_TOKENS],
                           __m256 acc[MAX_TOKENS]) {
    for (int k = 0; k < nt; k++) {
        a[k] = (const kiln_block_q8_0 *)act + (t0 + k) * nb;
        acc[k] = _mm256_setzero_ps();
    }
}

AVX2 INLINE void row_avx2(int nt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, float *y,
                          int64_t ldy) {
    const kiln_block_q8_0 *x = (const kiln_block_q8_0 *)w;
    const kiln_block_q8_0 *a[MAX_TOKENS];
    __m256 acc[MAX_TOKENS];
    row_start(act, nb, t0, nt, a, acc);
    for (int64_t i = 0; i < nb; i++) step_avx2(x, a, i, nt, acc);
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = finish(acc[k]);
}

AVX2 void kiln_q8direct_avx2(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                             int nt, float *y, int64_t ldy) {
    (void)qt;
    BY_TOKENS(row_avx2, w, nb, act, t0, nt, y, ldy)
}

/* ---- AVX-512: two blocks per register ---------------------------------- */

/* Levels of blocks i and i + 1 (32 bytes each, 34 apart). */
VNNI INLINE __m512i two_blocks(const kiln_block_q8_0 *b) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
    const __m256i hi = _mm256_loadu_si256((const __m256i *)b[1].qs);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* a with the sign of the weights (AVX-512 has no vpsignb: negate where
 * the weight is negative; a weight of 0 meets |q| = 0, so its a is moot). */
VNNI INLINE __m512i signed_act(__m512i a, __mmask64 negative) {
    return _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a);
}

/* The two blocks' sixteen int32 lane sums: vpdpbusd sums the four
 * products of each lane in int32. */
VNNI INLINE __m512i lanes_vnni(__m512i qabs, __m512i sa) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), qabs, sa);
}

/* A row against nt tokens, two blocks per step: block i's update on the
 * low eight lanes, then block i + 1's, as the reference; an odd last
 * block takes the AVX2 step. One token is bound by the latency of its
 * fmaf chain (one per block, in order), where the 512-bit integer work
 * gains nothing and costs clock: it takes the AVX2 row. */
VNNI INLINE void row_vnni(int nt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, float *y, int64_t ldy) {
    if (nt == 1) {
        row_avx2(1, w, nb, act, t0, y, ldy);
        return;
    }
    const kiln_block_q8_0 *x = (const kiln_block_q8_0 *)w;
    const kiln_block_q8_0 *a[MAX_TOKENS];
    __m256 acc[MAX_TOKENS];
    row_start(act, nb, t0, nt, a, acc);
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512i q = two_blocks(x + i), qabs = _mm512_abs_epi8(q);
        const __mmask64 negative = _mm512_movepi8_mask(q);
        const float dx0 = half_at(&x[i]), dx1 = half_at(&x[i + 1]);
        for (int k = 0; k < nt; k++) {
            const __m512 f = _mm512_cvtepi32_ps(lanes_vnni(qabs, signed_act(two_blocks(a[k] + i), negative)));
            const __m256 d0 = _mm256_set1_ps(dx0 * half_at(&a[k][i]));
            const __m256 d1 = _mm256_set1_ps(dx1 * half_at(&a[k][i + 1]));
            acc[k] = _mm256_fmadd_ps(d0, _mm512_castps512_ps256(f), acc[k]);
            acc[k] = _mm256_fmadd_ps(d1, _mm512_extractf32x8_ps(f, 1), acc[k]);
        }
    }
    if (i < nb) step_avx2(x, a, i, nt, acc);
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = finish(acc[k]);
}

VNNI void kiln_q8direct_vnni(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, int nt,
                             float *y, int64_t ldy) {
    (void)qt;
    BY_TOKENS(row_vnni, w, nb, act, t0, nt, y, ldy)
}
#undef BY_TOKENS
#endif
