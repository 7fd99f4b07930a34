/* fuzz/fuzz_st_index.c - model.safetensors.index.json, read by
 * core/safetensors.c (kiln_st_open) and by the converter's tensor listing
 * (convert/source.c, convert/stlist.c, through kiln_hf_open).
 *
 * The input is the index. Beside it the harness keeps a fixed, valid
 * two-shard llama checkpoint (config.json and two small safetensors
 * files), so the fuzzer explores what an index can get wrong: shards that
 * are missing or named with paths, tensors in the wrong shard, duplicate
 * or non-string entries, and so on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string.h>

#include "../convert/convert.h"
#include "../core/safetensors.h"
#include "fuzz.h"
#include "harnesses.h"

static const char CONFIG[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":1,\"num_key_value_heads\":1,\"intermediate_size\":4,\"vocab_size\":8,"
    "\"rms_norm_eps\":1e-5}";

/* A one-tensor F32 safetensors file of `n` zeros. */
static void put_shard(const char *file, const char *tensor, int64_t rows, int64_t cols) {
    char header[256];
    int64_t n = rows * cols;
    int hl = rows > 1 ? snprintf(header, sizeof header,
                                 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[0,%lld]}}",
                                 tensor, (long long)rows, (long long)cols, (long long)(n * 4))
                      : snprintf(header, sizeof header,
                                 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[0,%lld]}}",
                                 tensor, (long long)cols, (long long)(n * 4));
    size_t size = 8 + (size_t)hl + (size_t)n * 4;
    uint8_t *buf = calloc(1, size);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, (size_t)hl);
    fuzz_put(file, buf, size);
    free(buf);
}

static void setup(void) {
    static int done;
    if (done) return;
    fuzz_put("config.json", CONFIG, sizeof CONFIG - 1);
    put_shard("model-00001-of-00002.safetensors", "model.embed_tokens.weight", 8, 4);
    put_shard("model-00002-of-00002.safetensors", "model.norm.weight", 1, 4);
    done = 1;
}

int fuzz_st_index(const uint8_t *data, size_t size) {
    setup();
    fuzz_put("model.safetensors.index.json", data, size);
    kiln_err err = {{0}};
    kiln_st *st = kiln_st_open(fuzz_path("model.safetensors.index.json"), &err);
    if (!st) fuzz_expect_err(-1, &err, "kiln_st_open (index)");
    kiln_st_close(st);

    memset(&err, 0, sizeof err);
    kiln_convert_opts opts = {.outtype = KILN_OUT_F32};
    kiln_hf_model *m = kiln_hf_open(fuzz_dir(), &opts, &err);
    if (!m) fuzz_expect_err(-1, &err, "kiln_hf_open (index)");
    kiln_hf_close(m);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_st_index)
