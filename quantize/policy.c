/* quantize/policy.c - the per-tensor type policy of each preset (see
 * policy.h). The mixes are data: RULES below is llama.cpp's
 * llama_tensor_get_type_impl() for every llama-quantize preset written as
 * a table, one row per decision, first match wins per tensor category;
 * BUMPS are the adjustments llama.cpp applies to attn_v after that
 * choice. tests/test_quant_presets.c holds the table to llama-quantize's
 * own choices on every fixture architecture. */
#include "policy.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- presets ------------------------------------------------------------ */

/* One bit per preset, in llama-quantize's QUANT_OPTIONS order. */
enum {
    P_Q1_0, P_Q2_0, P_Q4_0, P_Q4_1, P_MXFP4_MOE, P_Q5_0, P_Q5_1, P_IQ2_XXS, P_IQ2_XS, P_IQ2_S, P_IQ2_M,
    P_IQ1_S, P_IQ1_M, P_TQ1_0, P_TQ2_0, P_Q2_K, P_Q2_K_S, P_IQ3_XXS, P_IQ3_S, P_IQ3_M, P_IQ3_XS, P_Q3_K_S,
    P_Q3_K_M, P_Q3_K_L, P_IQ4_NL, P_IQ4_XS, P_Q4_K_S, P_Q4_K_M, P_Q5_K_S, P_Q5_K_M, P_Q6_K, P_Q8_0, P_F16,
    P_BF16, P_F32, P_COPY,
};
#define PM(x) (1ull << P_##x)
#define PM_ALL ((1ull << P_F16) - 1) /* every preset with a quantized base type */
/* llama.cpp's branch for the 1- and 2-bit IQ mixes, which skips every
 * rule below it */
#define PM_IQ_LOW (PM(IQ2_XXS) | PM(IQ2_XS) | PM(IQ2_S) | PM(IQ2_M) | PM(IQ1_S) | PM(IQ1_M))
/* the presets that reach llama.cpp's general per-category rules */
#define PM_GENERAL (PM_ALL & ~PM_IQ_LOW & ~PM(MXFP4_MOE))

/* ftype values are llama.h's LLAMA_FTYPE_MOSTLY_*; names and order are
 * llama-quantize's QUANT_OPTIONS (tools/quantize/quantize.cpp) */
static const kiln_preset PRESETS[] = {
    {"Q1_0", 40, KILN_Q1_0, PM(Q1_0), KILN_PRESET_MIX},
    {"Q2_0", 41, KILN_Q2_0, PM(Q2_0), KILN_PRESET_MIX},
    {"Q4_0", 2, KILN_Q4_0, PM(Q4_0), KILN_PRESET_MIX},
    {"Q4_1", 3, KILN_Q4_1, PM(Q4_1), KILN_PRESET_MIX},
    {"MXFP4_MOE", 38, KILN_MXFP4, PM(MXFP4_MOE), KILN_PRESET_MIX},
    {"Q5_0", 8, KILN_Q5_0, PM(Q5_0), KILN_PRESET_MIX},
    {"Q5_1", 9, KILN_Q5_1, PM(Q5_1), KILN_PRESET_MIX},
    {"IQ2_XXS", 19, KILN_IQ2_XXS, PM(IQ2_XXS), KILN_PRESET_MIX},
    {"IQ2_XS", 20, KILN_IQ2_XS, PM(IQ2_XS), KILN_PRESET_MIX},
    {"IQ2_S", 28, KILN_IQ2_XS, PM(IQ2_S), KILN_PRESET_MIX}, /* sic: llama.cpp's IQ2_S mix is IQ2_XS based */
    {"IQ2_M", 29, KILN_IQ2_S, PM(IQ2_M), KILN_PRESET_MIX},
    {"IQ1_S", 24, KILN_IQ1_S, PM(IQ1_S), KILN_PRESET_MIX},
    {"IQ1_M", 31, KILN_IQ1_M, PM(IQ1_M), KILN_PRESET_MIX},
    {"TQ1_0", 36, KILN_TQ1_0, PM(TQ1_0), KILN_PRESET_MIX},
    {"TQ2_0", 37, KILN_TQ2_0, PM(TQ2_0), KILN_PRESET_MIX},
    {"Q2_K", 10, KILN_Q2_K, PM(Q2_K), KILN_PRESET_MIX},
    {"Q2_K_S", 21, KILN_Q2_K, PM(Q2_K_S), KILN_PRESET_MIX},
    {"IQ3_XXS", 23, KILN_IQ3_XXS, PM(IQ3_XXS), KILN_PRESET_MIX},
    {"IQ3_S", 26, KILN_IQ3_S, PM(IQ3_S), KILN_PRESET_MIX},
    {"IQ3_M", 27, KILN_IQ3_S, PM(IQ3_M), KILN_PRESET_MIX},
    {"IQ3_XS", 22, KILN_IQ3_S, PM(IQ3_XS), KILN_PRESET_MIX},
    {"Q3_K_S", 11, KILN_Q3_K, PM(Q3_K_S), KILN_PRESET_MIX},
    {"Q3_K_M", 12, KILN_Q3_K, PM(Q3_K_M), KILN_PRESET_MIX},
    {"Q3_K_L", 13, KILN_Q3_K, PM(Q3_K_L), KILN_PRESET_MIX},
    {"IQ4_NL", 25, KILN_IQ4_NL, PM(IQ4_NL), KILN_PRESET_MIX},
    {"IQ4_XS", 30, KILN_IQ4_XS, PM(IQ4_XS), KILN_PRESET_MIX},
    {"Q4_K_S", 14, KILN_Q4_K, PM(Q4_K_S), KILN_PRESET_MIX},
    {"Q4_K_M", 15, KILN_Q4_K, PM(Q4_K_M), KILN_PRESET_MIX},
    {"Q5_K_S", 16, KILN_Q5_K, PM(Q5_K_S), KILN_PRESET_MIX},
    {"Q5_K_M", 17, KILN_Q5_K, PM(Q5_K_M), KILN_PRESET_MIX},
    {"Q6_K", 18, KILN_Q6_K, PM(Q6_K), KILN_PRESET_MIX},
    {"Q8_0", 7, KILN_Q8_0, PM(Q8_0), KILN_PRESET_MIX},
    {"F16", 1, KILN_F16, PM(F16), KILN_PRESET_FLOAT},
    {"BF16", 32, KILN_BF16, PM(BF16), KILN_PRESET_FLOAT},
    {"F32", 0, KILN_F32, PM(F32), KILN_PRESET_FLOAT},
    {"COPY", 0, KILN_F32, PM(COPY), KILN_PRESET_COPY}, /* ftype: the input's */
};
#define N_PRESETS (sizeof PRESETS / sizeof *PRESETS)

