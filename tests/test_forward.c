/* tests/test_forward.c - the forward pass (runtime.h) against llama.cpp.
 *
 * Ground truth (../shared/golden, README section 4): for every GGUF in
 * gguf/, logits/STEM.logits holds llama.cpp's logits of 3 prompts at every
 * position (n_ctx 256, f32 KV cache, one batch per prompt); for the f32,
 * Q4_K_M and IQ2_XXS GGUFs, logits/STEM.f64ref.logits holds a float64
 * evaluation of the dequantized weights. Bounds:
 *   - default mode vs llama.cpp: mean KLD <= 1e-5 and top-1 agreement
 *     >= 99.5% on every GGUF (the bounds), and in fact max |diff|
 *     0: the same bits as llama.cpp on every file;
 *   - KILN_NUM_EXACT vs f64ref: max |diff| <= 2e-3.
 * Also: qwen3, qwen2moe, qwen3moe, gpt2 (and testmodel's mistral and
 * mixtral) against a float64 reference written here; batched prefill
 * against token-by-token decode through the KV cache (1e-4); the same bits
 * at every SIMD level; a fully masked softmax row gives zeros; the imatrix
 * hook sees every product with exactly the routed tokens; broken files
 * and calls fail with messages that name the culprit; KILN_ATTN_LLAMACPP
 * (F16 cache + flash attention) within mean KLD 1e-4 of the f32 attention
 * and the same bits at every SIMD level. */
#include "shared.h"
#include "simd_levels.h"

#include "../convert/convert.h"
#include "../testmodel/testmodel.h"
#include "../core/cpu.h"
#include "../core/gguf.h"
#include "../golden/klgt.h"
#include "../runtime/ops.h"
#include "../runtime/runtime.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>

/* ---- comparison -------------------------------------------------------- */

typedef struct stats {
    int64_t n, same_top;
    double sum_kld, max_abs;
} stats;

/* Adds one position: KL(softmax(ref) || softmax(test)) in double. */
static void compare_row(const float *ref, const float *test, int64_t nv, stats *s) {
    double mr = -INFINITY, mt = -INFINITY;
    int64_t ar = 0, at = 0;
    for (int64_t i = 0; i < nv; i++) {
        if (ref[i] > mr) mr = ref[i], ar = i;
        if (test[i] > mt) mt = test[i], at = i;
        double d = fabs((double)ref[i] - (double)test[i]);
        if (!(d <= s->max_abs)) s->max_abs = d; /* NaN sticks */
    }
    double zr = 0, zt = 0;
    for (int64_t i = 0; i < nv; i++) zr += exp(ref[i] - mr), zt += exp(test[i] - mt);
    double kld = 0;
    for (int64_t i = 0; i < nv; i++) {
        double lr = ref[i] - mr - log(zr), lt = test[i] - mt - log(zt);
        kld += exp(lr) * (lr - lt);
    }
    s->sum_kld += kld;
    s->same_top += ar == at;
    s->n++;
}

/* Evaluates every prompt of the KLGT file `ref_path` with `gguf` (fresh
 * cache per prompt, one batch each) and compares all positions. */
static stats run_golden(const char *gguf, const char *ref_path, kiln_numeric_mode mode) {
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(gguf, &err);
    if (!m) fail_msg("%s", err.msg);
    kiln_logit_set ref = {0};
    if (kiln_klgt_read(ref_path, &ref, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(ref.n_vocab, m->hp.n_vocab);
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256, .mode = mode}, &err);
    if (!c) fail_msg("%s", err.msg);
    stats s = {0};
    for (uint32_t p = 0; p < ref.n_seqs; p++) {
        const kiln_logit_seq *q = &ref.seqs[p];
        float *out = malloc((size_t)q->n_tokens * ref.n_vocab * sizeof(float));
        assert_non_null(out);
        kiln_ctx_clear(c);
        if (kiln_eval(c, q->ids, q->n_tokens, out, &err) < 0) fail_msg("%s: %s", gguf, err.msg);
        for (uint32_t t = 0; t < q->n_tokens; t++)
            compare_row(q->logits + (size_t)t * ref.n_vocab, out + (size_t)t * ref.n_vocab, ref.n_vocab, &s);
        free(out);
    }
    kiln_ctx_free(c);
    kiln_logit_set_free(&ref);
    kiln_model_free(m);
    return s;
}

/* Sorted stems of the files in logits/ (the f64ref ones or the others). */
static int list_stems(bool f64ref, char stems[][64], int cap) {
    DIR *d = opendir(kiln_shared_path("golden/logits"));
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        size_t len = strlen(e->d_name);
        const char *suf = f64ref ? ".f64ref.logits" : ".logits";
        size_t sl = strlen(suf);
        if (len <= sl || strcmp(e->d_name + len - sl, suf) != 0) continue;
        if (!f64ref && strstr(e->d_name, ".f64ref.")) continue;
        snprintf(stems[n++], 64, "%.*s", (int)(len - sl), e->d_name);
    }
    closedir(d);
    qsort(stems, (size_t)n, 64, (int (*)(const void *, const void *))strcmp);
    return n;
}

