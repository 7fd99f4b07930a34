/* tests/test_sensitivity_scan.c - the pure pieces of the sensitivity scan
 * (quantize/sensitivity_scan.c) and the model view it measures through
 * (runtime/override.c):
 *   - the error energy E by hand, and on real codecs: fewer bits, more E;
 *     a column whose activations are 0 costs nothing;
 *   - the estimator is exact when ΔKLD = gain x type factor x E holds,
 *     and the type factors are recovered from fully measured tensors;
 *   - which types get measured;
 *   - a view with one tensor swapped changes the logits, swapping back
 *     restores them bit for bit, and the base model never changes. */
#include "shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/codec.h"
#include "../quantize/sensitivity_scan.h"
#include "../runtime/runtime.h"

static void energy_by_hand(void **state) {
    (void)state;
    const float ref[] = {1, 2, 3, 4}, deq[] = {1.5f, 2, 3, 3};
    const double w[] = {2, 1}, row_w[] = {1, 3};
    /* row 0: 2 * 0.5^2 = 0.5; row 1: 1 * 1^2 = 1, weighted 3 */
    assert_true(fabs(kiln_scan_error_energy(ref, deq, 2, 2, w, row_w) - 3.5) < 1e-12);
    assert_true(fabs(kiln_scan_error_energy(ref, deq, 2, 2, NULL, NULL) - 1.25) < 1e-12);
    assert_true(kiln_scan_error_energy(ref, ref, 2, 2, w, row_w) == 0);
}

/* E of a random 8 x 256 matrix quantized to `type`, columns weighted by w. */
static double energy_of(kiln_type type, const float *x, const double *w) {
    enum { R = 8, N = 256 };
    uint8_t q[R * 300];
    float deq[R * N];
    kiln_err err = {{0}};
    assert_true(kiln_quantize_rows(type, x, q, R, N, NULL, &err) > 0);
    assert_int_equal(kiln_dequantize(type, q, deq, R * N, &err), 0);
    return kiln_scan_error_energy(x, deq, R, N, w, NULL);
}

static void energy_orders_codecs(void **state) {
    (void)state;
    enum { R = 8, N = 256 };
    float x[R * N];
    uint64_t s = 7;
    for (int i = 0; i < R * N; i++) x[i] = kiln_test_gaussf(&s);
    double ones[N], half[N];
    for (int c = 0; c < N; c++) ones[c] = 1, half[c] = c < N / 2 ? 1 : 0;
    const double e2 = energy_of(KILN_Q2_K, x, ones), e4 = energy_of(KILN_Q4_K, x, ones),
                 e6 = energy_of(KILN_Q6_K, x, ones), e8 = energy_of(KILN_Q8_0, x, ones);
    assert_true(e2 > e4 && e4 > e6 && e6 > e8 && e8 > 0);
    /* zero activations on half the columns: only the other half counts */
    const double h4 = energy_of(KILN_Q4_K, x, half);
    assert_true(h4 > 0.3 * e4 && h4 < 0.7 * e4);
}

static void estimate_exact_model(void **state) {
    (void)state;
    /* one tensor, four types; the data follow dkld = 2 * factor * e */
    const double e[] = {8, 4, 2, 1}, factor[] = {1.5, 1, 1, 0.5};
    double d[4];
    bool measured[] = {false, true, false, false};
    for (int i = 0; i < 4; i++) d[i] = measured[i] ? 2 * factor[i] * e[i] : -1;
    kiln_scan_estimate(e, d, measured, factor, 4);
    for (int i = 0; i < 4; i++) assert_true(fabs(d[i] - 2 * factor[i] * e[i]) < 1e-12);
    /* a measurement is kept as it is, even off the model */
    double d2[] = {-1, 5, -1, 7};
    bool m2[] = {false, true, false, true};
    kiln_scan_estimate(e, d2, m2, factor, 4);
    assert_true(d2[1] == 5 && d2[3] == 7);
    /* gain: geometric mean of 5 / 4 and 7 / 0.5 */
    const double g = sqrt(5.0 / 4.0 * 14.0);
    assert_true(fabs(d2[0] - g * 1.5 * 8) < 1e-9 && fabs(d2[2] - g * 2) < 1e-9);
    /* nothing measured above 0, or E = 0: estimated 0 */
    const double e3[] = {8, 0, 2};
    double d3[] = {-1, -1, 0};
    bool m3[] = {false, false, true};
    kiln_scan_estimate(e3, d3, m3, factor, 3);
    assert_true(d3[0] == 0 && d3[1] == 0 && d3[2] == 0);
    double d4[] = {3, -1, -1};
    bool m4[] = {true, false, false};
    kiln_scan_estimate(e3, d4, m4, factor, 3);
    assert_true(d4[1] == 0 && d4[2] > 0);
}

