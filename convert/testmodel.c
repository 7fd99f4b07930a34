/* convert/testmodel.c - the synthetic model generator declared in
 * testmodel.h: architecture table, tensor plan, weight values, tokenizer
 * vocabularies and the config / tokenizer JSON files, and the directory
 * writer that ties them together.
 *
 * Nothing here is random in the libc sense: every value comes from a
 * counter-based stream keyed by (seed, tensor name, block of 64Ki elements),
 * so generation can be chunked and parallel and still byte-identical, and
 * the sampler uses only + * / and sqrt, which IEEE makes exact everywhere. */
#include "testmodel.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fp16.h"
#include "../core/fileio.h"
#include "../core/safetensors_write.h"

/* ------------------------------------------------------------------ */
/* architectures                                                       */

enum { MOE_NONE, MOE_MIXTRAL, MOE_QWEN2, MOE_QWEN3 };
enum { TOK_SPM, TOK_QWEN, TOK_GPT2 };

typedef struct arch_info {
    const char *name, *cls, *model_type;
    const char *hf_version; /* a transformers release that has the class */
    uint8_t moe, tok;
    bool qkv_bias, qk_norm;
    double norm_eps, rope_theta;
} arch_info;

static const arch_info ARCH[KILN_TM_ARCH_COUNT] = {
    [KILN_TM_LLAMA] = {"llama", "LlamaForCausalLM", "llama", "4.46.3", MOE_NONE, TOK_SPM, false, false, 1e-5, 10000.0},
    [KILN_TM_MISTRAL] = {"mistral", "MistralForCausalLM", "mistral", "4.46.3", MOE_NONE, TOK_SPM, false, false, 1e-5, 1e6},
    [KILN_TM_QWEN2] = {"qwen2", "Qwen2ForCausalLM", "qwen2", "4.46.3", MOE_NONE, TOK_QWEN, true, false, 1e-6, 1e6},
    [KILN_TM_QWEN3] = {"qwen3", "Qwen3ForCausalLM", "qwen3", "4.51.0", MOE_NONE, TOK_QWEN, false, true, 1e-6, 1e6},
    [KILN_TM_MIXTRAL] = {"mixtral", "MixtralForCausalLM", "mixtral", "4.46.3", MOE_MIXTRAL, TOK_SPM, false, false, 1e-5, 1e6},
    [KILN_TM_QWEN2MOE] = {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", "4.46.3", MOE_QWEN2, TOK_QWEN, true, false, 1e-6, 1e6},
    [KILN_TM_QWEN3MOE] = {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", "4.51.0", MOE_QWEN3, TOK_QWEN, false, true, 1e-6, 1e6},
    [KILN_TM_GPT2] = {"gpt2", "GPT2LMHeadModel", "gpt2", "4.46.3", MOE_NONE, TOK_GPT2, false, false, 1e-5, 0},
};

int kiln_tm_arch_parse(const char *name, kiln_tm_arch *out) {
    for (int a = 0; a < KILN_TM_ARCH_COUNT; a++)
        if (!strcasecmp(name, ARCH[a].name) || !strcmp(name, ARCH[a].cls) || !strcmp(name, ARCH[a].model_type)) {
            *out = (kiln_tm_arch)a;
            return 0;
        }
    return -1;
}

const char *kiln_tm_arch_name(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT ? ARCH[a].name : "?"; }
const char *kiln_tm_arch_class(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT ? ARCH[a].cls : "?"; }
bool kiln_tm_arch_is_moe(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT && ARCH[a].moe != MOE_NONE; }

int kiln_tm_defaults(kiln_tm_config *c, kiln_tm_arch arch, const char *size, kiln_err *err) {
    if ((unsigned)arch >= KILN_TM_ARCH_COUNT) return kiln_fail(err, NULL, "arch", -1, "unknown architecture");
    bool moe = ARCH[arch].moe != MOE_NONE, gpt2 = arch == KILN_TM_GPT2;
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->dtype = KILN_ST_BF16;
    c->tie_embeddings = gpt2;
    c->experts = moe ? 4 : 0;
    c->experts_used = moe ? 2 : 0;
    if (!size || !*size) {
        /* every row a whole number of 256-wide k-quant blocks, as in the fixtures */
        c->layers = 2;
        c->hidden = 256;
        c->heads = 4;
        c->kv_heads = gpt2 ? 4 : 2;
        c->ffn = gpt2 ? 1024 : moe ? 256 : 512;
        c->vocab = 512;
        c->ctx = gpt2 ? 1024 : 2048;
        return 0;
    }
    if (!strcasecmp(size, "1b")) {
        /* llama.cpp's llama-bench figures in ../shared were taken on this shape */
        c->layers = 16;
        c->hidden = 2048;
        c->heads = 32;
        c->kv_heads = gpt2 ? 32 : 8;
        c->ffn = moe ? 8192 / c->experts_used : 8192; /* MoE: same active width */
        c->vocab = 32000;
        c->ctx = 2048;
        return 0;
    }
    return kiln_fail(err, NULL, "size", -1, "unknown size '%s' (known: 1b)", size);
}

/* the smallest vocabulary each tokenizer can be built with */
static uint32_t min_vocab(const kiln_tm_config *c) {
    switch (ARCH[c->arch].tok) {
    case TOK_SPM: return 3 + 256 + 8;
    case TOK_QWEN: return 256 + 3 + 8;
    default: return 256 + 1 + 8;
    }
}

int kiln_tm_check(const kiln_tm_config *c, kiln_err *err) {
    if ((unsigned)c->arch >= KILN_TM_ARCH_COUNT) return kiln_fail(err, NULL, "arch", -1, "unknown architecture");
    const arch_info *a = &ARCH[c->arch];
    const uint32_t big = 1u << 20;
    if (c->layers < 1 || c->layers > 4096) return kiln_fail(err, NULL, "layers", -1, "%u: must be 1..4096", c->layers);
    if (c->hidden < 1 || c->hidden > big) return kiln_fail(err, NULL, "hidden", -1, "%u: must be 1..%u", c->hidden, big);
    if (c->ffn < 1 || c->ffn > big) return kiln_fail(err, NULL, "ffn", -1, "%u: must be 1..%u", c->ffn, big);
    if (c->ctx < 1 || c->ctx > big) return kiln_fail(err, NULL, "ctx", -1, "%u: must be 1..%u", c->ctx, big);
    if (c->heads < 1 || c->hidden % c->heads)
        return kiln_fail(err, NULL, "heads", -1, "%u heads do not divide hidden size %u", c->heads, c->hidden);
    if (c->kv_heads < 1 || c->heads % c->kv_heads)
        return kiln_fail(err, NULL, "kv-heads", -1, "%u KV heads do not divide %u heads", c->kv_heads, c->heads);
    if (c->arch == KILN_TM_GPT2 && c->kv_heads != c->heads)
        return kiln_fail(err, NULL, "kv-heads", -1, "gpt2 has no grouped-query attention (KV heads must equal heads)");
    if (c->arch != KILN_TM_GPT2 && (c->hidden / c->heads) % 2)
        return kiln_fail(err, NULL, "heads", -1, "head size %u is odd; RoPE needs it even", c->hidden / c->heads);
    if (a->moe == MOE_NONE && (c->experts || c->experts_used))
        return kiln_fail(err, NULL, "experts", -1, "%s is not a mixture-of-experts architecture", a->name);
    if (a->moe != MOE_NONE) {
        if (c->experts < 1 || c->experts > 4096)
            return kiln_fail(err, NULL, "experts", -1, "%u: must be 1..4096", c->experts);
        if (c->experts_used < 1 || c->experts_used > c->experts)
            return kiln_fail(err, NULL, "experts-used", -1, "%u: must be 1..%u (the expert count)", c->experts_used,
                             c->experts);
        if ((uint64_t)c->ffn * c->experts_used > big)
            return kiln_fail(err, NULL, "ffn", -1, "ffn x experts-used is too large");
    }
    if (c->vocab < min_vocab(c) || c->vocab > 4 * big)
        return kiln_fail(err, NULL, "vocab", -1, "%u: must be %u..%u for the %s tokenizer", c->vocab, min_vocab(c),
                         4 * big, a->tok == TOK_SPM ? "SentencePiece" : "byte-level BPE");
    if (c->dtype != KILN_ST_BF16 && c->dtype != KILN_ST_F16 && c->dtype != KILN_ST_F32)
        return kiln_fail(err, NULL, "dtype", -1, "must be bf16, f16 or f32");
    if (c->arch == KILN_TM_GPT2 && !c->tie_embeddings)
        return kiln_fail(err, NULL, "tie-embeddings", -1, "gpt2 always ties its embeddings");
    return 0;
}

/* ------------------------------------------------------------------ */
/* tensor plan                                                         */

typedef struct plan {
    kiln_tm_tensor *t;
    size_t n, cap;
} plan;

static void add(plan *p, uint8_t kind, uint8_t in_axis, bool outl, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* d1 < 0 makes a 1-D tensor; capacity is reserved by the caller */
static void add(plan *p, uint8_t kind, uint8_t in_axis, bool outl, int64_t d0, int64_t d1, const char *fmt, ...) {
    kiln_tm_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = d1 < 0 ? 1 : 2;
    t->shape[0] = d0;
    t->shape[1] = d1 < 0 ? 0 : d1;
    t->kind = kind;
    t->in_axis = in_axis;
    t->outliers = outl;
}

/* SwiGLU feed-forward as gate/up/down (or Mixtral's w1/w3/w2) under `pre` */
static void add_swiglu(plan *p, const char *pre, int64_t h, int64_t f, bool mixtral) {
    if (mixtral) {
        add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.w1.weight", pre);
        add(p, KILN_TM_MATRIX, 1, false, h, f, "%s.w2.weight", pre);
        add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.w3.weight", pre);
        return;
    }
    add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.gate_proj.weight", pre);
    add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.up_proj.weight", pre);
    add(p, KILN_TM_MATRIX, 1, false, h, f, "%s.down_proj.weight", pre);
}

static void plan_gpt2(const kiln_tm_config *c, plan *p) {
    int64_t h = c->hidden, f = c->ffn;
    add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "transformer.wte.weight");
    add(p, KILN_TM_POS, 1, false, c->ctx, h, "transformer.wpe.weight");
    for (uint32_t l = 0; l < c->layers; l++) {
        /* Conv1D stores [in, out]: the input channel is axis 0 */
        add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.h.%u.ln_1.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.ln_1.bias", l);
        add(p, KILN_TM_MATRIX, 0, true, h, 3 * h, "transformer.h.%u.attn.c_attn.weight", l);
        add(p, KILN_TM_BIAS, 0, false, 3 * h, -1, "transformer.h.%u.attn.c_attn.bias", l);
        add(p, KILN_TM_MATRIX, 0, false, h, h, "transformer.h.%u.attn.c_proj.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.attn.c_proj.bias", l);
        add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.h.%u.ln_2.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.ln_2.bias", l);
        add(p, KILN_TM_MATRIX, 0, true, h, f, "transformer.h.%u.mlp.c_fc.weight", l);
        add(p, KILN_TM_BIAS, 0, false, f, -1, "transformer.h.%u.mlp.c_fc.bias", l);
        add(p, KILN_TM_MATRIX, 0, false, f, h, "transformer.h.%u.mlp.c_proj.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.mlp.c_proj.bias", l);
    }
    add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.ln_f.weight");
    add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.ln_f.bias");
}

static void plan_decoder(const kiln_tm_config *c, plan *p) {
    const arch_info *a = &ARCH[c->arch];
    int64_t h = c->hidden, hd = h / c->heads, q = hd * c->heads, kv = hd * c->kv_heads, f = c->ffn;
    const char *proj[3] = {"q", "k", "v"};
    int64_t rows[3] = {q, kv, kv};
    char pre[96];
    add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "model.embed_tokens.weight");
    for (uint32_t l = 0; l < c->layers; l++) {
        for (int i = 0; i < 3; i++) {
            add(p, KILN_TM_MATRIX, 1, true, rows[i], h, "model.layers.%u.self_attn.%s_proj.weight", l, proj[i]);
            if (a->qkv_bias) add(p, KILN_TM_BIAS, 0, false, rows[i], -1, "model.layers.%u.self_attn.%s_proj.bias", l, proj[i]);
        }
        add(p, KILN_TM_MATRIX, 1, false, h, q, "model.layers.%u.self_attn.o_proj.weight", l);
        if (a->qk_norm) {
            add(p, KILN_TM_NORM, 0, false, hd, -1, "model.layers.%u.self_attn.q_norm.weight", l);
            add(p, KILN_TM_NORM, 0, false, hd, -1, "model.layers.%u.self_attn.k_norm.weight", l);
        }
        switch (a->moe) {
        case MOE_NONE:
            snprintf(pre, sizeof pre, "model.layers.%u.mlp", l);
            add_swiglu(p, pre, h, f, false);
            break;
        case MOE_MIXTRAL:
            add(p, KILN_TM_MATRIX, 1, true, c->experts, h, "model.layers.%u.block_sparse_moe.gate.weight", l);
            for (uint32_t e = 0; e < c->experts; e++) {
                snprintf(pre, sizeof pre, "model.layers.%u.block_sparse_moe.experts.%u", l, e);
                add_swiglu(p, pre, h, f, true);
            }
            break;
        default: /* Qwen MoE */
            add(p, KILN_TM_MATRIX, 1, true, c->experts, h, "model.layers.%u.mlp.gate.weight", l);
            for (uint32_t e = 0; e < c->experts; e++) {
                snprintf(pre, sizeof pre, "model.layers.%u.mlp.experts.%u", l, e);
                add_swiglu(p, pre, h, f, false);
            }
            if (a->moe == MOE_QWEN2) {
                snprintf(pre, sizeof pre, "model.layers.%u.mlp.shared_expert", l);
                add_swiglu(p, pre, h, (int64_t)f * c->experts_used, false);
                add(p, KILN_TM_MATRIX, 1, true, 1, h, "model.layers.%u.mlp.shared_expert_gate.weight", l);
            }
        }
        add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.input_layernorm.weight", l);
        add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.post_attention_layernorm.weight", l);
    }
    add(p, KILN_TM_NORM, 0, false, h, -1, "model.norm.weight");
    if (!c->tie_embeddings) add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "lm_head.weight");
}

