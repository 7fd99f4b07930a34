/* testmodel/testmodel.h - synthetic Hugging Face models, written by kiln
 * itself, for the demo and for end-to-end tests of every architecture kiln
 * converts.
 *
 * kiln_tm_write() fills a directory the way save_pretrained plus a tokenizer
 * would: config.json, generation_config.json, model.safetensors (or shards
 * and an index), and a tokenizer (SentencePiece tokenizer.model for the
 * Llama family, byte-level BPE tokenizer.json for Qwen and GPT-2) with their
 * tokenizer_config.json and special_tokens_map.json. Tensor names, shapes
 * and config keys are those of the real transformers classes.
 *
 * The work is split in testmodel.c (architectures, plan, config.json, the
 * directory), testmodel_weights.c and testmodel_tok.c (see
 * testmodel_impl.h); spm_write.c writes tokenizer.model; deepseek.c the
 * full-shape DeepSeek checkpoints (below).
 *
 * Weights are deterministic functions of (seed, tensor name, element index):
 * the same configuration gives byte-identical files whatever the sharding or
 * thread count. They imitate trained weights where quantizers care: Student-t
 * (4 d.o.f.) values with scale 1/sqrt(fan_in), a few input channels with
 * 10-50x scale in about half the matrices that read the residual stream,
 * norms near 1, small biases. They are not trained: the model produces
 * noise, and the tokenizer's pieces are prefixes of common English words
 * and of made-up syllable words. Tensors are generated and written in
 * chunks, so memory use does not grow with the model. */
#ifndef KILN_TESTMODEL_H
#define KILN_TESTMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/safetensors.h"

typedef enum kiln_tm_arch {
    KILN_TM_LLAMA, KILN_TM_MISTRAL, KILN_TM_QWEN2, KILN_TM_QWEN3,
    KILN_TM_MIXTRAL, KILN_TM_QWEN2MOE, KILN_TM_QWEN3MOE, KILN_TM_GPT2, KILN_TM_LLAMA3, KILN_TM_PHI3, KILN_TM_GEMMA3,
    KILN_TM_ARCH_COUNT
} kiln_tm_arch;

typedef struct kiln_tm_config {
    kiln_tm_arch arch;
    uint32_t layers, hidden, heads, kv_heads;
    uint32_t ffn;          /* dense MLP width; for MoE, one expert's width */
    uint32_t experts, experts_used; /* 0, 0 for dense architectures */
    uint32_t vocab;        /* config vocab_size: every token id, added ones included */
    uint32_t ctx;          /* max_position_embeddings (GPT-2: n_positions, the wpe rows) */
    kiln_st_dtype dtype;   /* BF16, F16 or F32 */
    uint64_t seed;
    uint64_t shard_size;   /* 0: one model.safetensors */
    bool tie_embeddings;   /* no lm_head.weight; always true for GPT-2 */
} kiln_tm_config;

/* Short names "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2moe",
 * "qwen3moe", "gpt2", "llama3", "phi3" (also accepted: "qwen2_moe", "qwen3_moe" and the HF
 * class names). Returns 0 and sets *out, or -1 for an unknown name. */
int kiln_tm_arch_parse(const char *name, kiln_tm_arch *out);
const char *kiln_tm_arch_name(kiln_tm_arch a);  /* "llama" */
const char *kiln_tm_arch_class(kiln_tm_arch a); /* "LlamaForCausalLM" */
bool kiln_tm_arch_is_moe(kiln_tm_arch a);

/* Fills *c with the defaults for `arch` (hidden 256, 2 layers, 4 heads,
 * 2 KV heads, vocab 512, BF16, seed 0, 4 experts top-2 for MoE), or with a
 * named size preset: "1b" is shaped like a Llama 1B (hidden 2048, 16 layers,
 * ffn 8192, 32/8 heads, vocab 32000). `size` may be NULL. Returns 0, or -1
 * for an unknown size. */
int kiln_tm_defaults(kiln_tm_config *c, kiln_tm_arch arch, const char *size, kiln_err *err);

