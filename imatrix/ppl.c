/* imatrix/ppl.c - llama-imatrix's running perplexity (see ppl.h). */
#include "ppl.h"

/* kiln_nll(): -log softmax(row)[tok] in llama.cpp's precision, the same
 * as llama-perplexity's and so as llama-imatrix's. */
#include "../core/nll.h"

#include <math.h>

void kiln_imx_ppl_add(kiln_imx_ppl *p, const float *logits, const int32_t *tokens, int64_t n_ctx, int64_t n_vocab) {
    int64_t first = n_ctx / 2;
    double nll = 0, nll2 = 0;
#pragma omp parallel for reduction(+ : nll, nll2) schedule(static)
    for (int64_t i = first; i < n_ctx - 1; i++) {
        double v = kiln_nll(logits + i * n_vocab, n_vocab, tokens[i + 1]);
        nll += v;
        nll2 += v * v;
    }
    p->nll += nll;
    p->nll2 += nll2;
    p->count += n_ctx - 1 - first > 0 ? n_ctx - 1 - first : 0;
}

double kiln_imx_ppl_value(const kiln_imx_ppl *p) {
    return p->count ? exp(p->nll / (double)p->count) : 0;
}

double kiln_imx_ppl_error(const kiln_imx_ppl *p) {
    if (p->count < 2) return 0;
    double mean = p->nll / (double)p->count, var = p->nll2 / (double)p->count - mean * mean;
    return var > 0 ? sqrt(var / (double)(p->count - 1)) * exp(mean) : 0;
}