int kiln_tm_plan(const kiln_tm_config *c, kiln_tm_tensor **out, size_t *n, kiln_err *err) {
    if (kiln_tm_check(c, err)) return -1;
    /* an upper bound: 16 per layer plus 3 per expert, and the ends */
    size_t cap = (size_t)c->layers * (16 + 3 * (size_t)c->experts) + 8;
    plan p = {calloc(cap, sizeof(kiln_tm_tensor)), 0, cap};
    if (!p.t) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    if (c->arch == KILN_TM_GPT2) plan_gpt2(c, &p);
    else plan_decoder(c, &p);
    *out = p.t;
    *n = p.n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* values                                                              */

#define TM_BLOCK 65536 /* elements per random stream */

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

typedef struct rng {
    uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = seed = mix64(seed);
}

static uint64_t rng_next(rng *r) { /* xoshiro256** */
    uint64_t *s = r->s, out = s[1] * 5;
    out = ((out << 7) | (out >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Student-t with 4 degrees of freedom, scaled to unit variance, by Bailey's
 * polar method: T = U sqrt(4 (W^-1/2 - 1) / W) for (U, V) uniform in the
 * unit disc, W = U^2 + V^2. Only sqrt, so exactly reproducible. */
static double student_t4(rng *r) {
    for (;;) {
        double u = 2 * rng_unit(r) - 1, v = 2 * rng_unit(r) - 1, w = u * u + v * v;
        if (w > 0 && w < 1) return u * sqrt(4.0 * (1.0 / sqrt(w) - 1.0) / w) * 0.70710678118654752;
    }
}

typedef struct gen {
    uint64_t seed;
    double base, sigma;
    int64_t cols;
    uint8_t in_axis;
    float *chan; /* per input channel multiplier, or NULL */
} gen;

static uint64_t tensor_seed(const kiln_tm_config *c, const char *name) { return mix64(fnv1a(name) ^ mix64(c->seed)); }

/* The model's outlier channels: the same few residual-stream dimensions in
 * every matrix that has outliers, as in trained transformers. */
#define TM_N_OUTLIER 4

static int outlier_channels(const kiln_tm_config *c, uint32_t *ch) {
    int n = c->hidden >= 4 * TM_N_OUTLIER ? TM_N_OUTLIER : 1;
    rng r;
    rng_seed(&r, mix64(c->seed) ^ 0x6f75746c69657273ull);
    for (int i = 0; i < n; i++) {
        uint32_t x;
        bool dup;
        do {
            x = (uint32_t)(rng_next(&r) % c->hidden);
            dup = false;
            for (int j = 0; j < i; j++) dup |= ch[j] == x;
        } while (dup);
        ch[i] = x;
    }
    return n;
}

/* Sets up the generator of tensor t; g->chan is malloc'd when the tensor
 * has outlier channels. Returns -1 only when out of memory. */
static int gen_init(const kiln_tm_config *c, const kiln_tm_tensor *t, gen *g) {
    memset(g, 0, sizeof *g);
    g->seed = tensor_seed(c, t->name);
    g->cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
    g->in_axis = t->in_axis;
    int64_t fan_in = t->n_dims == 2 ? t->shape[t->in_axis] : t->shape[0];
    switch (t->kind) {
    case KILN_TM_NORM: g->base = 1.0, g->sigma = 0.02; break;
    case KILN_TM_BIAS: g->sigma = 0.02; break;
    case KILN_TM_POS: g->sigma = 0.02; break;
    default: g->sigma = 1.0 / sqrt((double)fan_in);
    }
    /* about half of the eligible matrices, chosen by the tensor's own seed */
    if (!t->outliers || t->n_dims != 2 || !((g->seed >> 17) & 1)) return 0;
    if (!(g->chan = malloc((size_t)fan_in * sizeof *g->chan))) return -1;
    for (int64_t i = 0; i < fan_in; i++) g->chan[i] = 1.0f;
    uint32_t ch[TM_N_OUTLIER];
    int n = outlier_channels(c, ch);
    rng r;
    rng_seed(&r, g->seed ^ 0x5ca1e5ull);
    for (int i = 0; i < n; i++)
        if (ch[i] < fan_in) g->chan[ch[i]] = (float)(10.0 + 40.0 * rng_unit(&r));
    return 0;
}

/* Elements [from, to) of block `b`, into dst[0 .. to-from). The stream of a
 * block always starts at its first element, so a partial block costs the
 * skipped draws. */
static void gen_block(const gen *g, uint64_t b, uint64_t from, uint64_t to, float *dst) {
    rng r;
    rng_seed(&r, g->seed + (b + 1) * 0xd1b54a32d192ed03ull);
    uint64_t e0 = b * TM_BLOCK;
    for (uint64_t j = 0; j < to; j++) {
        double v = student_t4(&r) * g->sigma;
        if (j < from) continue;
        if (g->chan) {
            uint64_t e = e0 + j;
            v *= g->chan[g->in_axis ? e % (uint64_t)g->cols : e / (uint64_t)g->cols];
        }
        dst[j - from] = (float)(g->base + v);
    }
}

static void gen_range(const gen *g, uint64_t start, uint64_t n, float *dst) {
    if (!n) return;
    int64_t b0 = (int64_t)(start / TM_BLOCK), b1 = (int64_t)((start + n - 1) / TM_BLOCK);
#pragma omp parallel for schedule(static) if (b1 > b0)
    for (int64_t b = b0; b <= b1; b++) {
        uint64_t lo = (uint64_t)b * TM_BLOCK, hi = lo + TM_BLOCK;
        uint64_t from = start > lo ? start - lo : 0, to = start + n < hi ? start + n - lo : TM_BLOCK;
        gen_block(g, (uint64_t)b, from, to, dst + (lo + from - start));
    }
}

void kiln_tm_values(const kiln_tm_config *c, const kiln_tm_tensor *t, uint64_t start, uint64_t n, float *dst) {
    gen g;
    gen_init(c, t, &g); /* without memory for the channel table: the values sans outliers */
    gen_range(&g, start, n, dst);
    free(g.chan);
}

static uint64_t nelements(const kiln_tm_tensor *t) {
    return (uint64_t)t->shape[0] * (t->n_dims == 2 ? (uint64_t)t->shape[1] : 1);
}

/* ------------------------------------------------------------------ */
/* safetensors                                                         */

#define TM_BATCH (16 * TM_BLOCK) /* elements generated per write */

static int write_weights(const kiln_tm_config *c, const char *dir, const kiln_tm_tensor *t, size_t n,
                         const kiln_tm_opts *o, kiln_tm_summary *sum, kiln_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kiln_stw_opts wo = {.shard_size = c->shard_size};
    kiln_stw *w = kiln_stw_create(path, &wo, err);
    if (!w) return -1;
    float *f32 = malloc(TM_BATCH * sizeof *f32);
    uint16_t *h16 = malloc(TM_BATCH * sizeof *h16);
    gen g = {0};
    uint64_t total = 0, done = 0;
    if (!f32 || !h16) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        goto fail;
    }
    /* save_pretrained's metadata, which some loaders insist on */
    if (kiln_stw_metadata(w, "format", "pt", err)) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (kiln_stw_declare(w, t[i].name, c->dtype, t[i].n_dims, t[i].shape, err) < 0) goto fail;
        total += kiln_stw_nbytes(w, (int64_t)i);
        sum->n_params += nelements(&t[i]);
    }
    if (kiln_stw_begin(w, err)) goto fail;
    sum->n_files = kiln_stw_n_files(w);
    sum->n_tensors = n;
    sum->tensor_bytes = total;
    int64_t idx;
    int r;
    uint32_t esize = c->dtype == KILN_ST_F32 ? 4 : 2;
    while ((r = kiln_stw_next(w, &idx, err)) == 1) {
        const kiln_tm_tensor *tt = &t[idx];
        if (gen_init(c, tt, &g)) {
            kiln_fail(err, path, tt->name, -1, "out of memory");
            goto fail;
        }
        uint64_t nel = nelements(tt);
        for (uint64_t s = 0; s < nel; s += TM_BATCH) {
            uint64_t k = nel - s < TM_BATCH ? nel - s : TM_BATCH;
            gen_range(&g, s, k, f32);
            const void *src = f32;
            if (c->dtype == KILN_ST_BF16) kiln_fp32_to_bf16_row(f32, h16, (int64_t)k), src = h16;
            else if (c->dtype == KILN_ST_F16) kiln_fp32_to_fp16_row(f32, h16, (int64_t)k), src = h16;
            if (kiln_stw_write(w, src, k * esize, err)) goto fail;
            done += k * esize;
            if (o && o->progress) o->progress(o->progress_ud, done, total);
        }
        free(g.chan);
        g.chan = NULL;
    }
    if (r < 0) goto fail;
    free(f32);
    free(h16);
    return kiln_stw_finish(w, err);
fail:
    free(g.chan);
    free(f32);
    free(h16);
    kiln_stw_abort(w);
    return -1;
}

/* ------------------------------------------------------------------ */
/* tokenizer vocabularies                                              */

/* A set of strings (open addressing), to keep pieces unique. */
typedef struct strset {
    char **slot;
    size_t cap, n;
} strset;

static void strset_free(strset *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
    free(s->slot);
}

/* Returns 1 when added, 0 when already present, -1 out of memory. */
static int strset_add(strset *s, const char *str) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        char **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t j = fnv1a(s->slot[i]) & (cap - 1);
                while (slot[j]) j = (j + 1) & (cap - 1);
                slot[j] = s->slot[i];
            }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t j = fnv1a(str) & (s->cap - 1);
    for (; s->slot[j]; j = (j + 1) & (s->cap - 1))
        if (!strcmp(s->slot[j], str)) return 0;
    if (!(s->slot[j] = strdup(str))) return -1;
    s->n++;
    return 1;
}

