/* codec/iq1_search.h - the steps IQ1_S (iq1_s.c) and IQ1_M (iq1_m.c)
 * share, as ggml's quantizers take them, so that both give llama.cpp's
 * bytes: the sort of a group's weights, and the move of an off-grid point
 * to its best neighbour. */
#ifndef KILN_IQ1_SEARCH_H
#define KILN_IQ1_SEARCH_H

#include "iq1_tables.h"

#include <stdbool.h>

/* Writes to order[0..n) the indices of x sorted by value ascending,
 * equal values in index order: the permutation glibc's qsort (a stable
 * merge sort for arrays this small) gives ggml's float comparison. */
void kiln_iq1_sort(const float *x, int n, int *order);

/* The 8 levels L (0..2) of a group as a point: if it is on the grid,
 * returns its index; otherwise the neighbour (iq1_tables.h) minimising
 * sum_i w[i] * (scale * shift[L'_i] - x[i])^2 over the neighbours' levels
 * L', summed in i order, the first on ties, and rewrites L with its
 * levels, and sets *moved. shift[] holds the three values a level stands
 * for (-1, 0, 1 plus the group's shift). t must come from
 * kiln_iq1_search_tables(). A list where no distance is below FLT_MAX
 * (huge weights overflowing) yields its first entry: ggml reads out of
 * bounds there. */
int kiln_iq1_to_grid(const kiln_iq1_tables *t, int8_t L[8], const float *x, const float *w, float scale,
                     const float shift[3], bool *moved);

#endif
