/* codec/grid_search.h - the steps of ggml's lattice-grid searches that the
 * 2-bit (IQ2_XXS, IQ2_XS, IQ2_S) and 3-bit (IQ3_XXS, IQ3_S) quantizers
 * take alike, whatever the grid's number of coordinates:
 *
 *   - the neighbour scan: for a point that rounded off the grid, the list
 *     entry fitting the weights best - the hot loop, with AVX2 / AVX-512
 *     versions that pick exactly the scalar entry,
 *   - the weighted fit sums of a group at its lattice levels,
 *   - splitting the signs off groups of 8 with the even-parity rule (the
 *     eighth sign is implied, so only 7 bits are stored).
 *
 * Written anew for kiln in ggml's order of operations, so that the blocks
 * are llama.cpp's byte for byte. What knows a grid (its key packing, its
 * neighbour map) stays in iq2_search.c and iq3_search.c. */
#ifndef KILN_GRID_SEARCH_H
#define KILN_GRID_SEARCH_H

#include <stdint.h>

/* Scans one neighbour list of n candidates with `dim` coordinates each
 * (dim <= 8), stored coordinate-major: coordinate i of candidate j is
 * q[i * npad + j], npad a multiple of 16 whose padding lanes repeat the
 * last candidate. Returns the position j (not the grid index) minimising
 *   sum_i w[i] * (scale * q_i - x[i])^2,
 * summed in i order; the first on ties, as ggml's strict '<' scan; 0 when
 * every distance overflows. */
typedef int (*kiln_grid_scan_fn)(const uint8_t *q, int dim, int n, int npad, const float *x, const float *w,
                                 float scale);

/* The scan for the SIMD level kiln_simd() allows now. Never NULL. */
kiln_grid_scan_fn kiln_grid_scan_pick(void);

/* sum w * x * q and sum w * q * q over n values with q = 2L + 1 (the odd
 * model of the lattice levels both grid families use), summed in ggml's
 * order. */
void kiln_grid_lattice_sums(int n, const float *xval, const float *weight, const int8_t *L, float *sumqx,
                            float *sumq2);

/* Splits the signs off n8 groups of 8: xval = |x|, except that a group
 * with an odd count of negatives keeps its least important weight
 * (smallest weight * x^2, the first on ties) negative, since only 7 sign
 * bits are stored; signs[k] gets group k's 7 bits. */
void kiln_grid_split_signs(int n8, const float *x, const float *weight, float *xval, uint8_t *signs);

#endif