const kiln_preset *const kiln_presets[] = {
    &PRESETS[0],  &PRESETS[1],  &PRESETS[2],  &PRESETS[3],  &PRESETS[4],  &PRESETS[5],  &PRESETS[6],
    &PRESETS[7],  &PRESETS[8],  &PRESETS[9],  &PRESETS[10], &PRESETS[11], &PRESETS[12], &PRESETS[13],
    &PRESETS[14], &PRESETS[15], &PRESETS[16], &PRESETS[17], &PRESETS[18], &PRESETS[19], &PRESETS[20],
    &PRESETS[21], &PRESETS[22], &PRESETS[23], &PRESETS[24], &PRESETS[25], &PRESETS[26], &PRESETS[27],
    &PRESETS[28], &PRESETS[29], &PRESETS[30], &PRESETS[31], &PRESETS[32], &PRESETS[33], &PRESETS[34],
    &PRESETS[35], NULL};
_Static_assert(sizeof kiln_presets / sizeof *kiln_presets == N_PRESETS + 1, "kiln_presets lists every preset");

const char *const kiln_preset_aliases[][2] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}, {NULL, NULL}};

/* general.file_type for a plain type (a type no preset is named after,
 * reached by name; the presets' own types come with --pure). */
static const struct {
    uint32_t type, ftype;
} PLAIN_FTYPES[] = {
    {KILN_MXFP4, 38}, {KILN_NVFP4, 39},
};

static int target_from_preset(const kiln_preset *p, kiln_quant_target *t) {
    *t = (kiln_quant_target){p, p->base, p->ftype, p->name};
    return 0;
}

static const kiln_preset *preset_named(const char *s) {
    for (const kiln_preset *const *p = kiln_presets; *p; p++)
        if (!strcasecmp(s, (*p)->name)) return *p;
    for (size_t i = 0; kiln_preset_aliases[i][0]; i++)
        if (!strcasecmp(s, kiln_preset_aliases[i][0])) return preset_named(kiln_preset_aliases[i][1]);
    return NULL;
}

/* llama-quantize's number form: the first option with that ftype (so 0 is
 * F32, not COPY). */
static const kiln_preset *preset_numbered(const char *s) {
    char *end;
    if (!isdigit((unsigned char)s[0])) return NULL;
    unsigned long v = strtoul(s, &end, 10);
    for (const kiln_preset *const *p = kiln_presets; *end == 0 && *p; p++)
        if ((*p)->ftype == v) return *p;
    return NULL;
}

int kiln_quant_target_parse(const char *s, kiln_quant_target *t, kiln_err *err) {
    memset(t, 0, sizeof *t);
    const kiln_preset *p = preset_named(s);
    if (!p) p = preset_numbered(s);
    if (p) return target_from_preset(p, t);
    int type = kiln_type_from_name(s);
    for (size_t i = 0; type >= 0 && i < sizeof PLAIN_FTYPES / sizeof *PLAIN_FTYPES; i++)
        if (PLAIN_FTYPES[i].type == (uint32_t)type) {
            *t = (kiln_quant_target){NULL, (uint32_t)type, PLAIN_FTYPES[i].ftype, kiln_type_name((uint32_t)type)};
            return 0;
        }
    char names[512];
    size_t n = 0;
    for (const kiln_preset *const *q = kiln_presets; *q && n < sizeof names; q++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? " " : "", (*q)->name);
    return kiln_fail(err, NULL, NULL, -1,
                     "unknown preset or type '%s' (presets: %s; aliases Q3_K Q4_K Q5_K; an ftype number; plain "
                     "types MXFP4 NVFP4; see 'kiln quantize --list-types')",
                     s, names);
}

