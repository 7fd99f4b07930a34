/* convert/plan.c - building the tensor plan (see plan.h).
 *
 * Source tensors are visited in stlist order, exactly as
 * convert_hf_to_gguf.py visits them, so the GGUF comes out in llama.cpp's
 * order: a generated rope_freqs first, then the outputs an architecture
 * plans itself (DeepSeek-V4's hash tables and stacked FP4 experts:
 * plan_first), then an MXFP4 checkpoint's expert pairs (gpt-oss: _blocks +
 * _scales, kept MXFP4), then each tensor as it
 * is met, and a block's stacked expert tensors at the point where its
 * last expert matrix is met. Types follow llama.cpp: 1-D tensors, norms, biases and a
 * few special matrices are F32; everything else gets the outtype, with
 * Q8_0 falling back to F16 for rows that are not a multiple of 32. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/types.h"
#include "f8.h"
#include "json.h"
#include "mxfp4_hf.h"
#include "rope.h"

#define MAX_KINDS 8

typedef struct builder {
    const cv_arch *a;
    json_t *config;
    const cv_hp *hp;
    const cv_stlist *st;
    cv_plan *p;
    kiln_err *err;
    bool fp8;
    bool mxfp4;          /* experts as HF MXFP4 _blocks + _scales */
    int64_t *scale_of;   /* per source tensor: its weight_scale_inv, or -1 */
    bool *aux;           /* per source tensor: consumed by another (scales) */
    int64_t *per_block;  /* tensors seen per block */
    const cv_tmap *kinds[MAX_KINDS];
    int n_kinds;
    int64_t n_exp;
    int64_t *slots;      /* per block: n_kinds * n_exp source indices */
    int64_t *filled;     /* per block */
    uint64_t cap;
} builder;

static const char *const OUTTYPE_NAMES[] = {"auto", "f32", "f16", "bf16", "q8_0", "tq1_0", "tq2_0"};

int cv_outtype_parse(const char *s) {
    for (int i = 0; i < (int)(sizeof OUTTYPE_NAMES / sizeof OUTTYPE_NAMES[0]); i++)
        if (!strcasecmp(s, OUTTYPE_NAMES[i])) return i;
    return -1;
}

const char *cv_outtype_name(cv_outtype t) { return OUTTYPE_NAMES[t]; }

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static bool dtype_ok(kiln_st_dtype d) {
    return d == KILN_ST_F32 || d == KILN_ST_F16 || d == KILN_ST_BF16 || d == KILN_ST_F64 || d == KILN_ST_F8_E4M3 ||
           d == KILN_ST_F8_E5M2;
}

/* --outtype auto: the first matrix in BF16 or F16 decides, as in
 * llama.cpp; an FP8 model becomes BF16 and an all-F32 model stays F32. */
static cv_outtype resolve_auto(const builder *b) {
    bool f8 = false;
    for (uint64_t i = 0; i < b->st->n; i++) {
        const kiln_st_tensor *t = &b->st->t[i];
        if (b->aux[i] || t->n_dims < 2) continue;
        if (t->dtype == KILN_ST_BF16) return CV_OUT_BF16;
        if (t->dtype == KILN_ST_F16) return CV_OUT_F16;
        f8 |= t->dtype == KILN_ST_F8_E4M3 || t->dtype == KILN_ST_F8_E5M2;
    }
    return f8 ? CV_OUT_BF16 : CV_OUT_F32;
}

static uint32_t file_type_of(cv_outtype t) {
    switch (t) {
    case CV_OUT_F16: return 1;
    case CV_OUT_BF16: return 32;
    case CV_OUT_Q8_0: return 7;
    case CV_OUT_TQ1_0: return 36;
    case CV_OUT_TQ2_0: return 37;
    default: return 0;
    }
}

/* Marks FP8 side tensors: X.weight_scale_inv belongs to X.weight, and
 * activation scales are dropped, as llama.cpp's dequant_model does. */
