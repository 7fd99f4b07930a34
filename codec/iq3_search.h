/* codec/iq3_search.h - ggml's search for one group of 32 weights of the
 * 3-bit grid formats (IQ3_XXS, IQ3_S), shared by their codecs.
 *
 * ggml writes both in one function (quantize_row_iq3_xxs_impl, and its
 * copy quantize_row_iq3_s_impl) that differs in a few constants; they are
 * the fields of kiln_iq3_variant. For each candidate scale the group's
 * 8 quadruples of magnitudes are rounded to levels 0..7 and, when a
 * quadruple is off the grid, replaced by its best-fitting neighbour (the
 * hot loop, grid_search.c's, shared with IQ2); the best scale is then
 * refitted once. */
#ifndef KILN_IQ3_SEARCH_H
#define KILN_IQ3_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "grid_search.h"
#include "iq3_tables.h"

typedef struct kiln_iq3_variant {
    int grid_size;      /* 256 or 512 */
    int steps;          /* candidate scales (15 + is * 0.2) / max for is in [-steps, steps] */
    bool refit_off_grid_only; /* the refit redoes only the quadruples that were off the grid
                               * (IQ3_XXS), else all of them (IQ3_S) */
} kiln_iq3_variant;

extern const kiln_iq3_variant kiln_iq3_xxs_variant, kiln_iq3_s_variant;

/* What one search needs: the variant, its neighbour map and the neighbour
 * scan of the SIMD level allowed now. */
typedef struct kiln_iq3_ctx {
    const kiln_iq3_variant *v;
    const kiln_iq3_search *s;
    kiln_grid_scan_fn scan;
} kiln_iq3_ctx;

/* Fills *c for variant v. Returns false (c unusable) when the neighbour
 * map could not be built (out of memory). */
bool kiln_iq3_ctx_init(kiln_iq3_ctx *c, const kiln_iq3_variant *v);

/* The 32 magnitudes xval (max their largest, > 0), their weights and
 * waux = sqrt(weights): writes the 8 grid indices to gidx and returns the
 * group's scale, which is negative in the case ggml then flips signs for. */
float kiln_iq3_search_group(const kiln_iq3_ctx *c, const float *xval, float max, const float *weight,
                            const float *waux, uint16_t gidx[8]);

/* ggml's per-weight importance of the 3-bit formats: with an imatrix
 * qw[i] * sqrt(sigma2 + x[i]^2), sigma2 being twice the block's mean
 * x^2; without one x[i]^2. Also writes waux = sqrt(weight). */
void kiln_iq3_weights(const float *xb, const float *qw, float sigma2, float *weight, float *waux);

/* sigma2 of a 256-weight block as ggml sums it. */
float kiln_iq3_sigma2(const float *xbl);

#endif
