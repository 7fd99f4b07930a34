/* quantize/search.h - the scale searches shared by several block formats.
 *
 * These are the same searches ggml runs (written anew for kiln), so that
 * kiln's blocks match llama.cpp's. Each takes `n` values `x`, picks a
 * scale (and for the *_min variants a minimum) and writes the integer
 * levels to L. `weights`/`qw` are per-value importances (NULL = default).
 * All return the chosen scale. */
#ifndef KILN_SEARCH_H
#define KILN_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

/* Round to nearest, ties away from zero's neighbour exactly as ggml's
 * nearest_int (the 12582912 magic-number trick); |x| must be < 4194303. */
static inline int kiln_nearest_int(float f) {
    float val = f + 12582912.f;
    int32_t i;
    __builtin_memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* Symmetric levels in [-nmax, nmax-1], stored in L as level + nmax.
 * rmse_type selects the weighting (ggml's make_qx_quants semantics). */
float kiln_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type,
                          const float *qw);

/* Symmetric 3-bit-style search (ggml's make_q3_quants). */
float kiln_make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse);

/* Asymmetric levels in [0, nmax] with a minimum: x ~ scale * L - min.
 * Writes -min to *the_min (ggml's make_qkx2_quants). Laux is scratch. */
float kiln_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                            float *the_min, uint8_t *Laux, float rmin, float rdelta,
                            int nstep, bool use_mad);

/* As above with ggml's make_qkx3_quants weighting (used with imatrix). */
float kiln_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                            float *the_min, uint8_t *Laux, float rmin, float rdelta,
                            int nstep, bool use_mad);

/* Positive-only levels in [0, nmax] for the sub-block scales themselves
 * (ggml's make_qp_quants). */
float kiln_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights);

#endif