static int find_aux(builder *b) {
    for (uint64_t i = 0; i < b->st->n; i++) {
        b->scale_of[i] = -1;
        /* MXFP4 pairs are planned by add_mxfp4(), before the rest */
        if (b->mxfp4 && (ends_with(b->st->t[i].name, "_blocks") || ends_with(b->st->t[i].name, "_scales")))
            b->aux[i] = true;
    }
    if (!b->fp8) return 0;
    for (uint64_t i = 0; i < b->st->n; i++) {
        const char *n = b->st->t[i].name;
        if (ends_with(n, ".activation_scale") || ends_with(n, "_activation_scale")) {
            b->aux[i] = true;
        } else if (ends_with(n, ".scale")) {
            /* DeepSeek-V4: X.scale (E8M0 block scales) beside an F8 X.weight; the
             * scales of FP4 experts are taken by the arch's plan_first */
            char w[512];
            snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(n) - strlen(".scale")), n);
            int64_t wi = cv_stlist_find(b->st, w);
            if (wi < 0 || b->st->t[wi].dtype != KILN_ST_F8_E4M3) continue;
            b->aux[i] = true;
            b->scale_of[wi] = (int64_t)i;
        } else if (ends_with(n, "_scale_inv")) {
            char w[512];
            snprintf(w, sizeof w, "%.*s", (int)(strlen(n) - strlen("_scale_inv")), n);
            int64_t wi = cv_stlist_find(b->st, w);
            if (wi < 0)
                return kiln_fail(b->err, "config.json", n, -1, "scale tensor without its weight '%s'", w);
            b->aux[i] = true;
            b->scale_of[wi] = (int64_t)i;
        }
    }
    return 0;
}

static const char *dim_key(int d) {
    static const char *const keys[CV_D_COUNT] = {
        [CV_D_VOCAB] = "vocab_size", [CV_D_EMBD] = "hidden_size", [CV_D_FF] = "intermediate_size",
        [CV_D_Q] = "num_attention_heads", [CV_D_KV] = "num_key_value_heads", [CV_D_HEAD] = "head_dim",
        [CV_D_NEXP] = "num_local_experts", [CV_D_FF_EXP] = "moe_intermediate_size",
        [CV_D_FF_SHEXP] = "shared_expert_intermediate_size", [CV_D_POS] = "n_positions", [CV_D_QKV] = "hidden_size",
        [CV_D_HEADS] = "num_attention_heads",
    };
    return keys[d] ? keys[d] : "?";
}

static void fmt_shape(char *buf, size_t cap, const int64_t *s, uint32_t n) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < n && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (off < cap) snprintf(buf + off, cap - off, "]");
}

/* The symbolic HF shape a tensor matching `m` must have. */
static uint32_t expected_dims(const cv_tmap *m, bool bias, uint8_t dims[3]) {
    uint32_t n = 0;
    while (n < 3 && m->shape[n]) n++;
    memcpy(dims, m->shape, 3);
    if (bias && (m->flags & CV_T_MXFP4)) {
        n = 2; /* an expert bias: [n_exp, rows] */
    } else if (bias && n > 1) {
        dims[0] = (m->flags & CV_T_CONV1D) ? m->shape[1] : m->shape[0];
        n = 1;
    }
    return n;
}

static int check_shape(const builder *b, const cv_tmap *m, bool bias, const kiln_st_tensor *t) {
    uint8_t dims[3];
    uint32_t n = expected_dims(m, bias, dims);
    int64_t want[3];
    for (uint32_t i = 0; i < n; i++) {
        if (dims[i] == CV_D_ANY) { /* checked by the arch's plan_first */
            want[i] = i < t->n_dims ? t->shape[i] : 0;
            continue;
        }
        if (!b->hp->dim[dims[i]])
            return kiln_fail(b->err, "config.json", dim_key(dims[i]), -1, "missing: needed to check tensor %s",
                             t->name);
        want[i] = b->hp->dim[dims[i]];
    }
    int bad = t->n_dims == n ? -1 : 0;
    for (uint32_t i = 0; bad < 0 && i < n; i++)
        if (t->shape[i] != want[i]) bad = (int)i;
    if (bad < 0) return 0;
    char got_s[96], want_s[96];
    fmt_shape(got_s, sizeof got_s, t->shape, t->n_dims);
    fmt_shape(want_s, sizeof want_s, want, n);
    uint8_t d = dims[bad];
    return kiln_fail(b->err, "config.json", b->hp->dim_key[d], -1,
                     "%lld disagrees with tensor %s: its shape is %s, config.json implies %s",
                     (long long)b->hp->dim[d], t->name, got_s, want_s);
}

