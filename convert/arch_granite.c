/* convert/arch_granite.c - GraniteForCausalLM (IBM Granite 3.x dense),
 * general.architecture = granite, as llama.cpp's GraniteModel converts it:
 * Llama's tensors (q/k permuted), vocab and keys, plus Granite's four
 * multipliers as keys: attention_multiplier -> attention.scale (the
 * softmax scale instead of 1/sqrt(head_dim)), embedding_multiplier ->
 * embedding_scale, residual_multiplier -> residual_scale and
 * logits_scaling -> logit_scale (the logits are divided by it). Like
 * llama.cpp, a multiplier that is absent or 0 writes no key.
 *
 * Not handled: a config head_dim, which llama.cpp drops for Granite before
 * writing the common keys (kiln would write attention.key_length). */
#include "arch.h"
#include "hparams.h"
#include "json.h"

static int granite_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    static const struct {
        const char *key, *suffix;
    } SCALES[] = {{"attention_multiplier", "attention.scale"},
                  {"embedding_multiplier", "embedding_scale"},
                  {"residual_multiplier", "residual_scale"},
                  {"logits_scaling", "logit_scale"}};
    if (cv_llama_params(hp, config, k) < 0) return -1;
    for (size_t i = 0; i < sizeof SCALES / sizeof SCALES[0]; i++) {
        json_t *v = cv_json_get(config, SCALES[i].key);
        double d;
        if (!v || json_is_null(v)) continue;
        if (!cv_json_num(v, &d)) return kiln_fail(k->err, "config.json", SCALES[i].key, -1, "must be a number");
        if (d != 0.0 && cv_kv_arch_f32(k, SCALES[i].suffix, (float)d) < 0) return -1;
    }
    return 0;
}

const cv_arch cv_arch_granite = {
    .hf_name = "GraniteForCausalLM",
    .gguf_arch = "granite",
    .tensors = cv_llama_tensors,
    .skip_suffixes = cv_llama_skip,
    .flags = CV_A_VOCAB_SPM | CV_A_VOCAB_LLAMA_HF | CV_A_ADD_PREFIX_SPACE | CV_A_ROPE_FREQS,
    .params = granite_params,
};
