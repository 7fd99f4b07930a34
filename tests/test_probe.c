/* tests/test_probe.c - layer probes (golden/probe.h) and the runtime
 * observers they stand on (runtime.h's output and layer hooks).
 *
 * The accumulator's figures are checked on vectors whose cosine and
 * relative RMS are known in closed form; the observers must leave the
 * logits bit-identical and report every block and every product (experts
 * with the tokens routed to them); a probe of a model against itself must
 * give cosine exactly 1, rel_rms 0 and KLD 0, and a probe's figures must not
 * depend on the thread count. The last three need ../shared's fixtures. */
#include "shared.h"

#include <omp.h>

#include "../golden/probe.h"
#include "../runtime/runtime.h"

static void test_sums_of_equal_vectors_are_exact(void **state) {
    (void)state;
    float a[1000];
    srand(7);
    for (int i = 0; i < 1000; i++) a[i] = (float)((double)rand() / RAND_MAX - 0.5) * (float)(1 + i % 17);
    kiln_probe_sums s = {0};
    kiln_probe_sums_add(&s, a, a, 1000);
    assert_true(s.n == 1000);
    assert_true(kiln_probe_cosine(&s) == 1.0);
    assert_true(kiln_probe_rel_rms(&s) == 0.0);
}

static void test_sums_known_figures(void **state) {
    (void)state;
    const float a[4] = {1, 2, -3, 4}, twice[4] = {2, 4, -6, 8}, minus[4] = {-1, -2, 3, -4};
    const float orth_a[2] = {3, 0}, orth_b[2] = {0, 3}, zero[4] = {0};
    kiln_probe_sums s = {0};
    kiln_probe_sums_add(&s, a, twice, 4); /* b = 2a: same direction, ||b-a|| = ||a|| */
    assert_true(fabs(kiln_probe_cosine(&s) - 1) < 1e-15);
    assert_true(fabs(kiln_probe_rel_rms(&s) - 1) < 1e-15);
    s = (kiln_probe_sums){0};
    kiln_probe_sums_add(&s, a, minus, 4); /* b = -a */
    assert_true(fabs(kiln_probe_cosine(&s) + 1) < 1e-15);
    assert_true(fabs(kiln_probe_rel_rms(&s) - 2) < 1e-15);
    s = (kiln_probe_sums){0};
    kiln_probe_sums_add(&s, orth_a, orth_b, 2);
    assert_true(kiln_probe_cosine(&s) == 0);
    assert_true(fabs(kiln_probe_rel_rms(&s) - sqrt(2.0)) < 1e-15);
    s = (kiln_probe_sums){0};
    kiln_probe_sums_add(&s, zero, zero, 4);
    assert_true(kiln_probe_cosine(&s) == 1 && kiln_probe_rel_rms(&s) == 0);
    s = (kiln_probe_sums){0};
    kiln_probe_sums_add(&s, zero, a, 4);
    assert_true(kiln_probe_cosine(&s) == 0 && isinf(kiln_probe_rel_rms(&s)));
    /* merging two halves gives the sums of the whole (integers: exact) */
    kiln_probe_sums h1 = {0}, h2 = {0}, whole = {0};
    kiln_probe_sums_add(&h1, a, twice, 2);
    kiln_probe_sums_add(&h2, a + 2, twice + 2, 2);
    kiln_probe_sums_add(&whole, a, twice, 4);
    kiln_probe_sums_merge(&h1, &h2);
    assert_true(h1.ab == whole.ab && h1.aa == whole.aa && h1.bb == whole.bb && h1.dd == whole.dd && h1.n == 4);
}

/* What the observers saw during one kiln_eval. */
typedef struct seen {
    int64_t n_tokens, n_used;
    int64_t layers, layer_rows_bad, next_layer;
    int64_t products, outputs;
    int64_t expert_rows;          /* rows of ffn_down_exps of layer 0 */
    int64_t *routed;              /* per token: times routed in layer 0's ffn_down_exps */
} seen;

