/* golden/kld.h - comparing two models' next-token distributions, position
 * by position, and the statistics over many positions that `kiln
 * perplexity --kl-divergence` and `kiln golden check` report.
 *
 * "ref" is the reference (the base model, the golden file), "test" the
 * model under test. Per position: KL(softmax(ref) || softmax(test)) in nats,
 * computed in float64 over the whole vocabulary (llama-perplexity drops
 * base probabilities below e^-16 and stores 16-bit log-probs; kiln keeps the
 * exact sum); whether the argmaxes agree; the logits' max |difference|,
 * squared error and cosine; and, when the next token is known, both
 * models' negative log-likelihood of it and the probability difference
 * dp = p_test - p_ref. The summary follows llama-perplexity's definitions:
 * mean +/- sqrt(var / (n - 1)) (0 for n <= 10), percentiles interpolated
 * between sorted values, ln(PPL ratio) with the covariance of the two
 * log-likelihoods, RMS dp with its propagated uncertainty, and "same top"
 * +/- sqrt(p (1 - p) / (n - 1)). */
#ifndef KILN_KLD_H
#define KILN_KLD_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/nll.h"

typedef struct kiln_pos_cmp {
    double kld;
    double max_abs, sum_sq, cosine;
    bool same_top;
    bool scored;               /* next token known: the fields below are set */
    double nll_ref, nll_test;
    double p_diff;             /* p_test(next) - p_ref(next) */
} kiln_pos_cmp;

/* Compares one position; next < 0 when there is no next token. */
void kiln_compare_row(const float *ref, const float *test, int64_t n_vocab, int32_t next, kiln_pos_cmp *out);

/* Compares n rows in parallel: row i's next token is next[i] (next may be
 * NULL: none known). */
void kiln_compare_rows(const float *ref, const float *test, int64_t n, int64_t n_vocab, const int32_t *next,
                       kiln_pos_cmp *out);

typedef struct kiln_cmp_acc {
    uint64_t count, n_scored, n_same_top, n_elems;
    double sum_kld, sum_kld2, max_kld, max_abs, sum_sq, cosine_min;
    double sum_nll, sum_nll2, sum_nll_ref, sum_nll_ref2, sum_nll_nll_ref;
    double sum_p_diff, sum_p_diff2, sum_p_diff4;
    float *klds, *p_diffs;     /* every position's KLD and every scored dp */
    uint64_t cap_klds, cap_p_diffs;
} kiln_cmp_acc;

/* Zero-initialise an accumulator with `= {0}`; free with kiln_cmp_free. */
int kiln_cmp_add(kiln_cmp_acc *a, const kiln_pos_cmp *c, int64_t n_vocab, kiln_err *err);
void kiln_cmp_free(kiln_cmp_acc *a);

typedef struct kiln_value_unc {
    double val, unc;
} kiln_value_unc;

typedef struct kiln_cmp_summary {
    uint64_t count, n_scored;
    kiln_value_unc kld;        /* mean */
    double kld_min, kld_p01, kld_p10, kld_median, kld_p90, kld_p95, kld_p99, kld_p999, kld_max;
    kiln_value_unc same_top;   /* fraction */
    double max_abs, rmse, cosine_min;
    /* over scored positions */
    kiln_value_unc ppl, ppl_ref, ln_ppl_ratio, ppl_ratio, ppl_diff;
    double ln_ppl_cor;         /* correlation of the two log-likelihoods */
    kiln_value_unc p_diff, p_diff_rms;
    double p_diff_min, p_diff_median, p_diff_max;
} kiln_cmp_summary;

/* Summarises (sorting the accumulator's value arrays in place). */
void kiln_cmp_summarize(kiln_cmp_acc *a, kiln_cmp_summary *s);

/* The figures that need no sorting (means, uncertainties, ratios, max
 * abs, RMSE, cosine, KLD max), cheap enough to print after every chunk;
 * percentiles and medians are left 0. */
void kiln_cmp_running(const kiln_cmp_acc *a, kiln_cmp_summary *s);

/* llama-perplexity's mean +/- uncertainty of a sum and sum of squares. */
kiln_value_unc kiln_mean_unc(double sum, double sum2, uint64_t count);

/* Value at `fraction` of sorted values, interpolated (llama-perplexity). */
double kiln_percentile(const float *sorted, uint64_t n, double fraction);

#endif