/* Common English words first, so that small vocabularies look like real ones. */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "she", "other", "its", "may", "these", "about", "into", "than", "them", "only", "some",
    "time", "out", "two", "first", "new", "then", "could", "also", "what", "any", "like", "over", "such", "our",
    "most", "do", "after", "year", "many", "people", "state", "between", "world", "under", "through", "where",
    "each", "work", "well", "used", "model", "token", "layer", "weight", "value", "number", "system", "water",
    "house", "light", "small", "large", "great", "little", "long", "right", "place", "point", "hand", "part",
    "child", "life", "day", "way", "man", "woman", "city", "country", "school", "history", "music", "science",
    "kiln", "quant", "tensor", "matrix", "block", "scale", "hello", "language", "machine", "learning",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

/* Word k of an endless list: the words above, then two-, three-, ...
 * syllable words over 90 consonant-vowel syllables. */
static void word_at(uint64_t k, char *out) {
    if (k < N_WORDS) {
        strcpy(out, WORDS[k]);
        return;
    }
    static const char cons[] = "bcdfghjklmnprstvwz", vow[] = "aeiou";
    uint64_t j = k - N_WORDS, count = 90 * 90;
    int syl = 2;
    while (j >= count && syl < 8) {
        j -= count;
        count *= 90;
        syl++;
    }
    char *p = out;
    for (int i = 0; i < syl; i++, j /= 90) {
        *p++ = cons[(j % 90) / 5];
        *p++ = vow[(j % 90) % 5];
    }
    *p = 0;
}

