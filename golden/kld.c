/* golden/kld.c - per-position distribution comparison and its statistics
 * (see kld.h). */
#include "kld.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* log of sum(exp(row)) in double, and the argmax. */
static double log_sum_exp(const float *row, int64_t n, int64_t *argmax) {
    int64_t im = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[im]) im = i;
    double max = row[im], sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)row[i] - max);
    *argmax = im;
    return max + log(sum);
}

void kiln_compare_row(const float *ref, const float *test, int64_t n_vocab, int32_t next, kiln_pos_cmp *out) {
    int64_t top_ref, top_test;
    double lse_ref = log_sum_exp(ref, n_vocab, &top_ref);
    double lse_test = log_sum_exp(test, n_vocab, &top_test);
    double kld = 0, max_abs = 0, sq = 0, dot = 0, nr = 0, nt = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        double lr = ref[i] - lse_ref, lt = test[i] - lse_test;
        kld += exp(lr) * (lr - lt);
        double d = (double)test[i] - ref[i];
        if (fabs(d) > max_abs) max_abs = fabs(d);
        sq += d * d;
        dot += (double)ref[i] * test[i];
        nr += (double)ref[i] * ref[i];
        nt += (double)test[i] * test[i];
    }
    *out = (kiln_pos_cmp){
        /* rounding can make a KLD of identical rows a hair negative */
        .kld = kld > 0 ? kld : 0,
        .max_abs = max_abs,
        .sum_sq = sq,
        .cosine = nr > 0 && nt > 0 ? dot / sqrt(nr * nt) : (nr == nt ? 1 : 0),
        .same_top = top_ref == top_test,
    };
    if (next >= 0) {
        out->scored = true;
        out->nll_ref = kiln_nll(ref, n_vocab, next);
        out->nll_test = kiln_nll(test, n_vocab, next);
        out->p_diff = exp(-out->nll_test) - exp(-out->nll_ref);
    }
}

void kiln_compare_rows(const float *ref, const float *test, int64_t n, int64_t n_vocab, const int32_t *next,
                       kiln_pos_cmp *out) {
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t i = 0; i < n; i++)
        kiln_compare_row(ref + i * n_vocab, test + i * n_vocab, n_vocab, next ? next[i] : -1, &out[i]);
}

static int push(float **v, uint64_t *cap, uint64_t n, double x, kiln_err *err) {
    if (n == *cap) {
        uint64_t c = *cap ? *cap * 2 : 1024;
        float *p = realloc(*v, c * sizeof *p);
        if (!p) return kiln_fail(err, NULL, NULL, -1, "out of memory");
        *v = p;
        *cap = c;
    }
    (*v)[n] = (float)x;
    return 0;
}

int kiln_cmp_add(kiln_cmp_acc *a, const kiln_pos_cmp *c, int64_t n_vocab, kiln_err *err) {
    if (push(&a->klds, &a->cap_klds, a->count, c->kld, err)) return -1;
    if (c->scored && push(&a->p_diffs, &a->cap_p_diffs, a->n_scored, c->p_diff, err)) return -1;
    if (a->count == 0 || c->cosine < a->cosine_min) a->cosine_min = c->cosine;
    a->count++;
    a->sum_kld += c->kld;
    a->sum_kld2 += c->kld * c->kld;
    if (c->kld > a->max_kld) a->max_kld = c->kld;
    a->n_same_top += c->same_top;
    if (c->max_abs > a->max_abs) a->max_abs = c->max_abs;
    a->sum_sq += c->sum_sq;
    a->n_elems += (uint64_t)n_vocab;
    if (c->scored) {
        a->n_scored++;
        a->sum_nll += c->nll_test;
        a->sum_nll2 += c->nll_test * c->nll_test;
        a->sum_nll_ref += c->nll_ref;
        a->sum_nll_ref2 += c->nll_ref * c->nll_ref;
        a->sum_nll_nll_ref += c->nll_test * c->nll_ref;
        a->sum_p_diff += c->p_diff;
        a->sum_p_diff2 += c->p_diff * c->p_diff;
        a->sum_p_diff4 += c->p_diff * c->p_diff * c->p_diff * c->p_diff;
    }
    return 0;
}

void kiln_cmp_free(kiln_cmp_acc *a) {
    free(a->klds);
    free(a->p_diffs);
    memset(a, 0, sizeof *a);
}

