/* codec/scan_min.h - the running minimum that the AVX2 neighbour scans
 * (grid_search.c over byte coordinates, iq2_scan.c over 16-bit keys)
 * keep alike: eight lanes of (distance, candidate position), updated with
 * ggml's strict '<' so the first candidate wins a tie, padding lanes
 * (position >= n) never taken; at the end the lowest distance, ties to
 * the lower position - the scalar scan's answer. */
#ifndef KILN_SCAN_MIN_H
#define KILN_SCAN_MIN_H

#include "quants.h"

#ifdef KILN_X86
#include <float.h>

typedef struct kiln_min8 {
    __m256 best;    /* lowest distance per lane so far */
    __m256i at;     /* its candidate position */
    __m256i lane;   /* the positions of the lanes' current candidates */
    __m256i n;      /* the list's length, broadcast */
} kiln_min8;

KILN_AVX2 static inline kiln_min8 kiln_min8_start(int n) {
    return (kiln_min8){_mm256_set1_ps(FLT_MAX), _mm256_setzero_si256(), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                       _mm256_set1_epi32(n)};
}

/* Takes the distances d2 of the next eight candidates. */
KILN_AVX2 static inline void kiln_min8_take(kiln_min8 *m, __m256 d2) {
    __m256 lt = _mm256_cmp_ps(d2, m->best, _CMP_LT_OQ);
    lt = _mm256_and_ps(lt, _mm256_castsi256_ps(_mm256_cmpgt_epi32(m->n, m->lane)));
    m->best = _mm256_blendv_ps(m->best, d2, lt);
    m->at = _mm256_blendv_epi8(m->at, m->lane, _mm256_castps_si256(lt));
    m->lane = _mm256_add_epi32(m->lane, _mm256_set1_epi32(8));
}

/* The winning candidate's position. */
KILN_AVX2 static inline int kiln_min8_end(const kiln_min8 *m) {
    float bv[8];
    int32_t bi[8];
    _mm256_storeu_ps(bv, m->best);
    _mm256_storeu_si256((__m256i *)bi, m->at);
    float v = bv[0];
    int at = bi[0];
    for (int k = 1; k < 8; k++)
        if (bv[k] < v || (bv[k] == v && bi[k] < at)) {
            v = bv[k];
            at = bi[k];
        }
    return at;
}
#endif

#endif