/* Checks that *c describes a model the architecture can have (divisible
 * heads, experts only for MoE, vocab large enough for the tokenizer...).
 * Returns 0 or -1 with the reason. */
int kiln_tm_check(const kiln_tm_config *c, kiln_err *err);

enum kiln_tm_kind {
    KILN_TM_MATRIX, /* heavy-tailed, scale 1/sqrt(fan_in) */
    KILN_TM_EMBED,  /* token embeddings / lm_head */
    KILN_TM_POS,    /* GPT-2's learned positions */
    KILN_TM_NORM,   /* near 1 */
    KILN_TM_BIAS,   /* near 0 */
};

typedef struct kiln_tm_tensor {
    char name[128];
    uint32_t n_dims;
    int64_t shape[2];
    uint8_t kind;     /* enum kiln_tm_kind */
    uint8_t in_axis;  /* axis indexed by input channel: 1 for Linear [out, in], 0 for Conv1D [in, out] */
    bool outliers;    /* reads the residual stream, so may get outlier channels */
} kiln_tm_tensor;

/* The tensors of the model, in the order the transformers module registers
 * them (which decides sharding). *out is malloc'd; the caller frees it.
 * Returns 0 or -1. */
int kiln_tm_plan(const kiln_tm_config *c, kiln_tm_tensor **out, size_t *n, kiln_err *err);

/* Writes elements [start, start + n) of tensor `t` (row-major) as f32 into
 * dst: the values the model files hold before rounding to c->dtype.
 * Returns 0, or -1 when out of memory. */
int kiln_tm_values(const kiln_tm_config *c, const kiln_tm_tensor *t, uint64_t start, uint64_t n, float *dst,
                   kiln_err *err);

