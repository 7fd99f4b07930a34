/* runtime/vecdot_korder.c - the float orders of llama.cpp's k-quant and
 * IQ2_XXS products, as its x86 AVX-512 build (GGML_NATIVE, REPACK,
 * LLAMAFILE) computes them, written out in scalar code: the definition
 * that the panel kernels (vecdot_qgemm.c) reproduce bit for bit.
 *
 * The integer sums of a super-block are exact whatever the instruction
 * that takes them, so only their grouping matters:
 *
 *   vec_dot (ggml-cpu/arch/x86/quants.c, the __AVX2__ branches; weights
 *     that are not repacked): eight int32 lanes, lane l summing
 *     sc * q * a over the weights p with (p / 4) % 8 == l (one 32-bit lane
 *     of a 256-bit register), then per super-block
 *     acc[l] = fmaf(y.d * x.d, lane[l], acc[l]) and kiln_hsum8 at the end.
 *     The mins (dmin = -y.d * x.dmin, m[j] = mn[2j] * bsums[2j] +
 *     mn[2j+1] * bsums[2j+1]):
 *       Q2_K  acc[l] = fmaf(dmin, m[l], acc[l]) before the lane step;
 *       Q4_K  four more lanes accm[k] = fmaf(dmin, m[2k] + m[2k+1],
 *             accm[k]), added as (accm0 + accm2) + (accm1 + accm3);
 *       Q5_K  summs = fmaf(dmin, sum of m, summs) (gcc fuses ggml's
 *             summs += dmin * sum), added after the lanes;
 *       Q6_K  levels 0..63, its -32 taken out through the bsums: lane l
 *             minus m[l] with mn = 32 * sc, in integers (vecdot_k.c
 *             unpacks Q6_K that way);
 *     and IQ2_XXS scales the total by 0.125.
 *   gemv / gemm (ggml-cpu/arch/x86/repack.cpp, repacked Q4_K and Q2_K):
 *     A = fmaf(I, x.d * y.d, A) and M = fmaf(P, x.dmin * y.d, M) with I
 *     and P the integer sums and mins of a whole super-block (gemv) or of
 *     gemm_chunks 32-weight chunks (gemm); the result is A - M. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "vecdot.h"

#include <math.h>
#include <string.h>

/* Integer sums of one super-block against its Q8_K block. */
typedef struct ksums {
    int32_t lane[8];  /* weights p with (p / 4) % 8 == l */
    int32_t chunk[8]; /* weights 32c .. 32c + 31 */
    int32_t mins[8];  /* mn[2j] * bsums[2j] + mn[2j + 1] * bsums[2j + 1] */
} ksums;

static void block_sums(const kiln_qblock *b, const kiln_block_q8_k *y, ksums *s) {
    memset(s, 0, sizeof *s);
    for (int p = 0; p < KILN_QK_K; p++) {
        const int32_t v = b->sc[p / 16] * (b->q[p] * y->qs[p]);
        s->lane[(p / 4) % 8] += v;
        s->chunk[p / 32] += v;
    }
    for (int j = 0; j < 8; j++)
        s->mins[j] = b->mn[2 * j] * y->bsums[2 * j] + b->mn[2 * j + 1] * y->bsums[2 * j + 1];
}

static float vecdot_order(int64_t nb, const uint8_t *x, const kiln_qtype *qt, const kiln_block_q8_k *y) {
    float acc[8] = {0}, accm[4] = {0}, summs = 0;
    kiln_qblock b;
    ksums s;
    for (int64_t i = 0; i < nb; i++, x += qt->block_bytes) {
        qt->unpack(x, 1, &b);
        block_sums(&b, &y[i], &s);
        const float d = y[i].d * b.d[0], dmin = -y[i].d * b.dmin;
        if (qt->comb == KILN_COMB_K_Q6)
            for (int l = 0; l < 8; l++) s.lane[l] -= s.mins[l];
        if (qt->comb == KILN_COMB_K_Q2)
            for (int l = 0; l < 8; l++) acc[l] = fmaf(dmin, (float)s.mins[l], acc[l]);
        if (qt->comb == KILN_COMB_K_Q4)
            for (int k = 0; k < 4; k++) accm[k] = fmaf(dmin, (float)(s.mins[2 * k] + s.mins[2 * k + 1]), accm[k]);
        if (qt->comb == KILN_COMB_K_Q5) {
            int32_t m = 0;
            for (int j = 0; j < 8; j++) m += s.mins[j];
            summs = fmaf(dmin, (float)m, summs);
        }
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)s.lane[l], acc[l]);
    }
    float r = kiln_hsum8(acc);
    if (qt->comb == KILN_COMB_K_Q4) r = r + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
    if (qt->comb == KILN_COMB_K_Q5) r = r + summs;
    if (qt->comb == KILN_COMB_IQ2) r = 0.125f * r;
    if (qt->comb == KILN_COMB_IQ3) r = 0.25f * r;
    return r;
}

static float repacked_order(int64_t nb, const uint8_t *x, const kiln_qtype *qt, int group,
                            const kiln_block_q8_k *y) {
    float a = 0, m = 0;
    kiln_qblock b;
    ksums s;
    for (int64_t i = 0; i < nb; i++, x += qt->block_bytes) {
        qt->unpack(x, 1, &b);
        block_sums(&b, &y[i], &s);
        const float ds = b.d[0] * y[i].d, dm = b.dmin * y[i].d;
        for (int c0 = 0; c0 < 8; c0 += group) {
            int32_t isum = 0, msum = 0;
            for (int c = c0; c < c0 + group; c++) {
                isum += s.chunk[c];
                msum += s.mins[c];
            }
            a = fmaf((float)isum, ds, a);
            m = fmaf((float)msum, dm, m);
        }
    }
    return a - m;
}

float kiln_kdot_ref(int64_t n, const void *w, const kiln_qtype *qt, kiln_korder order,
                    const kiln_block_q8_k *act) {
    const int64_t nb = n / KILN_QK_K;
    if (qt->comb == KILN_COMB_DOT) return qt->dot(n, w, act); /* IQ1_S, IQ1_M: vecdot_iq1.c */
    if (order == KILN_KORDER_VECDOT || !qt->gemm_chunks) return vecdot_order(nb, w, qt, act);
    return repacked_order(nb, w, qt, order == KILN_KORDER_GEMM ? qt->gemm_chunks : 8, act);
}

bool kiln_qtype_repacked(const kiln_qtype *qt, int64_t n_out) {
    return qt->gemm_chunks > 0 && n_out % 8 == 0;
}