/* The F8 scale of tensor `w` must cover it block by block. */
static int check_scale(const builder *b, const kiln_st_tensor *w, const kiln_st_tensor *s) {
    if (s->dtype != KILN_ST_F32 && s->dtype != KILN_ST_BF16 && s->dtype != KILN_ST_F16 && s->dtype != KILN_ST_F8_E8M0)
        return kiln_fail(b->err, s->name, "dtype", -1, "scale tensors must be F32, BF16, F16 or F8_E8M0, not %s",
                         kiln_st_dtype_name(s->dtype));
    if (b->p->block[0] > 0 && w->n_dims == 2) {
        int64_t r = (w->shape[0] + b->p->block[0] - 1) / b->p->block[0];
        int64_t c = (w->shape[1] + b->p->block[1] - 1) / b->p->block[1];
        if (s->n_dims == 2 && s->shape[0] == r && s->shape[1] == c) return 0;
        return kiln_fail(b->err, s->name, "shape", -1, "expected [%lld, %lld] block scales for %s (block %lldx%lld)",
                         (long long)r, (long long)c, w->name, (long long)b->p->block[0], (long long)b->p->block[1]);
    }
    if (s->nelements == 1 || (w->n_dims >= 1 && s->nelements == w->shape[0])) return 0;
    return kiln_fail(b->err, s->name, "shape", -1, "has %lld values; expected 1 or one per row of %s",
                     (long long)s->nelements, w->name);
}

/* llama.cpp's rule for tensors that stay F32 (prepare_tensors). */
static bool f32_rule(const char *name, uint32_t n_dims, uint16_t flags) {
    return n_dims <= 1 || ends_with(name, "_norm.weight") || (flags & CV_T_F32) || !ends_with(name, ".weight");
}

/* llama.cpp's choice of tensor type. */
static uint32_t pick_type(const builder *b, const char *name, uint32_t n_dims, int64_t ne0, uint16_t flags) {
    if (f32_rule(name, n_dims, flags)) return KILN_F32;
    switch (b->p->outtype) {
    case CV_OUT_F16: return KILN_F16;
    case CV_OUT_BF16: return KILN_BF16;
    case CV_OUT_Q8_0: return ne0 % 32 == 0 ? KILN_Q8_0 : KILN_F16; /* gguf-py's QuantError fallback */
    case CV_OUT_TQ1_0:
    case CV_OUT_TQ2_0:
        /* the embeddings and output stay F16 (llama.cpp's "TODO: use Q4_K
         * and Q6_K"), rows that are not whole 256-blocks fall back to F16 */
        if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight") || ne0 % 256) return KILN_F16;
        return b->p->outtype == CV_OUT_TQ1_0 ? KILN_TQ1_0 : KILN_TQ2_0;
    default: return KILN_F32;
    }
}

static char *expand_name(const char *pattern, int64_t bid, bool bias) {
    char buf[256];
    size_t off = 0;
    for (const char *p = pattern; *p && off < sizeof buf - 32;) {
        if (!strncmp(p, "{bid}", 5)) {
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%lld", (long long)bid);
            p += 5;
        } else {
            buf[off++] = *p++;
        }
    }
    snprintf(buf + off, sizeof buf - off, "%s", bias ? ".bias" : ".weight");
    return strdup(buf);
}

static cv_out *new_out(builder *b) {
    if (b->p->n == b->cap) {
        uint64_t cap = b->cap ? b->cap * 2 : 64;
        cv_out *t = realloc(b->p->t, cap * sizeof *t);
        if (!t) return NULL;
        b->p->t = t;
        b->cap = cap;
    }
    cv_out *o = &b->p->t[b->p->n++];
    memset(o, 0, sizeof *o);
    return o;
}