static void test_golden_ggml(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    char stems[64][64];
    int n = list_stems(false, stems, 64);
    assert_true(n >= 22); /* every GGUF of golden/gguf has its logits */
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char gguf[256], ref[256];
        snprintf(gguf, sizeof gguf, "golden/gguf/%.60s.gguf", stems[i]);
        snprintf(ref, sizeof ref, "golden/logits/%.60s.logits", stems[i]);
        stats s = run_golden(kiln_shared_path(gguf), kiln_shared_path(ref), KILN_NUM_GGML);
        double kld = s.sum_kld / (double)s.n, top = (double)s.same_top / (double)s.n;
        /* The bounds, and beyond them llama.cpp's numbers bit for
         * bit on every file: kiln follows its summation orders (tinyBLAS
         * and ggml_vec_dot for floats, the repacked k-quant gemm/gemv, the
         * 256-cell KV view). */
        bool ok = kld <= 1e-5 && top >= 0.995 && s.max_abs == 0;
        printf("# ggml  %-18s %4lld pos  mean KLD %.3e  top-1 %.4f  max|d| %.3e  %s\n", stems[i],
               (long long)s.n, kld, top, s.max_abs, ok ? "ok" : "FAIL");
        bad += !ok;
    }
    assert_int_equal(bad, 0);
}

static void test_golden_exact(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    char stems[64][64];
    int n = list_stems(true, stems, 64);
    assert_true(n >= 9); /* {llama,mixtral,qwen2} x {f32,Q4_K_M,IQ2_XXS} */
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char gguf[256], ref[256];
        snprintf(gguf, sizeof gguf, "golden/gguf/%.60s.gguf", stems[i]);
        snprintf(ref, sizeof ref, "golden/logits/%.60s.f64ref.logits", stems[i]);
        stats s = run_golden(kiln_shared_path(gguf), kiln_shared_path(ref), KILN_NUM_EXACT);
        bool ok = s.max_abs <= 2e-3;
        printf("# exact %-18s %4lld pos  mean KLD %.3e  top-1 %.4f  max|d| %.3e  %s\n", stems[i],
               (long long)s.n, s.sum_kld / (double)s.n, (double)s.same_top / (double)s.n, s.max_abs,
               ok ? "ok" : "FAIL");
        bad += !ok;
    }
    assert_int_equal(bad, 0);
}

/* ---- KV cache ---------------------------------------------------------- */

/* Prefill of a whole prompt vs decoding it one token at a time (and in two
 * uneven chunks): the cache must make them agree. In the default mode
 * they agree only as far as llama.cpp's own batch and single-token paths
 * do (different summation orders, so 8-bit activation rounding can flip
 * in quantized models): checked on F32 weights. KILN_NUM_EXACT orders
 * nothing by batch, so there it holds for any weights. */
static void check_decode(const char *stem, kiln_numeric_mode mode) {
    char gguf[256], ref[256];
    snprintf(gguf, sizeof gguf, "golden/gguf/%s.gguf", stem);
    snprintf(ref, sizeof ref, "golden/logits/%s.logits", stem);
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(gguf), &err);
    if (!m) fail_msg("%s", err.msg);
    kiln_logit_set set = {0};
    if (kiln_klgt_read(kiln_shared_path(ref), &set, &err) < 0) fail_msg("%s", err.msg);
    const kiln_logit_seq *q = &set.seqs[0];
    const int64_t nv = set.n_vocab, n = q->n_tokens;
    float *batch = malloc((size_t)(n * nv) * sizeof(float)), *step = malloc((size_t)(n * nv) * sizeof(float));
    assert_true(batch && step);
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256, .mode = mode}, &err);
    if (!c) fail_msg("%s", err.msg);
    assert_int_equal(kiln_eval(c, q->ids, n, batch, &err), 0);
    assert_int_equal(kiln_ctx_n_past(c), n);
    for (int pass = 0; pass < 2; pass++) {
        kiln_ctx_clear(c);
        assert_int_equal(kiln_ctx_n_past(c), 0);
        if (pass == 0) {
            for (int64_t t = 0; t < n; t++) assert_int_equal(kiln_eval(c, q->ids + t, 1, step + t * nv, &err), 0);
        } else {
            assert_int_equal(kiln_eval(c, q->ids, 7, step, &err), 0);
            assert_int_equal(kiln_eval(c, q->ids + 7, n - 7, step + 7 * nv, &err), 0);
        }
        double max_abs = 0;
        for (int64_t i = 0; i < n * nv; i++) max_abs = fmax(max_abs, fabs(batch[i] - step[i]));
        printf("# %s %s: prefill vs %s: max|d| %.3e\n", stem, mode ? "exact" : "ggml",
               pass ? "7 + rest" : "one at a time", max_abs);
        assert_true(max_abs <= 1e-4);
    }
    kiln_ctx_free(c);
    free(batch);
    free(step);
    kiln_logit_set_free(&set);
    kiln_model_free(m);
}

