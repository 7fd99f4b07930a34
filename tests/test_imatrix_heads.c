/* tests/test_imatrix_heads.c - the imatrix layout of a dense 3-D weight
 * (deepseek2's per-head attn_k_b / attn_v_b): llama-imatrix keeps one
 * matrix of n_head x columns with one count (tools/imatrix/imatrix.cpp,
 * the MUL_MAT branch), and so does kiln - the runtime's hook hands the
 * heads side by side (runtime/deepseek2.c), the collector stores what it
 * is given - while statistics kept per head (kiln's layout before, in a
 * checkpoint or an imatrix file being merged) join that one matrix when
 * their counts agree, and are refused when they do not.
 * tests/e2e/deepseek2_runtime.sh checks the whole file against
 * llama-imatrix's. */
#include "shared.h"

#include "../imatrix/collect.h"

#define KB "blk.0.attn_k_b.weight"

/* n tokens of 4 heads x 8 columns, x = 1 + column + 10 * head. */
static void hook_heads(kiln_imx_collector *c, int64_t n) {
    float x[3 * 32];
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < 32; j++) x[t * 32 + j] = (float)(1 + j % 8 + 10 * (j / 8));
    kiln_imx_hook(c, KB, -1, x, n, 32);
}

static void test_one_matrix(void **state) {
    (void)state;
    kiln_imx_collector c;
    kiln_imx_collector_init(&c, NULL, false, false);
    hook_heads(&c, 3);
    const kiln_imx_acc *a = kiln_imx_collector_find(&c, KB);
    assert_non_null(a);
    assert_int_equal(a->n, 32);
    assert_int_equal(a->n_mat, 1);
    assert_int_equal(a->counts[0], 3);
    assert_true(a->sum2[8 + 2] == 3.0 * 13 * 13); /* head 1, column 2 */
    kiln_imx_collector_free(&c);
}

/* Per-head statistics (4 matrices of 8) then the hook's one matrix. */
static void test_per_head_joins(void **state) {
    (void)state;
    kiln_err err = {0};
    kiln_imx_collector c;
    kiln_imx_collector_init(&c, NULL, false, false);
    kiln_imx_acc *a = kiln_imx_collector_get(&c, KB, 8, 4, &err);
    assert_non_null(a);
    for (int m = 0; m < 4; m++) a->counts[m] = 5;
    a->sum2[8 + 2] = 7;
    hook_heads(&c, 2);
    assert_false(c.failed);
    a = kiln_imx_collector_find(&c, KB);
    assert_int_equal(a->n, 32);
    assert_int_equal(a->n_mat, 1);
    assert_int_equal(a->counts[0], 7);
    assert_true(a->sum2[8 + 2] == 7 + 2.0 * 13 * 13);
    kiln_imx_collector_free(&c);

    /* counts that disagree: refused, naming the shapes */
    kiln_imx_collector_init(&c, NULL, false, false);
    a = kiln_imx_collector_get(&c, KB, 8, 4, &err);
    a->counts[2] = 1;
    assert_null(kiln_imx_collector_get(&c, KB, 32, 1, &err));
    assert_non_null(strstr(err.msg, "do not fit"));
    kiln_imx_collector_free(&c);
}

/* A per-head file merged into one-matrix statistics. */
static void test_merge_per_head_file(void **state) {
    (void)state;
    kiln_err err = {0};
    kiln_imx_collector c;
    kiln_imx_collector_init(&c, NULL, false, false);
    hook_heads(&c, 1);
    kiln_imatrix *im = kiln_imatrix_new();
    assert_non_null(im);
    kiln_imatrix_entry *e = kiln_imatrix_add(im, KB, 8, 4, false, &err);
    assert_non_null(e);
    for (int m = 0; m < 4; m++) e->counts[m] = 2;
    e->in_sum2[31] = 1;
    assert_int_equal(kiln_imx_collector_add_imatrix(&c, im, &err), 0);
    const kiln_imx_acc *a = kiln_imx_collector_find(&c, KB);
    assert_int_equal(a->n_mat, 1);
    assert_int_equal(a->counts[0], 3);
    assert_true(a->sum2[31] == 1 + 38.0 * 38);
    kiln_imatrix_free(im);
    kiln_imx_collector_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_matrix),
        cmocka_unit_test(test_per_head_joins),
        cmocka_unit_test(test_merge_per_head_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