/* Adds an output whose HF-order shape is hf[0..nd). */
static int add_out(builder *b, char *name, const int64_t *hf, uint32_t nd, uint16_t flags, uint8_t xform,
                   cv_part *parts, uint32_t n_parts, const char *hf_name) {
    cv_out *o = name ? new_out(b) : NULL;
    if (!o) {
        free(name);
        free(parts);
        return kiln_fail(b->err, hf_name, NULL, -1, "out of memory");
    }
    o->name = name;
    o->hf_name = hf_name;
    o->parts = parts;
    o->n_parts = n_parts;
    o->xform = xform;
    o->n_dims = nd;
    o->nelements = 1;
    for (uint32_t i = 0; i < 4; i++) o->ne[i] = i < nd ? hf[nd - 1 - i] : 1;
    for (uint32_t i = 0; i < nd; i++) o->nelements *= hf[i];
    o->dtype = parts ? b->st->t[parts[0].st].dtype : KILN_ST_F32;
    o->type = pick_type(b, name, nd, o->ne[0], flags);
    o->f32_rule = f32_rule(name, nd, flags);
    int forced = parts && b->a->tensor_type ? b->a->tensor_type(&b->st->t[parts[0].st], parts[0].scale >= 0) : -1;
    if (forced >= 0 && nd > 1 && !ends_with(name, "_norm.weight")) {
        /* gguf-py's QuantError fallback as in pick_type */
        o->type = forced == KILN_Q8_0 && o->ne[0] % 32 ? KILN_F16 : (uint32_t)forced;
        o->f32_rule = forced == KILN_F32;
    }
    o->nbytes = kiln_type_row_bytes(o->type, (uint64_t)o->nelements);
    b->p->data_bytes += o->nbytes;
    return 0;
}

/* A plain (possibly permuted or transposed) tensor. */
static int add_single(builder *b, const cv_tmap *m, int64_t st_i, int64_t bid, bool bias) {
    const kiln_st_tensor *t = &b->st->t[st_i];
    cv_part *part = malloc(sizeof *part);
    if (!part) return kiln_fail(b->err, t->name, NULL, -1, "out of memory");
    part->st = st_i;
    part->scale = b->scale_of[st_i];
    int64_t hf[KILN_ST_MAX_DIMS];
    memcpy(hf, t->shape, sizeof hf);
    uint8_t xform = CV_X_NONE;
    uint32_t n_head = 0;
    if (m->flags & (CV_T_PERMUTE_Q | CV_T_PERMUTE_K)) {
        xform = CV_X_PERMUTE;
        n_head = (uint32_t)((m->flags & CV_T_PERMUTE_Q) || b->hp->n_kv == b->hp->n_head ? b->hp->n_head : b->hp->n_kv);
        if (!n_head || t->shape[0] % (2 * n_head)) {
            free(part);
            return kiln_fail(b->err, "config.json", "num_attention_heads", -1,
                             "tensor %s has %lld rows, not a multiple of 2 x %u heads", t->name,
                             (long long)t->shape[0], n_head);
        }
    } else if ((m->flags & CV_T_NORM_SHIFT) && !bias) {
        xform = CV_X_NORM_SHIFT;
    } else if ((m->flags & CV_T_TERNARY) && !bias) {
        xform = CV_X_TERNARY;
    } else if ((m->flags & CV_T_CONV1D) && !bias && t->n_dims == 2) {
        xform = CV_X_TRANSPOSE;
        hf[0] = t->shape[1];
        hf[1] = t->shape[0];
    } else if (m->flags & (CV_T_EVEN | CV_T_ODD)) {
        xform = CV_X_DEINTERLEAVE;
        hf[t->n_dims - 1] /= 2;
    } else if ((m->flags & (CV_T_KV_B_K | CV_T_KV_B_V)) && !bias) {
        /* [n_kv * (nope + v), kv_lora], checked above, cut per head: llama.cpp
         * views it with num_key_value_heads as the config gives it */
        xform = CV_X_KV_B;
        bool k = (m->flags & CV_T_KV_B_K) != 0;
        hf[0] = b->hp->n_kv;
        hf[1] = k ? t->shape[1] : b->hp->dim[CV_D_V_HEAD];
        hf[2] = k ? b->hp->dim[CV_D_QK_NOPE] : t->shape[1];
    }
    size_t before = b->p->n;
    uint32_t nd = xform == CV_X_KV_B ? 3 : t->n_dims;
    if (add_out(b, expand_name(m->gguf, bid, bias), hf, nd, bias ? 0 : m->flags, xform, part, 1, t->name) < 0)
        return -1;
    cv_out *o = &b->p->t[before];
    o->n_head = n_head;
    o->parity = (m->flags & (CV_T_ODD | CV_T_KV_B_V)) ? 1 : 0;
    o->src_rows = t->n_dims ? t->shape[0] : 1;
    return 0;
}