static void test_kv_cache_decode(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    check_decode("llama-f32", KILN_NUM_GGML);
    check_decode("qwen2-f32", KILN_NUM_GGML);
    check_decode("mixtral-f32", KILN_NUM_GGML);
    check_decode("mixtral-Q4_K_M", KILN_NUM_EXACT);
    check_decode("qwen2-IQ2_XXS", KILN_NUM_EXACT);
}

/* ---- SIMD levels ------------------------------------------------------- */

/* Logits of a model's first golden prompt (one batch) and then one decoded
 * token, at the current SIMD level. */
static float *eval_first_prompt(const char *stem, kiln_numeric_mode mode, int64_t *count) {
    char gguf[256], ref[256];
    snprintf(gguf, sizeof gguf, "golden/gguf/%s.gguf", stem);
    snprintf(ref, sizeof ref, "golden/logits/%s.logits", stem);
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(gguf), &err);
    if (!m) fail_msg("%s", err.msg);
    kiln_logit_set set = {0};
    if (kiln_klgt_read(kiln_shared_path(ref), &set, &err) < 0) fail_msg("%s", err.msg);
    const int64_t n = set.seqs[0].n_tokens, nv = set.n_vocab;
    float *out = malloc((size_t)((n + 1) * nv) * sizeof(float));
    assert_non_null(out);
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256, .mode = mode}, &err);
    if (!c) fail_msg("%s", err.msg);
    assert_int_equal(kiln_eval(c, set.seqs[0].ids, n, out, &err), 0);
    assert_int_equal(kiln_eval(c, set.seqs[0].ids, 1, out + n * nv, &err), 0);
    *count = (n + 1) * nv;
    kiln_ctx_free(c);
    kiln_logit_set_free(&set);
    kiln_model_free(m);
    return out;
}

/* This case's SIMD level must give the same bits as the scalar code (on
 * the first fixture only under KILN_TEST_LIGHT, as in the attention tests
 * below: the golden tests still run every fixture at the best level). */
static void test_simd_levels(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    const char *stems[] = {"llama-Q4_K_M", "mixtral-Q8_0", "qwen2-f16"};
    const size_t n_stems = kiln_test_light() ? 1 : sizeof stems / sizeof stems[0];
    for (size_t i = 0; i < n_stems; i++)
        for (int mode = 0; mode < 2; mode++) {
            int64_t n = 0, n2 = 0;
            kiln_simd_set(KILN_SIMD_SCALAR);
            float *ref = eval_first_prompt(stems[i], mode, &n);
            kiln_simd_set(lvl);
            float *got = eval_first_prompt(stems[i], mode, &n2);
            assert_int_equal(n, n2);
            int64_t diff = 0;
            for (int64_t j = 0; j < n; j++) diff += memcmp(ref + j, got + j, sizeof(float)) != 0;
            printf("# %s %s: %s vs scalar: %lld of %lld logits differ\n", stems[i], mode ? "exact" : "ggml",
                   kiln_simd_name(lvl), (long long)diff, (long long)n);
            free(got);
            free(ref);
            assert_int_equal(diff, 0);
        }
}

/* ---- ops ---------------------------------------------------------------- */

static void test_softmax_masked(void **state) {
    (void)state;
    float row[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    kiln_softmax(row, 5, 0.125f, KILN_NUM_GGML);
    for (int i = 0; i < 5; i++) assert_true(row[i] == 0.0f);
    float part[4] = {1.0f, -INFINITY, 3.0f, -INFINITY};
    kiln_softmax(part, 4, 0.5f, KILN_NUM_GGML);
    assert_true(part[1] == 0.0f && part[3] == 0.0f);
    assert_float_equal(part[0] + part[2], 1.0f, 1e-6f);
    assert_float_equal(part[2] / part[0], expf(1.0f), 1e-5f);
}

/* ---- hook ---------------------------------------------------------------- */

typedef struct hook_log {
    int64_t calls, output_calls, tokens_router, tokens_experts, n_in_bad;
} hook_log;

static void record(void *user, const char *name, int expert, const float *x, int64_t n_tokens, int64_t n_in) {
    hook_log *h = user;
    h->calls++;
    if (!strcmp(name, "output.weight")) h->output_calls++;
    if (!strcmp(name, "blk.1.ffn_gate_inp.weight")) {
        assert_int_equal(expert, -1);
        h->tokens_router += n_tokens;
    }
    if (!strcmp(name, "blk.1.ffn_down_exps.weight")) {
        assert_true(expert >= 0 && expert < 4);
        h->tokens_experts += n_tokens;
        if (n_in != 256) h->n_in_bad++;
    }
    assert_true(isfinite(x[0]) && isfinite(x[n_tokens * n_in - 1]));
}

static void test_hook(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path("golden/gguf/mixtral-Q8_0.gguf"), &err);
    if (!m) fail_msg("%s", err.msg);
    const int32_t ids[10] = {1, 415, 287, 651, 10, 20, 30, 40, 50, 60};
    for (int out = 0; out < 2; out++) {
        hook_log h = {0};
        kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 64, .hook = record, .hook_user = &h,
                                                        .hook_output = out},
                                   &err);
        if (!c) fail_msg("%s", err.msg);
        assert_int_equal(kiln_eval(c, ids, 10, NULL, &err), 0);
        assert_int_equal(h.output_calls, out);
        assert_int_equal(h.tokens_router, 10);
        assert_int_equal(h.tokens_experts, 10 * 2); /* top-2: every token twice */
        assert_int_equal(h.n_in_bad, 0);
        kiln_ctx_free(c);
    }
    kiln_model_free(m);
}

