/* tests/test_act_q8k.c - a batch's activations in Q8_K (runtime/act_quant.c:
 * kiln_act_q8_k, ggml's quantize_row_q8_K_ref, and kiln_act_q8_k_x4, the
 * sign rule of ggml_quantize_mat_q8_K_4x8) give the same bytes at every
 * SIMD level as the scalar code: on Gaussian blocks, on blocks whose
 * largest magnitude occurs as both -amax and +amax (either first), on a
 * block of zeros, of tiny values, and with a NaN or an infinity in it;
 * and the panel kernels' packing of them (kiln_pact_pack).
 * Each level is its own case, skipped where the CPU lacks it;
 * test_tie_rules shows the two functions tell a tie apart, so that the
 * cases above can fail on the sign. */
#include "shared.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../core/types.h"
#include "../runtime/kernels.h"
#include "../runtime/vecdot.h"

#define NB 12

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* NB blocks of 256, each made a different way (see the header). */
static float *blocks(void) {
    float *x = malloc((size_t)(NB * KILN_QK_K) * sizeof *x);
    assert_non_null(x);
    for (int i = 0; i < NB * KILN_QK_K; i++) x[i] = kiln_test_gaussf(&rng) * (i % 11 == 0 ? 8.0f : 1.0f);
    float *b = x + 2 * KILN_QK_K; /* -amax first, +amax later */
    b[17] = -100.0f, b[200] = 100.0f; /* beyond every Gaussian value */
    b += KILN_QK_K; /* +amax first, -amax later */
    b[3] = 100.0f, b[100] = -100.0f;
    b += KILN_QK_K; /* -amax only */
    b[40] = -120.25f;
    b += KILN_QK_K; /* zeros */
    memset(b, 0, KILN_QK_K * sizeof *b);
    b += KILN_QK_K; /* tiny */
    for (int i = 0; i < KILN_QK_K; i++) b[i] *= 1e-30f;
    b += KILN_QK_K; /* a NaN */
    b[77] = NAN;
    b += KILN_QK_K; /* an infinity */
    b[5] = -INFINITY;
    b += KILN_QK_K; /* values halfway between levels after scaling: 127 * k / 254 of amax */
    for (int i = 0; i < KILN_QK_K; i++) b[i] = (float)(i % 255 - 127) / 254.0f;
    b[0] = 1.0f;
    return x;
}

static void quantize_both(const float *x, kiln_block_q8_k *ref, kiln_block_q8_k *x4) {
    kiln_act_q8_k(x, ref, NB * KILN_QK_K);
    kiln_act_q8_k_x4(x, x4, NB * KILN_QK_K);
}

static void test_levels(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    float *x = blocks();
    kiln_block_q8_k want[NB], want4[NB], got[NB], got4[NB];
    memset(want, 0xAA, sizeof want), memset(want4, 0xAA, sizeof want4);
    memset(got, 0x55, sizeof got), memset(got4, 0x55, sizeof got4);
    kiln_simd_set(KILN_SIMD_SCALAR);
    quantize_both(x, want, want4);
    kiln_simd_set(lvl);
    quantize_both(x, got, got4);
    for (int b = 0; b < NB; b++) {
        if (memcmp(&got[b], &want[b], sizeof got[b])) fail_msg("kiln_act_q8_k: block %d differs from the scalar's", b);
        if (memcmp(&got4[b], &want4[b], sizeof got4[b]))
            fail_msg("kiln_act_q8_k_x4: block %d differs from the scalar's", b);
    }
    free(x);
}

/* The panel kernels' activations (kiln_pact_pack: bytes q + 128, the
 * scales, the bsums) at every level against the scalar level, from Q8_K
 * and from Q8_0. */
static void test_pact_pack(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const uint32_t types[] = {KILN_Q4_K, KILN_Q4_0};
    float *x = blocks();
    for (int ti = 0; ti < 2; ti++) {
        const kiln_qtype *qt = &kiln_kernels_get(types[ti])->qt;
        const int64_t n = NB * KILN_QK_K, nb = n / qt->block;
        uint8_t *act = malloc((size_t)(nb * qt->act_bytes)), *u[2];
        float *d[2];
        int16_t bs[2][NB * 16];
        assert_non_null(act);
        kiln_act_row(qt, x, act, n);
        for (int k = 0; k < 2; k++) {
            u[k] = malloc((size_t)n), d[k] = malloc((size_t)nb * sizeof(float));
            assert_non_null(u[k]);
            assert_non_null(d[k]);
            kiln_simd_set(k ? lvl : KILN_SIMD_SCALAR);
            kiln_pact_pack(qt, act, n, u[k], d[k], qt->act_type == KILN_Q8_K ? bs[k] : NULL);
        }
        assert_memory_equal(u[0], u[1], (size_t)n);
        assert_memory_equal(d[0], d[1], (size_t)nb * sizeof(float));
        if (qt->act_type == KILN_Q8_K) assert_memory_equal(bs[0], bs[1], sizeof bs[0]);
        const int8_t q1 = qt->act_type == KILN_Q8_K ? ((const kiln_block_q8_k *)act)->qs[1]
                                                    : ((const kiln_block_q8_0 *)act)->qs[1];
        assert_int_equal(u[0][1], (uint8_t)(q1 ^ 0x80)); /* and it is q + 128 */
        free(act), free(u[0]), free(u[1]), free(d[0]), free(d[1]);
    }
    free(x);
}

/* The tie blocks: the reference keeps the first extreme's sign, the 4x8
 * rule +amax's; with +amax first, or no +amax, they agree. */
static void test_tie_rules(void **state) {
    (void)state;
    float *x = blocks();
    kiln_block_q8_k ref[NB], x4[NB];
    quantize_both(x, ref, x4);
    assert_true(ref[2].d > 0 && x4[2].d < 0);
    assert_memory_not_equal(&ref[2], &x4[2], sizeof ref[2]);
    assert_memory_equal(&ref[3], &x4[3], sizeof ref[3]);
    assert_memory_equal(&ref[4], &x4[4], sizeof ref[4]);
    assert_true(ref[4].d > 0);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_levels),
        SIMD_LEVEL_TESTS(test_pact_pack),
        cmocka_unit_test(test_tie_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