static void type_factors_recovered(void **state) {
    (void)state;
    /* two calibration tensors with gains 3 and 0.01, anchor Q4_K (factor 1) */
    const kiln_type types[] = {KILN_Q2_K, KILN_Q4_K, KILN_Q8_0, KILN_Q2_K, KILN_Q4_K, KILN_Q8_0};
    const double c[] = {2.5, 1, 4}, gain[] = {3, 0.01};
    const double e[] = {10, 3, 0.1, 20, 5, 0.3};
    double d[6];
    for (int i = 0; i < 6; i++) d[i] = gain[i / 3] * c[i % 3] * e[i];
    const bool anchor[] = {false, true, false, false, true, false};
    const size_t start[] = {0, 3, 6};
    double factor[KILN_TYPE_COUNT];
    assert_int_equal(kiln_scan_type_factors(types, e, d, anchor, start, 2, factor), 2);
    assert_true(fabs(factor[KILN_Q2_K] - 2.5) < 1e-9);
    assert_true(fabs(factor[KILN_Q4_K] - 1) < 1e-9);
    assert_true(fabs(factor[KILN_Q8_0] - 4) < 1e-9);
    assert_true(factor[KILN_Q6_K] == 1); /* a type no tensor gives */
    /* with them, one anchor measurement of a third tensor gives every type */
    const double e3[] = {7, 2, 0.05}, f3[] = {2.5, 1, 4};
    double d3[] = {-1, 0.5 * 1 * 2, -1};
    bool m3[] = {false, true, false};
    kiln_scan_estimate(e3, d3, m3, f3, 3);
    assert_true(fabs(d3[0] - 0.5 * 2.5 * 7) < 1e-9 && fabs(d3[2] - 0.5 * 4 * 0.05) < 1e-9);
    /* no anchor measured above 0: that tensor is left out */
    const double dz[] = {1, 0, 1};
    const size_t s1[] = {0, 3};
    assert_int_equal(kiln_scan_type_factors(types, e, dz, anchor, s1, 1, factor), 0);
    assert_true(factor[KILN_Q2_K] == 1);
}

static void picks(void **state) {
    (void)state;
    bool p[12];
    kiln_scan_pick_measured(12, 1, p);
    for (int i = 0; i < 12; i++) assert_int_equal(p[i], i == 5);
    kiln_scan_pick_measured(12, 2, p);
    for (int i = 0; i < 12; i++) assert_int_equal(p[i], i == 2 || i == 8);
    kiln_scan_pick_measured(4, 1, p);
    for (int i = 0; i < 4; i++) assert_int_equal(p[i], i == 1);
    kiln_scan_pick_measured(4, 4, p);
    for (int i = 0; i < 4; i++) assert_true(p[i]);
    kiln_scan_pick_measured(3, 9, p);
    for (int i = 0; i < 3; i++) assert_true(p[i]);
}

static float *eval_logits(const kiln_model *m, const int32_t *ids, int64_t n) {
    kiln_err err = {{0}};
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 16}, &err);
    if (!c) fail_msg("%s", err.msg);
    float *lg = malloc((size_t)(n * m->hp.n_vocab) * sizeof *lg);
    assert_non_null(lg);
    if (kiln_eval(c, ids, n, lg, &err)) fail_msg("%s", err.msg);
    kiln_ctx_free(c);
    return lg;
}

static void view_swaps(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path("golden/gguf/llama-f32.gguf"), &err);
    if (!m) fail_msg("%s", err.msg);
    const int32_t ids[] = {1, 10, 200, 37, 512, 99, 7, 300};
    const int64_t n = 8, nv = m->hp.n_vocab;
    assert_true(nv > 512);
    float *base = eval_logits(m, ids, n);
    kiln_model *v = kiln_model_view(m, &err);
    assert_non_null(v);
    /* blk.1.ffn_down as Q4_K */
    const kiln_tensor *t = m->layers[1].ffn_down;
    uint8_t *q = malloc(kiln_type_row_bytes(KILN_Q4_K, (uint64_t)t->ne[0]) * (uint64_t)t->ne[1]);
    assert_non_null(q);
    const size_t qb = kiln_quantize_rows(KILN_Q4_K, (const float *)t->data, q, t->ne[1], t->ne[0], NULL, &err);
    assert_true(qb > 0);
    kiln_tensor repl = *t;
    repl.type = KILN_Q4_K, repl.data = q, repl.nbytes = qb;
    assert_int_equal(kiln_model_view_swap(v, t, &repl), 1);
    float *swapped = eval_logits(v, ids, n), *still = eval_logits(m, ids, n);
    assert_memory_equal(still, base, (size_t)(n * nv) * sizeof *base); /* the base model is untouched */
    double diff = 0;
    for (int64_t i = 0; i < n * nv; i++) diff += fabs((double)swapped[i] - base[i]);
    assert_true(diff > 0);
    assert_int_equal(kiln_model_view_swap(v, &repl, t), 1);
    float *back = eval_logits(v, ids, n);
    assert_memory_equal(back, base, (size_t)(n * nv) * sizeof *base);
    /* a tensor the forward pass never reads is not found */
    kiln_tensor other = *t;
    assert_int_equal(kiln_model_view_swap(v, &other, &repl), 0);
    free(base), free(swapped), free(still), free(back), free(q);
    kiln_model_view_free(v);
    kiln_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(energy_by_hand),         cmocka_unit_test(energy_orders_codecs),
        cmocka_unit_test(estimate_exact_model),   cmocka_unit_test(type_factors_recovered),
        cmocka_unit_test(picks),                  cmocka_unit_test(view_swaps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
