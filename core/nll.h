/* core/nll.h - the negative log-likelihood of one token under a row of
 * logits, in llama-perplexity's precision. Perplexity (golden/) and the
 * imatrix tool's running PPL (imatrix/) both report it, and must print the
 * same digits as llama.cpp, so there is exactly one implementation. */
#ifndef KILN_NLL_H
#define KILN_NLL_H

#include <stdint.h>

/* -log softmax(row)[tok] the way llama-perplexity computes it: float max,
 * double sum of expf(x - max), float difference of the token's logit and
 * the max. Keeping these roundings is what makes PPL agree to the last
 * printed digit. */
double kiln_nll(const float *row, int64_t n_vocab, int32_t tok);

#endif
