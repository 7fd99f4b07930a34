/* quantize/policy.h - which type each tensor of a model is quantized to.
 *
 * A target is either a preset (every name llama-quantize lists, with its
 * aliases Q3_K/Q4_K/Q5_K and ftype numbers: Q4_K_M, "15", IQ3_M, COPY...:
 * llama.cpp's per-tensor mixes, with the same choices llama-quantize
 * makes) or a plain ggml type name that no preset takes (MXFP4, NVFP4:
 * every quantizable weight gets that type). The policy
 * works from tensor names, shapes and a few hyper-parameters only, so it
 * serves GGUF inputs and the Hugging Face one-step path alike, and a
 * --dry-run needs no tensor data.
 *
 * Per tensor, in this order (as llama_tensor_get_type does it):
 *   1. not quantizable (1-D, norms, expert gates, ...): keeps its type;
 *   2. --token-embedding-type / --output-tensor-type for those two;
 *   3. the first --tensor-type REGEX=TYPE whose regex matches the name;
 *   4. unless --pure (or a plain type): the preset's mix rules, a table in
 *      policy.c (attn_v / ffn_down promoted on the first and last eighth
 *      and every third layer, output and token_embd, GQA and expert
 *      rules, tied embeddings);
 *   5. the fallback when the row length is not a multiple of the type's
 *      block size (IQ1/IQ2/IQ3/IQ4_XS -> IQ4_NL, Q2_K/Q3_K/TQ1_0/TQ2_0/Q2_0 ->
 *      Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16; a type
 *      llama.cpp defines no fallback for is marked `unfit`, and refused).
 * Tensors are planned in the order given, which must be the order
 * llama-quantize visits them (by layer, then name) for the layer counters
 * to agree with llama.cpp. */
#ifndef KILN_QUANTIZE_POLICY_H
#define KILN_QUANTIZE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/name_regex.h"

typedef enum kiln_preset_kind {
    KILN_PRESET_MIX,     /* a quantized base type with llama.cpp's mix rules */
    KILN_PRESET_FLOAT,   /* F32/F16/BF16: every quantizable weight that type, no rules */
    KILN_PRESET_COPY,    /* COPY: every tensor keeps its type (general.file_type of the input) */
} kiln_preset_kind;

typedef struct kiln_preset {
    const char *name;    /* "Q4_K_M" */
    uint32_t ftype;      /* llama.cpp's LLAMA_FTYPE_* value, for general.file_type */
    uint32_t base;       /* the type most weights get */
    uint64_t mask;       /* bit of this preset in the rule table */
    kiln_preset_kind kind;
} kiln_preset;

/* A parsed target: a preset, or a plain type (preset == NULL). */
typedef struct kiln_quant_target {
    const kiln_preset *preset;
    uint32_t type;       /* the base type */
    uint32_t ftype;      /* general.file_type to write */
    const char *name;    /* preset name or canonical type name */
} kiln_quant_target;

/* Parses a preset name or alias ("Q4_K_M", "q4_k": case-insensitive), an
 * ftype number as llama-quantize takes it ("15"), or a type name no preset
 * has ("mxfp4"). A name that is both a type and a preset (Q8_0, Q4_K, F16)
 * is the preset; --pure then gives the one type. Presets are accepted
 * whether or not kiln has their codecs (quantizing refuses what it cannot
 * write). -1 with a message listing the choices. */
int kiln_quant_target_parse(const char *s, kiln_quant_target *t, kiln_err *err);

/* The presets in llama-quantize's order, for --help and tests;
 * NULL-terminated. Aliases are not in it. */
extern const kiln_preset *const kiln_presets[];

/* llama-quantize's alias names ("Q4_K" -> "Q4_K_M"); NULL-terminated pairs. */
extern const char *const kiln_preset_aliases[][2];

/* True when llama-quantize refuses to write a weight of `type` without an
 * importance matrix (tensor_requires_imatrix; token_embd and output never
 * do). `preset` may be NULL: Q2_K needs one only in the Q2_K_S mix. */
