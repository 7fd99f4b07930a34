/* tests/test_quantize_tool.c - kiln quantize's library: the type policy
 * against llama.cpp's choices (every golden preset file of every fixture,
 * types, metadata and bytes), and every override, dry-run, fallback and
 * refusal path on small synthetic GGUFs written here with the core writer. */
#include "shared.h"

#include "../core/gguf.h"
#include "../core/types.h"
#include "../inspect/format.h"
#include "../codec/codec.h"
#include "../quantize/policy.h"
#include "../quantize/quantize_model.h"

#include <limits.h>
#include <math.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

static kiln_quant_opts opts_for(const char *target) {
    kiln_quant_opts o = {.output_type = -1, .token_embd_type = -1, .force = true};
    kiln_err err;
    if (kiln_quant_target_parse(target, &o.target, &err) < 0) fail_msg("%s", err.msg);
    return o;
}

/* Runs the quantizer and returns its status; the report is freed. */
static int run(const char *in, const char *out, const kiln_quant_opts *o, kiln_quant_report *keep, kiln_err *err) {
    kiln_quant_report r;
    int rc = kiln_quantize_model(in, out, o, &r, err);
    if (keep) *keep = r;
    else kiln_quant_report_free(&r);
    return rc;
}

static const kiln_quant_tensor *find(const kiln_quant_report *r, const char *name) {
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (!strcmp(r->tensors[i].name, name)) return &r->tensors[i];
    fail_msg("no tensor %s in the report", name);
    return NULL;
}

/* A deterministic, roughly normal value (sum of uniforms). */
static float noise(uint64_t *s) {
    float v = 0;
    for (int k = 0; k < 4; k++) {
        v += (float)(kiln_test_xorshift64(s) >> 40) / (float)(1 << 24) - 0.5f;
    }
    return v * 0.05f;
}

typedef struct syn {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
} syn;

/* Writes a small llama-like GGUF with the given tensors (f32 noise,
 * converted to each tensor's type); `bad` names a tensor that gets a NaN. */
static void write_syn(const char *path, const syn *t, int n, uint32_t n_expert, uint64_t split_tensors,
                      const char *bad) {
    kiln_err err = {{0}};
    kiln_write_opts wo = {.force = true, .split_max_tensors = split_tensors};
    kiln_gguf_writer *w = kiln_writer_new(path, &wo, &err);
    assert_non_null(w);
    assert_int_equal(kiln_writer_set_str(w, "general.architecture", "llama", &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "llama.block_count", 2, &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "llama.attention.head_count", 4, &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "llama.attention.head_count_kv", 4, &err), 0);
    if (n_expert) assert_int_equal(kiln_writer_set_u32(w, "llama.expert_count", n_expert, &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "general.file_type", 0, &err), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(kiln_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, &err), 0);
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        int64_t ne0 = t[i].ne[0], nel = 1;
        for (uint32_t d = 0; d < t[i].n_dims; d++) nel *= t[i].ne[d];
        float *f = malloc((size_t)nel * sizeof(float));
        for (int64_t k = 0; k < nel; k++) f[k] = t[i].n_dims == 1 ? 1.0f : noise(&seed);
        if (bad && !strcmp(bad, t[i].name)) f[ne0 + 3] = NAN;
        uint64_t nb = kiln_type_row_bytes(t[i].type, (uint64_t)ne0) * (uint64_t)(nel / ne0);
        void *q = malloc(nb);
        if (t[i].type == KILN_F32) memcpy(q, f, nb);
        else assert_int_equal(kiln_quantize_rows(t[i].type, f, q, nel / ne0, ne0, NULL, &err), nb);
        assert_int_equal(kiln_writer_write(w, q, nb, &err), 0);
        free(f);
        free(q);
    }
    if (kiln_writer_finish(w, &err) < 0) fail_msg("%s", err.msg);
}

/* Two layers; blk.1's ffn_down has rows of 96, which fit no 256-block type. */
static const syn SMALL[] = {
    {"token_embd.weight", KILN_F32, 2, {256, 64, 1, 1}},
    {"output_norm.weight", KILN_F32, 1, {256, 1, 1, 1}},
    {"output.weight", KILN_F32, 2, {256, 64, 1, 1}},
    {"blk.0.attn_norm.weight", KILN_F32, 1, {256, 1, 1, 1}},
    {"blk.0.attn_q.weight", KILN_F32, 2, {256, 256, 1, 1}},
    {"blk.0.attn_v.weight", KILN_F32, 2, {256, 256, 1, 1}},
    {"blk.0.ffn_down.weight", KILN_F32, 2, {256, 256, 1, 1}},
    {"blk.1.attn_q.weight", KILN_F32, 2, {256, 256, 1, 1}},
    {"blk.1.attn_v.weight", KILN_F32, 2, {256, 256, 1, 1}},
    {"blk.1.ffn_down.weight", KILN_F32, 2, {96, 256, 1, 1}},
};
#define N_SMALL (int)(sizeof SMALL / sizeof *SMALL)

/* ---- the policy on its own ------------------------------------------------ */

