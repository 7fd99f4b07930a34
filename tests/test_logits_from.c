/* tests/test_logits_from.c - kiln_ctx_params.logits_from: kiln_eval skips
 * the output product for cache positions below it (perplexity and imatrix
 * score only a chunk's second half), and what it does write is the full
 * evaluation's bits. Checked on the llama and qwen2 fixtures (../shared):
 * the rows from logits_from on equal those of the same calls with every
 * row wanted, bit for bit, the rows before it are left untouched, in one
 * call or split over calls that straddle the boundary, or after calls
 * below it that want no logits at all (their last layer's FFN runs on no
 * row: the cache they leave must be whole), and a hook on output.weight
 * still sees every row (the imatrix collector's sums equal a full run's).
 * The mixtral fixture takes the same path through its MoE last layer.
 * The layer-major order (runtime/layer_major.c, perplexity's --layer-major
 * and --max-memory) skips the same rows: its logits from logits_from on
 * are the token-major run's bits, the rows before are zeros. */
#include "shared.h"

#include "../imatrix/collect.h"
#include "../runtime/layer_major.h"
#include "../runtime/model.h"
#include "../runtime/runtime.h"

#define N_TOK 96
#define FROM 48
#define SENTINEL 0x7fc0dead /* a NaN no product writes */

/* Evaluates N_TOK tokens in calls of `split` tokens (the last takes the
 * rest) with logits_from = from into logits (prefilled with SENTINEL),
 * collecting output.weight's statistics into col when it is not NULL.
 * null_below: calls that end at or before `from` pass no logits. */
static void run(const kiln_model *m, int64_t from, int64_t split, bool null_below, float *logits,
                kiln_imx_collector *col) {
    const int64_t nv = m->hp.n_vocab;
    int32_t ids[N_TOK];
    for (int i = 0; i < N_TOK; i++) ids[i] = (int32_t)((7 * i + 3) % nv);
    const uint32_t sentinel = SENTINEL;
    for (int64_t i = 0; i < N_TOK * nv; i++) memcpy(&logits[i], &sentinel, sizeof sentinel);
    kiln_ctx_params cp = {.n_ctx = N_TOK, .attention = KILN_ATTN_LLAMACPP, .logits_from = from};
    if (col) {
        kiln_imx_collector_init(col, m->gguf, true, true);
        cp.hook = kiln_imx_hook;
        cp.hook_user = col;
        cp.hook_output = true;
    }
    kiln_err err = {{0}};
    kiln_ctx *c = kiln_ctx_new(m, &cp, &err);
    if (!c) fail_msg("%s", err.msg);
    for (int64_t j = 0; j < N_TOK; j += split) {
        const int64_t n = N_TOK - j < split ? N_TOK - j : split;
        float *out = null_below && j + n <= from ? NULL : logits + j * nv;
        if (kiln_eval(c, ids + j, n, out, &err) < 0) fail_msg("%s", err.msg);
    }
    kiln_ctx_free(c);
    if (col) assert_false(col->failed);
}

/* The layer-major runs' logits: each sequence's rows (on_logits). */
typedef struct lm_rows {
    float *seq[2];
    int64_t nv;
} lm_rows;

static int keep_logits(void *user, int64_t seq, const float *logits, kiln_err *err) {
    (void)err;
    lm_rows *r = user;
    memcpy(r->seq[seq], logits, (size_t)(N_TOK * r->nv) * sizeof *logits);
    return 0;
}

/* Two sequences of the ids run() evaluates, layer by layer in calls of
 * `split` tokens with logits_from = FROM, against full: run()'s logits
 * with every row wanted, in the same calls. */
