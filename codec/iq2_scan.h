/* codec/iq2_scan.h - the neighbour scan of the 2-bit grid searches
 * (IQ2_XXS, IQ2_XS, IQ2_S), reading each candidate as its 16-bit key.
 *
 * It answers what grid_search.h's generic scan answers for 8 coordinates:
 * the candidate minimising sum_i w[i] * (scale * q_i - x[i])^2, summed in
 * i order, first on ties. It is faster because a coordinate has only three
 * levels (q = 1, 3, 5): the 24 possible terms are computed once per call,
 * exactly as the sum would compute them, and each candidate's distance is
 * then 8 table look-ups and adds, in the same order, so the same floats.
 * Reading 2 bytes a candidate instead of 8 also keeps the lists in cache. */
#ifndef KILN_IQ2_SCAN_H
#define KILN_IQ2_SCAN_H

#include <stdint.h>

/* Scans candidates keys[0..n) (key: level of coordinate i in bits 2i..2i+1;
 * npad >= n a multiple of 16 whose padding repeats the last key). Returns
 * the position j minimising sum_i w[i] * (scale * (2 l_i + 1) - x[i])^2;
 * the first on ties (ggml's strict '<'); 0 when every distance is
 * FLT_MAX or more, or NaN. */
typedef int (*kiln_iq2_scan_fn)(const uint16_t *keys, int n, int npad, const float *x, const float *w,
                                float scale);

/* The scan for the SIMD level kiln_simd() allows now. Never NULL. */
kiln_iq2_scan_fn kiln_iq2_scan_pick(void);

/* The scalar reference, whatever the SIMD level (tests compare with it). */
int kiln_iq2_scan_scalar(const uint16_t *keys, int n, int npad, const float *x, const float *w, float scale);

#endif
