/* tests/test_deepseek_convert.c - DeepSeek's converter table
 * (convert/arch_deepseek.c): the kv_b_proj split against its index
 * formula (llama.cpp's view(n_head, nope + v, kv_lora), split on dim 1, k
 * transposed), the MLA dimensions and config edits of the hparams hook,
 * the e_score_correction_bias rename, and configs the hook rejects. The
 * byte-for-byte checks against llama.cpp's converter (FP8 and BF16
 * sources, V3 and V2-Lite) are in tests/e2e/deepseek2.sh. */
#include "shared.h"

#include <jansson.h>
#include <string.h>

#include "../convert/arch.h"
#include "../convert/hparams.h"

/* 3 heads, nope 4, v 5, kv_lora 6: source element (h, r, c) holds
 * h * 1000 + r * 10 + c, so every output element names its source. */
enum { NH = 3, NOPE = 4, V = 5, KVL = 6 };

static void test_kv_b_split(void **state) {
    (void)state;
    float src[NH * (NOPE + V) * KVL], kb[NH * KVL * NOPE], vb[NH * V * KVL];
    for (int h = 0; h < NH; h++)
        for (int r = 0; r < NOPE + V; r++)
            for (int c = 0; c < KVL; c++) src[(h * (NOPE + V) + r) * KVL + c] = (float)(h * 1000 + r * 10 + c);
    memset(kb, 0xff, sizeof kb);
    memset(vb, 0xff, sizeof vb);
    cv_kv_b_split((const uint8_t *)src, (uint8_t *)kb, NH, NOPE, V, KVL, sizeof(float), 0);
    cv_kv_b_split((const uint8_t *)src, (uint8_t *)vb, NH, NOPE, V, KVL, sizeof(float), 1);
    /* k_b[h][c][j] = kv_b[h][j][c] for j < nope */
    for (int h = 0; h < NH; h++)
        for (int c = 0; c < KVL; c++)
            for (int j = 0; j < NOPE; j++) assert_true(kb[(h * KVL + c) * NOPE + j] == (float)(h * 1000 + j * 10 + c));
    /* v_b[h][j][c] = kv_b[h][nope + j][c] */
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < V; j++)
            for (int c = 0; c < KVL; c++)
                assert_true(vb[(h * V + j) * KVL + c] == (float)(h * 1000 + (NOPE + j) * 10 + c));
}

/* The same split on 2-byte elements (BF16 kept as it is): bytes move whole. */
static void test_kv_b_split_bf16(void **state) {
    (void)state;
    uint16_t src[2 * (1 + 2) * 3], kb[2 * 3 * 1];
    for (int i = 0; i < (int)(sizeof src / sizeof src[0]); i++) src[i] = (uint16_t)(0x3f00 + i);
    cv_kv_b_split((const uint8_t *)src, (uint8_t *)kb, 2, 1, 2, 3, 2, 0);
    /* head 1 starts at element 9; its k row is 9..11 */
    uint16_t want[] = {0x3f00, 0x3f01, 0x3f02, 0x3f09, 0x3f0a, 0x3f0b};
    assert_memory_equal(kb, want, sizeof want);
}

static json_t *load(const char *text) {
    json_error_t je;
    json_t *config = json_loads(text, 0, &je);
    if (!config) fail_msg("bad test JSON: %s", je.text);
    return config;
}

#define V3 "\"architectures\": [\"DeepseekV3ForCausalLM\"], \"hidden_size\": 128, \"num_attention_heads\": 4, " \
           "\"num_key_value_heads\": 4, \"num_hidden_layers\": 3, \"intermediate_size\": 192, "             \
           "\"moe_intermediate_size\": 48, \"n_routed_experts\": 4, \"qk_nope_head_dim\": 32, "             \
           "\"qk_rope_head_dim\": 16, \"v_head_dim\": 24, \"kv_lora_rank\": 64, \"vocab_size\": 640, "

static void test_hparams(void **state) {
    (void)state;
    const cv_arch *a = cv_arch_find("DeepseekV3ForCausalLM");
    assert_non_null(a);
    assert_string_equal(a->gguf_arch, "deepseek2");
    assert_ptr_equal(cv_arch_find("DeepseekV2ForCausalLM")->tensors, a->tensors);
    json_t *config = load("{" V3 "\"q_lora_rank\": 96, \"n_shared_experts\": 2}");
    cv_hp hp;
    kiln_err err = {0};
    assert_int_equal(cv_hp_load(a, config, &hp, &err), 0);
    assert_int_equal(hp.dim[CV_D_Q_LORA], 96);
    assert_int_equal(hp.dim[CV_D_KV_LORA], 64);
    assert_int_equal(hp.dim[CV_D_Q_MLA], 4 * (32 + 16));
    assert_int_equal(hp.dim[CV_D_KV_A_MQA], 64 + 16);
    assert_int_equal(hp.dim[CV_D_KV_B], 4 * (32 + 24));
    assert_int_equal(hp.dim[CV_D_O_MLA], 4 * 24);
    assert_int_equal(hp.dim[CV_D_FF_SHEXP], 2 * 48);
    assert_int_equal(hp.n_kv, 4); /* the checkpoint's, which kv_b_proj is cut by */
    /* llama.cpp's edits for the metadata: MQA over the latent, default eps */
    json_int_t kv = json_integer_value(json_object_get(config, "num_key_value_heads"));
    assert_int_equal(kv, 1);
    assert_true(json_real_value(json_object_get(config, "rms_norm_eps")) == 1e-6);
    json_decref(config);

    /* V2-Lite: no q LoRA, llama.cpp's kv_lora_rank default of 512 */
    config = load("{" V3 "\"q_lora_rank\": null, \"rms_norm_eps\": 1e-5}");
    json_object_del(config, "kv_lora_rank");
    assert_int_equal(cv_hp_load(a, config, &hp, &err), 0);
    assert_int_equal(hp.dim[CV_D_Q_LORA], 0);
    assert_int_equal(hp.dim[CV_D_KV_LORA], 512);
    assert_true(json_real_value(json_object_get(config, "rms_norm_eps")) == 1e-5);
    json_decref(config);
}

static void test_rejected(void **state) {
    (void)state;
    const cv_arch *a = cv_arch_find("DeepseekV2ForCausalLM");
    json_t *config = load("{" V3 "\"q_lora_rank\": -3}");
    cv_hp hp;
    kiln_err err = {0};
    assert_int_equal(cv_hp_load(a, config, &hp, &err), -1);
    assert_non_null(strstr(err.msg, "q_lora_rank"));
    json_decref(config);
}

static void test_rename(void **state) {
    (void)state;
    const cv_arch *a = cv_arch_find("DeepseekV3ForCausalLM");
    char buf[128];
    assert_string_equal(a->rename("model.layers.7.mlp.gate.e_score_correction_bias", buf, sizeof buf),
                        "model.layers.7.mlp.gate.e_score_correction.bias");
    const char *same = "model.layers.7.mlp.gate.weight";
    assert_ptr_equal(a->rename(same, buf, sizeof buf), same);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_b_split), cmocka_unit_test(test_kv_b_split_bf16), cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_rejected), cmocka_unit_test(test_rename),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
