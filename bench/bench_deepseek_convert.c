/* bench/bench_deepseek_convert.c - the checkpoint generator behind
 * bench/bench_deepseek_convert.sh.
 *
 *   bench_deepseek_convert gen DIR ROUTED_EXPERTS [SHARD_BYTES]
 *
 * Writes DIR/config.json and DIR/model-0000i-of-0000n.safetensors with
 * model.safetensors.index.json: a DeepSeek-V3 (DeepseekV3ForCausalLM) of
 * the real layer count and tensor shapes (61 blocks, the first 3 dense;
 * hidden 7168, q_lora 1536, kv_lora 512, 128 heads of nope 128 / rope 64 /
 * v 128, dense FFN 18432, expert FFN 2048, one shared expert, vocabulary
 * 129280) stored as deepseek-ai/DeepSeek-V3 is: every linear weight
 * F8_E4M3 with an F32 weight_scale_inv per 128x128 block, norms,
 * embeddings, lm_head and router BF16, the router's correction bias F32,
 * shards of about SHARD_BYTES (default 5e9) in block order. Only the number
 * of routed experts is not the real 256 (that would be 671 GB): each routed
 * expert adds 58 x 3 x 2048 x 7168 bytes (2.55 GB). The multi-token-
 * prediction block is left out (num_nextn_predict_layers 0); kiln drops it.
 * The tokenizer is the script's business (the real DeepSeek-V3 one, from
 * tests/fixtures/tokenizers/deepseek_v3).
 *
 * Values are noise from a fixed seed, valid E4M3 codes (never the NaN
 * codes 0x7f/0xff) and bf16 in a trained model's range: they are for
 * timing the convert, not for running. Memory stays at one chunk buffer.
 * Prints "largest_tensor_bytes N" and "total_bytes N" for the script.
 *
 * Run with no arguments (as bench/run.sh does with every bench binary) it
 * only says where the figures come from. */
#include "../core/safetensors_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HIDDEN = 7168, LAYERS = 61, DENSE_LAYERS = 3, HEADS = 128, Q_LORA = 1536, KV_LORA = 512, NOPE = 128,
       ROPE = 64, V_HEAD = 128, FFN = 18432, FFN_EXP = 2048, SHARED = 1, VOCAB = 129280, BLOCK = 128 };

typedef enum fill { F_FP8, F_SCALE, F_BF16_W, F_BF16_NORM, F_F32_BIAS } fill;

typedef struct spec {
    char name[200];
    fill fill;
    kiln_st_dtype dtype;
    int64_t shape[2];
    uint32_t n_dims;
} spec;

typedef struct plan {
    spec *t;
    size_t n, cap;
} plan;

static int push(plan *p, fill f, kiln_st_dtype dt, int64_t d0, int64_t d1, const char *name) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        spec *g = realloc(p->t, cap * sizeof *g);
        if (!g) return -1;
        p->t = g, p->cap = cap;
    }
    spec *s = &p->t[p->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->fill = f, s->dtype = dt, s->shape[0] = d0, s->shape[1] = d1, s->n_dims = d1 ? 2 : 1;
    return 0;
}

/* A linear weight as DeepSeek ships it: F8 codes and their block scales. */
static int linear(plan *p, int64_t rows, int64_t cols, const char *module) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", module);
    if (push(p, F_FP8, KILN_ST_F8_E4M3, rows, cols, n) < 0) return -1;
    snprintf(n, sizeof n, "%s.weight_scale_inv", module);
    return push(p, F_SCALE, KILN_ST_F32, (rows + BLOCK - 1) / BLOCK, (cols + BLOCK - 1) / BLOCK, n);
}

static int norm(plan *p, int64_t n, const char *name) { return push(p, F_BF16_NORM, KILN_ST_BF16, n, 0, name); }

static char name_buf[160];
#define NM(...) (snprintf(name_buf, sizeof name_buf, __VA_ARGS__), name_buf)