/* Enumerates new vocabulary pieces: for each word, the prefixes (of two
 * characters or more) of MARKER+word and then of the bare word, each
 * obtainable by merging its last character onto the previous prefix, which
 * is what both SentencePiece-BPE and byte-level BPE need to reach them. */
typedef struct piece_gen {
    strset seen;
    const char *marker;
    uint64_t word;
    int form;       /* 0: marker + word, 1: bare word */
    char buf[64];   /* the current form */
    size_t len, at; /* its length, and the end of the next prefix to try */
} piece_gen;

static void piece_gen_load(piece_gen *g) {
    char w[32];
    word_at(g->word, w);
    snprintf(g->buf, sizeof g->buf, "%s%s", g->form == 0 ? g->marker : "", w);
    g->len = strlen(g->buf);
    /* the first prefix has two characters; the marker is one multi-byte one */
    g->at = g->form == 0 ? strlen(g->marker) + 1 : 2;
}

/* Copies the next new piece into out (NUL-terminated) and its left part's
 * byte length into *split. Returns 0, or -1 when out of memory. */
static int piece_next(piece_gen *g, char *out, size_t *split) {
    for (;;) {
        while (g->at > g->len) {
            if (g->form == 1) g->word++;
            g->form ^= 1;
            piece_gen_load(g);
        }
        size_t at = g->at++;
        memcpy(out, g->buf, at);
        out[at] = 0;
        int r = strset_add(&g->seen, out);
        if (r < 0) return -1;
        if (r == 1) {
            *split = at - 1;
            return 0;
        }
    }
}

