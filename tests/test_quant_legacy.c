/* tests/test_quant_legacy.c - what the generic codec suites cannot see in
 * Q8_0, Q4_0, Q5_0 and IQ4_NL: exact bytes for hand-made blocks (ggml's
 * rounding, tie and sign rules, the Q5_0 bit layout), the IQ4_NL table
 * choice right at its switch points, and every SIMD level agreeing with
 * the scalar code on the row reference quantizers and on dequantization of
 * arbitrary blocks. Needs no ../shared. */
#include "shared.h"
#include "simd_levels.h"

#include <math.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/quants.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void) { return kiln_test_xorshift64(&rng); }
static float uniform(void) { return (float)((next() >> 11) * (1.0 / 9007199254740992.0)); }

/* Q8_0 rounds x / d half away from zero (roundf), including the float just
 * below one half, which a naive "add 0.5 and truncate" gets wrong. */
static void test_q8_0_rounding(void **state) {
    simd_level_enter(state);
    float x[32] = {127.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f, -0.49999997f,
                   126.5f, -126.5f, 3.4999998f, -3.5000002f, 0.0f, -0.0f, 64.5f};
    for (int j = 16; j < 32; j++) x[j] = (float)(j - 16) * 7.25f - 50.0f;
    kiln_block_q8_0 b;
    kiln_quantize_row_q8_0_ref(x, &b, 32);
    assert_int_equal(b.d, kiln_fp32_to_fp16(1.0f)); /* amax 127: d = 1, x / d = x */
    for (int j = 0; j < 32; j++) assert_int_equal(b.qs[j], (int)roundf(x[j]));
}

/* Q4_0 / Q5_0 take the scale from the first value of largest magnitude,
 * so a tie between -0.5 and +0.5 gives a positive d; an all-zero block
 * keeps ggml's -0 scale and the middle level. */
static void test_q4_q5_scale_rules(void **state) {
    simd_level_enter(state);
    float tie[32] = {0}, zero[32];
    tie[3] = -0.5f;
    tie[10] = 0.5f;
    tie[20] = 0.25f;
    for (int j = 0; j < 32; j++) zero[j] = -0.0f;
    kiln_block_q4_0 q4;
    kiln_quantize_row_q4_0_ref(tie, &q4, 32);
    assert_int_equal(q4.d, kiln_fp32_to_fp16(0.0625f));
    assert_int_equal(q4.qs[3] & 15, 0);  /* -0.5 = d * (0 - 8) */
    assert_int_equal(q4.qs[10] & 15, 15); /* +0.5 clips to level 15 */
    assert_int_equal(q4.qs[4] >> 4, 12); /* weight 20: 0.25 / d + 8 */
    kiln_quantize_row_q4_0_ref(zero, &q4, 32);
    assert_int_equal(q4.d, 0x8000);
    for (int j = 0; j < 16; j++) assert_int_equal(q4.qs[j], 0x88);

    kiln_block_q5_0 q5;
    kiln_quantize_row_q5_0_ref(tie, &q5, 32);
    assert_int_equal(q5.d, kiln_fp32_to_fp16(0.03125f));
    kiln_quantize_row_q5_0_ref(zero, &q5, 32);
    assert_int_equal(q5.d, 0x8000);
}

/* Levels 0..31 in weight order: checks the nibble pairing and the qh bit
 * of every weight, and that dequantization gives the values back. */
static void test_q5_0_layout(void **state) {
    simd_level_enter(state);
    float x[32], y[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.25f;
    kiln_block_q5_0 b;
    kiln_quantize_row_q5_0_ref(x, &b, 32);
    assert_int_equal(b.d, kiln_fp32_to_fp16(0.25f));
    for (int j = 0; j < 16; j++) assert_int_equal(b.qs[j], j | j << 4);
    uint8_t qh[4] = {0x00, 0x00, 0xff, 0xff};
    assert_memory_equal(b.qh, qh, 4);
    kiln_dequantize_row_q5_0(&b, y, 32);
    assert_memory_equal(x, y, sizeof x);
}

/* The table entry nearest to x, ties to the upper one, in exact arithmetic
 * (equal to ggml's float comparison near the midpoints tested here). */
static int nearest_exact(double x) {
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (fabs(x - kiln_iq4nl_values[i]) <= fabs(x - kiln_iq4nl_values[best])) best = i;
    return best;
}

/* With the largest |x| = 127 the reference quantizer's first scale is
 * exactly 1, so the stored indices are the table choice for x itself.
 * Every midpoint and its float neighbours must land on the right side. */
static void test_iq4_nl_switch_points(void **state) {
    simd_level_enter(state);
    float v[15 * 5];
    int n = 0;
    for (int i = 1; i < 16; i++) {
        float m = 0.5f * (kiln_iq4nl_values[i - 1] + kiln_iq4nl_values[i]);
        float lo = nextafterf(m, -INFINITY), hi = nextafterf(m, INFINITY);
        float vals[5] = {nextafterf(lo, -INFINITY), lo, m, hi, nextafterf(hi, INFINITY)};
        for (int k = 0; k < 5; k++) v[n++] = vals[k];
    }
    for (int start = 0; start < n; start += 31) {
        float x[32];
        x[0] = -127.0f;
        for (int j = 1; j < 32; j++) x[j] = v[(start + j - 1) % n];
        kiln_block_iq4_nl b;
        kiln_quantize_row_iq4_nl_ref(x, &b, 32);
        for (int j = 1; j < 32; j++) {
            int got = j < 16 ? b.qs[j] & 15 : b.qs[j - 16] >> 4;
            if (got != nearest_exact(x[j]))
                fail_msg("%s: %.9g -> index %d, want %d", kiln_simd_name(kiln_simd()), x[j], got,
                         nearest_exact(x[j]));
        }
    }
}

/* An imatrix that is zero over a block leaves no weight to fit; ggml would
 * divide 0 by 0 there. kiln keeps the first guess: finite, and close. */
static void test_iq4_nl_zero_weights(void **state) {
    float x[64], w[64], y[64];
    for (int j = 0; j < 64; j++) {
        x[j] = uniform() - 0.5f;
        w[j] = j < 32 ? 0.0f : 1.0f;
    }
    kiln_block_iq4_nl b[2];
    kiln_quantize_iq4_nl(x, b, 1, 64, w);
    kiln_dequantize_row_iq4_nl(b, y, 64);
    for (int j = 0; j < 64; j++) {
        assert_true(isfinite(y[j]));
        assert_true(fabsf(y[j] - x[j]) < 0.1f);
    }
}

/* Rows mixing ordinary blocks with the awkward ones: zeros, -0, one
 * outlier, subnormals, values so small that 1/d overflows, ties. */
static void fill_awkward(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int64_t blk = i / 32;
        switch (blk % 7) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = -0.0f; break;
        case 2: x[i] = (uniform() - 0.5f) * (i % 32 == 5 ? 1e4f : 1.0f); break;
        case 3: x[i] = (float)((i % 5) - 2) * 1e-40f; break;
        case 4: x[i] = (float)((i % 9) - 4) * 3e-38f; break;
        case 5: x[i] = (float)((int)(uniform() * 16) - 8) * 0.5f; break;
        default: x[i] = (uniform() - 0.5f) * 0.04f; break;
        }
    }
}