static void on_layer(void *user, int64_t layer, const float *x, int64_t n, int64_t n_embd) {
    seen *s = user;
    s->layers++;
    if (n != s->n_tokens || layer != s->next_layer || !x || n_embd <= 0) s->layer_rows_bad++;
    s->next_layer = layer + 1;
}

static void on_output(void *user, const char *name, int expert, const int32_t *slots, const float *y, int64_t n,
                      int64_t n_out) {
    seen *s = user;
    s->products++;
    if (!strcmp(name, "output.weight")) s->outputs++;
    if (expert < 0) {
        assert_null(slots);
        assert_int_equal(n, s->n_tokens);
        return;
    }
    assert_non_null(slots);
    if (strcmp(name, "blk.0.ffn_down_exps.weight")) return;
    s->expert_rows += n;
    for (int64_t i = 0; i < n; i++) {
        assert_true(slots[i] >= 0 && slots[i] / s->n_used < s->n_tokens);
        s->routed[slots[i] / s->n_used]++;
    }
}

static void observers_keep_logits(const char *rel, bool moe) {
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(rel), &err);
    assert_non_null(m);
    const int64_t n = 24, nv = m->hp.n_vocab;
    int32_t tokens[24];
    for (int i = 0; i < n; i++) tokens[i] = (int32_t)((i * 37 + 11) % nv);
    float *plain = malloc((size_t)(n * nv) * sizeof *plain), *watched = malloc((size_t)(n * nv) * sizeof *watched);
    int64_t routed[24] = {0};
    seen s = {.n_tokens = n, .n_used = m->hp.n_expert_used > 0 ? m->hp.n_expert_used : 1, .routed = routed};
    kiln_ctx_params p = {.n_ctx = 64, .attention = KILN_ATTN_LLAMACPP};
    kiln_ctx *c = kiln_ctx_new(m, &p, &err);
    p.output_hook = on_output;
    p.layer_hook = on_layer;
    p.observer_user = &s;
    kiln_ctx *w = kiln_ctx_new(m, &p, &err);
    assert_non_null(c);
    assert_non_null(w);
    assert_int_equal(kiln_eval(c, tokens, n, plain, &err), 0);
    assert_int_equal(kiln_eval(w, tokens, n, watched, &err), 0);
    assert_memory_equal(plain, watched, (size_t)(n * nv) * sizeof *plain);
    assert_int_equal(s.layers, m->hp.n_layer);
    assert_int_equal(s.layer_rows_bad, 0);
    assert_int_equal(s.outputs, 1);
    assert_true(s.products >= 7 * m->hp.n_layer + 1);
    if (moe) { /* every token went to exactly n_used experts */
        assert_int_equal(s.expert_rows, n * s.n_used);
        for (int64_t t = 0; t < n; t++) assert_int_equal(routed[t], s.n_used);
    }
    kiln_ctx_free(c);
    kiln_ctx_free(w);
    free(plain);
    free(watched);
    kiln_model_free(m);
}

static void test_observers_keep_logits_dense(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    observers_keep_logits("golden/gguf/llama-Q4_K_M.gguf", false);
}

static void test_observers_keep_logits_moe(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    observers_keep_logits("golden/gguf/mixtral-Q8_0.gguf", true);
    observers_keep_logits("golden/gguf/mixtral-f32.gguf", true); /* moe.c's own F32 expert kernel */
}

static char *text_of(size_t *len) {
    kiln_err err = {{0}};
    char *t = kiln_read_text(kiln_shared_path("golden/text/ppl.txt"), len, &err);
    assert_non_null(t);
    return t;
}