static void piece_gen_init(piece_gen *g, const char *marker) {
    memset(g, 0, sizeof *g);
    g->marker = marker;
    piece_gen_load(g);
}

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define BPE_SPACE "\xc4\xa0"     /* U+0120, GPT-2's byte-level space */

/* Single characters, Llama-style at the end of the vocabulary. */
static const char *const SPM_SINGLES[] = {
    SPM_SPACE, "e", "t", "a", "o", "i", "n", "s", "r", "h", "l", "d", "c", "u", "m", "f", "p", "g", "w", "y",
    "b", ",", ".", "v", "k", "-", "x", "'", "j", "q", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "T", "S", "A", "I", "C", "M", "P", "B", "D", "H", "R", "E", "F", "L", "W", "N", "G", "O", "!", "?", ":",
};
#define N_SPM_SINGLES (sizeof SPM_SINGLES / sizeof SPM_SINGLES[0])

/* tokenizer.model: <unk> <s> </s>, the 256 byte pieces, word pieces scored
 * by rank as spm_train's BPE does, then single characters. */
static int write_spm(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    size_t n = c->vocab, n_single = (n - 259) / 4 < N_SPM_SINGLES ? (n - 259) / 4 : N_SPM_SINGLES;
    size_t n_word = n - 259 - n_single;
    kiln_spm_piece *p = calloc(n, sizeof *p);
    char *bytes = malloc(256 * 8), *words = malloc(n_word * 64 + 1);
    piece_gen g;
    piece_gen_init(&g, SPM_SPACE);
    int rc = -1;
    if (!p || !bytes || !words) {
        kiln_fail(err, dir, "tokenizer.model", -1, "out of memory");
        goto done;
    }
    p[0] = (kiln_spm_piece){"<unk>", 0, KILN_SPM_UNKNOWN};
    p[1] = (kiln_spm_piece){"<s>", 0, KILN_SPM_CONTROL};
    p[2] = (kiln_spm_piece){"</s>", 0, KILN_SPM_CONTROL};
    for (int b = 0; b < 256; b++) {
        snprintf(bytes + 8 * b, 8, "<0x%02X>", b);
        p[3 + b] = (kiln_spm_piece){bytes + 8 * b, 0, KILN_SPM_BYTE};
    }
    for (size_t i = 0; i < n_word; i++) {
        size_t split;
        if (piece_next(&g, words + 64 * i, &split)) {
            kiln_fail(err, dir, "tokenizer.model", -1, "out of memory");
            goto done;
        }
        p[259 + i] = (kiln_spm_piece){words + 64 * i, -(float)i, KILN_SPM_NORMAL};
    }
    for (size_t i = 0; i < n_single; i++)
        p[259 + n_word + i] = (kiln_spm_piece){SPM_SINGLES[i], -(float)(n_word + i), KILN_SPM_NORMAL};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    rc = kiln_spm_write(path, p, n, err);
done:
    strset_free(&g.seen);
    free(p);
    free(bytes);
    free(words);
    return rc;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * others map to U+0100 and up, in byte order. Vocabulary id i is the i-th
 * byte of the list that puts the printable ones first. */
static bool byte_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae); }

static void byte_level_token(int id, char out[4]) {
    int b = -1, cp;
    if (id < 188) { /* the printable ones, ascending */
        for (int x = 0, k = 0; x < 256; x++)
            if (byte_printable(x) && k++ == id) b = x;
        cp = b;
    } else {
        cp = 256 + (id - 188);
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

static json_t *added_token(int id, const char *content, bool normalized) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "content", json_string(content));
    json_object_set_new(o, "single_word", json_false());
    json_object_set_new(o, "lstrip", json_false());
    json_object_set_new(o, "rstrip", json_false());
    json_object_set_new(o, "normalized", json_boolean(normalized));
    json_object_set_new(o, "special", json_true());
    return o;
}

static json_t *byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", add_prefix_space,
                     "trim_offsets", trim_offsets, "use_regex", use_regex);
}

/* Qwen2's pre-tokenizer split, as in its tokenizer.json. */
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