typedef struct kiln_tm_opts {
    bool force; /* overwrite a directory that already holds a model */
    /* called now and then while tensors are written; may be NULL */
    void (*progress)(void *ud, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_ud;
} kiln_tm_opts;

typedef struct kiln_tm_summary {
    uint64_t n_params, n_tensors, tensor_bytes;
    uint64_t largest_tensor_bytes;
    uint32_t n_files; /* safetensors files */
} kiln_tm_summary;

/* Writes the model to `dir` (created if missing; its parent must exist).
 * Refuses a directory holding config.json or *.safetensors unless
 * opts->force, in which case model files of the old model that the new one
 * does not replace (stale shards, index) are removed. config.json is written
 * last, so a directory with one is complete. `opts` and `sum` may be NULL.
 * Returns 0 or -1. */
int kiln_tm_write(const kiln_tm_config *c, const char *dir, const kiln_tm_opts *opts, kiln_tm_summary *sum,
                  kiln_err *err);

/* ---- full-shape DeepSeek checkpoints (deepseek.c) ----
 *
 * DeepSeek-V3 (DeepseekV3ForCausalLM, llama.cpp's deepseek2) and
 * DeepSeek-V4-Flash (DeepseekV4ForCausalLM, deepseek4) with the real layer
 * count, tensor names, shapes and dtypes, stored as DeepSeek ships them
 * (FP8 projections with block scales; V4's routed experts FP4), for the
 * convert benchmark and the scale tests: the routed expert count and the
 * layer count may be cut to fit a disk, every other dimension is real.
 * Values are fixed-seed noise in valid codes (no NaN), for timing and
 * memory, not for running. `sparse` writes the headers and leaves every
 * tensor a hole: a 671B-shaped checkpoint that takes no disk, for
 * `kiln convert --dry-run`. Memory stays at one 8 MiB chunk plus the plan
 * (about 100 bytes a tensor). */

#define KILN_TM_DS_REAL_VOCAB 129280 /* DeepSeek-V3's (and V4's) tokenizer */

typedef enum kiln_tm_ds_arch { KILN_TM_DS_V3, KILN_TM_DS_V4, KILN_TM_DS_ARCH_COUNT } kiln_tm_ds_arch;

typedef struct kiln_tm_ds_config {
    kiln_tm_ds_arch arch;
    uint32_t layers;     /* 1 .. the real count (61, 43); V3's first min(3, layers - 1) are dense */
    uint32_t experts;    /* routed experts per layer, 1..256 */
    uint32_t vocab;      /* KILN_TM_DS_REAL_VOCAB: no tokenizer is written (copy DeepSeek-V3's in); any
                          * other size: kiln's byte-level BPE tokenizer of that size, as for qwen2 */
    uint64_t shard_size; /* most tensor bytes per shard; 0: one file */
    uint64_t seed;
    bool sparse;         /* headers and holes */
} kiln_tm_ds_config;

/* "deepseek2", "deepseek3", "deepseek_v3" or DeepseekV3ForCausalLM; "deepseek4",
 * "deepseek_v4" or DeepseekV4ForCausalLM. Returns 0 and sets *out, or -1. */
int kiln_tm_ds_arch_parse(const char *name, kiln_tm_ds_arch *out);
const char *kiln_tm_ds_arch_class(kiln_tm_ds_arch a);

/* The real model: every layer, 256 experts, vocabulary 129280, 5 GB shards. */
void kiln_tm_ds_defaults(kiln_tm_ds_config *c, kiln_tm_ds_arch arch);

/* Returns 0, or -1 with the option that is out of range. */
int kiln_tm_ds_check(const kiln_tm_ds_config *c, kiln_err *err);

typedef struct kiln_tm_ds_tensor {
    char name[80];
    uint8_t dtype;    /* kiln_st_dtype */
    uint8_t fill;     /* how its bytes are made (deepseek.c) */
    uint8_t n_dims;
    int64_t shape[2];
    uint64_t n_params; /* weights it holds: 0 for scales, 2 a byte for FP4 */
} kiln_tm_ds_tensor;

/* The checkpoint's tensors in file order. *out is malloc'd; the caller
 * frees it. Returns 0 or -1. */
int kiln_tm_ds_plan(const kiln_tm_ds_config *c, kiln_tm_ds_tensor **out, size_t *n, kiln_err *err);

/* Sets sum's n_params, n_tensors, tensor_bytes and largest_tensor_bytes
 * from a plan (n_files is left alone). */
void kiln_tm_ds_totals(const kiln_tm_ds_tensor *t, size_t n, kiln_tm_summary *sum);

/* Writes config.json, generation_config.json, the safetensors (sharded with
 * an index past shard_size) and, for a vocabulary other than the real one,
 * a tokenizer, to `dir` as kiln_tm_write() does (same directory rules).
 * `opts` and `sum` may be NULL. Returns 0 or -1. */
int kiln_tm_ds_write(const kiln_tm_ds_config *c, const char *dir, const kiln_tm_opts *opts, kiln_tm_summary *sum,
                     kiln_err *err);

/* ---- SentencePiece model writer (spm_write.c) ---- */

typedef enum kiln_spm_type {
    KILN_SPM_NORMAL = 1, KILN_SPM_UNKNOWN = 2, KILN_SPM_CONTROL = 3,
    KILN_SPM_USER_DEFINED = 4, KILN_SPM_UNUSED = 5, KILN_SPM_BYTE = 6,
} kiln_spm_type;

typedef struct kiln_spm_piece {
    const char *piece; /* UTF-8, U+2581 for a space */
    float score;
    kiln_spm_type type;
} kiln_spm_piece;

/* Serializes a ModelProto with these pieces (ids in order) into a malloc'd
 * buffer *out of *len bytes. The pieces must follow the Llama convention:
 * <unk> at 0, <s> at 1, </s> at 2. Returns 0 or -1. */
int kiln_spm_encode(const kiln_spm_piece *pieces, size_t n, uint8_t **out, size_t *len, kiln_err *err);

/* kiln_spm_encode() written atomically to `path`. Returns 0 or -1. */
int kiln_spm_write(const char *path, const kiln_spm_piece *pieces, size_t n, kiln_err *err);

#endif