/* Stacks block `bid`'s experts: one output per kind, in table order. */
static int flush_experts(builder *b, int64_t bid) {
    int64_t *slots = b->slots + bid * b->n_kinds * b->n_exp;
    for (int k = 0; k < b->n_kinds; k++) {
        cv_part *parts = malloc((size_t)b->n_exp * sizeof *parts);
        if (!parts) return kiln_fail(b->err, NULL, NULL, -1, "out of memory");
        for (int64_t x = 0; x < b->n_exp; x++) {
            parts[x].st = slots[k * b->n_exp + x];
            parts[x].scale = b->scale_of[parts[x].st];
        }
        const kiln_st_tensor *t0 = &b->st->t[parts[0].st];
        for (int64_t x = 1; x < b->n_exp; x++) {
            if (b->st->t[parts[x].st].dtype == t0->dtype) continue;
            kiln_fail(b->err, b->st->t[parts[x].st].name, "dtype", -1,
                      "experts of one block must share a dtype (%s has %s)", t0->name, kiln_st_dtype_name(t0->dtype));
            free(parts);
            return -1;
        }
        int64_t hf[3] = {b->n_exp, t0->shape[0], t0->shape[1]};
        if (add_out(b, expand_name(b->kinds[k]->gguf, bid, false), hf, 3, 0, CV_X_NONE, parts, (uint32_t)b->n_exp,
                    t0->name) < 0)
            return -1;
    }
    b->filled[bid] = -1; /* done: a late duplicate is an error */
    return 0;
}

static int add_expert(builder *b, const cv_tmap *m, int64_t st_i, int64_t bid, int64_t xid, bool bias) {
    const kiln_st_tensor *t = &b->st->t[st_i];
    if (bias) return kiln_fail(b->err, t->name, NULL, -1, "expert biases are not supported");
    if (!b->n_exp)
        return kiln_fail(b->err, "config.json", "num_local_experts", -1, "missing: needed for expert tensor %s",
                         t->name);
    if (xid >= b->n_exp)
        return kiln_fail(b->err, "config.json", b->hp->dim_key[CV_D_NEXP], -1,
                         "is %lld, but tensor %s is expert %lld", (long long)b->n_exp, t->name, (long long)xid);
    int k = 0;
    while (k < b->n_kinds && b->kinds[k] != m) k++;
    int64_t *slot = &b->slots[(bid * b->n_kinds + k) * b->n_exp + xid];
    if (*slot >= 0 || b->filled[bid] < 0)
        return kiln_fail(b->err, t->name, NULL, -1, "expert tensor appears twice");
    *slot = st_i;
    if (++b->filled[bid] == b->n_kinds * b->n_exp) return flush_experts(b, bid);
    return 0;
}

/* A "model.layers.N." tensor with N past the block count (llama.cpp's
 * `re.match(r"model.layers.(\d+)", name)` test for DeepSeek's MTP layers). */
static bool past_last_block(const char *name, int64_t n_layer) {
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1)) return false;
    char *end;
    long long bid = strtoll(name + sizeof prefix - 1, &end, 10);
    return end != name + sizeof prefix - 1 && bid >= n_layer;
}

static int visit(builder *b, int64_t i) {
    const kiln_st_tensor *t = &b->st->t[i];
    const char *name = t->name;
    for (const char *const *s = b->a->skip_suffixes; s && *s; s++)
        if (ends_with(name, *s)) return 0;
    if (b->a->strip_prefix && !strncmp(name, b->a->strip_prefix, strlen(b->a->strip_prefix)))
        name += strlen(b->a->strip_prefix);
    char renamed[512];
    if (b->a->rename) name = b->a->rename(name, renamed, sizeof renamed);
    if ((b->a->flags & CV_A_DROP_MTP) && past_last_block(name, b->hp->n_layer)) return 0;
    const cv_tmap *m = b->a->tensors;
    int64_t bid = -1, xid = -1;
    bool bias = false;
    while (m->hf && !cv_tmap_match(m->hf, name, &bid, &xid, &bias)) m++;
    if (!m->hf)
        return kiln_fail(b->err, t->name, NULL, -1, "cannot map this tensor to a %s GGUF name",
                         b->a->gguf_arch);
    if (!dtype_ok(t->dtype))
        return kiln_fail(b->err, t->name, "dtype", -1, "unsupported dtype %s (kiln reads F32, F16, BF16 and F8_E4M3)",
                         kiln_st_dtype_name(t->dtype));
    if (bid >= b->hp->n_layer)
        return kiln_fail(b->err, "config.json", b->hp->layer_key, -1, "is %lld, but tensor %s belongs to block %lld",
                         (long long)b->hp->n_layer, t->name, (long long)bid);
    if (check_shape(b, m, bias, t) < 0) return -1;
    if (b->scale_of[i] >= 0 && check_scale(b, t, &b->st->t[b->scale_of[i]]) < 0) return -1;
    if (bid >= 0) b->per_block[bid]++;
    if (m->flags & CV_T_EXPERT) return add_expert(b, m, i, bid, xid, bias);
    if ((m->flags & CV_T_MXFP4) && !bias)
        return kiln_fail(b->err, t->name, NULL, -1,
                         "expected as MXFP4 _blocks and _scales (quantization_config.quant_method mxfp4)");
    if (add_single(b, m, i, bid, bias) < 0) return -1;
    /* a fused gate_up (the odd half) or DeepSeek's kv_b (the v part): the
     * second output is the next entry's */
    return (m->flags & (CV_T_EVEN | CV_T_KV_B_K)) ? add_single(b, m + 1, i, bid, bias) : 0;
}

