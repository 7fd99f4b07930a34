/* quantize/budget.c - the multiple-choice knapsack behind --target-bpw and
 * --target-size (see budget.h for the method). Sizes are integers and
 * never rounded; only the damage estimates are floating point. */
#include "budget.h"

#include "../codec/codec.h"
#include "../core/types.h"
#include "policy.h"
#include "quantize_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One upgrade along an item's lower convex hull: from hull point k to
 * k + 1, costing `bytes` more and saving `save` (> 0) dkld. */
typedef struct segment {
    size_t pos;     /* the item's position in the search order */
    size_t k;
    uint64_t bytes;
    double save;
} segment;

typedef struct solver {
    const kiln_budget_item *items;
    size_t n;
    uint64_t budget;
    size_t **hull;       /* per item: choice indexes on the lower hull, bytes ascending */
    size_t *n_hull;
    size_t *order;       /* search order: order[pos] is an item */
    segment *seg;        /* every hull segment, most dkld saved per byte first */
    size_t n_seg;
    uint64_t *min_bytes_from; /* [pos]: sum of hull[0] bytes of order[pos..n) */
    double *min_dkld_from;    /* [pos]: sum of hull[0] dkld of order[pos..n) */
    /* the search */
    size_t *cur, *best;
    double best_dkld;
    uint64_t nodes, max_nodes;
    bool stopped;
} solver;

static const kiln_budget_choice *choice(const solver *s, size_t item, size_t c) {
    return &s->items[item].choices[c];
}

/* Choices of one item (ctx: its choice array) by bytes, then dkld, then
 * index. */
