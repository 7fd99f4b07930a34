/* tests/test_quant_kq_a.c - format checks for Q2_K, Q3_K and Q8_K and for
 * the shared scale searches (quantize/search.c), beyond the generic codec
 * suites:
 *
 *  - hand-built blocks dequantize to what the byte diagrams in blocks_k.h
 *    say, computed here from the diagrams alone;
 *  - Q8_K is checked by its defining math (Q8_K has no golden vectors);
 *  - every search gives the same bits at every SIMD level;
 *  - the searches keep their promises (level ranges, least-squares scales,
 *    never worse than their starting point);
 *  - with an imatrix the weighted error drops, and kiln's own refined Q2_K
 *    imatrix search never does worse than ggml's on any block. */
#include "shared.h"
#include "simd_levels.h"

#include <math.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/quants.h"
#include "../codec/search.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) { return (uint32_t)(kiln_test_xorshift64(&rng) >> 32); }
static double uniform(void) { return (rnd() + 0.5) / 4294967296.0; }
/* 0.02 * Student-t(3): heavy-tailed like real weights. */
static float heavy(void) {
    double z = sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform()), c = 0;
    for (int i = 0; i < 3; i++) {
        double g = sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
        c += g * g;
    }
    return (float)(0.02 * z / sqrt(c / 3));
}

/* ------------------------------------------------------------ layouts */

static void test_q2_k_layout(void **state) {
    kiln_block_q2_k b;
    for (size_t i = 0; i < sizeof b; i++) ((uint8_t *)&b)[i] = (uint8_t)rnd();
    b.d = kiln_fp32_to_fp16(0.25f);
    b.dmin = kiln_fp32_to_fp16(0.5f);
    float y[256];
    kiln_dequantize_row_q2_k(&b, y, 256);
    for (int k = 0; k < 256; k++) {
        int h = k / 128, s = (k % 128) / 32, l = k % 32, sub = k / 16;
        int q = (b.qs[32 * h + l] >> (2 * s)) & 3;
        float want = 0.25f * (b.scales[sub] & 0xF) * q - 0.5f * (b.scales[sub] >> 4);
        assert_true(y[k] == want);
    }
}