static void test_probe_of_a_model_against_itself(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path("golden/gguf/llama-Q4_K_M.gguf"), &err);
    assert_non_null(m);
    size_t len;
    char *text = text_of(&len);
    kiln_probe_params p = {.n_ctx = 64, .n_chunks = 2};
    kiln_probe_result r;
    assert_int_equal(kiln_probe_run(m, m, text, len, &p, &r, &err), 0);
    assert_int_equal(r.relation, KILN_FP_SAME_WEIGHTS);
    /* attn q/k/v/output, ffn gate/up/down and the residual per layer, then output */
    assert_int_equal(r.n_stats, 8 * m->hp.n_layer + 1);
    for (size_t i = 0; i < r.n_stats; i++) {
        assert_true(kiln_probe_cosine(&r.stats[i].sums) == 1.0);
        assert_true(kiln_probe_rel_rms(&r.stats[i].sums) == 0.0);
        assert_true(r.stats[i].n_rows == 128);
    }
    assert_string_equal(r.stats[r.n_stats - 1].tensor, "output");
    assert_string_equal(r.stats[7].tensor, "residual");
    assert_true(r.kld.count == 2 * 31 && r.kld.kld.val == 0 && r.kld.same_top.val == 1);
    kiln_probe_result_free(&r);
    free(text);
    kiln_model_free(m);
}

static void probe_with_threads(const kiln_model *a, const kiln_model *b, const char *text, size_t len, int threads,
                               kiln_probe_result *r) {
    kiln_err err = {{0}};
    omp_set_num_threads(threads);
    kiln_probe_params p = {.n_ctx = 96, .n_batch = 40, .n_chunks = 1};
    assert_int_equal(kiln_probe_run(a, b, text, len, &p, r, &err), 0);
}

static void test_probe_ignores_the_thread_count(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_model *a = kiln_model_load(kiln_shared_path("golden/gguf/mixtral-f32.gguf"), &err);
    kiln_model *b = kiln_model_load(kiln_shared_path("golden/gguf/mixtral-Q2_K.gguf"), &err);
    assert_non_null(a);
    assert_non_null(b);
    size_t len;
    char *text = text_of(&len);
    const int max = omp_get_max_threads();
    kiln_probe_result r1, r2;
    probe_with_threads(a, b, text, len, 1, &r1);
    probe_with_threads(a, b, text, len, max > 1 ? max : 2, &r2);
    omp_set_num_threads(max);
    assert_int_equal(r1.n_stats, r2.n_stats);
    assert_memory_equal(r1.stats, r2.stats, r1.n_stats * sizeof *r1.stats);
    assert_true(r1.kld.kld.val == r2.kld.kld.val && r1.kld.kld.val > 0);
    for (size_t i = 0; i < r1.n_stats; i++) assert_true(kiln_probe_rel_rms(&r1.stats[i].sums) > 0);
    kiln_probe_result_free(&r1);
    kiln_probe_result_free(&r2);
    free(text);
    kiln_model_free(a);
    kiln_model_free(b);
}

static void test_probe_refuses_another_network(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_model *a = kiln_model_load(kiln_shared_path("golden/gguf/llama-Q8_0.gguf"), &err);
    kiln_model *b = kiln_model_load(kiln_shared_path("golden/gguf/qwen2-Q8_0.gguf"), &err);
    assert_non_null(a);
    assert_non_null(b);
    kiln_probe_params p = {.path_a = "A.gguf", .path_b = "B.gguf"};
    kiln_probe_result r;
    assert_int_equal(kiln_probe_run(a, b, "some text", 9, &p, &r, &err), -1);
    assert_non_null(strstr(err.msg, "A.gguf"));
    assert_non_null(strstr(err.msg, "B.gguf"));
    assert_non_null(strstr(err.msg, "not the same network"));
    kiln_probe_result_free(&r);
    kiln_model_free(a);
    kiln_model_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_of_equal_vectors_are_exact),
        cmocka_unit_test(test_sums_known_figures),
        cmocka_unit_test(test_observers_keep_logits_dense),
        cmocka_unit_test(test_observers_keep_logits_moe),
        cmocka_unit_test(test_probe_of_a_model_against_itself),
        cmocka_unit_test(test_probe_ignores_the_thread_count),
        cmocka_unit_test(test_probe_refuses_another_network),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