/* One MXFP4 expert tensor from its HF pair, rows `stride`/`parity` of it. */
static int add_mxfp4_out(builder *b, const cv_tmap *m, int64_t bid, int64_t bi, int64_t si) {
    const kiln_st_tensor *t = &b->st->t[bi];
    cv_part *part = malloc(sizeof *part);
    if (!part) return kiln_fail(b->err, t->name, NULL, -1, "out of memory");
    part->st = bi;
    part->scale = si;
    int stride = (m->flags & (CV_T_EVEN | CV_T_ODD)) ? 2 : 1;
    int64_t hf[3] = {t->shape[0], t->shape[1] / stride, t->shape[2] * 32};
    size_t before = b->p->n;
    if (add_out(b, expand_name(m->gguf, bid, false), hf, 3, 0, CV_X_MXFP4, part, 1, t->name) < 0) return -1;
    cv_out *o = &b->p->t[before];
    b->p->data_bytes -= o->nbytes;
    o->type = KILN_MXFP4; /* as stored, whatever the outtype */
    o->f32_rule = false;
    o->nbytes = kiln_type_row_bytes(KILN_MXFP4, (uint64_t)o->nelements);
    b->p->data_bytes += o->nbytes;
    o->stride = (uint8_t)stride;
    o->parity = (m->flags & CV_T_ODD) ? 1 : 0;
    return 0;
}

/* The MXFP4 pairs X_blocks [n_exp, rows, cols/32, 16] + X_scales [n_exp,
 * rows, cols/32] (uint8), planned first and in stlist order as llama.cpp's
 * GptOssModel.generate_extra_tensors writes them: a pair when its scales
 * are met. */
static int add_mxfp4(builder *b) {
    if (!b->mxfp4) return 0;
    for (uint64_t i = 0; i < b->st->n; i++) {
        const kiln_st_tensor *s = &b->st->t[i];
        if (!ends_with(s->name, "_scales")) continue;
        char base[400], blocks[512], name[512], renamed[512];
        size_t n = strlen(s->name) - strlen("_scales");
        if (n >= sizeof base) return kiln_fail(b->err, s->name, NULL, -1, "tensor name too long");
        snprintf(base, sizeof base, "%.*s", (int)n, s->name);
        snprintf(blocks, sizeof blocks, "%s_blocks", base);
        int64_t bi = cv_stlist_find(b->st, blocks);
        if (bi < 0) return kiln_fail(b->err, s->name, NULL, -1, "MXFP4 scales without their blocks '%s'", blocks);
        const char *p = base;
        if (b->a->strip_prefix && !strncmp(p, b->a->strip_prefix, strlen(b->a->strip_prefix)))
            p += strlen(b->a->strip_prefix);
        snprintf(name, sizeof name, "%s.weight", p);
        const char *mapped = b->a->rename ? b->a->rename(name, renamed, sizeof renamed) : name;
        const cv_tmap *m = b->a->tensors;
        int64_t bid = -1, xid = -1;
        bool bias = false;
        while (m->hf && !((m->flags & CV_T_MXFP4) && cv_tmap_match(m->hf, mapped, &bid, &xid, &bias))) m++;
        if (!m->hf)
            return kiln_fail(b->err, blocks, NULL, -1, "cannot map this MXFP4 tensor to a %s GGUF name",
                             b->a->gguf_arch);
        const kiln_st_tensor *t = &b->st->t[bi];
        int64_t want[3];
        for (int d = 0; d < 3; d++) want[d] = b->hp->dim[m->shape[d]];
        if (t->dtype != KILN_ST_U8 || s->dtype != KILN_ST_U8)
            return kiln_fail(b->err, blocks, "dtype", -1, "MXFP4 blocks and scales must be U8");
        if (t->n_dims != 4 || s->n_dims != 3 || t->shape[3] != 16 || want[2] % 32 || t->shape[0] != want[0] ||
            t->shape[1] != want[1] || t->shape[2] != want[2] / 32 || memcmp(s->shape, t->shape, 3 * sizeof *s->shape))
            return kiln_fail(b->err, blocks, "shape", -1,
                             "expected MXFP4 blocks [%lld, %lld, %lld, 16] and scales [%lld, %lld, %lld] "
                             "(config.json's sizes)", (long long)want[0], (long long)want[1], (long long)(want[2] / 32),
                             (long long)want[0], (long long)want[1], (long long)(want[2] / 32));
        if (bid >= b->hp->n_layer)
            return kiln_fail(b->err, "config.json", b->hp->layer_key, -1,
                             "is %lld, but tensor %s belongs to block %lld", (long long)b->hp->n_layer, blocks,
                             (long long)bid);
        if (bid >= 0) b->per_block[bid]++;
        if (add_mxfp4_out(b, m, bid, bi, (int64_t)i) < 0) return -1;
        if ((m->flags & CV_T_EVEN) && add_mxfp4_out(b, m + 1, bid, bi, (int64_t)i) < 0) return -1;
    }
    return 0;
}