/* ---- tensor categories (llama.cpp's tensor_get_category) ---------------- */

enum cat {
    C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN,
    C_DS4_HC,  /* deepseek4's hyper-connection mixers (kiln's own rules; llama.cpp has none) */
    C_DS4_APE, /* deepseek4's compressor position biases (likewise) */
};

static enum cat category(const char *name) {
    static const struct {
        const char *needle;
        enum cat cat;
    } BY_SUBSTRING[] = {
        /* attn_qkv and attn_kv_b carry V, so they share attn_v's rules */
        {"attn_qkv.weight", C_ATTN_V},   {"attn_kv_b.weight", C_ATTN_V}, {"attn_v.weight", C_ATTN_V},
        {"attn_k.weight", C_ATTN_K},     {"attn_q.weight", C_ATTN_Q},    {"attn_output.weight", C_ATTN_OUT},
        {"hc_attn_fn.weight", C_DS4_HC}, {"hc_ffn_fn.weight", C_DS4_HC}, {"output_hc_fn.weight", C_DS4_HC},
        {"compressor_ape.weight", C_DS4_APE},
        {"ffn_up", C_FFN_UP},            {"ffn_gate", C_FFN_GATE},       {"ffn_down", C_FFN_DOWN},
    };
    if (!strcmp(name, "output.weight")) return C_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    for (size_t i = 0; i < sizeof BY_SUBSTRING / sizeof *BY_SUBSTRING; i++)
        if (strstr(name, BY_SUBSTRING[i].needle)) return BY_SUBSTRING[i].cat;
    return C_OTHER;
}

/* Weights llama.cpp never quantizes, by substring of the name: small,
 * or read by non-matmul ops. */
static const char *const NOT_QUANTIZED[] = {
    "_norm.weight",       "ffn_gate_inp.weight",  "ffn_gate_tid2eid.weight", "altup",
    "laurel",             "per_layer_model_proj", "ssm_conv1d",              "shortconv.conv.weight",
    "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
    "time_mix_w1.weight", "time_mix_w2.weight",   "time_mix_v0.weight",      "time_mix_v1.weight",
    "time_mix_v2.weight", "time_mix_a0.weight",   "time_mix_a1.weight",      "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight",   "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",     "sam.pos_embd",
    "sam.neck.",          "sam.net_",             ".rel_pos",                ".patch_embd",
    ".patch_merger",      "a.rvq.codebook",       "mm.a.code_embd",
};

bool kiln_policy_quantizable(const char *name, uint32_t n_dims) {
    size_t n = strlen(name);
    if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof NOT_QUANTIZED / sizeof *NOT_QUANTIZED; i++)
        if (strstr(name, NOT_QUANTIZED[i])) return false;
    return true;
}

/* ---- the mix rules ------------------------------------------------------ */

enum arch_cond { A_ANY, A_FALCON, A_NOT_FALCON };
enum model_cond {
    M_ANY, M_GQA4, M_GQA4_OR_EXP4, M_EXP8, M_70B, M_ROW_MISFIT, M_IMATRIX, M_NO_IMATRIX,
    M_EXPERTS_TENSOR, /* a 3-D tensor holding several experts */
};
/* Position of the tensor among its kind: attn_v counts attn_v tensors in
 * visiting order; ffn_* use the layer (parsed from the name for MoE
 * models, whose expert tensors need not be in layer order). */
enum pos_cond { P_ANY, P_MORE_BITS, P_LT_N8, P_LT_N16, P_LT_K, P_RAW_LT_N8, P_MIDDLE };

#define T_BASE UINT32_MAX /* the preset's base type */
#define C_ANY 0xff        /* any category (output and token_embd rows come first) */

typedef struct rule {
    uint64_t presets;
    uint8_t cat, arch, model, pos, k;
    uint32_t type;
    const char *why;
} rule;

/* llama_tensor_get_type_impl as data. Per tensor, the first row whose
 * preset, category, architecture, model and position conditions all hold
 * decides; no row: the base type. llama.cpp's if/else chain tests the
 * preset first, so a row ending a preset's chain early (a "stays" row)
 * is needed only where a later row names the same preset and category. */
