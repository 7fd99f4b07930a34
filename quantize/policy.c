/* quantize/policy.c - the per-tensor type policy of each preset (see
 * policy.h). The mixes are data: RULES below is llama.cpp's
 * llama_tensor_get_type_impl() for kiln's presets written as a table, one
 * row per decision, first match wins per tensor category; BUMPS are the
 * adjustments llama.cpp applies to attn_v after that choice. */
#include "policy.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- presets ------------------------------------------------------------ */

enum {
    PM_Q8_0 = 1u << 0,
    PM_Q6_K = 1u << 1,
    PM_Q5_K_M = 1u << 2,
    PM_Q4_K_M = 1u << 3,
    PM_Q4_K_S = 1u << 4,
    PM_Q3_K_M = 1u << 5,
    PM_Q2_K = 1u << 6,
    PM_IQ2_XXS = 1u << 7,
    PM_Q4_0 = 1u << 8,
    PM_Q4_1 = 1u << 9,
    PM_Q5_0 = 1u << 10,
    PM_Q5_1 = 1u << 11,
    PM_IQ4_XS = 1u << 12,
    PM_ALL = 0x1fffu,
    PM_KQ = PM_ALL & ~PM_IQ2_XXS, /* llama.cpp's branch for non-IQ presets */
};

/* ftype values are llama.h's LLAMA_FTYPE_MOSTLY_* */
static const kiln_preset PRESETS[] = {
    {"Q8_0", 7, KILN_Q8_0, PM_Q8_0},       {"Q6_K", 18, KILN_Q6_K, PM_Q6_K},
    {"Q5_K_M", 17, KILN_Q5_K, PM_Q5_K_M},  {"Q4_K_M", 15, KILN_Q4_K, PM_Q4_K_M},
    {"Q4_K_S", 14, KILN_Q4_K, PM_Q4_K_S},  {"Q3_K_M", 12, KILN_Q3_K, PM_Q3_K_M},
    {"Q2_K", 10, KILN_Q2_K, PM_Q2_K},      {"IQ2_XXS", 19, KILN_IQ2_XXS, PM_IQ2_XXS},
    {"Q5_1", 9, KILN_Q5_1, PM_Q5_1},       {"Q5_0", 8, KILN_Q5_0, PM_Q5_0},
    {"Q4_1", 3, KILN_Q4_1, PM_Q4_1},       {"Q4_0", 2, KILN_Q4_0, PM_Q4_0},
    {"IQ4_XS", 30, KILN_IQ4_XS, PM_IQ4_XS},
};

const kiln_preset *const kiln_presets[] = {&PRESETS[0], &PRESETS[1], &PRESETS[2],  &PRESETS[3],
                                           &PRESETS[4], &PRESETS[5], &PRESETS[6],  &PRESETS[7],
                                           &PRESETS[8], &PRESETS[9], &PRESETS[10], &PRESETS[11],
                                           &PRESETS[12], NULL};

/* general.file_type for a plain type: the llama.cpp ftype whose default
 * type it is (the _S variant where there are several). Q4_0, Q4_1, Q5_0
 * and Q5_1 name presets (llama-quantize's mixes) and reach this table
 * only with --pure. */
static const struct {
    uint32_t type, ftype;
} PLAIN_FTYPES[] = {
    {KILN_F32, 0},   {KILN_F16, 1},     {KILN_BF16, 32},    {KILN_Q4_0, 2},    {KILN_Q5_0, 8},
    {KILN_Q4_1, 3},  {KILN_Q5_1, 9},
    {KILN_Q8_0, 7},  {KILN_Q2_K, 10},   {KILN_Q3_K, 11},    {KILN_Q4_K, 14},   {KILN_Q5_K, 16},
    {KILN_Q6_K, 18}, {KILN_IQ2_XXS, 19}, {KILN_IQ4_NL, 25}, {KILN_IQ4_XS, 30},
    {KILN_IQ2_XS, 20}, {KILN_IQ3_XXS, 23}, {KILN_IQ1_S, 24},  {KILN_IQ3_S, 26},   {KILN_IQ2_S, 28},
    {KILN_IQ1_M, 31},  {KILN_TQ1_0, 36},   {KILN_TQ2_0, 37},  {KILN_MXFP4, 38},   {KILN_NVFP4, 39},
    {KILN_Q1_0, 40},   {KILN_Q2_0, 41},
};