static int check_complete(builder *b) {
    for (int64_t blk = 0; blk < b->hp->n_layer; blk++) {
        if (!b->per_block[blk])
            return kiln_fail(b->err, "config.json", b->hp->layer_key, -1,
                             "is %lld, but no tensor belongs to block %lld", (long long)b->hp->n_layer, (long long)blk);
        if (b->n_kinds && b->filled[blk] > 0)
            return kiln_fail(b->err, "config.json", b->hp->dim_key[CV_D_NEXP], -1,
                             "is %lld, but block %lld has only %lld of its %lld expert matrices", (long long)b->n_exp,
                             (long long)blk, (long long)b->filled[blk], (long long)(b->n_kinds * b->n_exp));
    }
    return 0;
}

static int add_rope_freqs(builder *b) {
    if (!(b->a->flags & CV_A_ROPE_FREQS)) return 0;
    float *f = NULL;
    int64_t n = 0;
    if (cv_rope_freqs(b->config, b->hp, &f, &n, b->err) < 0) return -1;
    if (!f) return 0;
    if (add_out(b, strdup("rope_freqs.weight"), &n, 1, 0, CV_X_NONE, NULL, 0, "rope_scaling") < 0) {
        free(f);
        return -1;
    }
    b->p->t[b->p->n - 1].gen = f;
    return 0;
}

/* The outputs the architecture plans itself, first (DeepSeek-V4's hash
 * tables and FP4 experts); the source tensors they take are not visited. */
static int add_first(builder *b) {
    if (!b->a->plan_first) return 0;
    cv_first_out *f = NULL;
    uint64_t n = 0;
    int rc = b->a->plan_first(b->config, b->hp, b->st, b->aux, &f, &n, b->err);
    for (uint64_t i = 0; i < n; i++) {
        cv_part *parts = rc == 0 ? malloc(f[i].n_parts * sizeof *parts) : NULL;
        if (rc == 0 && !parts) rc = kiln_fail(b->err, f[i].name, NULL, -1, "out of memory");
        for (uint32_t p = 0; parts && p < f[i].n_parts; p++) {
            parts[p].st = f[i].st[p];
            parts[p].scale = f[i].scale ? f[i].scale[p] : -1;
        }
        size_t at = b->p->n;
        uint8_t xform = f[i].type == KILN_MXFP4 ? CV_X_MXFP4 : CV_X_NONE;
        if (rc == 0 && add_out(b, f[i].name, f[i].hf, f[i].n_dims, 0, xform, parts, f[i].n_parts,
                               b->st->t[f[i].st[0]].name) == 0) {
            cv_out *o = &b->p->t[at];
            b->p->data_bytes -= o->nbytes;
            o->type = f[i].type;
            o->f32_rule = false;
            o->stride = 1;
            o->nbytes = kiln_type_row_bytes(o->type, (uint64_t)o->nelements);
            b->p->data_bytes += o->nbytes;
        } else if (rc == 0) {
            rc = -1; /* add_out took name and parts */
        } else {
            free(f[i].name);
        }
        free(f[i].st);
        free(f[i].scale);
    }
    free(f);
    return rc;
}

