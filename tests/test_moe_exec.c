/* tests/test_moe_exec.c - the one-region MoE layer (runtime/moe_exec.c)
 * against moe.c's per-expert products, bit for bit.
 *
 * A context with a matmul hook runs every expert as a product of its own
 * (moe_exec.h: hooks see the experts one at a time); one without runs the
 * layer in one region. Both evaluate the same tokens in the same batches -
 * single tokens (each thread converts its own input), short batches (the
 * direct kernels) and long ones (a dozen or more rows an expert: the
 * panels) - and every logit must be the same float. Each of mixtral's
 * fixtures (F32 experts, Q8_0, Q4_K_M with Q6_K downs, Q2_K, IQ2_XXS) at
 * each SIMD level: at the scalar level quantized experts have no kernel
 * that runs inside the region, so those files take the per-expert path on
 * both sides and are reported, and the test asserts that the region ran
 * on every file where it can. Also a file whose gate, up and down differ
 * in type (converted separately, a float down). */
#include "shared.h"
#include "simd_levels.h"

#include "../core/types.h"
#include "../quantize/quantize_model.h"
#include "../runtime/forward_impl.h"
#include "../runtime/moe_exec.h"
#include "../runtime/runtime.h"

#include <omp.h>

static void no_op_hook(void *user, const char *name, int expert, const float *x, int64_t n, int64_t n_in) {
    (void)name, (void)expert, (void)x, (void)n, (void)n_in;
    ++*(int64_t *)user;
}

/* Batches fed one after another (decode, short, long, mixed). */
static const int BATCHES[] = {1, 1, 3, 1, 8, 24, 1, 2, 12, 1};
#define N_BATCHES (int)(sizeof BATCHES / sizeof BATCHES[0])

/* Every logit of the batches, evaluated by c (cache cleared first). */
static float *eval_all(kiln_ctx *c, const kiln_model *m, int64_t *n_out) {
    int64_t total = 0;
    for (int b = 0; b < N_BATCHES; b++) total += BATCHES[b];
    const int64_t nv = m->hp.n_vocab;
    float *logits = malloc((size_t)(total * nv) * sizeof(float));
    int32_t *tok = malloc((size_t)total * sizeof(int32_t));
    assert_non_null(logits);
    assert_non_null(tok);
    uint64_t s = 7;
    for (int64_t i = 0; i < total; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (uint64_t)nv);
    }
    kiln_ctx_clear(c);
    kiln_err err = {{0}};
    int64_t at = 0;
    for (int b = 0; b < N_BATCHES; b++) {
        if (kiln_eval(c, tok + at, BATCHES[b], logits + at * nv, &err) < 0) fail_msg("%s", err.msg);
        at += BATCHES[b];
    }
    free(tok);
    *n_out = total * nv;
    return logits;
}

/* Compares the two paths on the GGUF at path (at the current level);
 * fused: whether the region must run there. Prints and asserts. */
static void check_file(const char *path, const char *label, kiln_simd_level lvl, bool want_fused) {
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(path, &err);
    if (!m) fail_msg("%s", err.msg);
    int64_t hook_calls = 0;
    kiln_ctx *one = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256}, &err);
    kiln_ctx *per = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256, .hook = no_op_hook, .hook_user = &hook_calls},
                                 &err);
    if (!one || !per) fail_msg("%s", err.msg);
    const bool fused = kiln_moe_exec_fits(one, &m->layers[0]);
    assert_false(kiln_moe_exec_fits(per, &m->layers[0])); /* the hook keeps the per-expert path */
    assert_true(fused == want_fused);
    int64_t n1, n2;
    float *a = eval_all(one, m, &n1), *b = eval_all(per, m, &n2);
    assert_true(hook_calls > 0);
    assert_int_equal(n1, n2);
    int64_t differ = 0;
    for (int64_t j = 0; j < n1; j++) differ += memcmp(&a[j], &b[j], sizeof(float)) != 0;
    printf("# %-22s %s: %s vs per-expert: %lld of %lld logits differ\n", label, kiln_simd_name(lvl),
           fused ? "one region" : "per-expert (no kernel in a region here)", (long long)differ, (long long)n1);
    assert_int_equal(differ, 0);
    /* and with one thread: the split does not decide a bit */
    const int had = omp_get_max_threads();
    omp_set_num_threads(1);
    float *c1 = eval_all(one, m, &n1);
    omp_set_num_threads(had);
    assert_memory_equal(a, c1, (size_t)n1 * sizeof(float));
    free(a), free(b), free(c1);
    kiln_ctx_free(one);
    kiln_ctx_free(per);
    kiln_model_free(m);
}

/* Every mixtral fixture: every level above scalar runs it in one region,
 * the scalar level only the float experts. */
static void test_same_bits(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    const char *stems[] = {"mixtral-f32", "mixtral-Q8_0", "mixtral-Q4_K_M", "mixtral-Q2_K", "mixtral-IQ2_XXS"};
    for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "golden/gguf/%s.gguf", stems[i]);
        check_file(kiln_shared_path(path), stems[i], lvl, lvl != KILN_SIMD_SCALAR || strstr(stems[i], "f32"));
    }
}

/* Experts whose gate and up differ in type (Q8_0 and Q5_K: two
 * conversions of each row, Q8_0 and Q8_K blocks) and whose down is F16
 * (its input rounded, not quantized): mixtral-f32 quantized with
 * --tensor-type rules, once per process. */
static void test_mixed_types(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    static char path[512];
    if (!path[0]) {
        snprintf(path, sizeof path, "%s", kiln_test_tmp_path("mixtral-mixed.gguf"));
        kiln_err err = {{0}};
        const char *rules[] = {"ffn_gate_exps=Q8_0", "ffn_up_exps=Q5_K", "ffn_down_exps=F16"};
        kiln_type_override ov[3];
        for (int i = 0; i < 3; i++)
            if (kiln_override_parse(rules[i], &ov[i], &err) < 0) fail_msg("%s", err.msg);
        kiln_quant_opts o = {.output_type = -1, .token_embd_type = -1, .overrides = ov, .n_overrides = 3,
                             .force = true};
        if (kiln_quant_target_parse("Q4_K_M", &o.target, &err) < 0) fail_msg("%s", err.msg);
        kiln_quant_report r = {0};
        const int rc = kiln_quantize_model(kiln_shared_path("golden/gguf/mixtral-f32.gguf"), path, &o, &r, &err);
        kiln_quant_report_free(&r);
        for (int i = 0; i < 3; i++) kiln_override_free(&ov[i]);
        if (rc < 0) fail_msg("%s", err.msg);
    }
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(path, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(m->layers[0].ffn_gate_exps->type, KILN_Q8_0);
    assert_int_equal(m->layers[0].ffn_up_exps->type, KILN_Q5_K);
    assert_int_equal(m->layers[0].ffn_down_exps->type, KILN_F16);
    kiln_model_free(m);
    check_file(path, "mixtral gate Q8_0 up Q5_K down F16", lvl, lvl != KILN_SIMD_SCALAR);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_same_bits),
        SIMD_LEVEL_TESTS(test_mixed_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
