/* imatrix/ppl.h - the running perplexity llama-imatrix prints while it
 * collects: over each chunk's second half only (positions n_ctx/2 ..
 * n_ctx-2 predicting the next token), so every scored token has at least
 * half a chunk of context. log-softmax as llama.cpp computes it (float
 * exp, double sum); the estimate and its error as its final line. */
#ifndef KILN_IMATRIX_PPL_H
#define KILN_IMATRIX_PPL_H

#include <stdint.h>

typedef struct kiln_imx_ppl {
    double nll, nll2; /* sums of -log p and its square */
    int64_t count;    /* tokens scored */
} kiln_imx_ppl;

/* Scores one chunk: `logits` are n_ctx rows of n_vocab (row i after
 * reading tokens[0..i]), `tokens` the chunk as evaluated. */
void kiln_imx_ppl_add(kiln_imx_ppl *p, const float *logits, const int32_t *tokens, int64_t n_ctx, int64_t n_vocab);

/* exp(mean nll); 0 before anything was scored. */
double kiln_imx_ppl_value(const kiln_imx_ppl *p);

/* The +/- llama-imatrix prints with its final estimate; 0 if undefined. */
double kiln_imx_ppl_error(const kiln_imx_ppl *p);

#endif
