/* codec/iq2_search.h - the steps of ggml's 2-bit grid searches that
 * IQ2_XXS, IQ2_XS and IQ2_S take alike (written anew for kiln, in ggml's
 * order of operations so that the blocks are llama.cpp's):
 *
 *   - rounding 8 magnitudes to the 3-level lattice and, off the grid,
 *     moving to the neighbour of best weighted fit (the scan itself is
 *     iq2_scan.h's; the sign split and fit sums are grid_search.h's,
 *     shared with IQ3),
 *   - IQ2_XS's and IQ2_S's whole search of a group of 16 (19 trial scales,
 *     then a refit of the groups of 8 that fell off the grid).
 *
 * What differs per type (weights, sign storage, scale packing) stays in
 * iq2_xxs.c, iq2_xs.c and iq2_s.c. */
#ifndef KILN_IQ2_SEARCH_H
#define KILN_IQ2_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "grid_search.h"
#include "iq2_scan.h"
#include "iq2_tables.h"

/* A grid's neighbour map with the scan for the current SIMD level. */
typedef struct kiln_iq2_ctx {
    const kiln_iq2_search *s;
    kiln_iq2_scan_fn scan;
    uint32_t (*round)(const float *xval, float id, int8_t *L); /* levels and key */
} kiln_iq2_ctx;

/* Fills *c for grid `id` at the SIMD level kiln_simd() allows now.
 * Returns 0, or -1 when the neighbour map could not be built (out of
 * memory). */
int kiln_iq2_ctx_init(kiln_iq2_ctx *c, kiln_iq2_grid_id id);

/* Rounds 8 magnitudes at inverse scale `id` to lattice levels 0..2 and, if
 * that point is off the grid, moves to its best neighbour at `scale`
 * (weights waux). Writes the levels to L, whether the rounded point was on
 * the grid to *on_grid (unless NULL), and returns the grid index. */
int kiln_iq2_to_grid(const kiln_iq2_ctx *c, const float *xval, const float *waux, float id, float scale,
                     int8_t *L, bool *on_grid);

/* ggml's search of one group of 16 for IQ2_XS and IQ2_S (the caller has
 * checked that max(xval) is not negligible): chooses the two grid points
 * (gidx[2]) and returns the group's fitted scale, which may be negative
 * (the caller then flips the group's signs). */
float kiln_iq2_search16(const kiln_iq2_ctx *c, const float *xval, const float *weight, const float *waux,
                        uint16_t gidx[2]);

#endif