static void test_q3_k_layout(void **state) {
    kiln_block_q3_k b;
    for (size_t i = 0; i < sizeof b; i++) ((uint8_t *)&b)[i] = (uint8_t)rnd();
    b.d = kiln_fp32_to_fp16(0.125f);
    float y[256];
    kiln_dequantize_row_q3_k(&b, y, 256);
    for (int k = 0; k < 256; k++) {
        int j = k / 16;
        int lo = (j < 8 ? b.scales[j] : b.scales[j - 8] >> 4) & 0xF;
        int sc = lo | (((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
        int q = (b.qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
        int high = (b.hmask[k % 32] >> (k / 32)) & 1;
        float want = 0.125f * (sc - 32) * (q - (high ? 0 : 4));
        assert_true(y[k] == want);
    }
}

/* Levels that fit the format exactly come back exactly: the Q3_K scales
 * and levels survive a round trip when x is on the grid. */
static void test_q3_k_exact_grid(void **state) {
    float x[256], y[256];
    int sc[16];
    for (int j = 0; j < 16; j++) sc[j] = 20 + (j % 11);
    for (int k = 0; k < 256; k++) {
        int q = (int)(rnd() % 8) - 4;
        if (k % 16 == 0) q = -4; /* every group reaches the full range */
        x[k] = 0.01f * sc[k / 16] * q;
    }
    uint8_t blk[sizeof(kiln_block_q3_k)];
    kiln_quantize_row_q3_k_ref(x, blk, 256);
    kiln_dequantize_row_q3_k(blk, y, 256);
    double num = 0, den = 0;
    for (int k = 0; k < 256; k++) {
        num += (x[k] - y[k]) * (x[k] - y[k]);
        den += x[k] * x[k];
    }
    assert_true(sqrt(num / den) < 0.02); /* only the 6-bit scales round */
}

/* ---------------------------------------------------------------- Q8_K */

static void check_q8_k_block(const float *x, const kiln_block_q8_k *b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax == 0) {
        assert_true(b->d == 0);
        for (int j = 0; j < 256; j++) assert_int_equal(b->qs[j], 0);
        for (int j = 0; j < 16; j++) assert_int_equal(b->bsums[j], 0);
        return;
    }
    /* d = -max/127: the largest value maps to -127 */
    assert_true(fabsf(b->d - (-max / 127)) <= 1e-6f * fabsf(b->d));
    for (int j = 0; j < 256; j++) {
        assert_true(b->qs[j] >= -127 && b->qs[j] <= 127);
        assert_true(fabsf(x[j] - b->d * b->qs[j]) <= 0.5f * fabsf(b->d) * 1.0001f);
        if (x[j] == max) assert_int_equal(b->qs[j], -127);
    }
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += b->qs[16 * g + j];
        assert_int_equal(b->bsums[g], s);
    }
}

static void test_q8_k_math(void **state) {
    simd_level_enter(state);
    enum { NB = 6 };
    float x[NB * 256], y[NB * 256];
    for (int i = 0; i < NB * 256; i++) x[i] = heavy();
    for (int j = 0; j < 256; j++) x[256 + j] = 0; /* a zero block */
    x[2 * 256 + 9] = 5.0f;                       /* positive largest value */
    x[3 * 256 + 200] = -5.0f;                    /* negative largest value */
    for (int j = 0; j < 256; j++) x[4 * 256 + j] = 1.0f; /* constant */
    kiln_block_q8_k b[NB];
    memset(b, 0x5a, sizeof b);
    kiln_quantize_row_q8_k_ref(x, b, NB * 256);
    for (int i = 0; i < NB; i++) check_q8_k_block(x + 256 * i, &b[i]);
    assert_true(b[2].d < 0 && b[3].d > 0);
    kiln_dequantize_row_q8_k(b, y, NB * 256); /* at this case's level */
    for (int i = 0; i < NB * 256; i++) assert_true(y[i] == b[i / 256].d * b[i / 256].qs[i % 256]);
    /* the codec entry ignores an imatrix and writes whole rows */
    kiln_block_q8_k b2[NB];
    float w[256];
    for (int j = 0; j < 256; j++) w[j] = 1;
    assert_int_equal(kiln_quantize_q8_k(x, b2, 2, 3 * 256, w), sizeof b2);
    assert_memory_equal(b, b2, sizeof b);
}

/* ------------------------------------------------------------ searches */

/* One call of every search on x (n values), results serialized to out. */
static size_t run_searches(const float *x, const float *w, int n, uint8_t *out) {
    size_t o = 0;
    float r;
    uint8_t L[64], Laux[64];
    int8_t Li[64];
    static const struct { int nmax; float rmin, rdelta; int nstep; bool mad; } P[] = {
        {3, -0.5f, 0.1f, 15, true}, {3, -0.9f, 0.05f, 36, false}, {15, -1.f, 0.1f, 20, false},
        {31, -0.5f, 0.1f, 15, false}, {15, -0.9f, 0.05f, 36, false},
    };
    for (size_t p = 0; p < sizeof P / sizeof P[0]; p++) {
        for (int ww = 0; ww < 2; ww++) {
            float mn;
            r = kiln_make_qkx2_quants(n, P[p].nmax, x, ww ? w : NULL, L, &mn, Laux, P[p].rmin,
                                      P[p].rdelta, P[p].nstep, P[p].mad);
            memcpy(out + o, &r, 4), o += 4, memcpy(out + o, &mn, 4), o += 4;
            memcpy(out + o, L, n), o += n;
            r = kiln_make_qkx3_quants(n, P[p].nmax, x, ww ? w : NULL, L, &mn, Laux, P[p].rmin,
                                      P[p].rdelta, P[p].nstep, P[p].mad);
            memcpy(out + o, &r, 4), o += 4, memcpy(out + o, &mn, 4), o += 4;
            memcpy(out + o, L, n), o += n;
        }
    }
    static const int QX[][2] = {{4, 1}, {32, 1}, {16, 1}, {32, 2}, {8, 3}, {4, -1}, {4, 0}};
    for (size_t p = 0; p < sizeof QX / sizeof QX[0]; p++)
        for (int ww = 0; ww < 2; ww++) {
            r = kiln_make_qx_quants(n, QX[p][0], x, Li, QX[p][1], ww ? w : NULL);
            memcpy(out + o, &r, 4), o += 4;
            memcpy(out + o, Li, n), o += n;
        }
    r = kiln_make_q3_quants(n, 4, x, Li, true);
    memcpy(out + o, &r, 4), o += 4, memcpy(out + o, Li, n), o += n;
    float ax[64];
    for (int i = 0; i < n; i++) ax[i] = fabsf(x[i]);
    r = kiln_make_qp_quants(n, 15, ax, L, w);
    memcpy(out + o, &r, 4), o += 4, memcpy(out + o, L, n), o += n;
    /* requantization against fixed scales: Q2_K's range with a minimum,
     * Q6_K's symmetric one with a negative scale (outliers clamp); a zero
     * scale keeps the levels there */
    const float d[2] = {0.013f, 0.f}, m[2] = {0.021f, 0.5f}, dn[2] = {-0.0007f, 0.002f};
    memset(L, 7, n);
    kiln_levels_for_scales(n / 16, 16, x, d, m, 0, 3, L);
    memcpy(out + o, L, n), o += n;
    kiln_levels_for_scales(n / 16, 16, x, dn, NULL, -32, 31, L);
    memcpy(out + o, L, n), o += n;
    return o;
}

static void test_search_simd_matches_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    static uint8_t ref[8192], got[8192];
    float x[64], w[64];
    for (int trial = 0; trial < 600; trial++) {
        int n = trial % 3 == 0 ? 32 : 16;
        for (int i = 0; i < n; i++) {
            x[i] = heavy();
            w[i] = (float)uniform() * (i % 5 == 0 ? 20 : 1);
        }
        if (trial % 7 == 1) for (int i = 0; i < n; i++) x[i] = fabsf(x[i]) + 0.01f; /* min > 0 */
        if (trial % 7 == 2) for (int i = 0; i < n; i++) x[i] = -fabsf(x[i]);
        if (trial % 7 == 3) x[trial % n] = 40.f;                               /* outlier */
        if (trial % 11 == 4) for (int i = 0; i < n; i++) x[i] = 0;
        if (trial % 11 == 5) for (int i = 0; i < n; i++) x[i] = 0.37f;
        kiln_simd_set(KILN_SIMD_SCALAR);
        size_t len = run_searches(x, w, n, ref);
        kiln_simd_set(lvl);
        assert_int_equal(run_searches(x, w, n, got), len);
        if (memcmp(ref, got, len))
            fail_msg("trial %d n %d: %s search differs from scalar", trial, n, kiln_simd_name(lvl));
    }
}

/* Weighted error of x ~ scale * L - min. */
static double qkx_err(const float *x, const float *w, int n, const uint8_t *L, float scale,
                      float min) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = scale * L[i] - min - x[i];
        e += w[i] * d * d;
    }
    return e;
}

