/* golden/check.h - `kiln golden check`: evaluates a model on a golden
 * file's token ids and compares its logits with the stored ones, position
 * by position (kld.h), per prompt and overall, against thresholds.
 *
 * Thresholds (NAN = not checked) and the figure each one bounds:
 *   max_kld        mean KL(ref || model) over all positions, nats
 *   min_top1       fraction of positions whose argmax agrees
 *   max_abs        largest |logit difference| anywhere
 *   max_ppl_ratio  PPL(model) / PPL(ref) on the prompts (each position
 *                  scored against the prompt's next token)
 * A check that fails is named in report.failed, e.g.
 * "kld_mean 0.0477 > 0.0001 (--max-kld)". */
#ifndef KILN_CHECK_H
#define KILN_CHECK_H

#include <stdbool.h>

#include "fingerprint.h"
#include "golden_file.h"
#include "kld.h"

typedef struct kiln_golden_thresholds {
    double max_kld, min_top1, max_abs, max_ppl_ratio;
} kiln_golden_thresholds;

/* All thresholds unset. */
kiln_golden_thresholds kiln_golden_no_thresholds(void);

typedef struct kiln_golden_report {
    uint32_t n_prompts;
    uint32_t *n_tokens;            /* per prompt */
    kiln_cmp_summary *prompts;     /* per prompt */
    kiln_cmp_summary all;
    kiln_fp_relation relation;     /* model vs the golden file's model */
    json_t *model;                 /* the checked model's fingerprint */
    bool passed;
    int n_failed;
    char failed[4][128];
    double seconds;
} kiln_golden_report;

/* Fills *rep (free with kiln_golden_report_free). Returns 0 whether or not
 * the thresholds hold (see rep->passed), -1 when the check cannot run:
 * another vocabulary size, an id the model does not have, an eval error. */
int kiln_golden_check(const kiln_model *m, const kiln_golden *g, const kiln_golden_thresholds *t,
                      kiln_numeric_mode mode, int64_t n_batch, kiln_golden_report *rep, kiln_err *err);

void kiln_golden_report_free(kiln_golden_report *rep);

/* Sets rep->passed and rep->failed from rep->all and `t` (done by
 * kiln_golden_check; separate so the rules can be tested alone). */
void kiln_golden_apply_thresholds(kiln_golden_report *rep, const kiln_golden_thresholds *t);

#endif
