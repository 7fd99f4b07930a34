/* tests/test_gemma.c - the Gemma 2 / 3 pieces of the runtime on their own:
 * which layers slide and where a window starts (llama.cpp's
 * set_swa_pattern and standard SWA mask), soft-capping, the masked scores
 * attention softmaxes, and ggml's geglu. The end-to-end checks against
 * llama.cpp (convert, quantize, logits, perplexity, imatrix of trained
 * tiny Gemma 3 and Gemma 2 models) are in tests/e2e/gemma.sh. */
#include "shared.h"

#include "../runtime/forward_impl.h"

static kiln_hparams swa_hp(int64_t n_swa, int64_t period) {
    kiln_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_swa = n_swa;
    hp.swa_period = period;
    return hp;
}

/* gemma3: 5 sliding layers, then a global one; gemma2: alternating;
 * no window: nothing slides; period 0: everything does. */
static void test_layer_pattern(void **state) {
    (void)state;
    kiln_hparams g3 = swa_hp(512, 6), g2 = swa_hp(4096, 2), none = swa_hp(0, 6), all = swa_hp(8, 0);
    const char *want3 = "SSSSSGSSSSSGS", *want2 = "SGSGSG";
    for (int64_t il = 0; want3[il]; il++) assert_int_equal(kiln_layer_slides(&g3, il), want3[il] == 'S');
    for (int64_t il = 0; want2[il]; il++) assert_int_equal(kiln_layer_slides(&g2, il), want2[il] == 'S');
    for (int64_t il = 0; il < 12; il++) {
        assert_false(kiln_layer_slides(&none, il));
        assert_true(kiln_layer_slides(&all, il));
    }
}

/* A query at pos sees cells p with pos - p < n_swa: the n_swa cells up to
 * and including its own. */
static void test_window_start(void **state) {
    (void)state;
    kiln_hparams hp = swa_hp(32, 6);
    assert_int_equal(kiln_window_start(&hp, 0), 0);
    assert_int_equal(kiln_window_start(&hp, 31), 0);
    assert_int_equal(kiln_window_start(&hp, 32), 1);
    assert_int_equal(kiln_window_start(&hp, 100), 69);
}

/* cap * tanh(x / cap) with ggml's three roundings; bounded by cap, odd,
 * close to x for small x. */
static void test_softcap(void **state) {
    (void)state;
    float x[] = {0.0f, 0.5f, -0.5f, 10.0f, -10.0f, 49.0f, 1e4f, -1e4f};
    const size_t n = sizeof x / sizeof x[0];
    float y[sizeof x / sizeof x[0]];
    memcpy(y, x, sizeof x);
    kiln_softcap(y, (int64_t)n, 50.0f);
    for (size_t i = 0; i < n; i++) {
        const float want = tanhf(x[i] * (1.0f / 50.0f)) * 50.0f;
        assert_memory_equal(&y[i], &want, sizeof want);
        assert_true(fabsf(y[i]) <= 50.0f);
    }
    assert_true(y[0] == 0.0f && y[1] == -y[2] && y[6] == 50.0f);
    assert_true(fabsf(y[1] - 0.5f) < 1e-4f);
}

/* Scores below the window start become -INFINITY, the rest are capped;
 * softmax then gives the masked cells exactly 0 and the visible ones a
 * sum of 1. */
static void test_mask_scores(void **state) {
    (void)state;
    float s[8] = {100.0f, 3.0f, 1.0f, 2.0f, 0.5f, -1.0f, 4.0f, 60.0f};
    kiln_mask_scores(s, 3, 8, 30.0f);
    for (int j = 0; j < 3; j++) assert_true(isinf(s[j]) && s[j] < 0);
    assert_true(s[7] > 28.9f && s[7] < 28.95f); /* 30 tanh(2) */
    kiln_softmax(s, 8, 1.0f, KILN_NUM_GGML);
    double sum = 0.0;
    for (int j = 0; j < 8; j++) {
        if (j < 3) assert_true(s[j] == 0.0f);
        sum += s[j];
    }
    assert_true(fabs(sum - 1.0) < 1e-6);
    /* no cap, no window: untouched */
    float t[3] = {1.0f, 2.0f, 3.0f};
    kiln_mask_scores(t, 0, 3, 0.0f);
    assert_true(t[0] == 1.0f && t[1] == 2.0f && t[2] == 3.0f);
}

/* ggml_vec_geglu_f32: 0 (not 0 * u) below -10, gelu(g) * u elsewhere,
 * g * u from 10 on; aliasing the output with the gate is allowed. */
static void test_geglu(void **state) {
    (void)state;
    float g[300], u[300], y[300], gl[300];
    for (int i = 0; i < 300; i++) {
        g[i] = -12.0f + 0.08f * (float)i;
        u[i] = (i % 3 == 0) ? -1.5f : 0.75f;
    }
    kiln_gelu(g, gl, 300, KILN_NUM_GGML);
    kiln_geglu(g, u, y, 300, KILN_NUM_GGML);
    for (int i = 0; i < 300; i++) {
        if (g[i] <= -10.0f) {
            assert_true(y[i] == 0.0f && !signbit(y[i]));
        } else {
            const float want = gl[i] * u[i];
            assert_memory_equal(&y[i], &want, sizeof want);
        }
    }
    assert_true(y[299] == g[299] * u[299]); /* g = 11.92: the identity branch */
    memcpy(gl, g, sizeof g);
    kiln_geglu(gl, u, gl, 300, KILN_NUM_GGML);
    assert_memory_equal(gl, y, sizeof y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_pattern), cmocka_unit_test(test_window_start),
        cmocka_unit_test(test_softcap),       cmocka_unit_test(test_mask_scores),
        cmocka_unit_test(test_geglu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
