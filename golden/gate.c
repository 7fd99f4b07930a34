/* golden/gate.c - the pass/fail rules of `kiln golden check`: which
 * figure each threshold bounds and how a failure is named (see check.h).
 * Kept apart from the evaluation so the rules can be tested alone. */
#include "check.h"

#include <math.h>
#include <stdio.h>

kiln_golden_thresholds kiln_golden_no_thresholds(void) {
    return (kiln_golden_thresholds){NAN, NAN, NAN, NAN};
}

static void fail_if(kiln_golden_report *rep, bool bad, const char *what, double v, const char *op, double limit,
                    const char *option) {
    if (!bad || rep->n_failed >= 4) return;
    snprintf(rep->failed[rep->n_failed++], sizeof rep->failed[0], "%s %.6g %s %.6g (%s)", what, v, op, limit, option);
}

/* NAN thresholds never fail; a NaN figure always does. */
void kiln_golden_apply_thresholds(kiln_golden_report *rep, const kiln_golden_thresholds *t) {
    rep->n_failed = 0;
    const kiln_cmp_summary *s = &rep->all;
    fail_if(rep, !isnan(t->max_kld) && !(s->kld.val <= t->max_kld), "kld_mean", s->kld.val, ">", t->max_kld,
            "--max-kld");
    fail_if(rep, !isnan(t->min_top1) && !(s->same_top.val >= t->min_top1), "top1_agreement", s->same_top.val, "<",
            t->min_top1, "--min-top1");
    fail_if(rep, !isnan(t->max_abs) && !(s->max_abs <= t->max_abs), "max_abs", s->max_abs, ">", t->max_abs,
            "--max-abs");
    fail_if(rep, !isnan(t->max_ppl_ratio) && !(s->ppl_ratio.val <= t->max_ppl_ratio), "ppl_ratio", s->ppl_ratio.val,
            ">", t->max_ppl_ratio, "--max-ppl-ratio");
    rep->passed = rep->n_failed == 0;
}