static const char *const QWEN_ADDED[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

static int write_json(const char *dir, const char *name, json_t *root, size_t flags, kiln_err *err);

/* tokenizer.json (with vocab.json and merges.txt, as the fixture has): the
 * 256 byte tokens, then one token per merge, then the special tokens. */
static int write_bpe(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    bool gpt2 = ARCH[c->arch].tok == TOK_GPT2;
    size_t n_added = gpt2 ? 1 : 3, n_model = c->vocab - (gpt2 ? 0 : n_added), n_merge = c->vocab - 256 - n_added;
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    char *mtxt = malloc(n_merge * 80 + 32);
    size_t mlen = 0;
    piece_gen g;
    piece_gen_init(&g, BPE_SPACE);
    int rc = -1;
    if (!vocab || !merges || !added || !mtxt) {
        kiln_fail(err, dir, "tokenizer.json", -1, "out of memory");
        goto done;
    }
    mlen = (size_t)sprintf(mtxt, "#version: 0.2\n");
    for (int id = 0; id < 256; id++) {
        char tok[4];
        byte_level_token(id, tok);
        json_object_set_new(vocab, tok, json_integer(id));
    }
    for (size_t i = 0; i < n_merge; i++) {
        char piece[64], m[80];
        size_t split;
        if (piece_next(&g, piece, &split)) {
            kiln_fail(err, dir, "tokenizer.json", -1, "out of memory");
            goto done;
        }
        snprintf(m, sizeof m, "%.*s %s", (int)split, piece, piece + split);
        json_array_append_new(merges, json_string(m));
        mlen += (size_t)sprintf(mtxt + mlen, "%s\n", m);
        json_object_set_new(vocab, piece, json_integer((json_int_t)(256 + i)));
    }
    for (size_t i = 0; i < n_added; i++) {
        int id = (int)(256 + n_merge + i);
        const char *content = gpt2 ? "<|endoftext|>" : QWEN_ADDED[i];
        json_array_append_new(added, added_token(id, content, gpt2));
        if (gpt2) json_object_set_new(vocab, content, json_integer(id)); /* GPT-2 keeps it in the model vocab */
    }
    if (json_object_size(vocab) != n_model) {
        kiln_fail(err, dir, "tokenizer.json", -1, "vocabulary has %zu tokens, expected %zu", json_object_size(vocab),
                  n_model);
        goto done;
    }
    json_t *pre, *post, *dec;
    if (gpt2) {
        pre = byte_level(false, true, true);
        post = byte_level(true, false, true);
        dec = byte_level(true, true, true);
    } else {
        json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", QWEN2_REGEX,
                                  "behavior", "Isolated", "invert", 0);
        pre = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split, byte_level(false, false, false));
        post = byte_level(false, false, false);
        dec = byte_level(false, false, false);
    }
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:O, s:O}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *root = json_pack("{s:s, s:n, s:n, s:O, s:n, s:o, s:o, s:o, s:o}", "version", "1.0", "truncation",
                             "padding", "added_tokens", added, "normalizer", "pre_tokenizer", pre, "post_processor",
                             post, "decoder", dec, "model", model);
    if (!pre || !post || !dec || !model || !root) {
        json_decref(root);
        kiln_fail(err, dir, "tokenizer.json", -1, "cannot build the JSON");
        goto done;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if (write_json(dir, "tokenizer.json", root, JSON_INDENT(2), err) ||
        write_json(dir, "vocab.json", json_incref(vocab), JSON_INDENT(2) | JSON_SORT_KEYS, err) ||
        kiln_write_file_atomic(path, mtxt, mlen, err))
        goto done;
    rc = 0;
done:
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    strset_free(&g.seen);
    free(mtxt);
    return rc;
}

/* ------------------------------------------------------------------ */
/* config and tokenizer JSON                                           */

static const char *torch_dtype(kiln_st_dtype d) {
    return d == KILN_ST_BF16 ? "bfloat16" : d == KILN_ST_F16 ? "float16" : "float32";
}

/* save_pretrained's layout: sorted keys, indent 2, final newline. Steals
 * `root`. */
static int write_json(const char *dir, const char *name, json_t *root, size_t flags, kiln_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *s = root ? json_dumps(root, flags | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(root);
    if (!s) return kiln_fail(err, path, NULL, -1, "cannot build the JSON");
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return kiln_fail(err, path, NULL, -1, "out of memory");
    }
    t[n] = '\n';
    int rc = kiln_write_file_atomic(path, t, n + 1, err);
    free(t);
    return rc;
}

#define SET(o, k, v) json_object_set_new(o, k, v)

static void bos_eos(const kiln_tm_config *c, int *bos, int *eos) {
    switch (ARCH[c->arch].tok) {
    case TOK_SPM: *bos = 1, *eos = 2; break;
    case TOK_QWEN: *bos = *eos = (int)c->vocab - 3; break;
    default: *bos = *eos = (int)c->vocab - 1;
    }
}

static json_t *config_gpt2(const kiln_tm_config *c, int bos, int eos) {
    json_t *o = json_object();
    SET(o, "activation_function", json_string("gelu_new"));
    SET(o, "architectures", json_pack("[s]", ARCH[c->arch].cls));
    SET(o, "attn_pdrop", json_real(0.1));
    SET(o, "bos_token_id", json_integer(bos));
    SET(o, "embd_pdrop", json_real(0.1));
    SET(o, "eos_token_id", json_integer(eos));
    SET(o, "initializer_range", json_real(0.02));
    SET(o, "layer_norm_epsilon", json_real(ARCH[c->arch].norm_eps));
    SET(o, "model_type", json_string("gpt2"));
    SET(o, "n_ctx", json_integer(c->ctx));
    SET(o, "n_embd", json_integer(c->hidden));
    SET(o, "n_head", json_integer(c->heads));
    SET(o, "n_inner", json_integer(c->ffn));
    SET(o, "n_layer", json_integer(c->layers));
    SET(o, "n_positions", json_integer(c->ctx));
    SET(o, "reorder_and_upcast_attn", json_false());
    SET(o, "resid_pdrop", json_real(0.1));
    SET(o, "scale_attn_by_inverse_layer_idx", json_false());
    SET(o, "scale_attn_weights", json_true());
    SET(o, "summary_activation", json_null());
    SET(o, "summary_first_dropout", json_real(0.1));
    SET(o, "summary_proj_to_labels", json_true());
    SET(o, "summary_type", json_string("cls_index"));
    SET(o, "summary_use_proj", json_true());
    return o;
}