kiln_value_unc kiln_mean_unc(double sum, double sum2, uint64_t count) {
    if (count < 1) return (kiln_value_unc){0, 0};
    double f = sum / count, df = sum2 / count - f * f;
    return (kiln_value_unc){f, df > 0 && count > 10 ? sqrt(df / (count - 1)) : 0};
}

double kiln_percentile(const float *v, uint64_t n, double fraction) {
    if (n == 0) return 0;
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    double p = fraction * (n - 1);
    uint64_t ip = (uint64_t)p;
    p -= ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static double median(const float *v, uint64_t n) {
    if (n == 0) return 0;
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2] + v[n / 2 - 1]);
}

static int cmp_float(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

void kiln_cmp_running(const kiln_cmp_acc *a, kiln_cmp_summary *s) {
    memset(s, 0, sizeof *s);
    s->count = a->count;
    s->n_scored = a->n_scored;
    if (a->count == 0) return;
    uint64_t n = a->count;
    s->kld = kiln_mean_unc(a->sum_kld, a->sum_kld2, n);
    s->kld_max = a->max_kld;
    double p = (double)a->n_same_top / n;
    s->same_top = (kiln_value_unc){p, n > 1 ? sqrt(p * (1 - p) / (n - 1)) : 0};
    s->max_abs = a->max_abs;
    s->rmse = a->n_elems ? sqrt(a->sum_sq / a->n_elems) : 0;
    s->cosine_min = a->cosine_min;

    uint64_t m = a->n_scored;
    if (m == 0) return;
    kiln_value_unc lt = kiln_mean_unc(a->sum_nll, a->sum_nll2, m);
    kiln_value_unc lr = kiln_mean_unc(a->sum_nll_ref, a->sum_nll_ref2, m);
    double cov = m < 10 ? 0 : (a->sum_nll_nll_ref / m - (a->sum_nll / m) * (a->sum_nll_ref / m)) / (m - 1);
    s->ppl = (kiln_value_unc){exp(lt.val), exp(lt.val) * lt.unc};
    s->ppl_ref = (kiln_value_unc){exp(lr.val), exp(lr.val) * lr.unc};
    s->ln_ppl_cor = lt.unc > 0 && lr.unc > 0 ? cov / (lt.unc * lr.unc) : 0;
    double ratio_var = lt.unc * lt.unc + lr.unc * lr.unc - 2 * cov;
    s->ln_ppl_ratio = (kiln_value_unc){lt.val - lr.val, ratio_var > 0 ? sqrt(ratio_var) : 0};
    s->ppl_ratio = (kiln_value_unc){exp(s->ln_ppl_ratio.val), exp(s->ln_ppl_ratio.val) * s->ln_ppl_ratio.unc};
    double diff_var = s->ppl.unc * s->ppl.unc + s->ppl_ref.unc * s->ppl_ref.unc - 2 * s->ppl.val * s->ppl_ref.val * cov;
    s->ppl_diff = (kiln_value_unc){s->ppl.val - s->ppl_ref.val, diff_var > 0 ? sqrt(diff_var) : 0};
    s->p_diff = kiln_mean_unc(a->sum_p_diff, a->sum_p_diff2, m);
    kiln_value_unc mse = kiln_mean_unc(a->sum_p_diff2, a->sum_p_diff4, m);
    double rms = sqrt(mse.val);
    s->p_diff_rms = (kiln_value_unc){rms, rms > 0 ? 0.5 / rms * mse.unc : 0};
}

void kiln_cmp_summarize(kiln_cmp_acc *a, kiln_cmp_summary *s) {
    kiln_cmp_running(a, s);
    if (a->count == 0) return;
    qsort(a->klds, a->count, sizeof *a->klds, cmp_float);
    const float *k = a->klds;
    uint64_t n = a->count;
    s->kld_min = k[0];
    s->kld_median = median(k, n);
    s->kld_p01 = kiln_percentile(k, n, 0.01);
    s->kld_p10 = kiln_percentile(k, n, 0.10);
    s->kld_p90 = kiln_percentile(k, n, 0.90);
    s->kld_p95 = kiln_percentile(k, n, 0.95);
    s->kld_p99 = kiln_percentile(k, n, 0.99);
    s->kld_p999 = kiln_percentile(k, n, 0.999);
    uint64_t m = a->n_scored;
    if (m == 0) return;
    qsort(a->p_diffs, m, sizeof *a->p_diffs, cmp_float);
    s->p_diff_min = a->p_diffs[0];
    s->p_diff_max = a->p_diffs[m - 1];
    s->p_diff_median = median(a->p_diffs, m);
}