static const rule RULES[] = {
    /* output.weight, and token_embd.weight when it doubles as the output */
    {PM(MXFP4_MOE), C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, KILN_Q8_0, "output: Q8_0 for MXFP4_MOE"},
    {PM_ALL, C_OUTPUT, A_FALCON, M_ANY, P_ANY, 0, KILN_Q8_0, "output: Q8_0 for falcon"},
    {PM_ALL, C_OUTPUT, A_ANY, M_ROW_MISFIT, P_ANY, 0, KILN_Q8_0, "output: row does not fit the base type, Q8_0"},
    {PM_IQ_LOW | PM(IQ3_XXS), C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, KILN_Q5_K, "output: Q5_K for 1- to 3-bit IQ presets"},
    {PM(Q8_0), C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, T_BASE, "output: stays Q8_0"},
    {PM_ALL, C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, KILN_Q6_K, "output: Q6_K"},

    /* MXFP4_MOE: experts MXFP4, every other weight Q8_0 */
    {PM(MXFP4_MOE), C_ANY, A_ANY, M_EXPERTS_TENSOR, P_ANY, 0, KILN_MXFP4, "MXFP4 for expert tensors"},
    {PM(MXFP4_MOE), C_ANY, A_ANY, M_ANY, P_ANY, 0, KILN_Q8_0, "Q8_0 for non-expert tensors"},

    /* deepseek4 at 1 and 2 bits, where llama-quantize stops (no imatrix it
     * can use for attn_output_a or output_hc_fn): kiln's choice. The
     * hyper-connection mixers steer every residual stream through a
     * sinkhorn and are a few per mille of the weights; the compressors'
     * position biases are added to scores, never multiplied with an
     * activation, so no imatrix can weigh them. Both stay near lossless. */
    {PM_IQ_LOW | PM(Q2_K) | PM(Q2_K_S), C_DS4_HC, A_ANY, M_ANY, P_ANY, 0, KILN_Q8_0,
     "deepseek4 hyper-connection mixer: Q8_0 at 1-2 bits (kiln's rule)"},
    {PM_IQ_LOW | PM(Q2_K) | PM(Q2_K_S), C_DS4_APE, A_ANY, M_ANY, P_ANY, 0, KILN_Q8_0,
     "deepseek4 compressor position bias: Q8_0 at 1-2 bits (kiln's rule)"},

    /* token_embd.weight (untied) */
    {PM(IQ2_XXS) | PM(IQ2_XS) | PM(IQ1_S) | PM(IQ1_M), C_TOKEN_EMBD, A_ANY, M_ANY, P_ANY, 0, KILN_Q2_K,
     "token_embd: Q2_K for 1- and 2-bit IQ presets"},
    {PM(IQ2_S) | PM(IQ2_M) | PM(IQ3_XXS), C_TOKEN_EMBD, A_ANY, M_ANY, P_ANY, 0, KILN_IQ3_S,
     "token_embd: IQ3_S"},
    {PM(TQ1_0) | PM(TQ2_0) | PM(Q2_0), C_TOKEN_EMBD, A_ANY, M_ANY, P_ANY, 0, KILN_Q4_K,
     "token_embd: Q4_K for ternary and Q2_0 presets"},

    /* 1- and 2-bit IQ presets */
    {PM_IQ_LOW, C_ATTN_V, A_ANY, M_GQA4_OR_EXP4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4 or >= 4 experts"},
    {PM(IQ2_S) | PM(IQ2_M), C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_IQ3_S, "attn_v: IQ3_S"},
    {PM_IQ_LOW, C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q2_K, "attn_v: Q2_K"},
    {PM_IQ_LOW, C_ATTN_K, A_ANY, M_EXP8, P_ANY, 0, KILN_Q4_K, "attn_k: Q4_K with 8 experts"},
    {PM(IQ2_S) | PM(IQ2_M), C_FFN_DOWN, A_ANY, M_ANY, P_RAW_LT_N8, 0, KILN_IQ3_S, "ffn_down: IQ3_S in the first eighth"},
    {PM_IQ_LOW, C_FFN_DOWN, A_ANY, M_ANY, P_RAW_LT_N8, 0, KILN_Q2_K, "ffn_down: Q2_K in the first eighth"},
    {PM_IQ_LOW, C_ATTN_OUT, A_ANY, M_EXP8, P_ANY, 0, KILN_Q5_K, "attn_output: Q5_K with 8 experts"},
    {PM(IQ1_S) | PM(IQ1_M), C_ATTN_OUT, A_ANY, M_ANY, P_ANY, 0, KILN_IQ2_XXS, "attn_output: IQ2_XXS"},
    {PM(IQ2_S) | PM(IQ2_M), C_ATTN_OUT, A_ANY, M_ANY, P_ANY, 0, KILN_IQ3_S, "attn_output: IQ3_S"},

    /* attn_v (and attn_qkv, attn_kv_b) of every other preset; BUMPS follow */
    {PM(Q2_K), C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4"},
    {PM(Q2_K), C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q3_K, "attn_v: Q3_K"},
    {PM(Q2_K_S), C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4"},
    {PM(IQ3_XXS), C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4"},
    {PM(IQ3_XXS), C_ATTN_V, A_ANY, M_NO_IMATRIX, P_ANY, 0, KILN_IQ3_S, "attn_v: IQ3_S without an imatrix"},
    {PM(IQ3_XS) | PM(IQ3_S), C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4"},
    {PM(IQ3_M), C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K"},
    {PM(Q3_K_M), C_ATTN_V, A_ANY, M_ANY, P_LT_K, 2, KILN_Q5_K, "attn_v: Q5_K for the first two"},
    {PM(Q3_K_M), C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K"},
    {PM(Q3_K_L), C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q5_K, "attn_v: Q5_K"},
    {PM(IQ4_NL) | PM(IQ4_XS), C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q5_K, "attn_v: Q5_K with GQA >= 4"},
    {PM(Q4_K_M) | PM(Q5_K_M), C_ATTN_V, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q6_K,
     "attn_v: Q6_K on the first/last eighth and every third layer"},
    {PM(Q4_K_S), C_ATTN_V, A_ANY, M_ANY, P_LT_K, 4, KILN_Q5_K, "attn_v: Q5_K for the first four"},

    /* attn_k, attn_q */
    {PM_GENERAL, C_ATTN_K, A_ANY, M_EXP8, P_ANY, 0, KILN_Q8_0, "attn_k: Q8_0 with 8 experts"},
    {PM(IQ3_XS), C_ATTN_K, A_ANY, M_ANY, P_ANY, 0, KILN_IQ3_XXS, "attn_k: IQ3_XXS"},
    {PM(IQ3_XXS), C_ATTN_K, A_ANY, M_ANY, P_ANY, 0, KILN_IQ2_S, "attn_k: IQ2_S"},
    {PM(IQ3_XS), C_ATTN_Q, A_ANY, M_ANY, P_ANY, 0, KILN_IQ3_XXS, "attn_q: IQ3_XXS"},
    {PM(IQ3_XXS), C_ATTN_Q, A_ANY, M_ANY, P_ANY, 0, KILN_IQ2_S, "attn_q: IQ2_S"},

    /* ffn_down */
    {PM(Q2_K), C_FFN_DOWN, A_ANY, M_ANY, P_ANY, 0, KILN_Q3_K, "ffn_down: Q3_K"},
    {PM(Q2_K_S), C_FFN_DOWN, A_ANY, M_ANY, P_LT_N8, 0, KILN_Q4_K, "ffn_down: Q4_K in the first eighth"},
    {PM(IQ3_XXS), C_FFN_DOWN, A_ANY, M_NO_IMATRIX, P_LT_N8, 0, KILN_Q4_K,
     "ffn_down: Q4_K in the first eighth (no imatrix)"},
    {PM(IQ3_XXS), C_FFN_DOWN, A_ANY, M_NO_IMATRIX, P_ANY, 0, KILN_Q3_K, "ffn_down: Q3_K (no imatrix)"},
    {PM(Q3_K_M), C_FFN_DOWN, A_ANY, M_ANY, P_LT_N16, 0, KILN_Q5_K, "ffn_down: Q5_K in the first sixteenth"},
    {PM(Q3_K_M), C_FFN_DOWN, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "ffn_down: Q4_K"},
    {PM(Q3_K_M), C_FFN_DOWN, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q4_K,
     "ffn_down: Q4_K on the first/last eighth and every third layer"},
    {PM(IQ3_M), C_FFN_DOWN, A_ANY, M_ANY, P_LT_N8, 0, KILN_Q4_K, "ffn_down: Q4_K in the first eighth"},
    {PM(IQ3_M), C_FFN_DOWN, A_ANY, M_EXP8, P_MORE_BITS, 0, KILN_Q4_K,
     "ffn_down: Q4_K on the first/last eighth and every third layer with 8 experts"},
    {PM(Q3_K_L), C_FFN_DOWN, A_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "ffn_down: Q4_K for falcon"},
    {PM(Q3_K_L), C_FFN_DOWN, A_ANY, M_ANY, P_ANY, 0, KILN_Q5_K, "ffn_down: Q5_K"},
    {PM(Q4_K_M), C_FFN_DOWN, A_FALCON, M_ANY, P_LT_N16, 0, KILN_Q6_K, "ffn_down: Q6_K in the first sixteenth"},
    {PM(Q4_K_M), C_FFN_DOWN, A_FALCON, M_ANY, P_MORE_BITS, 0, KILN_Q5_K,
     "ffn_down: Q5_K on the first/last eighth and every third layer"},
    {PM(Q4_K_M), C_FFN_DOWN, A_FALCON, M_ANY, P_ANY, 0, T_BASE, "ffn_down: base type"},
    {PM(Q4_K_M) | PM(Q5_K_M), C_FFN_DOWN, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q6_K,
     "ffn_down: Q6_K on the first/last eighth and every third layer"},
    {PM(IQ4_NL) | PM(IQ4_XS), C_FFN_DOWN, A_ANY, M_NO_IMATRIX, P_LT_N8, 0, KILN_Q5_K,
     "ffn_down: Q5_K in the first eighth (no imatrix)"},
    {PM(Q4_K_S), C_FFN_DOWN, A_NOT_FALCON, M_ANY, P_LT_N8, 0, KILN_Q5_K, "ffn_down: Q5_K in the first eighth"},
    /* legacy presets: with an imatrix only, so that a run without one
     * keeps the old mix (Q4_1 / Q5_1 "go crazy" on ffn_down without) */
    {PM(Q4_0), C_FFN_DOWN, A_ANY, M_IMATRIX, P_LT_N8, 0, KILN_Q4_1, "ffn_down: Q4_1 in the first eighth (imatrix)"},
    {PM(Q5_0), C_FFN_DOWN, A_ANY, M_IMATRIX, P_LT_N8, 0, KILN_Q5_1, "ffn_down: Q5_1 in the first eighth (imatrix)"},

    /* attn_output */
    {PM(Q2_K) | PM(IQ3_XS) | PM(IQ3_XXS) | PM(Q3_K_S) | PM(Q3_K_M) | PM(IQ4_NL) | PM(Q4_K_S) | PM(Q4_K_M) |
         PM(IQ3_S) | PM(IQ3_M) | PM(IQ4_XS),
     C_ATTN_OUT, A_NOT_FALCON, M_EXP8, P_ANY, 0, KILN_Q5_K, "attn_output: Q5_K with 8 experts"},
    {PM_GENERAL, C_ATTN_OUT, A_NOT_FALCON, M_EXP8, P_ANY, 0, T_BASE, "attn_output: base type"},
    {PM(Q2_K), C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q3_K, "attn_output: Q3_K"},
    {PM(IQ3_XXS), C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_IQ3_S, "attn_output: IQ3_S"},
    {PM(Q3_K_M) | PM(IQ3_M), C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_output: Q4_K"},
    {PM(Q3_K_L), C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q5_K, "attn_output: Q5_K"},
    {PM(Q3_K_L), C_ATTN_OUT, A_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_output: Q4_K for falcon"},

    /* ffn_gate, ffn_up */
    {PM(IQ3_XS), C_FFN_GATE, A_ANY, M_ANY, P_MIDDLE, 0, KILN_IQ3_XXS, "ffn_gate: IQ3_XXS outside the first/last eighth"},
    {PM(IQ3_XS), C_FFN_UP, A_ANY, M_ANY, P_MIDDLE, 0, KILN_IQ3_XXS, "ffn_up: IQ3_XXS outside the first/last eighth"},
};

/* Applied in order after RULES, to the general presets' attn_v only;
 * `from` limits a bump to tensors already at that type (or at Q4_K for
 * the 70B bump, which lifts both Q3_K and Q4_K). */
typedef struct bump {
    uint8_t model;
    uint32_t from_a, from_b, type;
    const char *why;
} bump;

static const bump BUMPS[] = {
    {M_70B, KILN_Q3_K, KILN_Q4_K, KILN_Q5_K, "attn_v: Q5_K for llama 70B (8 heads share attn_v)"},
    {M_EXP8, T_BASE, T_BASE, KILN_Q8_0, "attn_v: Q8_0 with 8 experts"},
};

typedef struct state {
    const kiln_policy_model *m;
    uint32_t n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied;
    bool has_imatrix;
} state;

static bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* llama.cpp's LLM_TYPE_70B: the architectures whose 80-layer models it
 * names so (llama only with GQA; without, it is the 65B). */
static bool is_70b(const kiln_policy_model *m) {
    static const struct {
        const char *arch;
        bool needs_gqa;
    } ARCH_70B[] = {{"llama", true}, {"qwen2", false}, {"deci", false}, {"olmoe", false}};
    for (size_t i = 0; m->n_layer == 80 && i < sizeof ARCH_70B / sizeof *ARCH_70B; i++)
        if (!strcmp(m->arch, ARCH_70B[i].arch)) return !ARCH_70B[i].needs_gqa || m->n_head != m->n_head_kv;
    return false;
}

static bool model_ok(const state *s, uint8_t cond, const kiln_policy_tensor *t, uint32_t base) {
    const kiln_policy_model *m = s->m;
    uint32_t gqa = m->n_head_kv ? m->n_head / m->n_head_kv : 0;
    switch (cond) {
    case M_GQA4: return gqa >= 4;
    case M_GQA4_OR_EXP4: return gqa >= 4 || m->n_expert >= 4;
    case M_EXP8: return m->n_expert == 8;
    case M_70B: return is_70b(m);
    case M_ROW_MISFIT: return t->ne[0] % kiln_type_get(base)->block_size != 0;
    case M_IMATRIX: return s->has_imatrix;
    case M_NO_IMATRIX: return !s->has_imatrix;
    case M_EXPERTS_TENSOR: return t->n_dims >= 3 && t->ne[2] > 1;
    default: return true;
    }
}

/* The (index, count) a position condition compares for this tensor. */
static int position(const state *s, enum cat c, const kiln_policy_tensor *t, bool raw, int64_t *i, int64_t *n,
                    kiln_err *err) {
    if (c == C_ATTN_V) {
        *i = s->i_attn_v;
        *n = s->n_attn_v;
        return 0;
    }
    *n = s->m->n_layer;
    *i = c == C_FFN_DOWN ? s->i_ffn_down : c == C_FFN_GATE ? s->i_ffn_gate : s->i_ffn_up;
    if (raw || s->m->n_expert <= 1) return 0;
    int layer;
    if (sscanf(t->name, "blk.%d.", &layer) != 1)
        return kiln_fail(err, NULL, t->name, -1, "cannot tell this expert tensor's layer from its name");
    if (layer < 0 || layer >= (int)s->m->n_layer)
        return kiln_fail(err, NULL, t->name, -1, "layer %d is outside the model's %u layers", layer, s->m->n_layer);
    *i = layer;
    return 0;
}

static int pos_ok(const state *s, const rule *r, enum cat c, const kiln_policy_tensor *t, bool *ok, kiln_err *err) {
    int64_t i, n;
    *ok = true;
    if (r->pos == P_ANY) return 0;
    if (position(s, c, t, r->pos == P_RAW_LT_N8, &i, &n, err) < 0) return -1;
    switch (r->pos) {
    case P_MORE_BITS: *ok = use_more_bits(i, n); break;
    case P_LT_N8:
    case P_RAW_LT_N8: *ok = i < n / 8; break;
    case P_LT_N16: *ok = i < n / 16; break;
    case P_LT_K: *ok = i < r->k; break;
    case P_MIDDLE: *ok = i >= n / 8 && i < 7 * n / 8; break;
    }
    return 0;
}

static bool arch_ok(const state *s, uint8_t cond) {
    bool falcon = !strcmp(s->m->arch, "falcon");
    return cond == A_ANY || (cond == A_FALCON) == falcon;
}

/* llama.cpp's llama_tensor_get_type_impl for one tensor, with its layer
 * counters advanced the same way. */
static int mix(state *s, const kiln_policy_opts *o, const kiln_policy_tensor *t, enum cat c,
               kiln_tensor_plan *p, kiln_err *err) {
    uint32_t base = o->target.type;
    uint64_t mask = o->target.preset->mask;
    if (c == C_TOKEN_EMBD && s->tied) {
        c = C_OUTPUT;
        if (o->output_type >= 0) {
            p->to = (uint32_t)o->output_type;
            p->why = KILN_WHY_OUTPUT_OPT;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof RULES / sizeof *RULES; i++) {
        const rule *r = &RULES[i];
        bool ok;
        if (!(r->presets & mask) || (r->cat != c && r->cat != C_ANY) || !arch_ok(s, r->arch) ||
            !model_ok(s, r->model, t, base))
            continue;
        if (pos_ok(s, r, c, t, &ok, err) < 0) return -1;
        if (!ok) continue;
        p->to = r->type == T_BASE ? base : r->type;
        p->why = KILN_WHY_RULE;
        p->rule = r->why;
        break;
    }
    if (c == C_ATTN_V && (mask & PM_GENERAL))
        for (size_t i = 0; i < sizeof BUMPS / sizeof *BUMPS; i++) {
            const bump *b = &BUMPS[i];
            if (!model_ok(s, b->model, t, base)) continue;
            if (b->from_a != T_BASE && p->to != b->from_a && p->to != b->from_b) continue;
            p->to = b->type;
            p->why = KILN_WHY_RULE;
            p->rule = b->why;
        }
    if (c == C_ATTN_V) s->i_attn_v++;
    else if (c == C_FFN_DOWN) s->i_ffn_down++;
    else if (c == C_FFN_GATE) s->i_ffn_gate++;
    else if (c == C_FFN_UP) s->i_ffn_up++;
    return 0;
}

/* ---- fallback, overrides, the plan ------------------------------------- */

uint32_t kiln_policy_fallback(uint32_t type, int64_t ne0) {
    const kiln_type_info *ti = kiln_type_get(type);
    if (!ti || ne0 % ti->block_size == 0) return type;
    uint32_t to;
    switch (type) {
    case KILN_IQ1_S: case KILN_IQ1_M: case KILN_IQ2_XXS: case KILN_IQ2_XS: case KILN_IQ2_S:
    case KILN_IQ3_XXS: case KILN_IQ3_S: case KILN_IQ4_XS: to = KILN_IQ4_NL; break;
    case KILN_Q2_0: case KILN_Q2_K: case KILN_Q3_K: case KILN_TQ1_0: case KILN_TQ2_0: to = KILN_Q4_0; break;
    case KILN_Q4_K: to = KILN_Q5_0; break;
    case KILN_Q5_K: to = KILN_Q5_1; break;
    case KILN_Q6_K: to = KILN_Q8_0; break;
    default: return KILN_NO_FALLBACK; /* llama.cpp: "no tensor type fallback is defined" */
    }
    /* the fallback's 32-weight blocks do not fit either: llama.cpp keeps F16 */
    return ne0 % kiln_type_get(to)->block_size == 0 ? to : KILN_F16;
}

int kiln_override_parse(const char *spec, kiln_type_override *o, kiln_err *err) {
    memset(o, 0, sizeof *o);
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return kiln_fail(err, NULL, "--tensor-type", -1, "'%s' is not REGEX=TYPE", spec);
    int type = kiln_type_from_name(eq + 1);
    if (type < 0 || !kiln_can_quantize((uint32_t)type) || type == KILN_Q8_K)
        return kiln_fail(err, NULL, "--tensor-type", -1, "'%s': kiln cannot quantize to type '%s'", spec, eq + 1);
    o->pattern = strndup(spec, (size_t)(eq - spec));
    if (!o->pattern) return kiln_fail(err, NULL, "--tensor-type", -1, "out of memory");
    if (!(o->re = kiln_name_regex_compile(o->pattern, "--tensor-type", err))) {
        kiln_override_free(o);
        return -1;
    }
    o->type = (uint32_t)type;
    return 0;
}

void kiln_override_free(kiln_type_override *o) {
    kiln_name_regex_free(o->re);
    free(o->pattern);
    memset(o, 0, sizeof *o);
}

/* Sets *k to the index of the first override matching `name`, or -1.
 * -1 with a message when a regex fails to run. */
static int match_override(const kiln_policy_opts *o, const char *name, int *k, kiln_err *err) {
    *k = -1;
    for (uint32_t i = 0; i < o->n_overrides; i++) {
        int hit = kiln_name_regex_match(o->overrides[i].re, name, strlen(name), err);
        if (hit < 0) return -1;
        if (hit) {
            *k = (int)i;
            return 0;
        }
    }
    return 0;
}

bool kiln_policy_type_needs_imatrix(uint32_t type, const kiln_preset *preset) {
    switch (type) {
    case KILN_IQ3_XXS: case KILN_IQ2_XXS: case KILN_IQ2_XS: case KILN_IQ2_S: case KILN_IQ1_M: case KILN_IQ1_S:
        return true;
    case KILN_Q2_K: return preset && (preset->mask & PM(Q2_K_S)); /* only the Q2_K_S mix's Q2_K */
    default: return false;
    }
}

bool kiln_preset_needs_imatrix(const kiln_preset *p) {
    if (p->kind != KILN_PRESET_MIX) return false;
    if (kiln_policy_type_needs_imatrix(p->base, p)) return true;
    /* a rule for an ordinary weight (not output or token_embd, which
     * never need one) that picks such a type with or without an imatrix */
    for (size_t i = 0; i < sizeof RULES / sizeof *RULES; i++) {
        const rule *r = &RULES[i];
        if ((r->presets & p->mask) && r->cat != C_OUTPUT && r->cat != C_TOKEN_EMBD && r->model != M_IMATRIX &&
            kiln_policy_type_needs_imatrix(r->type == T_BASE ? p->base : r->type, p))
            return true;
    }
    return false;
}

static int plan_one(state *s, kiln_policy_opts *o, const kiln_policy_tensor *t, kiln_tensor_plan *p,
                    kiln_err *err) {
    enum cat c = category(t->name);
    const kiln_preset *preset = o->target.preset;
    *p = (kiln_tensor_plan){.from = t->type, .to = t->type, .why = KILN_WHY_KEEP, .override_idx = -1};
    /* ggml_n_dims: trailing dimensions of 1 do not count, so a [n, 1]
     * weight (qwen2moe's ffn_gate_inp_shexp) is a vector and kept */
    uint32_t n_dims = t->n_dims;
    while (n_dims > 1 && t->ne[n_dims - 1] == 1) n_dims--;
    if (!kiln_policy_quantizable(t->name, n_dims) || (preset && preset->kind == KILN_PRESET_COPY)) {
        p->wanted = p->to;
        return 0;
    }
    if (o->token_embd_type >= 0 && c == C_TOKEN_EMBD) {
        p->to = (uint32_t)o->token_embd_type;
        p->why = KILN_WHY_EMBD_OPT;
    } else if (o->output_type >= 0 && c == C_OUTPUT) {
        p->to = (uint32_t)o->output_type;
        p->why = KILN_WHY_OUTPUT_OPT;
    } else {
        p->to = o->target.type;
        p->why = KILN_WHY_BASE;
        int k;
        if (match_override(o, t->name, &k, err) < 0) return -1;
        if (k >= 0) {
            p->to = o->overrides[k].type;
            p->why = KILN_WHY_OVERRIDE;
            p->override_idx = k;
            o->overrides[k].hits++;
        } else if (!o->pure && preset && preset->kind == KILN_PRESET_MIX && mix(s, o, t, c, p, err) < 0) {
            return -1;
        }
    }
    p->wanted = p->to;
    uint32_t fits = kiln_policy_fallback(p->wanted, t->ne[0]);
    p->unfit = fits == KILN_NO_FALLBACK;
    p->to = p->unfit ? p->wanted : fits;
    p->fallback = p->to != p->wanted;
    p->needs_imatrix = c != C_TOKEN_EMBD && c != C_OUTPUT && kiln_policy_type_needs_imatrix(p->to, preset);
    return 0;
}

int kiln_policy_plan(const kiln_policy_model *m, const kiln_policy_tensor *t, uint64_t n, kiln_policy_opts *o,
                     kiln_tensor_plan *plan, kiln_err *err) {
    state s = {.m = m, .tied = true, .has_imatrix = o->has_imatrix};
    for (uint64_t i = 0; i < n; i++) {
        enum cat c = category(t[i].name);
        if (c == C_ATTN_V) s.n_attn_v++;
        if (c == C_OUTPUT) s.tied = false;
    }
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i++) rc = plan_one(&s, o, &t[i], &plan[i], err);
    return rc;
}
