/* codec/grid_search.c - the grid-search steps shared by the IQ2 and IQ3
 * quantizers (see grid_search.h). The neighbour scan is the hot loop: its
 * SIMD versions score 8 or 16 candidates at once, each lane summing its
 * terms in the scalar order, and merge the lanes by (distance, then list
 * position), so they pick exactly the scalar entry. */
#include "grid_search.h"
#include "scan_min.h"

#include "quants.h"

#include "../core/cpu.h"

#include <float.h>

/* ---- neighbour scan ----------------------------------------------------- */

static int scan_scalar(const uint8_t *q, int dim, int n, int npad, const float *x, const float *w, float scale) {
    float best = FLT_MAX;
    int bj = 0;
    for (int j = 0; j < n; j++) {
        float d2 = 0;
        for (int i = 0; i < dim; i++) {
            float diff = scale * (float)q[i * npad + j] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            bj = j;
        }
    }
    return bj;
}

#ifdef KILN_X86
/* scan_scalar's d2 for the candidates j.. in the lanes of d2 (vector type
 * V, intrinsics prefix P; LOAD reads one coordinate of as many
 * candidates), summed in the scalar order. Both SIMD widths share it; they
 * differ in how a lane keeps its minimum and how the lanes are merged. */
#define SCAN_D2(V, P, LOAD, d2)                                                                   \
    V d2 = P##_setzero_ps();                                                                      \
    for (int i = 0; i < dim; i++) {                                                               \
        V qf = P##_cvtepi32_ps(P##_cvtepu8_epi32(LOAD((const __m128i *)(q + i * npad + j))));     \
        V diff = P##_sub_ps(P##_mul_ps(sc, qf), P##_set1_ps(x[i]));                               \
        d2 = P##_add_ps(d2, P##_mul_ps(P##_mul_ps(P##_set1_ps(w[i]), diff), diff));               \
    }

KILN_AVX2 static int scan_avx2(const uint8_t *q, int dim, int n, int npad, const float *x, const float *w,
                               float scale) {
    const __m256 sc = _mm256_set1_ps(scale);
    kiln_min8 m = kiln_min8_start(n);
    for (int j = 0; j < n; j += 8) {
        SCAN_D2(__m256, _mm256, _mm_loadl_epi64, d2)
        kiln_min8_take(&m, d2);
    }
    return kiln_min8_end(&m);
}

KILN_AVX512 static int scan_avx512(const uint8_t *q, int dim, int n, int npad, const float *x, const float *w,
                                   float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 best = _mm512_set1_ps(FLT_MAX);
    __m512i bidx = _mm512_setzero_si512();
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i nv = _mm512_set1_epi32(n);
    for (int j = 0; j < n; j += 16) {
        SCAN_D2(__m512, _mm512, _mm_loadu_si128, d2)
        __mmask16 lt = _mm512_cmp_ps_mask(d2, best, _CMP_LT_OQ) & _mm512_cmpgt_epi32_mask(nv, lane);
        best = _mm512_mask_mov_ps(best, lt, d2);
        bidx = _mm512_mask_mov_epi32(bidx, lt, lane);
        lane = _mm512_add_epi32(lane, _mm512_set1_epi32(16));
    }
    float m = _mm512_reduce_min_ps(best);
    __mmask16 at = _mm512_cmp_ps_mask(best, _mm512_set1_ps(m), _CMP_EQ_OQ);
    /* no lane equal to the minimum: every lane NaN, impossible with finite
     * distances */
    return at ? _mm512_mask_reduce_min_epi32(at, bidx) : 0;
}
#undef SCAN_D2
#endif

kiln_grid_scan_fn kiln_grid_scan_pick(void) {
    return KILN_SIMD_PICK(scan);
}

/* ---- lattice steps ------------------------------------------------------ */

void kiln_grid_lattice_sums(int n, const float *xval, const float *weight, const int8_t *L, float *sumqx,
                            float *sumq2) {
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        float w = weight[i];
        float q = (float)(2 * L[i] + 1);
        sx += w * xval[i] * q;
        s2 += w * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

void kiln_grid_split_signs(int n8, const float *x, const float *weight, float *xval, uint8_t *signs) {
    for (int k = 0; k < n8; k++) {
        const float *xb = x + 8 * k, *wb = weight + 8 * k;
        float *v = xval + 8 * k;
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; i++) {
            if (xb[i] >= 0) {
                v[i] = xb[i];
            } else {
                v[i] = -xb[i];
                ++nflip;
                s |= (uint8_t)(1 << i);
            }
        }
        if (nflip % 2) {
            int imin = 0;
            float min = wb[0] * xb[0] * xb[0];
            for (int i = 1; i < 8; i++) {
                float ax = wb[i] * xb[i] * xb[i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            v[imin] = -v[imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = s & 127;
    }
}
