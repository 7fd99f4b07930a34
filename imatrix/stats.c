/* imatrix/stats.c - per-tensor statistics and expert coverage of an
 * importance matrix, as a table or JSON (see stats.h). */
#include "stats.h"

#include "../core/escape.h"
#include "../core/gguf.h"
#include "../core/jsonw.h"

#include <stdlib.h>
#include <string.h>

kiln_imx_tstat *kiln_imx_stats(const kiln_imatrix *im, kiln_err *err) {
    kiln_imx_tstat *st = calloc(im->n_entries ? im->n_entries : 1, sizeof *st);
    if (!st) {
        kiln_fail(err, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    for (uint64_t i = 0; i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        kiln_imx_tstat *s = &st[i];
        s->name = e->name;
        s->layer = kiln_tensor_layer(e->name);
        s->n = e->n;
        s->n_mat = e->n_mat;
        int64_t with_data = 0, zero = 0;
        for (int64_t m = 0; m < e->n_mat; m++) {
            s->tokens += e->counts[m];
            if (e->counts[m] <= 0) {
                zero += e->n;
                continue;
            }
            s->n_covered++;
            for (int64_t j = 0; j < e->n; j++) {
                double v = e->in_sum2[m * e->n + j];
                s->sum += v;
                if (v > s->max) s->max = v;
                if (v == 0) zero++;
                with_data++;
            }
        }
        s->mean = with_data ? s->sum / (double)with_data : 0;
        s->zero_share = (double)zero / (double)(e->n * e->n_mat);
    }
    return st;
}

/* Row order for people: layers numerically (blk.2 before blk.10), then
 * by name; entries outside blocks last. */
static const kiln_imx_tstat *g_sort_st;
static int by_layer(const void *a, const void *b) {
    const kiln_imx_tstat *x = &g_sort_st[*(const uint64_t *)a], *y = &g_sort_st[*(const uint64_t *)b];
    uint64_t lx = (uint64_t)x->layer, ly = (uint64_t)y->layer; /* -1 sorts last */
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

static uint64_t *row_order(const kiln_imatrix *im, const kiln_imx_tstat *st) {
    uint64_t *ord = malloc((im->n_entries ? im->n_entries : 1) * sizeof *ord);
    if (!ord) return NULL;
    for (uint64_t i = 0; i < im->n_entries; i++) ord[i] = i;
    g_sort_st = st;
    qsort(ord, im->n_entries, sizeof *ord, by_layer);
    return ord;
}

void kiln_imx_stats_table(FILE *out, const kiln_imatrix *im, const kiln_imx_tstat *st) {
    uint64_t *ord = row_order(im, st);
    if (!ord) return;
    fprintf(out, "%-34s %6s %4s %10s %11s %11s %11s %6s %8s\n", "tensor", "cols", "mats", "tokens", "sum(x2) sum",
            "mean", "max", "zero%", "experts");
    for (uint64_t k = 0; k < im->n_entries; k++) {
        const kiln_imx_tstat *s = &st[ord[k]];
        char cover[32];
        snprintf(cover, sizeof cover, "%lld/%lld", (long long)s->n_covered, (long long)s->n_mat);
        fprintf(out, "%-34s %6lld %4lld %10.0f %11.4g %11.4g %11.4g %5.1f%% %8s\n", kiln_esc(s->name).s, (long long)s->n,
                (long long)s->n_mat, s->tokens, s->sum, s->mean, s->max, 100 * s->zero_share, cover);
    }
    fprintf(out, "%llu tensors, %u chunks of %u tokens\n", (unsigned long long)im->n_entries, im->chunk_count,
            im->chunk_size);
    free(ord);
}

void kiln_imx_stats_json(FILE *out, const kiln_imatrix *im, const kiln_imx_tstat *st) {
    uint64_t *ord = row_order(im, st);
    if (!ord) return;
    kiln_jsonw *w = malloc(sizeof *w);
    if (!w) {
        free(ord);
        return;
    }
    kiln_jw_init(w, out, false);
    kiln_jw_obj(w);
    kiln_jw_kv_str(w, "schema", "kiln.imatrix.stats/1");
    kiln_jw_kv_uint(w, "chunk_count", im->chunk_count);
    kiln_jw_kv_uint(w, "chunk_size", im->chunk_size);
    kiln_jw_key(w, "datasets");
    kiln_jw_arr(w);
    for (uint64_t i = 0; i < im->n_datasets; i++) kiln_jw_str(w, im->datasets[i]);
    kiln_jw_end_arr(w);
    kiln_jw_key(w, "tensors");
    kiln_jw_arr(w);
    for (uint64_t k = 0; k < im->n_entries; k++) {
        const kiln_imx_tstat *s = &st[ord[k]];
        const kiln_imatrix_entry *e = &im->entries[ord[k]];
        kiln_jw_obj(w);
        kiln_jw_kv_str(w, "name", s->name);
        kiln_jw_key(w, "layer");
        if (s->layer >= 0) kiln_jw_int(w, s->layer);
        else kiln_jw_null(w);
        kiln_jw_kv_int(w, "columns", s->n);
        kiln_jw_kv_int(w, "matrices", s->n_mat);
        kiln_jw_kv_real(w, "tokens", s->tokens);
        kiln_jw_kv_real(w, "sum2_sum", s->sum);
        kiln_jw_kv_real(w, "sum2_mean", s->mean);
        kiln_jw_kv_real(w, "sum2_max", s->max);
        kiln_jw_kv_real(w, "zero_share", s->zero_share);
        kiln_jw_kv_int(w, "experts_covered", s->n_covered);
        kiln_jw_key(w, "experts_uncovered");
        kiln_jw_arr(w);
        for (int64_t m = 0; m < e->n_mat; m++)
            if (e->counts[m] <= 0) kiln_jw_int(w, m);
        kiln_jw_end_arr(w);
        kiln_jw_end_obj(w);
    }
    kiln_jw_end_arr(w);
    kiln_jw_end_obj(w);
    kiln_jw_finish(w);
    free(w);
    free(ord);
}

/* "3 5 7": the experts of e that got no tokens, or "" when all did. */
static void uncovered_list(const kiln_imatrix_entry *e, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int64_t m = 0; m < e->n_mat && k + 24 < cap; m++)
        if (e->counts[m] <= 0) k += (size_t)snprintf(out + k, cap - k, k ? " %lld" : "%lld", (long long)m);
}

/* Short form of a block weight's name: "ffn_up_exps" for
 * "blk.3.ffn_up_exps.weight". */
static void short_name(const char *name, char *out, size_t cap) {
    const char *p = name;
    if (!strncmp(p, "blk.", 4) && (p = strchr(p + 4, '.'))) p++;
    else p = name;
    size_t n = strlen(p);
    if (n > 7 && !strcmp(p + n - 7, ".weight")) n -= 7;
    kiln_escape(out, cap, p, n, 0); /* for printing */
}

int64_t kiln_imx_coverage_report(FILE *out, const kiln_imatrix *im) {
    kiln_imx_tstat *st = kiln_imx_stats(im, NULL);
    uint64_t *ord = st ? row_order(im, st) : NULL;
    int64_t n_weights = 0;
    char line[4096] = "", set[2048], prev[2048] = "", sn[256];
    int64_t prev_layer = -2;
    for (uint64_t k = 0; ord && k <= im->n_entries; k++) {
        const kiln_imatrix_entry *e = k < im->n_entries ? &im->entries[ord[k]] : NULL;
        if (e) uncovered_list(e, set, sizeof set);
        bool partial = e && e->n_mat > 1 && set[0];
        int64_t layer = e ? st[ord[k]].layer : -3;
        /* A layer's expert weights share one routing, so they normally
         * share one set of idle experts: one line for all of them. */
        if (line[0] && (!e || layer != prev_layer || (partial && strcmp(set, prev)))) {
            fprintf(out, "%s) kept with count 0\n", line);
            line[0] = 0;
        }
        if (!partial) continue;
        n_weights++;
        short_name(e->name, sn, sizeof sn);
        size_t len = strlen(line);
        if (!line[0])
            snprintf(line, sizeof line, "layer %lld: expert%s %s of %lld got no calibration tokens (%s",
                     (long long)layer, strchr(set, ' ') ? "s" : "", set, (long long)e->n_mat, sn);
        else snprintf(line + len, sizeof line - len, ", %s", sn);
        snprintf(prev, sizeof prev, "%s", set);
        prev_layer = layer;
    }
    free(ord);
    free(st);
    return n_weights;
}