/* ---- the other architectures, against a float64 reference ---------------- */

/* qwen3, qwen2moe, qwen3moe and gpt2 have no llama.cpp logits in
 * ../shared, and mistral / mixtral models written by kiln testmodel differ
 * from the fixtures in shape. For them, kiln testmodel + kiln convert make
 * an F32 GGUF and the forward pass is checked against the plain double
 * loops below: one token at a time, no cache, no batching, no expert
 * grouping, so that indexing or buffer mistakes in the real thing cannot
 * hide behind a shared helper. */

static const float *ref_tensor(const kiln_gguf *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const float *ref_tensor(const kiln_gguf *g, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const kiln_tensor *t = kiln_gguf_find_tensor(g, name);
    if (!t) return NULL;
    assert_int_equal(t->type, 0); /* F32 */
    return (const float *)t->data;
}

static void ref_mv(const float *w, const double *x, int64_t n_in, int64_t n_out, double *y) {
    for (int64_t r = 0; r < n_out; r++) {
        double s = 0;
        for (int64_t c = 0; c < n_in; c++) s += (double)w[r * n_in + c] * x[c];
        y[r] = s;
    }
}

static void ref_bias(double *y, const float *b, int64_t n) {
    for (int64_t i = 0; b && i < n; i++) y[i] += b[i];
}

static void ref_norm(const kiln_hparams *hp, const double *x, const float *w, const float *b, int64_t n, double *y) {
    double mean = 0, ms = 0;
    if (hp->arch == KILN_ARCH_GPT2)
        for (int64_t i = 0; i < n; i++) mean += x[i] / (double)n;
    for (int64_t i = 0; i < n; i++) ms += (x[i] - mean) * (x[i] - mean) / (double)n;
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) / sqrt(ms + hp->norm_eps) * w[i] + (b ? b[i] : 0);
}

/* down(silu(gate x) * up x), weights given as pointers to f x d / d x f rows */
static void ref_swiglu(const float *gate, const float *up, const float *down, int64_t d, int64_t f, const double *x,
                       double *out) {
    double *a = malloc((size_t)f * sizeof *a), *b = malloc((size_t)f * sizeof *b);
    assert_true(a && b);
    ref_mv(gate, x, d, f, a);
    ref_mv(up, x, d, f, b);
    for (int64_t i = 0; i < f; i++) a[i] = a[i] / (1 + exp(-a[i])) * b[i];
    ref_mv(down, a, f, d, out);
    free(a);
    free(b);
}