static kiln_tensor_plan plan_of(const kiln_policy_model *m, const char *target, const char *const *names, int n,
                                const char *want, kiln_policy_opts *po_in) {
    kiln_policy_tensor t[128];
    kiln_tensor_plan p[128];
    kiln_policy_opts po = {0};
    if (po_in) po = *po_in;
    else po.output_type = po.token_embd_type = -1;
    kiln_err err;
    if (kiln_quant_target_parse(target, &po.target, &err) < 0) fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++) t[i] = (kiln_policy_tensor){names[i], 2, {4096, 4096, 1, 1}, KILN_F32};
    if (kiln_policy_plan(m, t, (uint64_t)n, &po, p, &err) < 0) fail_msg("%s", err.msg);
    if (po_in) *po_in = po;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return p[i];
    fail_msg("%s not planned", want);
    return p[0];
}

static void policy_layers(void **state) {
    (void)state;
    /* 32 layers: attn_v and ffn_down get Q6_K in Q4_K_M on the first and
     * last eighth and on every third layer in between (llama-7B's mix). */
    kiln_policy_model m = {"llama", 32, 32, 32, 0};
    const char *names[64];
    char buf[64][48];
    for (int i = 0; i < 32; i++) {
        snprintf(buf[2 * i], 48, "blk.%d.attn_v.weight", i);
        snprintf(buf[2 * i + 1], 48, "blk.%d.ffn_down.weight", i);
        names[2 * i] = buf[2 * i];
        names[2 * i + 1] = buf[2 * i + 1];
    }
    const int q6[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    for (int i = 0; i < 32; i++) {
        bool want = false;
        for (size_t k = 0; k < sizeof q6 / sizeof *q6; k++) want |= q6[k] == i;
        uint32_t v = plan_of(&m, "Q4_K_M", names, 64, names[2 * i], NULL).to;
        uint32_t d = plan_of(&m, "Q4_K_M", names, 64, names[2 * i + 1], NULL).to;
        assert_int_equal(v, want ? KILN_Q6_K : KILN_Q4_K);
        assert_int_equal(d, want ? KILN_Q6_K : KILN_Q4_K);
        /* Q3_K_M: attn_v Q5_K for the first two, ffn_down Q5_K below n/16 */
        assert_int_equal(plan_of(&m, "Q3_K_M", names, 64, names[2 * i], NULL).to, i < 2 ? KILN_Q5_K : KILN_Q4_K);
        assert_int_equal(plan_of(&m, "Q3_K_M", names, 64, names[2 * i + 1], NULL).to, i < 2 ? KILN_Q5_K : KILN_Q4_K);
        /* Q4_K_S: attn_v Q5_K for the first four, ffn_down below n/8 */
        assert_int_equal(plan_of(&m, "Q4_K_S", names, 64, names[2 * i], NULL).to, i < 4 ? KILN_Q5_K : KILN_Q4_K);
        assert_int_equal(plan_of(&m, "Q4_K_S", names, 64, names[2 * i + 1], NULL).to, i < 4 ? KILN_Q5_K : KILN_Q4_K);
        assert_int_equal(plan_of(&m, "Q5_K_M", names, 64, names[2 * i], NULL).to, want ? KILN_Q6_K : KILN_Q5_K);
    }
    /* IQ2_XXS: ffn_down Q2_K in the first eighth */
    assert_int_equal(plan_of(&m, "IQ2_XXS", names, 64, "blk.3.ffn_down.weight", NULL).to, KILN_Q2_K);
    assert_int_equal(plan_of(&m, "IQ2_XXS", names, 64, "blk.4.ffn_down.weight", NULL).to, KILN_IQ2_XXS);
    /* llama 70B (80 layers, GQA): Q4_K attn_v becomes Q5_K */
    kiln_policy_model m70 = {"llama", 80, 64, 8, 0};
    assert_int_equal(plan_of(&m70, "Q4_K_M", names, 64, "blk.5.attn_v.weight", NULL).to, KILN_Q5_K);
    kiln_policy_model m65 = {"llama", 80, 64, 64, 0}, q72 = {"qwen2", 80, 64, 8, 0};
    assert_int_equal(plan_of(&m65, "Q4_K_M", names, 64, "blk.5.attn_v.weight", NULL).to, KILN_Q4_K);
    assert_int_equal(plan_of(&q72, "Q3_K_M", names, 64, "blk.5.attn_v.weight", NULL).to, KILN_Q5_K);
}

static void policy_model_rules(void **state) {
    (void)state;
    const char *names[] = {"token_embd.weight", "output.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                           "blk.0.attn_output.weight", "blk.0.ffn_down_exps.weight", "blk.0.attn_norm.weight"};
    kiln_policy_model dense = {"llama", 1, 32, 32, 0}, gqa = {"llama", 1, 32, 8, 0}, moe8 = {"llama", 1, 32, 8, 8};
    /* GQA >= 4 lifts attn_v of Q2_K and IQ2_XXS to Q4_K */
    assert_int_equal(plan_of(&dense, "Q2_K", names, 7, "blk.0.attn_v.weight", NULL).to, KILN_Q3_K);
    assert_int_equal(plan_of(&gqa, "Q2_K", names, 7, "blk.0.attn_v.weight", NULL).to, KILN_Q4_K);
    assert_int_equal(plan_of(&dense, "IQ2_XXS", names, 7, "blk.0.attn_v.weight", NULL).to, KILN_Q2_K);
    assert_int_equal(plan_of(&gqa, "IQ2_XXS", names, 7, "blk.0.attn_v.weight", NULL).to, KILN_Q4_K);
    /* 8 experts */
    assert_int_equal(plan_of(&moe8, "Q4_K_M", names, 7, "blk.0.attn_v.weight", NULL).to, KILN_Q8_0);
    assert_int_equal(plan_of(&moe8, "Q4_K_M", names, 7, "blk.0.attn_k.weight", NULL).to, KILN_Q8_0);
    assert_int_equal(plan_of(&moe8, "Q4_K_M", names, 7, "blk.0.attn_output.weight", NULL).to, KILN_Q5_K);
    assert_int_equal(plan_of(&moe8, "IQ2_XXS", names, 7, "blk.0.attn_k.weight", NULL).to, KILN_Q4_K);
    /* output and token_embd */
    assert_int_equal(plan_of(&dense, "Q4_K_M", names, 7, "output.weight", NULL).to, KILN_Q6_K);
    assert_int_equal(plan_of(&dense, "Q4_K_M", names, 7, "token_embd.weight", NULL).to, KILN_Q4_K);
    assert_int_equal(plan_of(&dense, "Q8_0", names, 7, "output.weight", NULL).to, KILN_Q8_0);
    assert_int_equal(plan_of(&dense, "IQ2_XXS", names, 7, "output.weight", NULL).to, KILN_Q5_K);
    assert_int_equal(plan_of(&dense, "IQ2_XXS", names, 7, "token_embd.weight", NULL).to, KILN_Q2_K);
    kiln_policy_model falcon = {"falcon", 1, 32, 32, 0};
    assert_int_equal(plan_of(&falcon, "Q4_K_M", names, 7, "output.weight", NULL).to, KILN_Q8_0);
    /* tied embeddings: no output.weight, token_embd takes the output's type */
    const char *tied[] = {"token_embd.weight", "blk.0.attn_v.weight"};
    assert_int_equal(plan_of(&dense, "Q4_K_M", tied, 2, "token_embd.weight", NULL).to, KILN_Q6_K);
    assert_int_equal(plan_of(&dense, "IQ2_XXS", tied, 2, "token_embd.weight", NULL).to, KILN_Q5_K);
    /* norms stay */
    kiln_tensor_plan p = plan_of(&dense, "Q4_K_M", names, 7, "blk.0.attn_norm.weight", NULL);
    assert_int_equal(p.to, KILN_F32);
    assert_int_equal(p.why, KILN_WHY_KEEP);
    assert_false(kiln_policy_quantizable("blk.0.ffn_gate_inp.weight", 2));
    assert_false(kiln_policy_quantizable("blk.0.attn_q.bias", 2));
    assert_false(kiln_policy_quantizable("blk.0.attn_q.weight", 1));
    assert_true(kiln_policy_quantizable("blk.0.ffn_up_exps.weight", 3));
}

static void policy_options(void **state) {
    (void)state;
    const char *names[] = {"token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                           "blk.1.attn_q.weight"};
    kiln_policy_model m = {"llama", 2, 8, 8, 0};
    kiln_type_override ov[3];
    kiln_err err;
    assert_int_equal(kiln_override_parse("blk\\.0\\.attn_q=q8_0", &ov[0], &err), 0);
    assert_int_equal(kiln_override_parse("attn_q=Q5_K", &ov[1], &err), 0);
    assert_int_equal(kiln_override_parse("nothing_here=q4_0", &ov[2], &err), 0);
    kiln_policy_opts po = {.output_type = -1, .token_embd_type = -1, .overrides = ov, .n_overrides = 3};
    kiln_tensor_plan p = plan_of(&m, "Q4_K_M", names, 5, "blk.0.attn_q.weight", &po);
    assert_int_equal(p.to, KILN_Q8_0);
    assert_int_equal(p.why, KILN_WHY_OVERRIDE);
    assert_int_equal(p.override_idx, 0);
    assert_int_equal(ov[0].hits, 1);
    assert_int_equal(ov[1].hits, 1); /* first match wins: blk.1 only */
    assert_int_equal(ov[2].hits, 0);
    for (int i = 0; i < 3; i++) kiln_override_free(&ov[i]);
    /* override parse errors */
    assert_int_equal(kiln_override_parse("attn_q", &ov[0], &err), -1);
    assert_non_null(strstr(err.msg, "REGEX=TYPE"));
    assert_int_equal(kiln_override_parse("attn_q=i8", &ov[0], &err), -1);
    assert_non_null(strstr(err.msg, "cannot quantize"));
    assert_int_equal(kiln_override_parse("attn_(q=q4_0", &ov[0], &err), -1);
    assert_non_null(strstr(err.msg, "regex"));
    /* output / token_embd types, and --pure */
    kiln_policy_opts po2 = {.output_type = KILN_Q8_0, .token_embd_type = KILN_Q5_0};
    assert_int_equal(plan_of(&m, "Q4_K_M", names, 5, "output.weight", &po2).to, KILN_Q8_0);
    assert_int_equal(plan_of(&m, "Q4_K_M", names, 5, "token_embd.weight", &po2).to, KILN_Q5_0);
    kiln_policy_opts pure = {.pure = true, .output_type = -1, .token_embd_type = -1};
    assert_int_equal(plan_of(&m, "Q4_K_M", names, 5, "output.weight", &pure).to, KILN_Q4_K);
    assert_int_equal(plan_of(&m, "Q4_K_M", names, 5, "blk.0.attn_v.weight", &pure).to, KILN_Q4_K);
    /* q5_k is llama-quantize's alias of Q5_K_M; a type no preset has is pure */
    assert_int_equal(plan_of(&m, "q5_k", names, 5, "output.weight", NULL).to, KILN_Q6_K);
    assert_int_equal(plan_of(&m, "mxfp4", names, 5, "output.weight", NULL).to, KILN_MXFP4);
    assert_int_equal(plan_of(&m, "f16", names, 5, "blk.0.attn_v.weight", NULL).to, KILN_F16);
}

static void policy_targets_and_fallbacks(void **state) {
    (void)state;
    kiln_quant_target t;
    kiln_err err;
    assert_int_equal(kiln_quant_target_parse("q4_k_m", &t, &err), 0);
    assert_non_null(t.preset);
    assert_int_equal(t.ftype, 15);
    const struct {
        const char *name;
        uint32_t ftype;
    } FT[] = {{"Q8_0", 7}, {"Q6_K", 18}, {"Q5_K_M", 17}, {"Q4_K_S", 14}, {"Q3_K_M", 12}, {"Q2_K", 10}, {"IQ2_XXS", 19}};
    for (size_t i = 0; i < sizeof FT / sizeof *FT; i++) {
        assert_int_equal(kiln_quant_target_parse(FT[i].name, &t, &err), 0);
        assert_int_equal(t.ftype, FT[i].ftype);
    }
    assert_int_equal(kiln_quant_target_parse("q4_k", &t, &err), 0); /* llama-quantize's alias */
    assert_string_equal(t.preset->name, "Q4_K_M");
    assert_int_equal(t.ftype, 15);
    assert_int_equal(kiln_quant_target_parse("F16", &t, &err), 0);
    assert_int_equal(t.ftype, 1);
    assert_int_equal(kiln_quant_target_parse("Q4_K_Z", &t, &err), -1);
    assert_non_null(strstr(err.msg, "presets:"));
    assert_int_equal(kiln_quant_target_parse("i8", &t, &err), -1);
    /* llama.cpp's fallbacks for rows that do not fit the blocks */
    assert_int_equal(kiln_policy_fallback(KILN_Q4_K, 256), KILN_Q4_K);
    assert_int_equal(kiln_policy_fallback(KILN_Q4_K, 96), KILN_Q5_0);
    assert_int_equal(kiln_policy_fallback(KILN_Q5_K, 96), KILN_Q5_1);
    assert_int_equal(kiln_policy_fallback(KILN_Q6_K, 96), KILN_Q8_0);
    assert_int_equal(kiln_policy_fallback(KILN_Q2_K, 96), KILN_Q4_0);
    assert_int_equal(kiln_policy_fallback(KILN_Q3_K, 96), KILN_Q4_0);
    assert_int_equal(kiln_policy_fallback(KILN_IQ2_XXS, 96), KILN_IQ4_NL);
    assert_int_equal(kiln_policy_fallback(KILN_Q4_K, 100), KILN_F16);
    assert_int_equal(kiln_policy_fallback(KILN_Q8_0, 100), KILN_NO_FALLBACK); /* llama.cpp refuses */
    assert_int_equal(kiln_policy_fallback(KILN_F16, 100), KILN_F16);
}

/* ---- against llama.cpp's files -------------------------------------------- */

static const struct {
    const char *fixture, *preset;
} GOLDEN[] = {
    {"llama", "Q8_0"},    {"llama", "Q4_K_M"},   {"llama", "Q4_K_S"}, {"llama", "Q3_K_M"},    {"llama", "Q6_K"},
    {"llama", "Q2_K"},    {"llama", "IQ2_XXS"},  {"mixtral", "Q8_0"}, {"mixtral", "Q4_K_M"},  {"mixtral", "Q2_K"},
    {"mixtral", "IQ2_XXS"}, {"qwen2", "Q8_0"},   {"qwen2", "Q4_K_M"}, {"qwen2", "Q2_K"},      {"qwen2", "IQ2_XXS"},
};

static char home[PATH_MAX];

/* golden_presets works inside ../shared/golden; a failed assertion must
 * not leave the other tests there. */
static int back_home(void **state) {
    (void)state;
    return chdir(home);
}

static void golden_presets(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    char golden[PATH_MAX];
    assert_non_null(realpath(kiln_shared_path("golden"), golden));
    /* run where llama-quantize ran, with the same relative paths, so that
     * quantize.imatrix.file holds the same string */
    assert_int_equal(chdir(golden), 0);
    char identical[512] = "";
    for (size_t g = 0; g < sizeof GOLDEN / sizeof *GOLDEN; g++) {
        char in[128], ref[128], im[128];
        snprintf(in, sizeof in, "gguf/%s-f32.gguf", GOLDEN[g].fixture);
        snprintf(ref, sizeof ref, "gguf/%s-%s.gguf", GOLDEN[g].fixture, GOLDEN[g].preset);
        snprintf(im, sizeof im, "imatrix/%s.imatrix.gguf", GOLDEN[g].fixture);
        const char *out = kiln_test_tmp_path("golden-out.gguf");
        kiln_quant_opts o = opts_for(GOLDEN[g].preset);
        kiln_err err = {{0}};
        kiln_imatrix *imx = NULL;
        bool low = !strcmp(GOLDEN[g].preset, "Q2_K") || !strcmp(GOLDEN[g].preset, "IQ2_XXS");
        if (low) {
            if (!(imx = kiln_imatrix_read(im, &err))) fail_msg("%s", err.msg);
            o.imatrix = imx;
            o.imatrix_path = im;
        }
        if (run(in, out, &o, NULL, &err) < 0) fail_msg("%s %s: %s", GOLDEN[g].fixture, GOLDEN[g].preset, err.msg);
        kiln_gguf *a = kiln_gguf_open(ref, &err), *b = kiln_gguf_open(out, &err);
        assert_non_null(a);
        assert_non_null(b);
        /* the same keys, in the same order, with the same values */
        assert_int_equal(a->n_kv, b->n_kv);
        for (uint64_t k = 0; k < a->n_kv; k++) {
            assert_int_equal(a->kv[k].key.len, b->kv[k].key.len);
            assert_memory_equal(a->kv[k].key.ptr, b->kv[k].key.ptr, a->kv[k].key.len);
            assert_true(kiln_value_equal(&a->kv[k].val, &b->kv[k].val));
        }
        /* the same tensors, order, types and shapes; the same bytes where
         * kiln's codec is byte-exact (all but IQ2_XXS) */
        assert_int_equal(a->n_tensors, b->n_tensors);
        uint64_t iq2_same = 0, iq2_total = 0;
        for (uint64_t i = 0; i < a->n_tensors; i++) {
            const kiln_tensor *x = &a->tensors[i], *y = &b->tensors[i];
            assert_true(x->name.len == y->name.len && !memcmp(x->name.ptr, y->name.ptr, x->name.len));
            if (x->type != y->type)
                fail_msg("%s: %.*s is %s in llama.cpp's file, %s in kiln's", ref, (int)x->name.len, x->name.ptr,
                         kiln_type_name(x->type), kiln_type_name(y->type));
            assert_memory_equal(x->ne, y->ne, sizeof x->ne);
            assert_int_equal(x->offset, y->offset);
            if (x->type == KILN_IQ2_XXS) {
                for (uint64_t k = 0; k < x->nbytes; k++) iq2_same += x->data[k] == y->data[k];
                iq2_total += x->nbytes;
            } else if (memcmp(x->data, y->data, x->nbytes)) {
                fail_msg("%s: %.*s (%s) differs from llama.cpp's bytes", ref, (int)x->name.len, x->name.ptr,
                         kiln_type_name(x->type));
            }
        }
        bool same = kiln_test_same_file(ref, out);
        print_message("# %-8s %-8s types match, metadata match, %s%s\n", GOLDEN[g].fixture, GOLDEN[g].preset,
                      same ? "whole file byte-identical" : "file differs", iq2_total ? "" : "");
        if (iq2_total)
            print_message("#                   IQ2_XXS tensors: %.1f%% of their bytes equal llama.cpp's (codec not "
                          "byte-exact); every other tensor byte-identical\n",
                          100.0 * (double)iq2_same / (double)iq2_total);
        else
            assert_true(same);
        if (same) {
            size_t n = strlen(identical);
            snprintf(identical + n, sizeof identical - n, " %s-%s", GOLDEN[g].fixture, GOLDEN[g].preset);
        }
        kiln_gguf_close(a);
        kiln_gguf_close(b);
        kiln_imatrix_free(imx);
    }
    print_message("# byte-identical to llama.cpp:%s\n", identical);
}

/* Straight from the Hugging Face models (convert + quantize in one pass):
 * the same file llama.cpp's converter and llama-quantize made. */
static void hf_one_step(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *fixtures[] = {"llama", "mixtral", "qwen2"};
    for (int f = 0; f < 3; f++) {
        char in[256], ref[256];
        snprintf(in, sizeof in, "models/%s", fixtures[f]);
        snprintf(ref, sizeof ref, "golden/gguf/%s-Q4_K_M.gguf", fixtures[f]);
        kiln_quant_opts o = opts_for("Q4_K_M");
        kiln_err err = {{0}};
        if (run(kiln_shared_path(in), kiln_test_tmp_path("hf.gguf"), &o, NULL, &err) < 0) fail_msg("%s: %s", in, err.msg);
        if (!kiln_test_same_file(kiln_test_tmp_path("hf.gguf"), kiln_shared_path(ref))) fail_msg("%s: differs from %s", in, ref);
        print_message("# %s -> Q4_K_M in one step: byte-identical to %s\n", in, ref);
    }
}

/* ---- synthetic paths -------------------------------------------------------- */

static void fallback_paths(void **state) {
    (void)state;
    const char *in = kiln_test_tmp_path("small.gguf"), *out = kiln_test_tmp_path("small-q4.gguf");
    write_syn(in, SMALL, N_SMALL, 0, 0, NULL);
    kiln_quant_opts o = opts_for("Q4_K_M");
    kiln_quant_report r;
    kiln_err err = {{0}};
    if (run(in, out, &o, &r, &err) < 0) fail_msg("%s", err.msg);
    const kiln_quant_tensor *q = find(&r, "blk.1.ffn_down.weight");
    assert_true(q->plan.fallback);
    assert_int_equal(q->plan.wanted, KILN_Q6_K); /* last layer: more bits */
    assert_int_equal(q->plan.to, KILN_Q8_0);
    assert_int_equal(r.n_fallbacks, 1);
    /* the written file reads back, and the fallback tensor is close */
    kiln_gguf *g = kiln_gguf_open(out, &err);
    assert_non_null(g);
    const kiln_tensor *t = kiln_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    assert_int_equal(t->type, KILN_Q8_0);
    float *back = malloc(96 * 256 * sizeof(float));
    assert_int_equal(kiln_dequantize(t->type, t->data, back, 96 * 256, &err), 0);
    kiln_gguf *src = kiln_gguf_open(in, &err);
    const float *orig = (const float *)kiln_gguf_find_tensor(src, "blk.1.ffn_down.weight")->data;
    double worst = 0;
    for (int i = 0; i < 96 * 256; i++) worst = fmax(worst, fabs((double)back[i] - orig[i]));
    assert_true(worst < 0.002);
    free(back);
    kiln_gguf_close(g);
    kiln_gguf_close(src);
    kiln_quant_report_free(&r);
    /* pure Q2_K (the name alone is the preset, as in llama-quantize):
     * Q2_K falls back to Q4_0 */
    o = opts_for("q2_k");
    o.pure = true;
    if (run(in, out, &o, &r, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(find(&r, "blk.1.ffn_down.weight")->plan.to, KILN_Q4_0);
    assert_int_equal(find(&r, "output.weight")->plan.to, KILN_Q2_K);
    kiln_quant_report_free(&r);
    /* --no-fallback makes it an error, and nothing is written */
    unlink(out);
    o = opts_for("Q4_K_M");
    o.no_fallback = true;
    assert_int_equal(run(in, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "blk.1.ffn_down.weight"));
    assert_non_null(strstr(err.msg, "--no-fallback"));
    assert_false(kiln_test_exists(out));
}

static void dry_run_and_overrides(void **state) {
    (void)state;
    const char *in = kiln_test_tmp_path("small.gguf"), *out = kiln_test_tmp_path("dry.gguf");
    write_syn(in, SMALL, N_SMALL, 0, 0, NULL);
    unlink(out);
    kiln_quant_opts o = opts_for("Q4_K_M");
    kiln_type_override ov[2];
    kiln_err err = {{0}};
    assert_int_equal(kiln_override_parse("attn_q=q8_0", &ov[0], &err), 0);
    assert_int_equal(kiln_override_parse("^nope=q4_0", &ov[1], &err), 0);
    o.overrides = ov;
    o.n_overrides = 2;
    o.dry_run = true;
    kiln_quant_report r;
    assert_int_equal(run(in, out, &o, &r, &err), 0);
    assert_false(kiln_test_exists(out));
    assert_int_equal(r.n_outputs, 0);
    assert_int_equal(r.n_tensors, N_SMALL);
    assert_int_equal(ov[0].hits, 2);
    assert_int_equal(ov[1].hits, 0);
    const kiln_quant_tensor *q = find(&r, "blk.0.attn_q.weight");
    assert_int_equal(q->plan.to, KILN_Q8_0);
    assert_int_equal(q->plan.why, KILN_WHY_OVERRIDE);
    assert_int_equal(q->bytes_out, 256 * 34 * 8);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < r.n_tensors; i++) sum += r.tensors[i].bytes_out;
    assert_int_equal(sum, r.bytes_out);
    assert_true(kiln_quant_bpw(&r, r.bytes_in) == 32.0);
    assert_true(kiln_quant_bpw(&r, r.bytes_out) < 9.0);
    kiln_quant_report_free(&r);
    /* dry-run of IQ2_XXS without an imatrix warns instead of failing */
    kiln_quant_opts o2 = opts_for("IQ2_XXS");
    o2.dry_run = true;
    assert_int_equal(run(in, NULL, &o2, &r, &err), 0);
    assert_true(r.n_warnings > 0);
    assert_non_null(strstr(r.warnings[0], "needs an importance matrix"));
    kiln_quant_report_free(&r);
    kiln_override_free(&ov[0]);
    kiln_override_free(&ov[1]);
}

static void refusals(void **state) {
    (void)state;
    const char *in = kiln_test_tmp_path("small.gguf"), *out = kiln_test_tmp_path("ref.gguf");
    write_syn(in, SMALL, N_SMALL, 0, 0, NULL);
    kiln_err err = {{0}};
    /* IQ2_XXS without an imatrix: refused, with the reason */
    unlink(out);
    kiln_quant_opts o = opts_for("IQ2_XXS");
    assert_int_equal(run(in, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "needs an importance matrix"));
    assert_non_null(strstr(err.msg, "--imatrix"));
    assert_false(kiln_test_exists(out));
    /* an existing output without force; the input as output */
    o = opts_for("Q8_0");
    assert_int_equal(run(in, out, &o, NULL, &err), 0);
    o.force = false;
    assert_int_equal(run(in, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "exists"));
    o.force = true;
    assert_int_equal(run(in, in, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "input"));
    /* a quantized input is refused unless requantizing is allowed */
    syn q8[N_SMALL];
    memcpy(q8, SMALL, sizeof q8);
    q8[4].type = KILN_Q8_0;
    const char *qin = kiln_test_tmp_path("small-q8.gguf");
    write_syn(qin, q8, N_SMALL, 0, 0, NULL);
    o = opts_for("Q4_K_M");
    assert_int_equal(run(qin, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "blk.0.attn_q.weight: is already quantized (Q8_0)"));
    assert_non_null(strstr(err.msg, "--allow-requantize"));
    o.allow_requantize = true;
    kiln_quant_report r;
    assert_int_equal(run(qin, out, &o, &r, &err), 0);
    assert_int_equal(find(&r, "blk.0.attn_q.weight")->plan.to, KILN_Q4_K);
    kiln_quant_report_free(&r);
    /* same type in and out is a copy, not a requantization */
    o = opts_for("q8_0");
    assert_int_equal(run(qin, out, &o, NULL, &err), 0);
    /* NaN in a weight: refused, naming tensor and row */
    const char *nin = kiln_test_tmp_path("nan.gguf");
    write_syn(nin, SMALL, N_SMALL, 0, 0, "blk.0.attn_v.weight");
    o = opts_for("Q4_K_M");
    assert_int_equal(run(nin, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "blk.0.attn_v.weight: row 1 column 3 is NaN"));
    /* a directory (HF model) is not a GGUF */
    assert_int_equal(run(kiln_test_tmpdir(), out, &o, NULL, &err), -1);
}

static void imatrix_paths(void **state) {
    (void)state;
    /* an MoE layer: expert tensors are quantized per expert, each with its
     * own slice of the imatrix */
    const syn MOE[] = {
        {"output.weight", KILN_F32, 2, {256, 32, 1, 1}},
        {"blk.0.attn_v.weight", KILN_F32, 2, {256, 64, 1, 1}},
        {"blk.0.ffn_up_exps.weight", KILN_F32, 3, {256, 16, 4, 1}},
        {"blk.1.attn_v.weight", KILN_F32, 2, {256, 64, 1, 1}},
        {"blk.1.attn_k.weight", KILN_F32, 2, {256, 64, 1, 1}},
    };
    const char *in = kiln_test_tmp_path("moe.gguf"), *out = kiln_test_tmp_path("moe-iq2.gguf");
    write_syn(in, MOE, 5, 4, 0, NULL);
    kiln_err err = {{0}};
    kiln_imatrix *im = kiln_imatrix_new();
    assert_non_null(kiln_imatrix_add(im, "blk.0.ffn_up_exps.weight", 256, 4, false, &err));
    assert_non_null(kiln_imatrix_add(im, "blk.0.attn_v.weight", 256, 1, false, &err));
    kiln_quant_opts o = opts_for("IQ2_XXS");
    o.imatrix = im;
    o.imatrix_path = "moe.imatrix";
    /* no entry for any weight of blk.1: made for a shallower model */
    assert_int_equal(run(in, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "moe.imatrix: has entries for 1 of the 2 layers"));
    assert_non_null(strstr(err.msg, "none for blk.1: it was made for another model"));
    assert_non_null(kiln_imatrix_add(im, "blk.1.attn_k.weight", 256, 1, false, &err));
    /* entries move when others are added: look them up afterwards */
    kiln_imatrix_entry *e = (kiln_imatrix_entry *)kiln_imatrix_find(im, "blk.0.ffn_up_exps.weight");
    kiln_imatrix_entry *v0 = (kiln_imatrix_entry *)kiln_imatrix_find(im, "blk.0.attn_v.weight");
    for (int k = 0; k < 1024; k++) e->in_sum2[k] = 1.0f + (float)((k * 37) % 101);
    for (int k = 0; k < 256; k++) v0->in_sum2[k] = 1.0f;
    e->counts[0] = 10, e->counts[1] = 0, e->counts[2] = 5, e->counts[3] = 2; /* expert 1 never routed */
    v0->counts[0] = 1;
    kiln_imatrix_entry *k1 = (kiln_imatrix_entry *)kiln_imatrix_find(im, "blk.1.attn_k.weight");
    for (int k = 0; k < 256; k++) k1->in_sum2[k] = 1.0f;
    k1->counts[0] = 1;
    im->chunk_count = 3;
    kiln_quant_report r;
    if (run(in, out, &o, &r, &err) < 0) fail_msg("%s", err.msg);
    const kiln_quant_tensor *q = find(&r, "blk.0.ffn_up_exps.weight");
    assert_int_equal(q->plan.to, KILN_IQ2_XXS);
    assert_true(q->imatrix);
    assert_int_equal(q->zero_experts, 1);
    bool warned = false;
    for (uint32_t i = 0; i < r.n_warnings; i++) warned |= strstr(r.warnings[i], "1 of 4 experts") != NULL;
    assert_true(warned);
    /* 4 experts: attn_v is Q4_K (llama.cpp's expert rule) and has no entry for blk.1 */
    assert_int_equal(find(&r, "blk.1.attn_v.weight")->plan.to, KILN_Q4_K);
    kiln_quant_report_free(&r);
    /* each expert's bytes equal quantizing it alone with its slice */
    kiln_gguf *src = kiln_gguf_open(in, &err), *dst = kiln_gguf_open(out, &err);
    const kiln_tensor *ts = kiln_gguf_find_tensor(src, "blk.0.ffn_up_exps.weight");
    const kiln_tensor *td = kiln_gguf_find_tensor(dst, "blk.0.ffn_up_exps.weight");
    float w[1024];
    int64_t zero;
    assert_int_equal(kiln_imatrix_weights(e, 256, 4, w, &zero, &err), 0);
    uint64_t eb = kiln_type_row_bytes(KILN_IQ2_XXS, 256) * 16;
    uint8_t *one = malloc(eb);
    for (int x = 0; x < 4; x++) {
        assert_int_equal(kiln_quantize_rows(KILN_IQ2_XXS, (const float *)ts->data + x * 16 * 256, one, 16, 256,
                                            w + x * 256, &err), eb);
        assert_memory_equal(one, td->data + x * eb, eb);
    }
    free(one);
    /* the imatrix keys */
    kiln_str s;
    uint64_t u;
    assert_true(kiln_gguf_get_str(dst, "quantize.imatrix.file", &s) && kiln_str_eq(s, "moe.imatrix"));
    assert_true(kiln_gguf_get_u64(dst, "quantize.imatrix.entries_count", &u) && u == 3);
    assert_true(kiln_gguf_get_u64(dst, "quantize.imatrix.chunks_count", &u) && u == 3);
    assert_null(kiln_gguf_find_kv(dst, "quantize.imatrix.dataset"));
    assert_true(kiln_gguf_get_u64(dst, "general.file_type", &u) && u == 19);
    kiln_gguf_close(src);
    kiln_gguf_close(dst);
    /* an imatrix of the wrong size is an error */
    kiln_imatrix *bad = kiln_imatrix_new();
    assert_non_null(kiln_imatrix_add(bad, "blk.0.ffn_up_exps.weight", 256, 2, false, &err));
    assert_non_null(kiln_imatrix_add(bad, "blk.0.attn_v.weight", 256, 1, false, &err));
    o.imatrix = bad;
    assert_int_equal(run(in, out, &o, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "statistics for 256 columns x 2 matrices"));
    assert_non_null(strstr(err.msg, "another model"));
    kiln_imatrix_free(bad);
    kiln_imatrix_free(im);
}

static void tensor_checks(void **state) {
    (void)state;
    /* an overflow to Inf in the output is caught before writing */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = i == 7 ? 1e6f : 0.5f;
    uint16_t h[256];
    int64_t ne[4] = {256, 1, 1, 1};
    kiln_err err = {{0}};
    assert_int_equal(kiln_quantize_tensor(KILN_F16, x, h, ne, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "NaN/Inf"));
    x[7] = 0.25f;
    assert_int_equal(kiln_quantize_tensor(KILN_F16, x, h, ne, NULL, NULL, &err), 512);
}

static void split_outputs(void **state) {
    (void)state;
    const char *in = kiln_test_tmp_path("split-in.gguf"), *out = kiln_test_tmp_path("split-out.gguf");
    write_syn(in, SMALL, N_SMALL, 0, 4, NULL); /* 3 shards of <= 4 tensors */
    const char *first = kiln_test_tmp_path("split-in-00001-of-00003.gguf");
    assert_true(kiln_test_exists(first));
    kiln_quant_opts o = opts_for("Q8_0");
    o.keep_split = true;
    kiln_quant_report r;
    kiln_err err = {{0}};
    if (run(first, out, &o, &r, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(r.n_outputs, 3);
    assert_non_null(strstr(r.outputs[2], "split-out-00003-of-00003.gguf"));
    kiln_quant_report_free(&r);
    kiln_gguf *g = kiln_gguf_open(kiln_test_tmp_path("split-out-00002-of-00003.gguf"), &err);
    assert_non_null(g);
    assert_int_equal(g->n_shards, 3);
    assert_int_equal(g->n_tensors, N_SMALL);
    kiln_gguf *gi = kiln_gguf_open(first, &err);
    for (uint32_t s = 0; s < 3; s++) assert_int_equal(g->shards[s].n_tensors, gi->shards[s].n_tensors);
    kiln_gguf_close(gi);
    kiln_gguf_close(g);
    /* --split-max-size from an unsplit input */
    const char *one = kiln_test_tmp_path("small.gguf");
    write_syn(one, SMALL, N_SMALL, 0, 0, NULL);
    o = opts_for("Q8_0");
    o.split_max_size = 100000;
    if (run(one, kiln_test_tmp_path("sized.gguf"), &o, &r, &err) < 0) fail_msg("%s", err.msg);
    assert_true(r.n_outputs > 1);
    g = kiln_gguf_open(r.outputs[0], &err);
    assert_non_null(g);
    assert_int_equal(g->n_tensors, N_SMALL);
    for (uint32_t s = 0; s < g->n_shards; s++) assert_true(g->shards[s].size <= 100000 + 8192);
    kiln_gguf_close(g);
    kiln_quant_report_free(&r);
}

int main(void) {
    /* absolute paths from here on: golden_presets changes directory */
    char shared[PATH_MAX];
    if (kiln_shared() && realpath(kiln_shared(), shared)) setenv("KILN_SHARED", shared, 1);
    if (!getcwd(home, sizeof home)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policy_layers),        cmocka_unit_test(policy_model_rules),
        cmocka_unit_test(policy_options),       cmocka_unit_test(policy_targets_and_fallbacks),
        cmocka_unit_test_teardown(golden_presets, back_home), cmocka_unit_test(hf_one_step),
        cmocka_unit_test(fallback_paths),
        cmocka_unit_test(dry_run_and_overrides), cmocka_unit_test(refusals),
        cmocka_unit_test(imatrix_paths),        cmocka_unit_test(tensor_checks),
        cmocka_unit_test(split_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