/* Every tensor, in the checkpoint's order (block by block). */
static int make_plan(plan *p, int experts) {
    int rc = push(p, F_BF16_W, KILN_ST_BF16, VOCAB, HIDDEN, "model.embed_tokens.weight");
    for (int l = 0; rc == 0 && l < LAYERS; l++) {
        rc |= norm(p, HIDDEN, NM("model.layers.%d.input_layernorm.weight", l));
        rc |= linear(p, Q_LORA, HIDDEN, NM("model.layers.%d.self_attn.q_a_proj", l));
        rc |= norm(p, Q_LORA, NM("model.layers.%d.self_attn.q_a_layernorm.weight", l));
        rc |= linear(p, HEADS * (NOPE + ROPE), Q_LORA, NM("model.layers.%d.self_attn.q_b_proj", l));
        rc |= linear(p, KV_LORA + ROPE, HIDDEN, NM("model.layers.%d.self_attn.kv_a_proj_with_mqa", l));
        rc |= norm(p, KV_LORA, NM("model.layers.%d.self_attn.kv_a_layernorm.weight", l));
        rc |= linear(p, HEADS * (NOPE + V_HEAD), KV_LORA, NM("model.layers.%d.self_attn.kv_b_proj", l));
        rc |= linear(p, HIDDEN, HEADS * V_HEAD, NM("model.layers.%d.self_attn.o_proj", l));
        rc |= norm(p, HIDDEN, NM("model.layers.%d.post_attention_layernorm.weight", l));
        if (l < DENSE_LAYERS) {
            rc |= linear(p, FFN, HIDDEN, NM("model.layers.%d.mlp.gate_proj", l));
            rc |= linear(p, FFN, HIDDEN, NM("model.layers.%d.mlp.up_proj", l));
            rc |= linear(p, HIDDEN, FFN, NM("model.layers.%d.mlp.down_proj", l));
            continue;
        }
        rc |= push(p, F_BF16_W, KILN_ST_BF16, experts, HIDDEN, NM("model.layers.%d.mlp.gate.weight", l));
        rc |= push(p, F_F32_BIAS, KILN_ST_F32, experts, 0, NM("model.layers.%d.mlp.gate.e_score_correction_bias", l));
        for (int e = 0; e < experts; e++) {
            rc |= linear(p, FFN_EXP, HIDDEN, NM("model.layers.%d.mlp.experts.%d.gate_proj", l, e));
            rc |= linear(p, FFN_EXP, HIDDEN, NM("model.layers.%d.mlp.experts.%d.up_proj", l, e));
            rc |= linear(p, HIDDEN, FFN_EXP, NM("model.layers.%d.mlp.experts.%d.down_proj", l, e));
        }
        rc |= linear(p, FFN_EXP * SHARED, HIDDEN, NM("model.layers.%d.mlp.shared_experts.gate_proj", l));
        rc |= linear(p, FFN_EXP * SHARED, HIDDEN, NM("model.layers.%d.mlp.shared_experts.up_proj", l));
        rc |= linear(p, HIDDEN, FFN_EXP * SHARED, NM("model.layers.%d.mlp.shared_experts.down_proj", l));
    }
    rc |= norm(p, HIDDEN, "model.norm.weight");
    rc |= push(p, F_BF16_W, KILN_ST_BF16, VOCAB, HIDDEN, "lm_head.weight");
    return rc ? -1 : 0;
}

static void set_int(json_t *o, const char *k, json_int_t v) { json_object_set_new(o, k, json_integer(v)); }
static void set_real(json_t *o, const char *k, double v) { json_object_set_new(o, k, json_real(v)); }
static void set_str(json_t *o, const char *k, const char *v) { json_object_set_new(o, k, json_string(v)); }
static void set_bool(json_t *o, const char *k, int v) { json_object_set_new(o, k, json_boolean(v)); }

