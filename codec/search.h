/* codec/search.h - the scale searches shared by several block formats,
 * and the small steps around them that every codec takes the same way.
 *
 * These are the same searches ggml runs (written anew for kiln), so that
 * kiln's blocks match llama.cpp's. Each kiln_make_* takes `n` values `x`
 * (n <= 64 for the qkx searches, as in every format), picks a scale (and
 * for the qkx variants a minimum) and writes the integer levels to L.
 * `weights`/`qw` are per-value importances (NULL = default). All return
 * the chosen scale. Not here: anything that knows a block layout. */
#ifndef KILN_SEARCH_H
#define KILN_SEARCH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* ggml's GROUP_MAX_EPS: a group (or block) whose largest |x| is below this
 * is stored as all zeros. */
#define KILN_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, exactly as ggml's nearest_int (adding
 * 1.5 * 2^23 leaves the integer in the low mantissa bits); |f| must be
 * below 4194303. */
static inline int kiln_nearest_int(float f) {
    float val = f + 12582912.f;
    int32_t i;
    __builtin_memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The value of largest magnitude among x[0..n) (the first on ties), its
 * magnitude in *amax; 0 and 0 when all are zero. ggml derives most scales
 * from this signed value, so the sign of the extreme decides the sign of
 * the scale. */
static inline float kiln_max_magnitude(const float *x, int n, float *amax) {
    float max = 0, a = 0;
    for (int i = 0; i < n; ++i) {
        /* written as selects, which GCC compiles without a branch: on real
         * weights a branch here mispredicts often */
        float ax = fabsf(x[i]);
        bool more = ax > a;
        max = more ? x[i] : max;
        a = more ? ax : a;
    }
    *amax = a;
    return max;
}

/* ggml's importance of each weight when an imatrix is given:
 * w[i] = qw[i] * sqrt(sigma2 + x[i]^2) (qw NULL counts as all ones), with
 * sigma2 a mean square the caller picks as its format does. Returns the sum
 * of the n weights, added in order. */
float kiln_importance_weights(int n, const float *x, const float *qw, float sigma2, float *w);

/* The last step of every k-quant: the levels of a block against its
 * sub-block scales as stored (rounded to the bits the format keeps). For
 * each of nsub sub-blocks j of n values (n a multiple of 16),
 * L = clamp(nearest((x + m[j]) / d[j]), lo, hi) - lo, where m NULL means no
 * offset. A sub-block whose d[j] is 0 keeps the levels L already holds
 * (the search's), as in ggml. Every SIMD level gives the same bytes. */
void kiln_levels_for_scales(int nsub, int n, const float *x, const float *d, const float *m,
                            int lo, int hi, uint8_t *L);

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
