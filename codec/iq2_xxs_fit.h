/* codec/iq2_xxs_fit.h - kiln's own IQ2_XXS block search (not ggml's).
 *
 * ggml's search (iq2_xxs.c) rounds each group of 8 to the nearest lattice
 * point and only then looks at grid neighbours, models the grid levels as
 * 1:3:5 although the format decodes them as 8:25:43, fixes which weight
 * absorbs an odd sign count before choosing the point, and rounds each
 * group's scale to its 4 bits after the fact. This search instead scores
 * every one of the 256 grid points for every group of 8 at the decoded
 * levels, lets each point pick its own best weight to flip, and chooses
 * the block scale d and the 4-bit group scales jointly by the weighted
 * error they actually produce.
 *
 * It minimizes sum_i w[i] * (x[i] - y[i])^2 for caller-given weights; the
 * codec (iq2_xxs.c) decides the weights and whether to keep the result. */
#ifndef KILN_IQ2_XXS_FIT_H
#define KILN_IQ2_XXS_FIT_H

#include "blocks.h"

/* Per-thread scratch (72 KiB of score tables and the decoded grid). */
typedef struct kiln_iq2xxs_fit kiln_iq2xxs_fit;

/* Returns scratch for kiln_iq2xxs_fit_block, or NULL when out of memory.
 * Free with kiln_iq2xxs_fit_free (NULL is fine). */
kiln_iq2xxs_fit *kiln_iq2xxs_fit_new(void);
void kiln_iq2xxs_fit_free(kiln_iq2xxs_fit *f);

/* Encodes the 256 values x into *y, minimizing the w-weighted squared
 * error (w: 256 non-negative weights). A block with every |x| < 1e-15 is
 * stored as zeros. Deterministic; every SIMD level gives the same bytes. */
void kiln_iq2xxs_fit_block(kiln_iq2xxs_fit *f, const float *x, const float *w,
                           kiln_block_iq2_xxs *y);

#endif
