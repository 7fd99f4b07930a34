/* splice/plan.c - kiln_splice_plan_make(): every check and every decision
 * of a splice, made from the headers alone (see splice.h). Reading no
 * tensor data keeps --dry-run instant on any model size, and putting every
 * refusal here means a refused splice never creates a file. */
#include "splice.h"

#include "../core/fileio.h"
#include "../core/name_regex.h"
#include "../core/types.h"
#include "../codec/codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable string for the selection description. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static int warn(kiln_splice_plan *p, kiln_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int warn(kiln_splice_plan *p, kiln_err *err, const char *fmt, ...) {
    char **w = realloc(p->warnings, (p->n_warnings + 1) * sizeof *w);
    if (!w) return kiln_fail(err, p->opts.base, NULL, -1, "out of memory");
    p->warnings = w;
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&w[p->n_warnings], fmt, ap);
    va_end(ap);
    if (rc < 0) return kiln_fail(err, p->opts.base, NULL, -1, "out of memory");
    p->n_warnings++;
    return 0;
}

static bool arch_u64(const kiln_gguf *g, const char *arch, const char *what, uint64_t *v) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, what);
    return kiln_gguf_get_u64(g, key, v);
}

static int add_inputs(kiln_splice_plan *p, const kiln_gguf *g, kiln_err *err) {
    const char **in = realloc(p->inputs, (size_t)(p->n_inputs + (int)g->n_shards) * sizeof *in);
    if (!in) return kiln_fail(err, g->path, NULL, -1, "out of memory");
    p->inputs = in;
    for (uint32_t s = 0; s < g->n_shards; s++) in[p->n_inputs++] = g->shards[s].path;
    return 0;
}

/* Rejects combinations of options that have no meaning, before any file
 * is opened. */
static int check_options(const kiln_splice_opts *o, kiln_err *err) {
    bool selects = o->n_tensor_regex || o->layers || o->experts || o->expert_ids;
    if (o->keep_experts) {
        if (o->donor) return kiln_fail(err, NULL, "--keep-experts", -1, "takes one model and no donor");
        if (selects || o->requantize || o->imatrix)
            return kiln_fail(err, NULL, "--keep-experts", -1,
                             "cannot be combined with a selection: every expert tensor and the router are cut");
        return 0;
    }
    if (!o->donor) return kiln_fail(err, NULL, NULL, -1, "a splice needs BASE and DONOR (or --keep-experts)");
    if (!selects)
        return kiln_fail(err, NULL, NULL, -1,
                         "no selection: give --tensors, --layers, --experts or --expert-ids "
                         "(--tensors . takes every tensor)");
    if (o->requantize && !o->expert_ids)
        return kiln_fail(err, NULL, "--requantize", -1, "only applies to --expert-ids (whole tensors keep the donor's type)");
    if (o->imatrix && !o->requantize) return kiln_fail(err, NULL, "--imatrix", -1, "only applies with --requantize");
    return 0;
}

/* Architecture, block count and expert count must agree, or tensors with
 * the same names would mean different things. */