static int cmp_choice(const void *pa, const void *pb, void *ctx) {
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const kiln_budget_choice *x = (const kiln_budget_choice *)ctx + a, *y = (const kiln_budget_choice *)ctx + b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    if (x->dkld != y->dkld) return x->dkld < y->dkld ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The lower convex hull of (bytes, dkld): dominated choices (no fewer
 * bytes, no less dkld than a kept one) go first, then points above the
 * chord of their neighbours. hull[0] is the smallest choice. */
static int build_hull(solver *s, size_t item, kiln_err *err) {
    const kiln_budget_item *it = &s->items[item];
    size_t *ord = malloc(it->n_choices * sizeof *ord), n = 0;
    if (!ord) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (size_t c = 0; c < it->n_choices; c++) ord[c] = c;
    qsort_r(ord, it->n_choices, sizeof *ord, cmp_choice, (void *)it->choices);
    for (size_t k = 0; k < it->n_choices; k++) {
        const kiln_budget_choice *p = &it->choices[ord[k]];
        if (n && p->dkld >= it->choices[ord[n - 1]].dkld) continue; /* dominated */
        while (n >= 2) {
            const kiln_budget_choice *a = &it->choices[ord[n - 2]], *b = &it->choices[ord[n - 1]];
            /* b lies on or above the chord a-p: slope(a,b) >= slope(b,p) */
            long double lhs = ((long double)b->dkld - a->dkld) * (long double)(p->bytes - b->bytes);
            long double rhs = ((long double)p->dkld - b->dkld) * (long double)(b->bytes - a->bytes);
            if (lhs < rhs) break;
            n--;
        }
        ord[n++] = ord[k];
    }
    s->hull[item] = ord;
    s->n_hull[item] = n;
    return 0;
}

static int cmp_segment(const void *pa, const void *pb) {
    const segment *a = pa, *b = pb;
    /* a->save / a->bytes vs b->save / b->bytes, without dividing */
    long double x = (long double)a->save * (long double)b->bytes, y = (long double)b->save * (long double)a->bytes;
    if (x != y) return x > y ? -1 : 1;
    if (a->pos != b->pos) return a->pos < b->pos ? -1 : 1;
    return a->k < b->k ? -1 : a->k > b->k;
}

/* Items with the widest dkld range first: deciding them early prunes most. */
static double dkld_range(const solver *s, size_t item) {
    const size_t *h = s->hull[item];
    return choice(s, item, h[0])->dkld - choice(s, item, h[s->n_hull[item] - 1])->dkld;
}
static int cmp_order(const void *pa, const void *pb, void *ctx) {
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    double ra = dkld_range(ctx, a), rb = dkld_range(ctx, b);
    if (ra != rb) return ra > rb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void solver_free(solver *s) {
    for (size_t i = 0; s->hull && i < s->n; i++) free(s->hull[i]);
    free(s->hull);
    free(s->n_hull);
    free(s->order);
    free(s->seg);
    free(s->min_bytes_from);
    free(s->min_dkld_from);
    free(s->cur);
    free(s->best);
}

static int solver_init(solver *s, kiln_err *err) {
    size_t n = s->n;
    s->hull = calloc(n + 1, sizeof *s->hull);
    s->n_hull = calloc(n + 1, sizeof *s->n_hull);
    s->order = calloc(n + 1, sizeof *s->order);
    s->min_bytes_from = calloc(n + 1, sizeof *s->min_bytes_from);
    s->min_dkld_from = calloc(n + 1, sizeof *s->min_dkld_from);
    s->cur = calloc(n + 1, sizeof *s->cur);
    s->best = calloc(n + 1, sizeof *s->best);
    if (!s->hull || !s->n_hull || !s->order || !s->min_bytes_from || !s->min_dkld_from || !s->cur || !s->best)
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const kiln_budget_item *it = &s->items[i];
        if (!it->n_choices) return kiln_fail(err, NULL, NULL, -1, "item %zu has no choices", i);
        for (size_t c = 0; c < it->n_choices; c++)
            if (!isfinite(it->choices[c].dkld))
                return kiln_fail(err, NULL, NULL, -1, "item %zu choice %zu: dkld is not finite", i, c);
        if (build_hull(s, i, err) < 0) return -1;
        total += s->n_hull[i] - 1;
        s->order[i] = i;
    }
    qsort_r(s->order, n, sizeof *s->order, cmp_order, s);
    s->seg = calloc(total + 1, sizeof *s->seg);
    if (!s->seg) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (size_t pos = 0; pos < n; pos++) {
        size_t i = s->order[pos];
        for (size_t k = 0; k + 1 < s->n_hull[i]; k++) {
            const kiln_budget_choice *a = choice(s, i, s->hull[i][k]), *b = choice(s, i, s->hull[i][k + 1]);
            s->seg[s->n_seg++] = (segment){pos, k, b->bytes - a->bytes, a->dkld - b->dkld};
        }
    }
    qsort(s->seg, s->n_seg, sizeof *s->seg, cmp_segment);
    for (size_t pos = n; pos-- > 0;) {
        const kiln_budget_choice *c = choice(s, s->order[pos], s->hull[s->order[pos]][0]);
        s->min_bytes_from[pos] = s->min_bytes_from[pos + 1] + c->bytes;
        s->min_dkld_from[pos] = s->min_dkld_from[pos + 1] + c->dkld;
    }
    return 0;
}

/* The LP relaxation of items order[from..n) within `room` bytes: each on
 * its hull, upgraded in order of dkld saved per byte, the last upgrade
 * taken in part. A lower bound on any integer solution. `room` must cover
 * their smallest choices. */
static double lp_bound(const solver *s, size_t from, uint64_t room) {
    double d = s->min_dkld_from[from];
    room -= s->min_bytes_from[from];
    for (size_t j = 0; j < s->n_seg && room > 0; j++) {
        const segment *g = &s->seg[j];
        if (g->pos < from) continue;
        if (g->bytes <= room) {
            room -= g->bytes;
            d -= g->save;
        } else {
            d -= g->save * ((double)room / (double)g->bytes);
            room = 0;
        }
    }
    return d;
}

/* Step 1: the LP solution without its fractional part. cur[] gets choice
 * indexes; returns the bytes used. */
static uint64_t lagrangian_start(solver *s) {
    size_t *at = calloc(s->n + 1, sizeof *at); /* hull position per search position */
    bool *blocked = calloc(s->n + 1, sizeof *blocked);
    uint64_t used = s->min_bytes_from[0];
    for (size_t j = 0; at && blocked && j < s->n_seg; j++) {
        const segment *g = &s->seg[j];
        if (blocked[g->pos] || at[g->pos] != g->k) continue;
        if (used + g->bytes <= s->budget) {
            used += g->bytes;
            at[g->pos]++;
        } else {
            blocked[g->pos] = true;
        }
    }
    if (!at || !blocked) used = s->min_bytes_from[0]; /* out of memory: start from the smallest */
    for (size_t pos = 0; pos < s->n; pos++) {
        size_t i = s->order[pos];
        s->cur[i] = s->hull[i][at ? at[pos] : 0];
    }
    free(at);
    free(blocked);
    return used;
}

/* Step 2: while some single switch fits the bytes left and lowers the
 * dkld, take the one that lowers it most (ties: fewer extra bytes, then
 * lower item, then lower choice index). Each step lowers the sum, so this
 * ends. */
static uint64_t greedy_fill(solver *s, uint64_t used) {
    for (;;) {
        size_t bi = SIZE_MAX, bc = 0;
        double bsave = 0;
        int64_t bextra = 0;
        for (size_t i = 0; i < s->n; i++) {
            const kiln_budget_choice *now = choice(s, i, s->cur[i]);
            for (size_t c = 0; c < s->items[i].n_choices; c++) {
                const kiln_budget_choice *x = choice(s, i, c);
                int64_t extra = (int64_t)x->bytes - (int64_t)now->bytes;
                double save = now->dkld - x->dkld;
                if (save <= 0 || (extra > 0 && used + (uint64_t)extra > s->budget)) continue;
                if (bi == SIZE_MAX || save > bsave || (save == bsave && extra < bextra)) {
                    bi = i, bc = c, bsave = save, bextra = extra;
                }
            }
        }
        if (bi == SIZE_MAX) return used;
        used = (uint64_t)((int64_t)used + bextra);
        s->cur[bi] = bc;
    }
}

/* The choices of item i in the order the search tries them: the
 * incumbent's first, then by dkld, bytes and index. */
static int cmp_try(const void *pa, const void *pb, void *ctx) {
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const kiln_budget_choice *x = (const kiln_budget_choice *)ctx + a, *y = (const kiln_budget_choice *)ctx + b;
    if (x->dkld != y->dkld) return x->dkld < y->dkld ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Improvements smaller than this relative amount are float noise, not
 * better plans: the incumbent (found first, deterministically) stays. */
static bool better(double d, double than) {
    return d < than - 1e-12 * fabs(than);
}

/* Step 3: depth-first over order[pos..n) with `used` bytes and `d` dkld
 * fixed so far. tries[pos] holds the try order of order[pos]. */
static void search(solver *s, size_t **tries, size_t pos, uint64_t used, double d) {
    if (s->stopped) return;
    if (++s->nodes > s->max_nodes) {
        s->stopped = true;
        return;
    }
    if (pos == s->n) {
        if (better(d, s->best_dkld)) {
            s->best_dkld = d;
            memcpy(s->best, s->cur, s->n * sizeof *s->best);
        }
        return;
    }
    size_t i = s->order[pos];
    for (size_t k = 0; k < s->items[i].n_choices && !s->stopped; k++) {
        const kiln_budget_choice *c = choice(s, i, tries[pos][k]);
        uint64_t u = used + c->bytes;
        if (u + s->min_bytes_from[pos + 1] > s->budget) continue;
        if (!better(d + c->dkld + lp_bound(s, pos + 1, s->budget - u), s->best_dkld)) continue;
        s->cur[i] = tries[pos][k];
        search(s, tries, pos + 1, u, d + c->dkld);
    }
}

static int branch_and_bound(solver *s, kiln_err *err) {
    size_t **tries = calloc(s->n + 1, sizeof *tries);
    int rc = tries ? 0 : kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (size_t pos = 0; rc == 0 && pos < s->n; pos++) {
        size_t i = s->order[pos], m = s->items[i].n_choices, at = 0;
        if (!(tries[pos] = malloc(m * sizeof **tries))) {
            rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
            break;
        }
        tries[pos][at++] = s->best[i];
        for (size_t c = 0; c < m; c++)
            if (c != s->best[i]) tries[pos][at++] = c;
        qsort_r(tries[pos] + 1, m - 1, sizeof **tries, cmp_try, (void *)s->items[i].choices);
    }
    if (rc == 0) search(s, tries, 0, 0, 0.0);
    for (size_t pos = 0; tries && pos < s->n; pos++) free(tries[pos]);
    free(tries);
    return rc;
}

int kiln_budget_solve(const kiln_budget_item *items, size_t n_items, uint64_t budget, uint64_t max_nodes,
                      size_t *pick, kiln_budget_result *res, kiln_err *err) {
    memset(res, 0, sizeof *res);
    solver s = {.items = items, .n = n_items, .budget = budget,
                .max_nodes = max_nodes ? max_nodes : KILN_BUDGET_MAX_NODES};
    int rc = solver_init(&s, err);
    if (rc == 0) {
        res->min_bytes = s.min_bytes_from[0];
        if (s.min_bytes_from[0] > budget)
            rc = kiln_fail(err, NULL, NULL, -1, "budget %llu bytes is below the smallest achievable, %llu bytes",
                           (unsigned long long)budget, (unsigned long long)s.min_bytes_from[0]);
    }
    if (rc == 0) {
        res->lower_bound = lp_bound(&s, 0, budget);
        greedy_fill(&s, lagrangian_start(&s));
        memcpy(s.best, s.cur, n_items * sizeof *s.best);
        s.best_dkld = 0;
        for (size_t i = 0; i < n_items; i++) s.best_dkld += choice(&s, i, s.best[i])->dkld;
        rc = branch_and_bound(&s, err);
    }
    if (rc == 0) {
        res->exact = !s.stopped;
        res->nodes = s.nodes;
        for (size_t i = 0; i < n_items; i++) {
            pick[i] = s.best[i];
            res->bytes += choice(&s, i, s.best[i])->bytes;
            res->dkld += choice(&s, i, s.best[i])->dkld;
        }
    }
    solver_free(&s);
    return rc;
}

/* ---- the bridge to a model's plan ------------------------------------------ */

static uint64_t padded(uint64_t bytes, uint64_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

static bool is_embd_or_output(const char *name) {
    return !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight");
}

static bool needs_imatrix(uint32_t type, const char *name) {
    return !is_embd_or_output(name) && kiln_policy_type_needs_imatrix(type, NULL);
}

/* Tensor index of `name` in the report, or -1. */
static int64_t find_tensor(const kiln_quant_report *r, const char *name) {
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (!strcmp(r->tensors[i].name, name)) return (int64_t)i;
    return -1;
}

/* Checks one row against the tensor it names; -1 with a message naming
 * the sensitivity file, the tensor and the type. */
static int check_row(const char *path, const kiln_sens_row *row, const kiln_quant_tensor *q, kiln_err *err) {
    const char *tn = kiln_type_name((uint32_t)row->type);
    const kiln_type_info *ti = kiln_type_get((uint32_t)row->type);
    if (!kiln_policy_quantizable(q->name, q->n_dims))
        return kiln_fail(err, path, row->tensor, -1, "has rows but llama.cpp does not quantize this tensor");
    if (!ti || !ti->block_size || q->ne[0] % ti->block_size)
        return kiln_fail(err, path, row->tensor, -1,
                         "%s: row length %lld is not a multiple of its block size %u (llama.cpp would fall back "
                         "to another type): the row cannot be used",
                         tn ? tn : "?", (long long)q->ne[0], ti ? ti->block_size : 0);
    if (!kiln_can_quantize((uint32_t)row->type))
        return kiln_fail(err, path, row->tensor, -1, "kiln cannot quantize to %s", tn);
    uint64_t nrows = (uint64_t)(q->ne[1] * q->ne[2] * q->ne[3]);
    uint64_t want = kiln_type_row_bytes((uint32_t)row->type, (uint64_t)q->ne[0]) * nrows;
    if (row->bytes != want)
        return kiln_fail(err, path, row->tensor, -1, "%s: the file says %llu bytes, the model's tensor takes %llu",
                         tn, (unsigned long long)row->bytes, (unsigned long long)want);
    return 0;
}

/* general.file_type for a budget mix: the preset of the type holding the
 * most weights (its _M mix when there is one), as llama.cpp's loader
 * names a file by its main type. */
static uint32_t mix_ftype(const kiln_quant_report *r) {
    uint64_t weights[KILN_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].plan.why == KILN_WHY_BUDGET && r->tensors[i].plan.to < KILN_TYPE_COUNT)
            weights[r->tensors[i].plan.to] += (uint64_t)(r->tensors[i].ne[0] * r->tensors[i].ne[1] *
                                                          r->tensors[i].ne[2] * r->tensors[i].ne[3]);
    uint32_t main = 0;
    for (uint32_t t = 1; t < KILN_TYPE_COUNT; t++)
        if (weights[t] > weights[main]) main = t;
    const kiln_preset *pick = NULL;
    for (const kiln_preset *const *p = kiln_presets; *p; p++) {
        if ((*p)->kind != KILN_PRESET_MIX || (*p)->base != main) continue;
        size_t len = strlen((*p)->name);
        if (!pick || (len > 2 && !strcmp((*p)->name + len - 2, "_M"))) pick = *p;
    }
    return pick ? pick->ftype : r->ftype;
}

int kiln_budget_apply(const kiln_quant_opts *o, kiln_quant_report *r, uint64_t file_bytes, uint64_t alignment,
                      uint64_t *left_out, kiln_err *err) {
    const kiln_sensitivity *sens = o->sensitivity;
    const char *path = o->sensitivity_path;
    *left_out = 0;
    if (o->target_size) r->budget_bytes = o->target_size;
    else r->budget_bytes = (uint64_t)floor(o->target_bpw * (double)r->n_elements / 8.0);
    /* Rows come sorted by tensor; each run of one tensor's rows is an item. */
    kiln_budget_choice *ch = calloc(sens->n_rows + 1, sizeof *ch);
    kiln_budget_item *items = calloc(sens->n_rows + 1, sizeof *items);
    uint64_t *item_tensor = calloc(sens->n_rows + 1, sizeof *item_tensor);
    size_t *pick = calloc(sens->n_rows + 1, sizeof *pick), n_items = 0, n_ch = 0;
    bool *seen = calloc(r->n_tensors + 1, 1);
    int rc = ch && items && item_tensor && pick && seen ? 0 : kiln_fail(err, path, NULL, -1, "out of memory");
    uint64_t fixed = file_bytes;
    for (size_t k = 0; rc == 0 && k < sens->n_rows;) {
        const char *name = sens->rows[k].tensor;
        int64_t ti = find_tensor(r, name);
        if (ti < 0) {
            rc = kiln_fail(err, path, name, -1, "has rows but the model has no such tensor");
            break;
        }
        if (seen[ti]) {
            rc = kiln_fail(err, path, name, -1, "rows of this tensor are not together: the file is not sorted");
            break;
        }
        seen[ti] = true;
        kiln_quant_tensor *q = &r->tensors[ti];
        size_t first = n_ch;
        for (; k < sens->n_rows && !strcmp(sens->rows[k].tensor, name); k++) {
            const kiln_sens_row *row = &sens->rows[k];
            if ((rc = check_row(path, row, q, err)) < 0) break;
            if (!o->imatrix && needs_imatrix((uint32_t)row->type, name)) {
                (*left_out)++;
                continue;
            }
            ch[n_ch++] = (kiln_budget_choice){(uint32_t)row->type, padded(row->bytes, alignment), row->dkld};
        }
        if (rc < 0 || n_ch == first) continue; /* no usable row: the tensor keeps its type */
        fixed -= padded(q->bytes_out, alignment);
        items[n_items] = (kiln_budget_item){&ch[first], n_ch - first};
        item_tensor[n_items++] = (uint64_t)ti;
    }
    kiln_budget_result res;
    if (rc == 0) {
        uint64_t room = r->budget_bytes > fixed ? r->budget_bytes - fixed : 0;
        rc = kiln_budget_solve(items, n_items, room, 0, pick, &res, err);
        if (rc < 0 && res.min_bytes + fixed > r->budget_bytes) {
            uint64_t least = res.min_bytes + fixed;
            rc = kiln_fail(err, path, NULL, -1,
                           "the budget, %llu bytes (%.4f bits per weight), is below the smallest file these rows "
                           "allow, %llu bytes (%.4f bits per weight)",
                           (unsigned long long)r->budget_bytes, (double)r->budget_bytes * 8 / (double)r->n_elements,
                           (unsigned long long)least, (double)least * 8 / (double)r->n_elements);
        } else if (rc < 0) {
            kiln_err inner = *err;
            rc = kiln_fail(err, path, NULL, -1, "%s", inner.msg);
        }
    }
    for (size_t i = 0; rc == 0 && i < n_items; i++) {
        kiln_quant_tensor *q = &r->tensors[item_tensor[i]];
        const kiln_budget_choice *c = &items[i].choices[pick[i]];
        uint64_t bytes = kiln_type_row_bytes(c->type, (uint64_t)q->ne[0]) * (uint64_t)(q->ne[1] * q->ne[2] * q->ne[3]);
        r->bytes_out = r->bytes_out - q->bytes_out + bytes;
        r->n_quantized += (c->type != q->plan.from) - (q->plan.to != q->plan.from);
        q->bytes_out = bytes;
        q->dkld = c->dkld;
        q->plan = (kiln_tensor_plan){.from = q->plan.from, .to = c->type, .wanted = c->type,
                                     .needs_imatrix = needs_imatrix(c->type, q->name), .why = KILN_WHY_BUDGET,
                                     .override_idx = -1};
    }
    if (rc == 0) {
        r->file_bytes = fixed + res.bytes;
        r->estimated_kld = res.dkld;
        r->kld_lower_bound = res.lower_bound;
        r->budget_exact = res.exact;
        r->ftype = mix_ftype(r);
    }
    free(ch);
    free(items);
    free(item_tensor);
    free(pick);
    free(seen);
    return rc;
}