bool kiln_policy_type_needs_imatrix(uint32_t type, const kiln_preset *preset);

/* True when the preset gives some weight a type that needs an imatrix on
 * an ordinary transformer, i.e. llama-quantize refuses it without one
 * (derived from the preset's base type and its rules). */
bool kiln_preset_needs_imatrix(const kiln_preset *p);

/* What the rules need to know about the model. */
typedef struct kiln_policy_model {
    char arch[64];       /* general.architecture */
    uint32_t n_layer;    /* ARCH.block_count */
    uint32_t n_head, n_head_kv; /* of layer 0 */
    uint32_t n_expert;   /* ARCH.expert_count, 0 for dense */
} kiln_policy_model;

typedef struct kiln_policy_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];       /* GGUF order, ne[0] the row length */
    uint32_t type;       /* current type */
} kiln_policy_tensor;

/* One --tensor-type REGEX=TYPE. */
typedef struct kiln_type_override {
    char *pattern;
    uint32_t type;
    kiln_name_regex *re; /* compiled pattern */
    uint64_t hits;       /* tensors it decided */
} kiln_type_override;

typedef struct kiln_policy_opts {
    kiln_quant_target target;
    bool pure;                    /* no mix rules: every weight gets target.type */
    int output_type;              /* -1: the policy's choice */
    int token_embd_type;          /* -1: the policy's choice */
    kiln_type_override *overrides;
    uint32_t n_overrides;
    bool has_imatrix;             /* an imatrix was given (llama.cpp's Q4_0 / Q5_0 ffn_down rule) */
} kiln_policy_opts;

typedef enum kiln_plan_why {
    KILN_WHY_KEEP,       /* not a quantizable weight */
    KILN_WHY_BASE,       /* the target's base type */
    KILN_WHY_RULE,       /* a mix rule (see rule) */
    KILN_WHY_OVERRIDE,   /* --tensor-type (see override) */
    KILN_WHY_OUTPUT_OPT, /* --output-tensor-type */
    KILN_WHY_EMBD_OPT,   /* --token-embedding-type */
    KILN_WHY_BUDGET,     /* --target-bpw / --target-size: the allocation (quantize/budget.h) */
} kiln_plan_why;

typedef struct kiln_tensor_plan {
    uint32_t from, to;   /* current and chosen type */
    uint32_t wanted;     /* chosen before any fallback */
    bool fallback;       /* to != wanted because of the row length */
    bool unfit;          /* the row does not fit `wanted` and llama.cpp has no fallback for it */
    bool needs_imatrix;  /* llama.cpp refuses this without an imatrix */
    kiln_plan_why why;
    const char *rule;    /* KILN_WHY_RULE: the rule's description */
    int override_idx;    /* KILN_WHY_OVERRIDE: index into opts.overrides */
} kiln_tensor_plan;

/* Compiles "REGEX=TYPE" into `o` (the type name is case-insensitive; the
 * regex is PCRE2 through core/name_regex.h, searched anywhere in the name
 * like llama.cpp's std::regex_search). -1 with a message. */
int kiln_override_parse(const char *spec, kiln_type_override *o, kiln_err *err);
void kiln_override_free(kiln_type_override *o);

/* True when llama.cpp quantizes a tensor of this name and rank at all. */
bool kiln_policy_quantizable(const char *name, uint32_t n_dims);

/* Plans n tensors (in llama-quantize's visiting order) into plan[n].
 * Only structural errors fail (a layer number out of range); the caller
 * decides what to do with fallbacks and imatrix needs. */
int kiln_policy_plan(const kiln_policy_model *m, const kiln_policy_tensor *t, uint64_t n,
                     kiln_policy_opts *o, kiln_tensor_plan *plan, kiln_err *err);

/* The fallback llama.cpp applies when a row of ne0 values does not fit
 * `type`'s blocks (returns `type` when it fits, KILN_NO_FALLBACK when
 * llama.cpp defines none for `type` and refuses the tensor). */
#define KILN_NO_FALLBACK UINT32_MAX
uint32_t kiln_policy_fallback(uint32_t type, int64_t ne0);

#endif