static void check_layer_major(const kiln_model *m, int64_t split, const float *full) {
    const int64_t nv = m->hp.n_vocab;
    int32_t ids[2 * N_TOK];
    for (int i = 0; i < 2 * N_TOK; i++) ids[i] = (int32_t)((7 * (i % N_TOK) + 3) % nv);
    lm_rows got = {{malloc((size_t)(N_TOK * nv) * sizeof(float)), malloc((size_t)(N_TOK * nv) * sizeof(float))}, nv};
    assert_true(got.seq[0] && got.seq[1]);
    kiln_lm_params lp = {.ctx = {.n_ctx = N_TOK, .attention = KILN_ATTN_LLAMACPP, .logits_from = FROM},
                         .n_batch = split, .on_logits = keep_logits, .user = &got};
    kiln_err err = {{0}};
    if (kiln_eval_layer_major(m, &lp, ids, 2, NULL, &err) < 0) fail_msg("%s", err.msg);
    for (int s = 0; s < 2; s++) {
        const float *rows = got.seq[s];
        if (memcmp(rows + FROM * nv, full + FROM * nv, (size_t)((N_TOK - FROM) * nv) * sizeof *rows))
            fail_msg("layer-major, calls of %lld, sequence %d: logits from %d differ from a full evaluation's",
                     (long long)split, s, FROM);
        for (int64_t i = 0; i < FROM * nv; i++)
            if (rows[i] != 0.0f || signbit(rows[i]))
                fail_msg("layer-major, calls of %lld, sequence %d: row %lld below logits_from is not zeros",
                         (long long)split, s, (long long)(i / nv));
    }
    free(got.seq[0]);
    free(got.seq[1]);
}

static void check_model(const char *gguf) {
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(gguf), &err);
    if (!m) fail_msg("%s: %s", gguf, err.msg);
    const int64_t nv = m->hp.n_vocab;
    float *full = malloc((size_t)(N_TOK * nv) * sizeof *full), *part = malloc((size_t)(N_TOK * nv) * sizeof *part);
    assert_non_null(full);
    assert_non_null(part);
    kiln_imx_collector want, got;
    const int64_t splits[] = {N_TOK, 40, 16, FROM};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        /* the same calls with every row wanted, then from FROM on (the
         * last split with no logits asked below FROM) */
        const bool null_below = splits[s] == FROM;
        run(m, 0, splits[s], false, full, s == 0 ? &want : NULL);
        run(m, FROM, splits[s], null_below, part, s == 0 ? &got : NULL);
        /* the wanted rows: the full run's bits */
        if (memcmp(part + FROM * nv, full + FROM * nv, (size_t)((N_TOK - FROM) * nv) * sizeof *part))
            fail_msg("%s, calls of %lld: logits from %d differ from a full evaluation's", gguf, (long long)splits[s],
                     FROM);
        if (!null_below) check_layer_major(m, splits[s], full);
        /* the rows before: never written */
        for (int64_t i = 0; i < FROM * nv; i++) {
            uint32_t b;
            memcpy(&b, &part[i], sizeof b);
            if (b != SENTINEL)
                fail_msg("%s, calls of %lld: row %lld was written", gguf, (long long)splits[s], (long long)(i / nv));
        }
    }
    /* the output hook saw every row, in order (a model whose output is
     * its tied token embedding has no output.weight to collect) */
    const kiln_imx_acc *a = kiln_imx_collector_find(&want, "output.weight"), *b = kiln_imx_collector_find(&got, "output.weight");
    assert_true(want.n_acc > 0 && want.n_acc == got.n_acc);
    if (!a) {
        assert_ptr_equal(m->output, m->tok_embd);
        assert_null(b);
    } else {
        assert_non_null(b);
        assert_int_equal(a->counts[0], N_TOK);
        assert_int_equal(b->counts[0], N_TOK);
        assert_memory_equal(a->sum2, b->sum2, (size_t)a->n * sizeof *a->sum2);
        assert_memory_equal(a->sum, b->sum, (size_t)a->n * sizeof *a->sum);
    }
    kiln_imx_collector_free(&want);
    kiln_imx_collector_free(&got);
    free(full);
    free(part);
    kiln_model_free(m);
}

static void logits_from_llama(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    check_model("golden/gguf/llama-f32.gguf");
}

static void logits_from_qwen2(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    check_model("golden/gguf/qwen2-Q4_K_M.gguf");
}

static void logits_from_mixtral(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    check_model("golden/gguf/mixtral-Q4_K_M.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(logits_from_llama),
        cmocka_unit_test(logits_from_qwen2),
        cmocka_unit_test(logits_from_mixtral),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