/* The architecture's generated tensors (Phi-3's LongRoPE factors), in its
 * order, before everything else as llama.cpp writes them. */
static int add_generated(builder *b) {
    if (!b->a->extra_tensors) return 0;
    cv_gen_tensor g[CV_MAX_GEN] = {{0}};
    int n = b->a->extra_tensors(b->config, b->hp, g, b->err), rc = n < 0 ? -1 : 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && add_out(b, strdup(g[i].name), &g[i].n, 1, 0, CV_X_NONE, NULL, 0, "rope_scaling") == 0) {
            b->p->t[b->p->n - 1].gen = g[i].data;
            continue;
        }
        rc = -1;
        free(g[i].data);
    }
    return rc;
}

static int build(builder *b) {
    b->mxfp4 = cv_mxfp4_checkpoint(b->config);
    if (cv_f8_config(b->config, &b->fp8, b->p->block, b->err) < 0 || find_aux(b) < 0) return -1;
    b->p->outtype = b->p->outtype == CV_OUT_AUTO ? resolve_auto(b) : b->p->outtype;
    b->p->file_type = file_type_of(b->p->outtype);
    for (const cv_tmap *m = b->a->tensors; m->hf; m++)
        if ((m->flags & CV_T_EXPERT) && b->n_kinds < MAX_KINDS) b->kinds[b->n_kinds++] = m;
    b->n_exp = b->hp->dim[CV_D_NEXP];
    if (b->n_kinds && b->n_exp) {
        uint64_t n = (uint64_t)b->hp->n_layer * (uint64_t)b->n_kinds * (uint64_t)b->n_exp;
        if (!(b->slots = malloc(n * sizeof *b->slots))) return kiln_fail(b->err, NULL, NULL, -1, "out of memory");
        for (uint64_t i = 0; i < n; i++) b->slots[i] = -1;
    }
    if (add_rope_freqs(b) < 0 || add_generated(b) < 0 || add_first(b) < 0 || add_mxfp4(b) < 0) return -1;
    if (b->a->flags & CV_A_FTYPE_MXFP4_MOE) b->p->file_type = 38;
    /* llama.cpp's MOSTLY_MXFP4_MOE for a float outtype of an mxfp4 checkpoint */
    if (b->mxfp4 && (b->p->outtype == CV_OUT_F32 || b->p->outtype == CV_OUT_F16 || b->p->outtype == CV_OUT_BF16))
        b->p->file_type = 38;
    for (uint64_t i = 0; i < b->st->n; i++)
        if (!b->aux[i] && visit(b, (int64_t)i) < 0) return -1;
    return check_complete(b);
}

int cv_plan_build(const cv_arch *a, json_t *config, const cv_hp *hp, const cv_stlist *st, cv_outtype outtype,
                  cv_plan *p, kiln_err *err) {
    memset(p, 0, sizeof *p);
    p->outtype = outtype;
    builder b = {.a = a, .config = config, .hp = hp, .st = st, .p = p, .err = err};
    b.scale_of = malloc((st->n + 1) * sizeof *b.scale_of);
    b.aux = calloc(st->n + 1, sizeof *b.aux);
    b.per_block = calloc((size_t)hp->n_layer + 1, sizeof *b.per_block);
    b.filled = calloc((size_t)hp->n_layer + 1, sizeof *b.filled);
    int rc = (!b.scale_of || !b.aux || !b.per_block || !b.filled) ? kiln_fail(err, NULL, NULL, -1, "out of memory")
                                                                   : build(&b);
    free(b.scale_of);
    free(b.aux);
    free(b.per_block);
    free(b.filled);
    free(b.slots);
    if (rc) cv_plan_free(p);
    return rc;
}

void cv_plan_free(cv_plan *p) {
    for (uint64_t i = 0; i < p->n; i++) {
        free(p->t[i].name);
        free(p->t[i].parts);
        free(p->t[i].gen);
    }
    free(p->t);
    memset(p, 0, sizeof *p);
}