int kiln_quant_target_parse(const char *s, kiln_quant_target *t, kiln_err *err) {
    memset(t, 0, sizeof *t);
    for (const kiln_preset *const *p = kiln_presets; *p; p++)
        if (!strcasecmp(s, (*p)->name)) {
            *t = (kiln_quant_target){*p, (*p)->base, (*p)->ftype, (*p)->name};
            return 0;
        }
    int type = kiln_type_from_name(s);
    for (size_t i = 0; type >= 0 && i < sizeof PLAIN_FTYPES / sizeof *PLAIN_FTYPES; i++)
        if (PLAIN_FTYPES[i].type == (uint32_t)type && kiln_can_quantize((uint32_t)type)) {
            *t = (kiln_quant_target){NULL, (uint32_t)type, PLAIN_FTYPES[i].ftype, kiln_type_name((uint32_t)type)};
            return 0;
        }
    return kiln_fail(err, NULL, NULL, -1,
                     "unknown preset or type '%s' (presets: Q8_0 Q6_K Q5_K_M Q4_K_M Q4_K_S Q3_K_M Q2_K IQ2_XXS "
                     "Q5_1 Q5_0 Q4_1 Q4_0 IQ4_XS; types: F32 F16 BF16 Q8_0 Q5_1 Q5_0 Q4_1 Q4_0 IQ4_NL IQ4_XS "
                     "Q6_K Q5_K Q4_K Q3_K Q2_K IQ2_XXS)",
                     s);
}

/* ---- tensor categories (llama.cpp's tensor_get_category) ---------------- */

enum cat {
    C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN
};