static void ref_ffn(const kiln_model *m, int64_t il, const double *x, double *out) {
    const kiln_hparams *hp = &m->hp;
    const kiln_gguf *g = m->gguf;
    const int64_t d = hp->n_embd;
#define W(name) ref_tensor(g, "blk.%lld." name, (long long)il)
    if (hp->arch == KILN_ARCH_GPT2) {
        double *u = malloc((size_t)hp->n_ff * sizeof *u);
        assert_non_null(u);
        ref_mv(W("ffn_up.weight"), x, d, hp->n_ff, u);
        ref_bias(u, W("ffn_up.bias"), hp->n_ff);
        for (int64_t i = 0; i < hp->n_ff; i++)
            u[i] = 0.5 * u[i] * (1 + tanh(sqrt(2 / M_PI) * (u[i] + 0.044715 * u[i] * u[i] * u[i])));
        ref_mv(W("ffn_down.weight"), u, hp->n_ff, d, out);
        ref_bias(out, W("ffn_down.bias"), d);
        free(u);
        return;
    }
    if (hp->n_expert == 0) {
        ref_swiglu(W("ffn_gate.weight"), W("ffn_up.weight"), W("ffn_down.weight"), d, hp->n_ff, x, out);
        return;
    }
    const int64_t ne = hp->n_expert, k = hp->n_expert_used, f = hp->n_ff_exp;
    double p[64], y[4096], wsum = 0;
    int64_t sel[16];
    assert_true(ne <= 64 && k <= 16 && d <= 4096);
    ref_mv(W("ffn_gate_inp.weight"), x, d, ne, p);
    double mx = p[0], z = 0;
    for (int64_t e = 0; e < ne; e++) mx = fmax(mx, p[e]);
    for (int64_t e = 0; e < ne; e++) z += exp(p[e] - mx);
    for (int64_t e = 0; e < ne; e++) p[e] = exp(p[e] - mx) / z;
    for (int64_t j = 0; j < k; j++) {
        sel[j] = -1;
        for (int64_t e = 0; e < ne; e++) {
            bool used = false;
            for (int64_t i = 0; i < j; i++) used |= sel[i] == e;
            if (!used && (sel[j] < 0 || p[e] > p[sel[j]])) sel[j] = e;
        }
        wsum += p[sel[j]];
    }
    memset(out, 0, (size_t)d * sizeof *out);
    for (int64_t j = 0; j < k; j++) {
        const int64_t e = sel[j];
        const double w = hp->arch == KILN_ARCH_QWEN2MOE ? p[e] : p[e] / wsum;
        ref_swiglu(W("ffn_gate_exps.weight") + e * f * d, W("ffn_up_exps.weight") + e * f * d,
                   W("ffn_down_exps.weight") + e * d * f, d, f, x, y);
        for (int64_t i = 0; i < d; i++) out[i] += w * y[i];
    }
    if (hp->arch == KILN_ARCH_QWEN2MOE) {
        double s;
        ref_mv(W("ffn_gate_inp_shexp.weight"), x, d, 1, &s);
        ref_swiglu(W("ffn_gate_shexp.weight"), W("ffn_up_shexp.weight"), W("ffn_down_shexp.weight"), d,
                   hp->n_ff_shexp, x, y);
        for (int64_t i = 0; i < d; i++) out[i] += y[i] / (1 + exp(-s));
    }
}

/* Q, K, V of block il for every token of X (n x d), RoPE'd. */
static void ref_qkv(const kiln_model *m, int64_t il, const double *X, int64_t n, double *Q, double *K, double *V) {
    const kiln_hparams *hp = &m->hp;
    const kiln_gguf *g = m->gguf;
    const int64_t d = hp->n_embd, hd = hp->head_dim, nq = hd * hp->n_head, nk = hd * hp->n_head_kv;
    double h[4096], qkv[3 * 4096];
    assert_true(d <= 4096 && nq + 2 * nk <= 3 * 4096);
    for (int64_t t = 0; t < n; t++) {
        double *q = Q + t * nq, *k = K + t * nk, *v = V + t * nk;
        ref_norm(hp, X + t * d, W("attn_norm.weight"), W("attn_norm.bias"), d, h);
        if (hp->arch == KILN_ARCH_GPT2) {
            ref_mv(W("attn_qkv.weight"), h, d, nq + 2 * nk, qkv);
            ref_bias(qkv, W("attn_qkv.bias"), nq + 2 * nk);
            memcpy(q, qkv, (size_t)nq * sizeof *q);
            memcpy(k, qkv + nq, (size_t)nk * sizeof *k);
            memcpy(v, qkv + nq + nk, (size_t)nk * sizeof *v);
            continue;
        }
        ref_mv(W("attn_q.weight"), h, d, nq, q);
        ref_mv(W("attn_k.weight"), h, d, nk, k);
        ref_mv(W("attn_v.weight"), h, d, nk, v);
        ref_bias(q, W("attn_q.bias"), nq);
        ref_bias(k, W("attn_k.bias"), nk);
        ref_bias(v, W("attn_v.bias"), nk);
        const float *qn = W("attn_q_norm.weight"), *kn = W("attn_k_norm.weight");
        for (int64_t i = 0; qn && i < hp->n_head; i++) ref_norm(hp, q + i * hd, qn, NULL, hd, q + i * hd);
        for (int64_t i = 0; kn && i < hp->n_head_kv; i++) ref_norm(hp, k + i * hd, kn, NULL, hd, k + i * hd);
        for (int64_t i = 0; i < hp->n_head + hp->n_head_kv; i++) {
            double *x = i < hp->n_head ? q + i * hd : k + (i - hp->n_head) * hd;
            for (int64_t j = 0; j < hd / 2; j++) {
                const double th = (double)t * pow(hp->rope_freq_base, -2.0 * (double)j / (double)hd);
                const int64_t a = hp->rope_neox ? j : 2 * j, b = hp->rope_neox ? j + hd / 2 : 2 * j + 1;
                const double x0 = x[a], x1 = x[b];
                x[a] = x0 * cos(th) - x1 * sin(th);
                x[b] = x0 * sin(th) + x1 * cos(th);
            }
        }
    }
}