typedef void (*row_ref_fn)(const float *, void *, int64_t);

/* The row reference quantizers (ggml's *_ref, not reached through the codec
 * table for IQ4_NL) give the scalar bytes at this case's SIMD level. */
static void test_ref_simd_matches_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const struct {
        uint32_t type;
        row_ref_fn fn;
    } refs[] = {
        {KILN_Q8_0, kiln_quantize_row_q8_0_ref},
        {KILN_Q4_0, kiln_quantize_row_q4_0_ref},
        {KILN_Q5_0, kiln_quantize_row_q5_0_ref},
        {KILN_IQ4_NL, kiln_quantize_row_iq4_nl_ref},
    };
    int64_t n = 32 * 7 * 40;
    float *x = malloc((size_t)n * 4);
    uint8_t *q0 = malloc((size_t)n * 2), *q1 = malloc((size_t)n * 2);
    for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++) {
        size_t bytes = kiln_type_row_bytes(refs[r].type, (uint64_t)n);
        for (int round = 0; round < 2; round++) {
            if (round == 0) fill_awkward(x, n);
            else for (int64_t i = 0; i < n; i++) x[i] = (uniform() - 0.5f) * 0.1f;
            kiln_simd_set(KILN_SIMD_SCALAR);
            refs[r].fn(x, q0, n);
            kiln_simd_set(lvl);
            refs[r].fn(x, q1, n);
            if (memcmp(q0, q1, bytes))
                fail_msg("%s ref: %s differs from scalar", kiln_type_name(refs[r].type), kiln_simd_name(lvl));
        }
    }
    free(x);
    free(q0);
    free(q1);
}

/* Dequantizing random bytes (any finite scale, every level pattern) gives
 * the scalar floats at this case's SIMD level. */
static void test_dequant_simd_matches_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const uint32_t types[] = {KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_IQ4_NL};
    int64_t n = 32 * 257;
    float *d0 = malloc((size_t)n * 4), *d1 = malloc((size_t)n * 4);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const kiln_type_info *ti = kiln_type_get(types[t]);
        size_t bytes = kiln_type_row_bytes(types[t], (uint64_t)n);
        uint8_t *q = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) q[i] = (uint8_t)next();
        for (size_t b = 0; b < bytes / ti->type_size; b++) {
            uint16_t h;
            memcpy(&h, q + b * ti->type_size, 2); /* d is the first field of all four */
            if ((h & 0x7c00) == 0x7c00) h &= 0xbfff; /* keep d finite */
            memcpy(q + b * ti->type_size, &h, 2);
        }
        kiln_simd_set(KILN_SIMD_SCALAR);
        kiln_codec_get(types[t])->dequantize_row(q, d0, n);
        kiln_simd_set(lvl);
        kiln_codec_get(types[t])->dequantize_row(q, d1, n);
        if (memcmp(d0, d1, (size_t)n * 4))
            fail_msg("%s dequantize: %s differs from scalar", ti->name, kiln_simd_name(lvl));
        free(q);
    }
    free(d0);
    free(d1);
}

/* ggml ignores the imatrix for Q8_0; so does kiln. */
static void test_q8_0_ignores_imatrix(void **state) {
    float x[256], w[256];
    uint8_t a[8 * 34], b[8 * 34];
    for (int i = 0; i < 256; i++) {
        x[i] = uniform() - 0.5f;
        w[i] = uniform() * 10;
    }
    kiln_quantize_q8_0(x, a, 1, 256, NULL);
    kiln_quantize_q8_0(x, b, 1, 256, w);
    assert_memory_equal(a, b, sizeof a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_q8_0_rounding),
        SIMD_LEVEL_TESTS(test_q4_q5_scale_rules),
        SIMD_LEVEL_TESTS(test_q5_0_layout),
        SIMD_LEVEL_TESTS(test_iq4_nl_switch_points),
        cmocka_unit_test(test_iq4_nl_zero_weights),
        SIMD_VECTOR_TESTS(test_ref_simd_matches_scalar),
        SIMD_VECTOR_TESTS(test_dequant_simd_matches_scalar),
        cmocka_unit_test(test_q8_0_ignores_imatrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