static enum cat category(const char *name) {
    static const struct {
        const char *needle;
        enum cat cat;
    } BY_SUBSTRING[] = {
        /* attn_qkv and attn_kv_b carry V, so they share attn_v's rules */
        {"attn_qkv.weight", C_ATTN_V},   {"attn_kv_b.weight", C_ATTN_V}, {"attn_v.weight", C_ATTN_V},
        {"attn_k.weight", C_ATTN_K},     {"attn_q.weight", C_ATTN_Q},    {"attn_output.weight", C_ATTN_OUT},
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
enum model_cond { M_ANY, M_GQA4, M_GQA4_OR_EXP4, M_EXP8, M_70B, M_ROW_MISFIT, M_IMATRIX, M_NO_IMATRIX };
/* Position of the tensor among its kind: attn_v counts attn_v tensors in
 * visiting order; ffn_* use the layer (parsed from the name for MoE
 * models, whose expert tensors need not be in layer order). */
enum pos_cond { P_ANY, P_MORE_BITS, P_LT_N8, P_LT_N16, P_LT_K, P_RAW_LT_N8 };

#define T_BASE UINT32_MAX /* the preset's base type */

typedef struct rule {
    uint32_t presets;
    uint8_t cat, arch, model, pos, k;
    uint32_t type;
    const char *why;
} rule;

static const rule RULES[] = {
    /* output.weight, and token_embd.weight when it doubles as the output */
    {PM_ALL, C_OUTPUT, A_FALCON, M_ANY, P_ANY, 0, KILN_Q8_0, "output: Q8_0 for falcon"},
    {PM_ALL, C_OUTPUT, A_ANY, M_ROW_MISFIT, P_ANY, 0, KILN_Q8_0, "output: row does not fit the base type, Q8_0"},
    {PM_IQ2_XXS, C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, KILN_Q5_K, "output: Q5_K for 2-bit IQ presets"},
    {PM_Q8_0, C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, T_BASE, "output: stays Q8_0"},
    {PM_ALL, C_OUTPUT, A_ANY, M_ANY, P_ANY, 0, KILN_Q6_K, "output: Q6_K"},
    {PM_IQ2_XXS, C_TOKEN_EMBD, A_ANY, M_ANY, P_ANY, 0, KILN_Q2_K, "token_embd: Q2_K for 2-bit IQ presets"},

    /* IQ2_XXS */
    {PM_IQ2_XXS, C_ATTN_V, A_ANY, M_GQA4_OR_EXP4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4 or >= 4 experts"},
    {PM_IQ2_XXS, C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q2_K, "attn_v: Q2_K"},
    {PM_IQ2_XXS, C_ATTN_K, A_ANY, M_EXP8, P_ANY, 0, KILN_Q4_K, "attn_k: Q4_K with 8 experts"},
    {PM_IQ2_XXS, C_FFN_DOWN, A_ANY, M_ANY, P_RAW_LT_N8, 0, KILN_Q2_K, "ffn_down: Q2_K in the first eighth"},
    {PM_IQ2_XXS, C_ATTN_OUT, A_ANY, M_EXP8, P_ANY, 0, KILN_Q5_K, "attn_output: Q5_K with 8 experts"},

    /* k-quant presets */
    {PM_Q2_K, C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K with GQA >= 4"},
    {PM_Q2_K, C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q3_K, "attn_v: Q3_K"},
    {PM_Q3_K_M, C_ATTN_V, A_ANY, M_ANY, P_LT_K, 2, KILN_Q5_K, "attn_v: Q5_K for the first two"},
    {PM_Q3_K_M, C_ATTN_V, A_ANY, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_v: Q4_K"},
    {PM_Q4_K_M | PM_Q5_K_M, C_ATTN_V, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q6_K,
     "attn_v: Q6_K on the first/last eighth and every third layer"},
    {PM_IQ4_XS, C_ATTN_V, A_ANY, M_GQA4, P_ANY, 0, KILN_Q5_K, "attn_v: Q5_K with GQA >= 4"},
    {PM_Q4_K_S, C_ATTN_V, A_ANY, M_ANY, P_LT_K, 4, KILN_Q5_K, "attn_v: Q5_K for the first four"},
    {PM_KQ, C_ATTN_K, A_ANY, M_EXP8, P_ANY, 0, KILN_Q8_0, "attn_k: Q8_0 with 8 experts"},
    {PM_Q2_K, C_FFN_DOWN, A_ANY, M_ANY, P_ANY, 0, KILN_Q3_K, "ffn_down: Q3_K"},
    {PM_Q3_K_M, C_FFN_DOWN, A_ANY, M_ANY, P_LT_N16, 0, KILN_Q5_K, "ffn_down: Q5_K in the first sixteenth"},
    {PM_Q3_K_M, C_FFN_DOWN, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "ffn_down: Q4_K"},
    {PM_Q3_K_M, C_FFN_DOWN, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q4_K,
     "ffn_down: Q4_K on the first/last eighth and every third layer"},
    {PM_Q4_K_M, C_FFN_DOWN, A_FALCON, M_ANY, P_LT_N16, 0, KILN_Q6_K, "ffn_down: Q6_K in the first sixteenth"},
    {PM_Q4_K_M, C_FFN_DOWN, A_FALCON, M_ANY, P_MORE_BITS, 0, KILN_Q5_K,
     "ffn_down: Q5_K on the first/last eighth and every third layer"},
    {PM_Q4_K_M, C_FFN_DOWN, A_FALCON, M_ANY, P_ANY, 0, T_BASE, "ffn_down: base type"},
    {PM_Q4_K_M | PM_Q5_K_M, C_FFN_DOWN, A_ANY, M_ANY, P_MORE_BITS, 0, KILN_Q6_K,
     "ffn_down: Q6_K on the first/last eighth and every third layer"},
    {PM_IQ4_XS, C_FFN_DOWN, A_ANY, M_NO_IMATRIX, P_LT_N8, 0, KILN_Q5_K,
     "ffn_down: Q5_K in the first eighth (no imatrix)"},
    {PM_Q4_K_S, C_FFN_DOWN, A_NOT_FALCON, M_ANY, P_LT_N8, 0, KILN_Q5_K, "ffn_down: Q5_K in the first eighth"},
    /* legacy presets: with an imatrix only, so that a run without one
     * keeps the old mix (Q4_1 / Q5_1 "go crazy" on ffn_down without) */
    {PM_Q4_0, C_FFN_DOWN, A_ANY, M_IMATRIX, P_LT_N8, 0, KILN_Q4_1, "ffn_down: Q4_1 in the first eighth (imatrix)"},
    {PM_Q5_0, C_FFN_DOWN, A_ANY, M_IMATRIX, P_LT_N8, 0, KILN_Q5_1, "ffn_down: Q5_1 in the first eighth (imatrix)"},
    {PM_Q2_K | PM_Q3_K_M | PM_Q4_K_S | PM_Q4_K_M | PM_IQ4_XS, C_ATTN_OUT, A_NOT_FALCON, M_EXP8, P_ANY, 0, KILN_Q5_K,
     "attn_output: Q5_K with 8 experts"},
    {PM_KQ, C_ATTN_OUT, A_NOT_FALCON, M_EXP8, P_ANY, 0, T_BASE, "attn_output: base type"},
    {PM_Q2_K, C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q3_K, "attn_output: Q3_K"},
    {PM_Q3_K_M, C_ATTN_OUT, A_NOT_FALCON, M_ANY, P_ANY, 0, KILN_Q4_K, "attn_output: Q4_K"},
};

/* Applied in order after RULES, to k-quant presets' attn_v only; `from`
 * limits a bump to tensors already at that type (or at Q4_K for the 70B
 * bump, which lifts both Q3_K and Q4_K). */
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
    uint32_t base = o->target.type, mask = o->target.preset->mask;
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
        if (!(r->presets & mask) || r->cat != c || !arch_ok(s, r->arch) || !model_ok(s, r->model, t, base)) continue;
        if (pos_ok(s, r, c, t, &ok, err) < 0) return -1;
        if (!ok) continue;
        p->to = r->type == T_BASE ? base : r->type;
        p->why = KILN_WHY_RULE;
        p->rule = r->why;
        break;
    }
    if (c == C_ATTN_V && (mask & PM_KQ))
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
    case KILN_Q2_K: case KILN_Q3_K: case KILN_TQ1_0: case KILN_TQ2_0: to = KILN_Q4_0; break;
    case KILN_Q4_K: to = KILN_Q5_0; break;
    case KILN_Q5_K: to = KILN_Q5_1; break;
    case KILN_Q6_K: to = KILN_Q8_0; break;
    default: to = ti->block_size <= 32 ? type : KILN_F16; break;
    }
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

static bool needs_imatrix(uint32_t type, enum cat c) {
    if (c == C_TOKEN_EMBD || c == C_OUTPUT) return false;
    return type == KILN_IQ2_XXS || type == KILN_IQ2_XS || type == KILN_IQ2_S || type == KILN_IQ3_XXS ||
           type == KILN_IQ1_S || type == KILN_IQ1_M;
}

static int plan_one(state *s, kiln_policy_opts *o, const kiln_policy_tensor *t, kiln_tensor_plan *p,
                    kiln_err *err) {
    enum cat c = category(t->name);
    *p = (kiln_tensor_plan){.from = t->type, .to = t->type, .why = KILN_WHY_KEEP, .override_idx = -1};
    if (!kiln_policy_quantizable(t->name, t->n_dims)) {
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
        } else if (!o->pure && o->target.preset && mix(s, o, t, c, p, err) < 0) {
            return -1;
        }
    }
    p->wanted = p->to;
    p->to = kiln_policy_fallback(p->wanted, t->ne[0]);
    p->fallback = p->to != p->wanted;
    p->needs_imatrix = needs_imatrix(p->to, c);
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
