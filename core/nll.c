/* core/nll.c - see nll.h. */
#include "nll.h"

#include <math.h>

double kiln_nll(const float *row, int64_t n_vocab, int32_t tok) {
    float max = row[0];
    for (int64_t i = 1; i < n_vocab; i++)
        if (row[i] > max) max = row[i];
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; i++) sum += expf(row[i] - max);
    return -((double)(row[tok] - max) - log(sum));
}
