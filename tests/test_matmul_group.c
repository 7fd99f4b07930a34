/* tests/test_matmul_group.c - kiln_matmul_group: several products of one
 * input in one OpenMP region (runtime/matmul.c) must give every product
 * the bits kiln_matmul gives it alone.
 *
 * The groups are the forward pass's (attention's q, k and v; the FFN's
 * gate and up) and the mixtures that test the sharing of the converted
 * input: products of one type (one conversion, one set of panel
 * activations), of types with one vec_dot_type made two ways (Q4_K's
 * repacked 4-token groups against Q6_K's plain Q8_K), of different
 * vec_dot_types (Q8_0 against Q8_K), float and quantized together, F16
 * products sharing their rounded input; at one token (decode: direct
 * kernels, each thread rounding its own F16 input), a few tokens and a
 * batch (panels, tinyBLAS). Each SIMD level is its own case, skipped
 * where the CPU lacks it (tests/simd_levels.h). Needs no ../shared. */
#include "shared.h"
#include "simd_levels.h"

#include "../core/types.h"
#include "../codec/codec.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float gauss(void) { return kiln_test_gaussf(&rng); }

typedef struct wmat {
    uint32_t type;
    int64_t n_out;
    uint8_t *w;
} wmat;

/* n_out random rows of n_in weights quantized to type (an importance
 * vector for the types that need one). */
static wmat make_w(uint32_t type, int64_t n_in, int64_t n_out) {
    wmat m = {type, n_out, NULL};
    const int64_t row_bytes = (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in);
    float *src = malloc((size_t)(n_in * n_out) * sizeof(float)), *imat = malloc((size_t)n_in * sizeof(float));
    assert_non_null(src);
    assert_non_null(imat);
    for (int64_t i = 0; i < n_in * n_out; i++) src[i] = 0.02f * gauss();
    for (int64_t i = 0; i < n_in; i++) imat[i] = 1.0f + 0.5f * (float)(i % 7);
    m.w = malloc((size_t)(row_bytes * n_out));
    assert_non_null(m.w);
    kiln_err err;
    assert_int_equal(kiln_quantize_rows(type, src, m.w, n_out, n_in, imat, &err), (size_t)(row_bytes * n_out));
    free(src);
    free(imat);
    return m;
}

/* The group's outputs against each product alone: the same bits. */
static void check_group(const uint32_t *types, const int64_t *n_out, int n, int64_t n_in, int64_t n_tokens,
                        kiln_numeric_mode mode) {
    wmat m[KILN_MM_GROUP_MAX];
    kiln_mm mm[KILN_MM_GROUP_MAX];
    float *alone[KILN_MM_GROUP_MAX];
    float *x = malloc((size_t)(n_tokens * n_in) * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n_tokens * n_in; i++) x[i] = gauss() * (i % 53 == 0 ? 9.0f : 1.0f);
    for (int i = 0; i < n; i++) {
        m[i] = make_w(types[i], n_in, n_out[i]);
        const size_t ny = (size_t)(n_tokens * n_out[i]);
        alone[i] = malloc(ny * sizeof(float));
        mm[i] = (kiln_mm){types[i], m[i].w, n_out[i], malloc(ny * sizeof(float))};
        assert_non_null(alone[i]);
        assert_non_null(mm[i].y);
        for (size_t j = 0; j < ny; j++) mm[i].y[j] = NAN;
        assert_int_equal(kiln_matmul(types[i], m[i].w, n_in, n_out[i], x, n_tokens, alone[i], mode), 0);
    }
    int bad = 7;
    assert_int_equal(kiln_matmul_group(mm, n, n_in, x, n_tokens, mode, &bad), 0);
    assert_int_equal(bad, -1);
    for (int i = 0; i < n; i++) {
        if (memcmp(mm[i].y, alone[i], (size_t)(n_tokens * n_out[i]) * sizeof(float)))
            fail_msg("product %d (%s, %lld rows) of a group of %d, %lld tokens, %s mode: not the bits of kiln_matmul",
                     i, kiln_type_name(types[i]), (long long)n_out[i], n, (long long)n_tokens,
                     mode == KILN_NUM_GGML ? "ggml" : "exact");
        free(alone[i]);
        free(mm[i].y);
        free(m[i].w);
    }
    free(x);
}

static const int64_t TOKENS[] = {1, 3, 9, 64};

/* The groups of the forward pass and the mixtures above, in GGML mode,
 * at every token count of TOKENS. */