static void ref_forward(const kiln_model *m, const int32_t *ids, int64_t n, double *logits) {
    const kiln_hparams *hp = &m->hp;
    const kiln_gguf *g = m->gguf;
    const int64_t d = hp->n_embd, hd = hp->head_dim, nq = hd * hp->n_head, nk = hd * hp->n_head_kv;
    const int64_t group = hp->n_head / hp->n_head_kv;
    double *X = malloc((size_t)(n * d) * sizeof *X), *Q = malloc((size_t)(n * nq) * sizeof *Q);
    double *K = malloc((size_t)(n * nk) * sizeof *K), *V = malloc((size_t)(n * nk) * sizeof *V);
    double *A = malloc((size_t)nq * sizeof *A), *O = malloc((size_t)d * sizeof *O), *H = malloc((size_t)d * sizeof *H);
    double *s = malloc((size_t)n * sizeof *s);
    assert_true(X && Q && K && V && A && O && H && s);
    const float *te = ref_tensor(g, "token_embd.weight"), *pe = ref_tensor(g, "position_embd.weight");
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++) X[t * d + i] = te[ids[t] * d + i] + (pe ? pe[t * d + i] : 0);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        ref_qkv(m, il, X, n, Q, K, V);
        for (int64_t t = 0; t < n; t++) {
            for (int64_t h = 0; h < hp->n_head; h++) {
                const double *q = Q + t * nq + h * hd;
                double mx = -INFINITY, z = 0;
                for (int64_t j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int64_t i = 0; i < hd; i++) s[j] += q[i] * K[j * nk + (h / group) * hd + i];
                    s[j] /= sqrt((double)hd);
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= t; j++) z += (s[j] = exp(s[j] - mx));
                for (int64_t i = 0; i < hd; i++) {
                    A[h * hd + i] = 0;
                    for (int64_t j = 0; j <= t; j++) A[h * hd + i] += s[j] / z * V[j * nk + (h / group) * hd + i];
                }
            }
            ref_mv(W("attn_output.weight"), A, nq, d, O);
            ref_bias(O, W("attn_output.bias"), d);
            for (int64_t i = 0; i < d; i++) X[t * d + i] += O[i];
        }
        for (int64_t t = 0; t < n; t++) {
            ref_norm(hp, X + t * d, W("ffn_norm.weight"), W("ffn_norm.bias"), d, H);
            ref_ffn(m, il, H, O);
            for (int64_t i = 0; i < d; i++) X[t * d + i] += O[i];
        }
    }
    const float *out = ref_tensor(g, "output.weight");
    for (int64_t t = 0; t < n; t++) {
        ref_norm(hp, X + t * d, ref_tensor(g, "output_norm.weight"), ref_tensor(g, "output_norm.bias"), d, H);
        ref_mv(out ? out : te, H, d, hp->n_vocab, logits + t * hp->n_vocab);
    }
#undef W
    free(X), free(Q), free(K), free(V), free(A), free(O), free(H), free(s);
}

/* Writes ARCH's default test model as F32 HF files, converts it, and
 * returns the loaded GGUF. */
static kiln_model *synthetic_model(const char *arch) {
    kiln_err err = {{0}};
    kiln_tm_arch a;
    kiln_tm_config cfg;
    assert_int_equal(kiln_tm_arch_parse(arch, &a), 0);
    if (kiln_tm_defaults(&cfg, a, NULL, &err) < 0) fail_msg("%s", err.msg);
    cfg.dtype = KILN_ST_F32;
    char dir[512], out[512];
    snprintf(dir, sizeof dir, "%s/tm-%s", kiln_test_tmpdir(), arch);
    snprintf(out, sizeof out, "%s/tm-%s.gguf", kiln_test_tmpdir(), arch);
    if (kiln_tm_write(&cfg, dir, &(kiln_tm_opts){.force = true}, NULL, &err) < 0) fail_msg("%s", err.msg);
    if (kiln_convert(dir, out, &(kiln_convert_opts){.outtype = KILN_OUT_F32}, &(kiln_write_opts){.force = true},
                     NULL, NULL, &err) < 0)
        fail_msg("%s", err.msg);
    kiln_model *m = kiln_model_load(out, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

static void test_archs_vs_reference(void **state) {
    (void)state;
    const char *archs[] = {"qwen3", "qwen2moe", "qwen3moe", "gpt2", "mistral", "mixtral"};
    int bad = 0;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        kiln_model *m = synthetic_model(archs[a]);
        const int64_t n = 24, nv = m->hp.n_vocab;
        int32_t ids[24];
        for (int64_t t = 0; t < n; t++) ids[t] = (int32_t)((t * 37 + 5) % nv);
        double *ref = malloc((size_t)(n * nv) * sizeof *ref);
        float *got = malloc((size_t)(n * nv) * sizeof *got);
        assert_true(ref && got);
        ref_forward(m, ids, n, ref);
        double d[2] = {0, 0};
        for (int mode = 0; mode < 2; mode++) {
            kiln_err err = {{0}};
            kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 32, .mode = mode}, &err);
            if (!c || kiln_eval(c, ids, n, got, &err) < 0) fail_msg("%s: %s", archs[a], err.msg);
            for (int64_t i = 0; i < n * nv; i++) {
                double e = fabs(ref[i] - got[i]);
                if (!(e <= d[mode])) d[mode] = e;
            }
            kiln_ctx_free(c);
        }
        /* gpt2's GELU goes through ggml's fp16 table in the default mode */
        bool ok = d[KILN_NUM_EXACT] <= 2e-3 && d[KILN_NUM_GGML] <= 2e-2;
        printf("# %-9s (%s) vs float64 reference: max|d| exact %.3e, ggml %.3e  %s\n", archs[a], m->hp.arch_name,
               d[KILN_NUM_EXACT], d[KILN_NUM_GGML], ok ? "ok" : "FAIL");
        bad += !ok;
        free(ref);
        free(got);
        kiln_model_free(m);
    }
    assert_int_equal(bad, 0);
}