static json_t *config_decoder(const kiln_tm_config *c, int bos, int eos) {
    const arch_info *a = &ARCH[c->arch];
    bool qwen = a->tok == TOK_QWEN, qwen3 = a->qk_norm;
    json_t *o = json_object();
    SET(o, "architectures", json_pack("[s]", a->cls));
    SET(o, "attention_dropout", json_real(0.0));
    SET(o, "bos_token_id", json_integer(bos));
    SET(o, "eos_token_id", json_integer(eos));
    SET(o, "hidden_act", json_string("silu"));
    SET(o, "hidden_size", json_integer(c->hidden));
    SET(o, "initializer_range", json_real(0.02));
    SET(o, "intermediate_size", json_integer(a->moe == MOE_QWEN2 || a->moe == MOE_QWEN3
                                                 ? (json_int_t)c->ffn * c->experts_used : c->ffn));
    SET(o, "max_position_embeddings", json_integer(c->ctx));
    SET(o, "model_type", json_string(a->model_type));
    SET(o, "num_attention_heads", json_integer(c->heads));
    SET(o, "num_hidden_layers", json_integer(c->layers));
    SET(o, "num_key_value_heads", json_integer(c->kv_heads));
    SET(o, "rms_norm_eps", json_real(a->norm_eps));
    SET(o, "rope_theta", json_real(a->rope_theta));
    if (c->arch == KILN_TM_LLAMA || qwen) SET(o, "rope_scaling", json_null());
    if (!qwen || qwen3) SET(o, "head_dim", json_integer(c->hidden / c->heads));
    if (c->arch == KILN_TM_LLAMA) {
        SET(o, "attention_bias", json_false());
        SET(o, "mlp_bias", json_false());
        SET(o, "pretraining_tp", json_integer(1));
    }
    if (c->arch == KILN_TM_MISTRAL || c->arch == KILN_TM_MIXTRAL) SET(o, "sliding_window", json_null());
    if (qwen) {
        SET(o, "max_window_layers", json_integer(c->layers));
        SET(o, "sliding_window", qwen3 ? json_null() : json_integer(c->ctx));
        SET(o, "use_sliding_window", json_false());
    }
    if (qwen3) SET(o, "attention_bias", json_false());
    if (a->moe == MOE_MIXTRAL) {
        SET(o, "num_local_experts", json_integer(c->experts));
        SET(o, "num_experts_per_tok", json_integer(c->experts_used));
        SET(o, "output_router_logits", json_false());
        SET(o, "router_aux_loss_coef", json_real(0.02));
        SET(o, "router_jitter_noise", json_real(0.0));
    }
    if (a->moe == MOE_QWEN2 || a->moe == MOE_QWEN3) {
        SET(o, "decoder_sparse_step", json_integer(1));
        SET(o, "mlp_only_layers", json_array());
        SET(o, "moe_intermediate_size", json_integer(c->ffn));
        SET(o, "norm_topk_prob", json_boolean(a->moe == MOE_QWEN3));
        SET(o, "num_experts", json_integer(c->experts));
        SET(o, "num_experts_per_tok", json_integer(c->experts_used));
        SET(o, "output_router_logits", json_false());
        SET(o, "router_aux_loss_coef", json_real(0.001));
        if (a->moe == MOE_QWEN2)
            SET(o, "shared_expert_intermediate_size", json_integer((json_int_t)c->ffn * c->experts_used));
    }
    return o;
}

static int write_configs(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    int bos, eos;
    bos_eos(c, &bos, &eos);
    json_t *o = c->arch == KILN_TM_GPT2 ? config_gpt2(c, bos, eos) : config_decoder(c, bos, eos);
    if (!o) return kiln_fail(err, dir, "config.json", -1, "out of memory");
    SET(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    SET(o, "torch_dtype", json_string(torch_dtype(c->dtype)));
    SET(o, "transformers_version", json_string(ARCH[c->arch].hf_version));
    SET(o, "use_cache", json_true());
    SET(o, "vocab_size", json_integer(c->vocab));
    json_t *gen = json_pack("{s:b, s:i, s:i, s:s}", "_from_model_config", 1, "bos_token_id", bos, "eos_token_id", eos,
                            "transformers_version", ARCH[c->arch].hf_version);
    int flags = JSON_INDENT(2) | JSON_SORT_KEYS;
    if (write_json(dir, "generation_config.json", gen, flags, err)) return json_decref(o), -1;
    return write_json(dir, "config.json", o, flags, err);
}

/* {content, lstrip, normalized, rstrip, single_word[, special]} as in
 * special_tokens_map.json and tokenizer_config.json */
static json_t *token_obj(const char *content, bool normalized, bool special) {
    json_t *o = json_pack("{s:s, s:b, s:b, s:b, s:b}", "content", content, "lstrip", 0, "normalized", normalized,
                          "rstrip", 0, "single_word", 0);
    if (o && special) SET(o, "special", json_true());
    return o;
}

static const char LLAMA_TEMPLATE[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + "
    "eos_token }}{% else %}{{ message['content'] + '\\n' }}{% endif %}{% endfor %}";

static const char QWEN_TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int write_tokenizer_configs(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    int tok = ARCH[c->arch].tok, flags = JSON_INDENT(2) | JSON_SORT_KEYS;
    json_t *cfg = json_object(), *dec = json_object(), *map = json_object();
    char id[16];
    SET(cfg, "added_tokens_decoder", dec);
    SET(cfg, "clean_up_tokenization_spaces", json_boolean(tok == TOK_GPT2));
    SET(cfg, "model_max_length", json_integer(c->ctx));
    if (tok == TOK_SPM) {
        static const char *const sp[3] = {"<unk>", "<s>", "</s>"};
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%d", i);
            SET(dec, id, token_obj(sp[i], false, true));
        }
        SET(cfg, "add_bos_token", json_true());
        SET(cfg, "add_eos_token", json_false());
        SET(cfg, "bos_token", json_string("<s>"));
        SET(cfg, "chat_template", json_string(LLAMA_TEMPLATE));
        SET(cfg, "eos_token", json_string("</s>"));
        SET(cfg, "legacy", json_true());
        SET(cfg, "pad_token", json_null());
        SET(cfg, "padding_side", json_string("right"));
        SET(cfg, "sp_model_kwargs", json_object());
        SET(cfg, "spaces_between_special_tokens", json_false());
        SET(cfg, "tokenizer_class", json_string("LlamaTokenizer"));
        SET(cfg, "unk_token", json_string("<unk>"));
        SET(cfg, "use_default_system_prompt", json_false());
        SET(map, "bos_token", token_obj("<s>", false, false));
        SET(map, "eos_token", token_obj("</s>", false, false));
        SET(map, "unk_token", token_obj("<unk>", false, false));
    } else if (tok == TOK_QWEN) {
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%u", c->vocab - 3 + i);
            SET(dec, id, token_obj(QWEN_ADDED[i], false, true));
        }
        SET(cfg, "add_bos_token", json_false());
        SET(cfg, "add_prefix_space", json_false());
        SET(cfg, "additional_special_tokens", json_pack("[s, s]", QWEN_ADDED[1], QWEN_ADDED[2]));
        SET(cfg, "bos_token", json_null());
        SET(cfg, "chat_template", json_string(QWEN_TEMPLATE));
        SET(cfg, "eos_token", json_string(QWEN_ADDED[0]));
        SET(cfg, "errors", json_string("replace"));
        SET(cfg, "pad_token", json_string(QWEN_ADDED[0]));
        SET(cfg, "split_special_tokens", json_false());
        SET(cfg, "tokenizer_class", json_string("Qwen2Tokenizer"));
        SET(cfg, "unk_token", json_null());
        SET(map, "additional_special_tokens", json_pack("[s, s]", QWEN_ADDED[1], QWEN_ADDED[2]));
        SET(map, "eos_token", token_obj(QWEN_ADDED[0], false, false));
        SET(map, "pad_token", token_obj(QWEN_ADDED[0], false, false));
    } else {
        const char *eot = "<|endoftext|>";
        snprintf(id, sizeof id, "%u", c->vocab - 1);
        SET(dec, id, token_obj(eot, true, true));
        SET(cfg, "add_bos_token", json_false());
        SET(cfg, "add_prefix_space", json_false());
        SET(cfg, "bos_token", json_string(eot));
        SET(cfg, "eos_token", json_string(eot));
        SET(cfg, "errors", json_string("replace"));
        SET(cfg, "pad_token", json_null());
        SET(cfg, "tokenizer_class", json_string("GPT2Tokenizer"));
        SET(cfg, "unk_token", json_string(eot));
        SET(map, "bos_token", token_obj(eot, true, false));
        SET(map, "eos_token", token_obj(eot, true, false));
        SET(map, "unk_token", token_obj(eot, true, false));
    }
    if (write_json(dir, "tokenizer_config.json", cfg, flags, err)) return json_decref(map), -1;
    return write_json(dir, "special_tokens_map.json", map, flags, err);
}