/* config.json as DeepSeek-V3's, but for the routed expert count (routing
 * in one group, since a handful of experts cannot fill DeepSeek's 8). */
static json_t *config(int experts) {
    json_t *c = json_object(), *rs = json_object(), *qc = json_object(), *arch = json_array(), *bs = json_array();
    if (!c || !rs || !qc || !arch || !bs) {
        json_decref(c), json_decref(rs), json_decref(qc), json_decref(arch), json_decref(bs);
        return NULL;
    }
    json_array_append_new(arch, json_string("DeepseekV3ForCausalLM"));
    json_object_set_new(c, "architectures", arch);
    set_str(c, "model_type", "deepseek_v3");
    set_bool(c, "attention_bias", 0);
    set_int(c, "bos_token_id", 0);
    set_int(c, "eos_token_id", 1);
    set_int(c, "first_k_dense_replace", DENSE_LAYERS);
    set_str(c, "hidden_act", "silu");
    set_int(c, "hidden_size", HIDDEN);
    set_int(c, "intermediate_size", FFN);
    set_int(c, "kv_lora_rank", KV_LORA);
    set_int(c, "max_position_embeddings", 163840);
    set_int(c, "moe_intermediate_size", FFN_EXP);
    set_int(c, "moe_layer_freq", 1);
    set_int(c, "n_group", 1);
    set_int(c, "n_routed_experts", experts);
    set_int(c, "n_shared_experts", SHARED);
    set_bool(c, "norm_topk_prob", 1);
    set_int(c, "num_attention_heads", HEADS);
    set_int(c, "num_experts_per_tok", experts < 8 ? experts : 8);
    set_int(c, "num_hidden_layers", LAYERS);
    set_int(c, "num_key_value_heads", HEADS);
    set_int(c, "num_nextn_predict_layers", 0);
    set_int(c, "q_lora_rank", Q_LORA);
    set_int(c, "qk_nope_head_dim", NOPE);
    set_int(c, "qk_rope_head_dim", ROPE);
    set_real(c, "rms_norm_eps", 1e-6);
    set_int(rs, "beta_fast", 32);
    set_int(rs, "beta_slow", 1);
    set_int(rs, "factor", 40);
    set_real(rs, "mscale", 1.0);
    set_real(rs, "mscale_all_dim", 1.0);
    set_int(rs, "original_max_position_embeddings", 4096);
    set_str(rs, "type", "yarn");
    json_object_set_new(c, "rope_scaling", rs);
    set_int(c, "rope_theta", 10000);
    set_real(c, "routed_scaling_factor", 2.5);
    set_str(c, "scoring_func", "sigmoid");
    set_bool(c, "tie_word_embeddings", 0);
    set_int(c, "topk_group", 1);
    set_str(c, "topk_method", "noaux_tc");
    set_str(c, "torch_dtype", "bfloat16");
    set_int(c, "v_head_dim", V_HEAD);
    set_int(c, "vocab_size", VOCAB);
    set_str(qc, "activation_scheme", "dynamic");
    set_str(qc, "fmt", "e4m3");
    set_str(qc, "quant_method", "fp8");
    json_array_append_new(bs, json_integer(BLOCK));
    json_array_append_new(bs, json_integer(BLOCK));
    json_object_set_new(qc, "weight_block_size", bs);
    json_object_set_new(c, "quantization_config", qc);
    return c;
}