static void test_group_bits(void **state) {
    simd_level_enter(state);
    static const struct {
        uint32_t types[KILN_MM_GROUP_MAX];
        int64_t n_out[KILN_MM_GROUP_MAX];
        int n;
    } groups[] = {
        {{KILN_F32, KILN_F32, KILN_F32}, {256, 128, 128}, 3},        /* llama-f32's q, k, v */
        {{KILN_F32, KILN_F32}, {512, 512}, 2},                       /* gate, up */
        {{KILN_F16, KILN_BF16, KILN_F16, KILN_F32}, {64, 36, 21, 8}, 4}, /* rounded inputs shared by type */
        {{KILN_Q4_K, KILN_Q4_K, KILN_Q4_K}, {256, 128, 128}, 3},     /* Q4_K_M's q, k, v */
        {{KILN_Q4_K, KILN_Q4_K, KILN_Q6_K}, {256, 128, 128}, 3},     /* ... with a Q6_K v */
        {{KILN_Q6_K, KILN_Q4_K, KILN_Q2_K}, {32, 24, 40}, 3},        /* repacked and not */
        {{KILN_Q8_0, KILN_Q4_K, KILN_Q4_0, KILN_IQ4_NL}, {48, 16, 32, 20}, 4}, /* Q8_0 and Q8_K inputs */
        {{KILN_F32, KILN_Q4_K}, {20, 32}, 2},                        /* float and quantized */
    };
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t t = 0; t < sizeof TOKENS / sizeof TOKENS[0]; t++)
            check_group(groups[g].types, groups[g].n_out, groups[g].n, 256, TOKENS[t], KILN_NUM_GGML);
}

/* KILN_NUM_EXACT: each product as kiln_matmul computes it. */
static void test_group_exact(void **state) {
    (void)state;
    const uint32_t types[] = {KILN_F32, KILN_Q4_K, KILN_F16};
    const int64_t n_out[] = {40, 16, 24};
    for (size_t t = 0; t < sizeof TOKENS / sizeof TOKENS[0]; t++) check_group(types, n_out, 3, 256, TOKENS[t], KILN_NUM_EXACT);
}

/* A product without a kernel, or a shape its type cannot take, fails the
 * group and names its index; so does a group too large. */
static void test_group_errors(void **state) {
    (void)state;
    float x[512] = {0}, y[64];
    wmat a = make_w(KILN_F32, 256, 8);
    kiln_mm mm[KILN_MM_GROUP_MAX + 1] = {{KILN_F32, a.w, 8, y}, {KILN_TYPE_COUNT + 5, a.w, 8, y + 8}};
    int bad = 7;
    assert_int_equal(kiln_matmul_group(mm, 2, 256, x, 1, KILN_NUM_GGML, &bad), -1);
    assert_int_equal(bad, 1);
    mm[1] = (kiln_mm){KILN_Q4_K, a.w, 8, y + 8}; /* 255 is no whole number of Q4_K blocks */
    assert_int_equal(kiln_matmul_group(mm + 1, 1, 255, x, 1, KILN_NUM_GGML, &bad), -1);
    assert_int_equal(bad, 0);
    for (int i = 0; i <= KILN_MM_GROUP_MAX; i++) mm[i] = mm[0];
    assert_int_equal(kiln_matmul_group(mm, KILN_MM_GROUP_MAX + 1, 256, x, 1, KILN_NUM_GGML, &bad), -1);
    assert_int_equal(bad, -1);
    free(a.w);
}

/* A buffer that cannot be had fails the group (-1, no index) or leaves
 * every output with its bits, never 0 with outputs unwritten. */
static void test_group_alloc_failure(void **state) {
    (void)state;
    const uint32_t types[] = {KILN_Q4_K, KILN_Q6_K, KILN_F16};
    const int64_t n_out[] = {32, 16, 8}, n_in = 256, T = 9;
    wmat m[3];
    float *x = malloc((size_t)(T * n_in) * sizeof(float)), *ref[3];
    kiln_mm mm[3];
    assert_non_null(x);
    for (int64_t i = 0; i < T * n_in; i++) x[i] = gauss();
    for (int i = 0; i < 3; i++) {
        m[i] = make_w(types[i], n_in, n_out[i]);
        ref[i] = malloc((size_t)(T * n_out[i]) * sizeof(float));
        mm[i] = (kiln_mm){types[i], m[i].w, n_out[i], malloc((size_t)(T * n_out[i]) * sizeof(float))};
        assert_int_equal(kiln_matmul(types[i], m[i].w, n_in, n_out[i], x, T, ref[i], KILN_NUM_GGML), 0);
    }
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 3; i++)
            for (int64_t j = 0; j < T * n_out[i]; j++) mm[i].y[j] = NAN;
        int bad = 7;
        kiln_kernel_alloc_fail_after(k);
        const int rc = kiln_matmul_group(mm, 3, n_in, x, T, KILN_NUM_GGML, &bad);
        kiln_kernel_alloc_fail_after(-1);
        assert_int_equal(bad, -1);
        if (rc == 0) {
            for (int i = 0; i < 3; i++)
                if (memcmp(mm[i].y, ref[i], (size_t)(T * n_out[i]) * sizeof(float)))
                    fail_msg("allocation %d refused: returned 0 with wrong outputs", k);
        } else {
            assert_int_equal(rc, -1);
        }
    }
    for (int i = 0; i < 3; i++) {
        free(ref[i]);
        free(mm[i].y);
        free(m[i].w);
    }
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_group_bits),
        cmocka_unit_test(test_group_exact),
        cmocka_unit_test(test_group_errors),
        cmocka_unit_test(test_group_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