/* ------------------------------------------------------------------ */
/* the directory                                                       */

/* Files a model directory written here may hold; anything else is left alone. */
static bool is_model_file(const char *n) {
    static const char *const known[] = {
        "config.json", "generation_config.json", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(n, known[i])) return true;
    size_t len = strlen(n);
    return len > 12 && !strcmp(n + len - 12, ".safetensors");
}

/* Finds the first model file in dir (into `found`); 1 if any, 0 if none, -1 on error. */
static int find_model_file(const char *dir, char *found, size_t cap, kiln_err *err) {
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(err, dir, NULL, -1, "cannot list: %s", strerror(errno));
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d)))
        if (is_model_file(e->d_name)) {
            snprintf(found, cap, "%s", e->d_name);
            r = 1;
            break;
        }
    closedir(d);
    return r;
}

/* "model-00002-of-00005.safetensors": sets *i and *k */
static bool is_shard_name(const char *n, unsigned *i, unsigned *k) {
    if (strlen(n) != 32 || strncmp(n, "model-", 6) || strncmp(n + 11, "-of-", 4) || strcmp(n + 20, ".safetensors"))
        return false;
    for (int p = 6; p < 20; p++)
        if ((p < 11 || p >= 15) && (n[p] < '0' || n[p] > '9')) return false;
    *i = (unsigned)atoi(n + 6);
    *k = (unsigned)atoi(n + 15);
    return true;
}

/* After an overwrite: removes the old model's files the new one did not
 * write (other shard counts, the other tokenizer kind). */
static int remove_stale(const kiln_tm_config *c, const char *dir, uint32_t n_files, kiln_err *err) {
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(err, dir, NULL, -1, "cannot list: %s", strerror(errno));
    bool spm = ARCH[c->arch].tok == TOK_SPM;
    char path[4096];
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        unsigned i, k;
        bool stale = false;
        if (!strcmp(n, "model.safetensors")) stale = n_files > 1;
        else if (!strcmp(n, "model.safetensors.index.json")) stale = n_files == 1;
        else if (is_shard_name(n, &i, &k)) stale = k != n_files || i < 1 || i > n_files;
        else if (!strcmp(n, "tokenizer.model")) stale = !spm;
        else if (!strcmp(n, "tokenizer.json") || !strcmp(n, "vocab.json") || !strcmp(n, "merges.txt")) stale = spm;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (stale && unlink(path) != 0) rc = kiln_fail(err, path, NULL, -1, "cannot remove stale file: %s", strerror(errno));
    }
    closedir(d);
    return rc;
}

int kiln_tm_write(const kiln_tm_config *c, const char *dir, const kiln_tm_opts *opts, kiln_tm_summary *sum,
                  kiln_err *err) {
    kiln_tm_summary local;
    if (!sum) sum = &local;
    memset(sum, 0, sizeof *sum);
    if (kiln_tm_check(c, err)) return -1;
    if (strlen(dir) > 3000) return kiln_fail(err, dir, NULL, -1, "path too long");
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0755) != 0)
            return kiln_fail(err, dir, NULL, -1, "cannot create directory: %s", strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return kiln_fail(err, dir, NULL, -1, "exists and is not a directory");
    } else {
        char found[256];
        int r = find_model_file(dir, found, sizeof found, err);
        if (r < 0) return -1;
        if (r > 0 && !(opts && opts->force))
            return kiln_fail(err, dir, NULL, -1, "already holds a model (%s); use --force to overwrite it", found);
    }
    kiln_tm_tensor *t;
    size_t n;
    if (kiln_tm_plan(c, &t, &n, err)) return -1;
    int rc = write_weights(c, dir, t, n, opts, sum, err);
    free(t);
    if (rc) return -1;
    if (remove_stale(c, dir, sum->n_files, err)) return -1;
    if (ARCH[c->arch].tok == TOK_SPM ? write_spm(c, dir, err) : write_bpe(c, dir, err)) return -1;
    if (write_tokenizer_configs(c, dir, err)) return -1;
    return write_configs(c, dir, err);
}