static void test_search_properties(void **state) {
    float x[32], w[32];
    uint8_t L[32], Laux[32];
    int8_t Li[32];
    for (int trial = 0; trial < 300; trial++) {
        for (int i = 0; i < 32; i++) x[i] = heavy(), w[i] = (float)uniform() + 0.01f;
        /* qkx: levels in range, no worse than the plain min/max fit */
        float mn;
        float s = kiln_make_qkx3_quants(32, 15, x, w, L, &mn, Laux, -0.9f, 0.05f, 36, false);
        float lo = 0, hi = 0;
        for (int i = 0; i < 32; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
        uint8_t L0[32];
        for (int i = 0; i < 32; i++) {
            assert_true(L[i] <= 15);
            L0[i] = (uint8_t)kiln_nearest_int(15 / (hi - lo) * (x[i] - lo));
        }
        assert_true(mn >= 0);
        assert_true(qkx_err(x, w, 32, L, s, mn) <= qkx_err(x, w, 32, L0, (hi - lo) / 15, -lo) * 1.0001);
        /* qx with weights: the scale is the weighted least-squares one */
        float sq = kiln_make_qx_quants(16, 4, x, Li, 1, w);
        double slx = 0, sl2 = 0;
        for (int i = 0; i < 16; i++) {
            assert_true(Li[i] >= 0 && Li[i] <= 7);
            slx += (double)w[i] * x[i] * (Li[i] - 4);
            sl2 += (double)w[i] * (Li[i] - 4) * (Li[i] - 4);
        }
        assert_true(fabs(sq - slx / sl2) <= 1e-5 * fabs(sq));
        /* qp: non-negative levels up to nmax, least-squares scale */
        float ax[16];
        for (int i = 0; i < 16; i++) ax[i] = fabsf(x[i]);
        float sp = kiln_make_qp_quants(16, 15, ax, L, w);
        slx = sl2 = 0;
        for (int i = 0; i < 16; i++) {
            assert_true(L[i] <= 15);
            slx += (double)w[i] * ax[i] * L[i];
            sl2 += (double)w[i] * L[i] * L[i];
        }
        assert_true(fabs(sp - slx / sl2) <= 1e-5 * fabs(sp));
    }
}

/* ------------------------------------------------------ codec behaviour */

/* The imatrix path lowers the imatrix-weighted error, and threads or row
 * chunking never change a byte. */
static void test_imatrix_and_threads(void **state) {
    enum { ROWS = 40, COLS = 512 };
    static float x[ROWS * COLS], y[ROWS * COLS], w[COLS];
    static uint8_t a[ROWS * COLS], b[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = heavy();
    for (int c = 0; c < COLS; c++) w[c] = (float)(uniform() * uniform() * (c % 9 == 0 ? 30 : 1));
    const uint32_t types[] = {KILN_Q2_K, KILN_Q3_K};
    for (size_t t = 0; t < 2; t++) {
        const kiln_codec *cd = kiln_codec_get(types[t]);
        size_t row = kiln_type_row_bytes(types[t], COLS);
        kiln_err err;
        assert_int_equal(kiln_quantize_rows(types[t], x, a, ROWS, COLS, NULL, &err), row * ROWS);
        cd->dequantize_row(a, y, ROWS * COLS);
        double plain = kiln_test_wrmse(x, y, w, ROWS, COLS);
        assert_int_equal(kiln_quantize_rows(types[t], x, a, ROWS, COLS, w, &err), row * ROWS);
        cd->dequantize_row(a, y, ROWS * COLS);
        double weighted = kiln_test_wrmse(x, y, w, ROWS, COLS);
        printf("# %s weighted rmse: reference %.6f, imatrix %.6f\n", kiln_type_name(types[t]),
               plain, weighted);
        assert_true(weighted < plain);
        for (int r = 0; r < ROWS; r++) cd->quantize(x + r * COLS, b + r * row, 1, COLS, w);
        assert_memory_equal(a, b, row * ROWS);
    }
}

/* Per block, the refined search's imatrix-weighted error is at most
 * ggml's; overall it is clearly lower. */
static void test_q2_k_refined(void **state) {
    enum { ROWS = 16, COLS = 512, NB = ROWS * COLS / 256 };
    static float x[ROWS * COLS], ya[ROWS * COLS], yb[ROWS * COLS], w[COLS];
    static kiln_block_q2_k a[NB], b[NB];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = heavy();
    for (int c = 0; c < COLS; c++) w[c] = (float)(uniform() * uniform() * (c % 9 == 0 ? 30 : 1));
    kiln_quantize_q2_k(x, a, ROWS, COLS, w);
    kiln_quantize_q2_k_refined(x, b, ROWS, COLS, w);
    kiln_dequantize_row_q2_k(a, ya, ROWS * COLS);
    kiln_dequantize_row_q2_k(b, yb, ROWS * COLS);
    double ta = 0, tb = 0;
    for (int k = 0; k < NB; k++) {
        double ea = 0, eb = 0;
        for (int i = 256 * k; i < 256 * k + 256; i++) {
            double wc = w[i % COLS];
            ea += wc * ((double)ya[i] - x[i]) * ((double)ya[i] - x[i]);
            eb += wc * ((double)yb[i] - x[i]) * ((double)yb[i] - x[i]);
        }
        assert_true(eb <= ea);
        ta += ea, tb += eb;
    }
    printf("# Q2_K refined / ggml imatrix-weighted rmse: %.4f\n", sqrt(tb / ta));
    assert_true(tb < 0.95 * ta);
    /* without an imatrix it is ggml's reference quantizer */
    kiln_quantize_q2_k(x, a, ROWS, COLS, NULL);
    kiln_quantize_q2_k_refined(x, b, ROWS, COLS, NULL);
    assert_memory_equal(a, b, sizeof a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q2_k_layout),
        cmocka_unit_test(test_q3_k_layout),
        cmocka_unit_test(test_q3_k_exact_grid),
        SIMD_LEVEL_TESTS(test_q8_k_math),
        SIMD_VECTOR_TESTS(test_search_simd_matches_scalar),
        cmocka_unit_test(test_search_properties),
        cmocka_unit_test(test_imatrix_and_threads),
        cmocka_unit_test(test_q2_k_refined),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