static int check_compatible(kiln_splice_plan *p, kiln_err *err) {
    const kiln_gguf *b = p->base, *d = p->donor;
    kiln_str da;
    if (!kiln_gguf_get_str(d, "general.architecture", &da) || !kiln_str_eq(da, p->arch)) {
        char *dn = kiln_gguf_get_str(d, "general.architecture", &da) ? kiln_str_dup(da) : NULL;
        int rc = kiln_fail(err, d->path, "general.architecture", -1,
                           "donor architecture '%s' differs from the base's '%s'; refusing to splice",
                           dn ? dn : "(none)", p->arch);
        free(dn);
        return rc;
    }
    static const char *const counts[] = {"block_count", "expert_count"};
    for (int i = 0; i < 2; i++) {
        uint64_t vb = 0, vd = 0;
        bool hb = arch_u64(b, p->arch, counts[i], &vb), hd = arch_u64(d, p->arch, counts[i], &vd);
        if (hb != hd || vb != vd) {
            char key[256];
            snprintf(key, sizeof key, "%s.%s", p->arch, counts[i]);
            return kiln_fail(err, d->path, key, -1, "donor has %s%llu, base has %s%llu; refusing to splice",
                             hd ? "" : "none, treated as ", (unsigned long long)vd, hb ? "" : "none, treated as ",
                             (unsigned long long)vb);
        }
    }
    return 0;
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b) {
    for (int d = 0; d < KILN_GGUF_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

static void shape_str(const kiln_tensor *t, char *buf, size_t cap) {
    size_t n = 0;
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? " x " : "", (long long)t->ne[d]);
}

/* The outermost dimension of an expert-indexed tensor must be the expert
 * count, or its slabs are not experts. */
static int check_expert_dim(const kiln_splice_plan *p, const kiln_tensor *t, const char *name, kiln_err *err) {
    if (t->ne[t->n_dims - 1] != (int64_t)p->n_expert) {
        char sh[128];
        shape_str(t, sh, sizeof sh);
        return kiln_fail(err, p->base->path, name, -1,
                         "shape %s: outermost dimension is not the expert count %llu", sh,
                         (unsigned long long)p->n_expert);
    }
    if (t->n_dims == 1 && kiln_type_get(t->type)->block_size != 1)
        return kiln_fail(err, p->base->path, name, -1, "a 1-D %s tensor cannot be cut per expert",
                         kiln_type_name(t->type));
    return 0;
}

typedef struct selector {
    kiln_name_regex **re;
    int n_re;
    bool *layers; /* NULL: any layer */
    uint64_t n_layers;
    bool experts;
} selector;

/* 1 when the selection takes the tensor, 0 when not, -1 with a message. */
static int selected(const selector *s, const char *name, kiln_err *err) {
    if (s->n_re) {
        int any = 0;
        for (int i = 0; i < s->n_re && !any; i++)
            if ((any = kiln_name_regex_match(s->re[i], name, strlen(name), err)) < 0) return -1;
        if (!any) return 0;
    }
    if (s->layers) {
        int64_t l = kiln_tensor_layer(name);
        if (l < 0 || (uint64_t)l >= s->n_layers || !s->layers[l]) return 0;
    }
    return !s->experts || kiln_splice_is_expert_tensor(name);
}

/* For --requantize: the codecs and imatrix entry the slab conversion uses.
 * The weights are computed once here only to validate them; writing
 * computes them again per tensor rather than holding every tensor's. */
static int plan_requant(kiln_splice_plan *p, kiln_splice_item *it, kiln_err *err) {
    uint32_t bt = it->base->type, dt = it->donor->type;
    if (!kiln_can_dequantize(dt))
        return kiln_fail(err, p->donor->path, it->name, -1, "kiln cannot dequantize %s", kiln_type_name(dt));
    if (!kiln_can_quantize(bt))
        return kiln_fail(err, p->base->path, it->name, -1, "kiln cannot quantize to %s", kiln_type_name(bt));
    const char *imx_path = p->opts.imatrix;
    if (p->imatrix && !(it->imx = kiln_imatrix_find(p->imatrix, it->name)) &&
        warn(p, err, "%s: %s has no entry for it; its experts are requantized without weights", it->name,
             imx_path) < 0)
        return -1;
    if (it->imx) {
        int64_t cols = it->base->ne[0], zero = 0;
        float *w = malloc((size_t)(cols * (int64_t)p->n_expert) * sizeof *w);
        if (!w) return kiln_fail(err, imx_path, it->name, -1, "out of memory");
        int rc = kiln_imatrix_weights(it->imx, cols, (int64_t)p->n_expert, w, &zero, err);
        free(w);
        if (rc < 0) {
            char msg[sizeof err->msg];
            memcpy(msg, err->msg, sizeof msg);
            return kiln_fail(err, imx_path, NULL, -1, "%s", msg);
        }
        /* An entry holds one count per matrix it kept: per expert, or one
         * for all of them (legacy .dat). */
        for (uint64_t e = 0; zero && e < p->n_expert; e++)
            if (p->expert_sel[e] && !(it->imx->counts[(int64_t)e * cols / it->imx->n] > 0) &&
                warn(p, err, "%s: expert %llu saw no calibration input in %s; its columns get weight 1",
                     it->name, (unsigned long long)e, imx_path) < 0)
                return -1;
    }
    if (!it->imx && kiln_codec_get(bt)->needs_imatrix)
        return kiln_fail(err, p->base->path, it->name, -1,
                         "requantizing to %s needs an importance matrix (--imatrix FILE with an entry for "
                         "this tensor): at 2 bits per weight unweighted quantization ruins the experts",
                         kiln_type_name(bt));
    return 0;
}

/* Decides the fate of one selected tensor in a donor splice. */
static int plan_donor_item(kiln_splice_plan *p, kiln_splice_item *it, kiln_err *err) {
    const kiln_tensor *bt = it->base;
    const kiln_tensor *dt = kiln_gguf_find_tensor(p->donor, it->name);
    if (!dt) return kiln_fail(err, p->donor->path, it->name, -1, "donor has no such tensor; refusing to splice");
    if (!same_shape(bt, dt)) {
        char sb[128], sd[128];
        shape_str(bt, sb, sizeof sb);
        shape_str(dt, sd, sizeof sd);
        return kiln_fail(err, p->donor->path, it->name, -1, "shape %s differs from the base's %s; refusing to splice",
                         sd, sb);
    }
    it->donor = dt;
    if (!p->opts.expert_ids) {
        it->action = KILN_SPLICE_TENSOR;
        it->type = dt->type;
        it->bytes_after = dt->nbytes;
        return 0;
    }
    if (check_expert_dim(p, bt, it->name, err) < 0) return -1;
    if (bt->type == dt->type) {
        it->action = KILN_SPLICE_SLABS;
        return 0;
    }
    if (!p->opts.requantize)
        return kiln_fail(err, p->donor->path, it->name, -1,
                         "donor stores it as %s, base as %s: a tensor has one type, so single experts cannot be "
                         "copied between them; add --requantize to convert the donor's experts to %s, or drop "
                         "--expert-ids to take the whole tensor",
                         kiln_type_name(dt->type), kiln_type_name(bt->type), kiln_type_name(bt->type));
    it->action = KILN_SPLICE_REQUANT;
    return plan_requant(p, it, err);
}

static void plan_keep_item(kiln_splice_plan *p, kiln_splice_item *it) {
    it->action = KILN_SPLICE_KEEP;
    it->ne[it->n_dims - 1] = (int64_t)p->n_expert_sel;
    it->bytes_after = it->base->nbytes / p->n_expert * p->n_expert_sel;
}

static int compile_selector(const kiln_splice_plan *p, selector *s, uint64_t n_layer, kiln_err *err) {
    const kiln_splice_opts *o = &p->opts;
    s->experts = o->experts || o->expert_ids;
    if (o->n_tensor_regex) {
        s->re = calloc((size_t)o->n_tensor_regex, sizeof *s->re);
        if (!s->re) return kiln_fail(err, NULL, "--tensors", -1, "out of memory");
        for (; s->n_re < o->n_tensor_regex; s->n_re++)
            if (!(s->re[s->n_re] = kiln_name_regex_compile(o->tensor_regex[s->n_re], "--tensors", err))) return -1;
    }
    if (o->layers) {
        if (!n_layer) return kiln_fail(err, p->base->path, "--layers", -1, "the base has no %s.block_count", p->arch);
        s->layers = calloc(n_layer, sizeof *s->layers);
        s->n_layers = n_layer;
        if (!s->layers) return kiln_fail(err, NULL, "--layers", -1, "out of memory");
        if (kiln_splice_parse_set(o->layers, n_layer, "--layers", s->layers, err) < 0) return -1;
    }
    return 0;
}

static void free_selector(selector *s) {
    for (int i = 0; i < s->n_re; i++) kiln_name_regex_free(s->re[i]);
    free(s->re);
    free(s->layers);
}

/* The selection, written the way it was asked for, for kiln.splice.selection. */
static int describe_selection(kiln_splice_plan *p, kiln_err *err) {
    const kiln_splice_opts *o = &p->opts;
    sbuf b = {0};
    sb_printf(&b, "%s", "");
    for (int i = 0; i < o->n_tensor_regex; i++) sb_printf(&b, "%s--tensors %s", b.len ? " " : "", o->tensor_regex[i]);
    if (o->layers) sb_printf(&b, "%s--layers %s", b.len ? " " : "", o->layers);
    if (o->experts) sb_printf(&b, "%s--experts", b.len ? " " : "");
    if (o->expert_ids) sb_printf(&b, "%s--expert-ids %s", b.len ? " " : "", o->expert_ids);
    if (o->requantize) sb_printf(&b, "%s--requantize", b.len ? " " : "");
    if (o->imatrix) {
        const char *slash = strrchr(o->imatrix, '/');
        sb_printf(&b, " --imatrix %s", slash ? slash + 1 : o->imatrix);
    }
    if (o->keep_experts) sb_printf(&b, "--keep-experts %s", o->keep_experts);
    if (b.oom) {
        free(b.p);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    p->selection = b.p;
    return 0;
}

static int open_inputs(kiln_splice_plan *p, kiln_err *err) {
    const kiln_splice_opts *o = &p->opts;
    if (!(p->base = kiln_gguf_open(o->base, err)) || add_inputs(p, p->base, err) < 0) return -1;
    if (o->donor && (!(p->donor = kiln_gguf_open(o->donor, err)) || add_inputs(p, p->donor, err) < 0)) return -1;
    if (o->imatrix) {
        if (!(p->imatrix = kiln_imatrix_read(o->imatrix, err))) return -1;
        const char **in = realloc(p->inputs, (size_t)(p->n_inputs + 1) * sizeof *in);
        if (!in) return kiln_fail(err, o->imatrix, NULL, -1, "out of memory");
        p->inputs = in;
        in[p->n_inputs++] = o->imatrix;
    }
    /* Existence is checked (with --force) when writing; equality with an
     * input is refused even for a dry run, whose plan would be a lie. */
    if (o->output && kiln_check_output(o->output, p->inputs, p->n_inputs, true, err) < 0) return -1;
    kiln_str a;
    if (!kiln_gguf_get_str(p->base, "general.architecture", &a))
        return kiln_fail(err, p->base->path, "general.architecture", -1, "missing; cannot tell what the tensors mean");
    if (!(p->arch = kiln_str_dup(a))) return kiln_fail(err, p->base->path, NULL, -1, "out of memory");
    return 0;
}

/* Parses --expert-ids or --keep-experts against the base's expert count. */
static int parse_experts(kiln_splice_plan *p, const char *spec, const char *what, kiln_err *err) {
    if (!p->n_expert)
        return kiln_fail(err, p->base->path, what, -1, "the base is not a mixture of experts (no %s.expert_count)",
                         p->arch);
    if (!(p->expert_sel = calloc(p->n_expert, sizeof *p->expert_sel)))
        return kiln_fail(err, NULL, what, -1, "out of memory");
    int64_t n = kiln_splice_parse_set(spec, p->n_expert, what, p->expert_sel, err);
    if (n < 0) return -1;
    p->n_expert_sel = (uint64_t)n;
    return 0;
}

/* Keep-experts: the new expert count, and a top-k that still fits in it. */
static int plan_keep_counts(kiln_splice_plan *p, kiln_err *err) {
    uint64_t groups = 0;
    if (arch_u64(p->base, p->arch, "expert_group_count", &groups) && groups > 1)
        return kiln_fail(err, p->base->path, "--keep-experts", -1,
                         "the model routes within %llu expert groups; cutting experts would break the groups",
                         (unsigned long long)groups);
    p->expert_used_after = p->expert_used;
    if (p->expert_used > p->n_expert_sel) {
        p->expert_used_after = p->n_expert_sel;
        if (warn(p, err, "%s.expert_used_count lowered from %llu to %llu: each token now uses every remaining expert",
                 p->arch, (unsigned long long)p->expert_used, (unsigned long long)p->n_expert_sel) < 0)
            return -1;
    }
    return 0;
}

int kiln_splice_plan_make(const kiln_splice_opts *o, kiln_splice_plan *p, kiln_err *err) {
    memset(p, 0, sizeof *p);
    p->opts = *o;
    if (check_options(o, err) < 0 || open_inputs(p, err) < 0) return -1;
    if (p->donor && check_compatible(p, err) < 0) return -1;
    uint64_t n_layer = 0;
    arch_u64(p->base, p->arch, "block_count", &n_layer);
    arch_u64(p->base, p->arch, "expert_count", &p->n_expert);
    arch_u64(p->base, p->arch, "expert_used_count", &p->expert_used);
    const char *ids = o->keep_experts ? o->keep_experts : o->expert_ids;
    if (ids && parse_experts(p, ids, o->keep_experts ? "--keep-experts" : "--expert-ids", err) < 0) return -1;
    if (o->keep_experts && plan_keep_counts(p, err) < 0) return -1;
    if (describe_selection(p, err) < 0) return -1;

    selector sel = {0};
    int rc = o->keep_experts ? 0 : compile_selector(p, &sel, n_layer, err);
    p->n_items = p->base->n_tensors;
    if (rc == 0 && !(p->items = calloc(p->n_items ? p->n_items : 1, sizeof *p->items)))
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < p->n_items; i++) {
        kiln_splice_item *it = &p->items[i];
        const kiln_tensor *t = &p->base->tensors[i];
        it->base = t;
        it->type = t->type;
        it->n_dims = t->n_dims;
        memcpy(it->ne, t->ne, sizeof it->ne);
        it->bytes_before = it->bytes_after = t->nbytes;
        if (!(it->name = kiln_str_dup(t->name))) {
            rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
            break;
        }
        if (o->keep_experts) {
            if (kiln_splice_is_expert_indexed(it->name)) {
                rc = check_expert_dim(p, t, it->name, err);
                if (rc == 0) plan_keep_item(p, it);
            }
        } else if ((rc = selected(&sel, it->name, err)) == 1) {
            rc = plan_donor_item(p, it, err);
        }
        if (it->action != KILN_SPLICE_FROM_BASE) p->n_changed++;
        p->bytes_before += it->bytes_before;
        p->bytes_after += it->bytes_after;
        p->weights_before += (uint64_t)t->nelements;
        p->weights_after += (uint64_t)(it->ne[0] * it->ne[1] * it->ne[2] * it->ne[3]);
    }
    free_selector(&sel);
    if (rc == 0 && p->n_changed == 0)
        rc = o->keep_experts
                 ? kiln_fail(err, p->base->path, "--keep-experts", -1, "the base has no expert tensors to cut")
                 : kiln_fail(err, p->base->path, NULL, -1, "the selection '%s' matches no tensor; nothing to splice",
                             p->selection);
    return rc;
}

void kiln_splice_plan_free(kiln_splice_plan *p) {
    for (uint64_t i = 0; p->items && i < p->n_items; i++) free(p->items[i].name);
    free(p->items);
    for (uint64_t i = 0; i < p->n_warnings; i++) free(p->warnings[i]);
    free(p->warnings);
    free(p->expert_sel);
    free(p->selection);
    free(p->arch);
    free(p->inputs);
    kiln_imatrix_free(p->imatrix);
    kiln_gguf_close(p->donor);
    kiln_gguf_close(p->base);
    memset(p, 0, sizeof *p);
}