/* ---- errors -------------------------------------------------------------- */

/* Copies llama-f32.gguf leaving out tensor `drop`, or giving tensor
 * `swap` its two dimensions swapped, and returns the load error. */
static const char *load_broken(const char *drop, const char *swap) {
    static kiln_err err;
    kiln_err e2 = {{0}};
    kiln_gguf *g = kiln_gguf_open(kiln_shared_path("golden/gguf/llama-f32.gguf"), &e2);
    if (!g) fail_msg("%s", e2.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/broken.gguf", kiln_test_tmpdir());
    kiln_gguf_writer *w = kiln_writer_new(path, &(kiln_write_opts){.force = true}, &e2);
    assert_non_null(w);
    assert_int_equal(kiln_writer_copy_kv(w, g, &e2), 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        if (kiln_str_eq(t->name, drop)) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (kiln_str_eq(t->name, swap)) ne[0] = t->ne[1], ne[1] = t->ne[0];
        assert_int_equal(kiln_writer_add_tensor(w, name, t->type, t->n_dims, ne, &e2), 0);
    }
    assert_int_equal(kiln_writer_begin(w, &e2), 0);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!kiln_str_eq(g->tensors[i].name, drop))
            assert_int_equal(kiln_writer_write(w, g->tensors[i].data, g->tensors[i].nbytes, &e2), 0);
    assert_int_equal(kiln_writer_finish(w, &e2), 0);
    kiln_gguf_close(g);
    err.msg[0] = 0;
    kiln_model *m = kiln_model_load(path, &err);
    assert_null(m);
    return err.msg;
}

static void test_errors(void **state) {
    (void)state;
    kiln_err err = {{0}};
    assert_null(kiln_model_load("/nonexistent/model.gguf", &err));
    assert_true(err.msg[0] != 0);
    SKIP_WITHOUT_SHARED();
    const char *msg = load_broken("blk.2.attn_k.weight", "");
    printf("# missing: %s\n", msg);
    assert_non_null(strstr(msg, "blk.2.attn_k.weight"));
    assert_non_null(strstr(msg, "missing"));
    msg = load_broken("", "blk.1.ffn_up.weight");
    printf("# swapped: %s\n", msg);
    assert_non_null(strstr(msg, "blk.1.ffn_up.weight"));
    assert_non_null(strstr(msg, "shape"));

    kiln_model *m = kiln_model_load(kiln_shared_path("golden/gguf/qwen2-Q8_0.gguf"), &err);
    if (!m) fail_msg("%s", err.msg);
    assert_true(m->output == m->tok_embd); /* tied embeddings */
    assert_true(m->hp.rope_neox);
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 8}, &err);
    assert_non_null(c);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t bad = (int32_t)m->hp.n_vocab;
    assert_int_equal(kiln_eval(c, &bad, 1, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    assert_int_equal(kiln_eval(c, ids, 9, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "overflow"));
    assert_int_equal(kiln_ctx_n_past(c), 0);
    assert_int_equal(kiln_eval(c, ids, 8, NULL, &err), 0);
    assert_int_equal(kiln_eval(c, ids, 1, NULL, &err), -1);
    kiln_ctx_free(c);
    kiln_model_free(m);
}

/* ---- KILN_ATTN_LLAMACPP ----------------------------------------------- */

/* All logits of a model's golden prompts (one batch each, fresh cache)
 * with the given attention, at the current SIMD level. */
static float *eval_prompts_attn(const char *stem, kiln_attention attention, int64_t *count, int64_t *nv_out,
                                int64_t *head_dim) {
    char gguf[256], ref[256];
    snprintf(gguf, sizeof gguf, "golden/gguf/%s.gguf", stem);
    snprintf(ref, sizeof ref, "golden/logits/%s.logits", stem);
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(gguf), &err);
    if (!m) fail_msg("%s", err.msg);
    kiln_logit_set set = {0};
    if (kiln_klgt_read(kiln_shared_path(ref), &set, &err) < 0) fail_msg("%s", err.msg);
    const int64_t nv = set.n_vocab;
    int64_t total = 0;
    for (uint32_t p = 0; p < set.n_seqs; p++) total += set.seqs[p].n_tokens;
    float *out = malloc((size_t)(total * nv) * sizeof(float));
    assert_non_null(out);
    kiln_ctx *c = kiln_ctx_new(m, &(kiln_ctx_params){.n_ctx = 256, .attention = attention}, &err);
    if (!c) fail_msg("%s", err.msg);
    int64_t at = 0;
    for (uint32_t p = 0; p < set.n_seqs; p++) {
        kiln_ctx_clear(c);
        assert_int_equal(kiln_eval(c, set.seqs[p].ids, set.seqs[p].n_tokens, out + at * nv, &err), 0);
        at += set.seqs[p].n_tokens;
    }
    *count = total;
    *nv_out = nv;
    *head_dim = m->hp.head_dim;
    kiln_ctx_free(c);
    kiln_logit_set_free(&set);
    kiln_model_free(m);
    return out;
}