/* xorshift64*: cheap, fixed-seed noise. */
static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Fills n bytes of a tensor of kind f (n a multiple of the element size). */
static void fill_bytes(fill f, uint8_t *dst, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = next_rand(s);
        size_t k = n - i < 8 ? n - i : 8;
        if (f == F_FP8) { /* any code but NaN; exponents up to 2^8 */
            for (size_t j = 0; j < k; j++, r >>= 8) {
                uint8_t b = (uint8_t)r;
                dst[i + j] = (b & 0x7f) == 0x7f ? b ^ 1 : b;
            }
        } else if (f == F_SCALE || f == F_F32_BIAS) { /* 2^-10 .. 2^-9 (scales) or 2^-5.. (bias): positive f32 */
            for (size_t j = 0; j + 4 <= k; j += 4, r >>= 32) {
                uint32_t v = (f == F_SCALE ? 0x3a800000u : 0x3d000000u) | ((uint32_t)r & 0x007fffffu);
                memcpy(dst + i + j, &v, 4);
            }
        } else { /* bf16: weights +-[2^-7, 2^-5), norms 1 + a little */
            for (size_t j = 0; j + 2 <= k; j += 2, r >>= 16) {
                uint16_t v = f == F_BF16_NORM ? (uint16_t)(0x3f80u | (r & 0x0fu))
                                              : (uint16_t)((r & 0x807fu) | (0x3c00u + ((r >> 7 & 1u) << 7)));
                memcpy(dst + i + j, &v, 2);
            }
        }
    }
}

static int gen(const char *dir, int experts, uint64_t shard, kiln_err *err) {
    plan p = {0};
    if (make_plan(&p, experts) < 0) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = config(experts);
    if (!c || json_dump_file(c, path, JSON_INDENT(2)) < 0) {
        json_decref(c);
        free(p.t);
        return kiln_fail(err, path, NULL, -1, "cannot write config.json");
    }
    json_decref(c);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kiln_stw_opts o = {.shard_size = shard, .keep_order = true};
    kiln_stw *w = kiln_stw_create(path, &o, err);
    uint64_t largest = 0, total = 0;
    int rc = w ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < p.n; i++) {
        const spec *s = &p.t[i];
        if (kiln_stw_declare(w, s->name, s->dtype, s->n_dims, s->shape, err) < 0) rc = -1;
    }
    if (rc == 0) rc = kiln_stw_begin(w, err);
    enum { CHUNK = 8 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf && rc == 0) rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
    int64_t idx;
    int more;
    while (rc == 0 && (more = kiln_stw_next(w, &idx, err)) != 0) {
        if (more < 0) {
            rc = -1;
            break;
        }
        uint64_t n = kiln_stw_nbytes(w, idx), seed = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1);
        largest = n > largest ? n : largest;
        total += n;
        for (uint64_t done = 0; rc == 0 && done < n; done += CHUNK) {
            size_t k = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
            fill_bytes(p.t[idx].fill, buf, k, &seed);
            rc = kiln_stw_write(w, buf, k, err);
        }
    }
    free(buf);
    free(p.t);
    if (rc < 0) {
        kiln_stw_abort(w);
        return -1;
    }
    if (kiln_stw_finish(w, err) < 0) return -1;
    printf("largest_tensor_bytes %llu\ntotal_bytes %llu\n", (unsigned long long)largest, (unsigned long long)total);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        puts("bench_deepseek_convert: generator only; bench/bench_deepseek_convert.sh runs the benchmark "
             "(KILN_BENCH_DS2_FULL=1)");
        return 0;
    }
    if (strcmp(argv[1], "gen") || argc < 4 || argc > 5) {
        fprintf(stderr, "usage: bench_deepseek_convert gen DIR ROUTED_EXPERTS [SHARD_BYTES]\n");
        return 2;
    }
    int experts = atoi(argv[3]);
    uint64_t shard = argc == 5 ? strtoull(argv[4], NULL, 10) : 5000000000ull;
    if (experts < 1 || experts > 256 || !shard) {
        fprintf(stderr, "bench_deepseek_convert: ROUTED_EXPERTS must be 1..256 and SHARD_BYTES positive\n");
        return 2;
    }
    kiln_err err = {{0}};
    if (gen(argv[2], experts, shard, &err) < 0) {
        fprintf(stderr, "bench_deepseek_convert: %s\n", err.msg);
        return 1;
    }
    return 0;
}