/* The models the llama.cpp-attention tests run: a dense f32, another
 * architecture, and a quantized MoE. */
static const char *const ATTN_STEMS[] = {"llama-f32", "qwen2-f32", "mixtral-Q8_0"};

/* How many of n floats differ bit for bit. */
static int64_t floats_differ(const float *a, const float *b, int64_t n) {
    int64_t diff = 0;
    for (int64_t j = 0; j < n; j++) diff += memcmp(a + j, b + j, sizeof(float)) != 0;
    return diff;
}

/* llama.cpp's default attention (F16 cache, flash attention) stays close
 * to the f32 one (test_attention_llamacpp_levels: and gives the same bits
 * at every SIMD level). */
static void test_attention_llamacpp(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *const *stems = ATTN_STEMS;
    const size_t n_stems = kiln_test_light() ? 1 : sizeof ATTN_STEMS / sizeof ATTN_STEMS[0];
    for (size_t i = 0; i < n_stems; i++) {
        int64_t n = 0, n2 = 0, nv = 0, hd = 0;
        kiln_simd_set(KILN_SIMD_AVX512);
        float *f32 = eval_prompts_attn(stems[i], KILN_ATTN_F32, &n, &nv, &hd);
        kiln_simd_set(KILN_SIMD_SCALAR);
        float *ref = eval_prompts_attn(stems[i], KILN_ATTN_LLAMACPP, &n2, &nv, &hd);
        assert_int_equal(n, n2);
        stats s = {0};
        for (int64_t t = 0; t < n; t++) compare_row(f32 + t * nv, ref + t * nv, nv, &s);
        printf("# %s (head_dim %lld) llamacpp vs f32 attention: %lld pos  mean KLD %.3e  top-1 %.4f  max|d| %.3e\n",
               stems[i], (long long)hd, (long long)s.n, s.sum_kld / (double)s.n, (double)s.same_top / (double)s.n,
               s.max_abs);
        assert_true(s.sum_kld / (double)s.n < 1e-4);
        assert_true(floats_differ(f32, ref, n * nv) > 0); /* the option does something */
        free(f32);
        free(ref);
    }
    kiln_simd_set(KILN_SIMD_AVX512); /* capped to what the CPU has */
}

/* llama.cpp's default attention at this case's SIMD level gives the
 * scalar code's bits. */
static void test_attention_llamacpp_levels(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    const char *const *stems = ATTN_STEMS;
    const size_t n_stems = kiln_test_light() ? 1 : sizeof ATTN_STEMS / sizeof ATTN_STEMS[0];
    for (size_t i = 0; i < n_stems; i++) {
        int64_t n = 0, n2 = 0, nv = 0, hd = 0;
        kiln_simd_set(KILN_SIMD_SCALAR);
        float *ref = eval_prompts_attn(stems[i], KILN_ATTN_LLAMACPP, &n, &nv, &hd);
        kiln_simd_set(lvl);
        float *got = eval_prompts_attn(stems[i], KILN_ATTN_LLAMACPP, &n2, &nv, &hd);
        assert_int_equal(n, n2);
        const int64_t diff = floats_differ(ref, got, n * nv);
        printf("# %s llamacpp attention: %s vs scalar: %lld of %lld logits differ\n", stems[i], kiln_simd_name(lvl),
               (long long)diff, (long long)(n * nv));
        free(got);
        free(ref);
        assert_int_equal(diff, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_masked), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_hook),           cmocka_unit_test(test_kv_cache_decode),
        cmocka_unit_test(test_archs_vs_reference), SIMD_VECTOR_TESTS(test_simd_levels),
        cmocka_unit_test(test_golden_ggml),    cmocka_unit_test(test_golden_exact),
        cmocka_unit_test(test_attention_llamacpp), SIMD_VECTOR_TESTS(test_attention_llamacpp_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
