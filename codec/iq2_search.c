/* codec/iq2_search.c - the shared steps of ggml's 2-bit grid searches
 * (see iq2_search.h); the neighbour scan they call is iq2_scan.c's. */
#include "iq2_search.h"

#include "quants.h"
#include "search.h"

#include "../core/cpu.h"

#include <string.h>

/* ---- lattice steps ------------------------------------------------------ */

/* Rounds 8 magnitudes at inverse scale id to levels 0..2 (ggml's
 * nearest_int(0.5 * (id * x - 1)), clamped): writes them to L and returns
 * their key. */
static uint32_t round_scalar(const float *xval, float id, int8_t *L) {
    uint32_t key = 0;
    for (int i = 0; i < 8; i++) {
        int l = kiln_nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 2 ? 2 : l;
        L[i] = (int8_t)l;
        key |= (uint32_t)l << 2 * i;
    }
    return key;
}

#ifdef KILN_X86
/* round_scalar in 8 lanes: the same float operations, and kiln_nearest_int's
 * bit trick (add 1.5 * 2^23, keep the low mantissa bits) done on the lanes,
 * so every level is the scalar one, whatever the input. */
KILN_AVX2 static uint32_t round_avx2(const float *xval, float id, int8_t *L) {
    __m256 t = _mm256_mul_ps(_mm256_set1_ps(id), _mm256_loadu_ps(xval));
    t = _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_sub_ps(t, _mm256_set1_ps(1.0f)));
    t = _mm256_add_ps(t, _mm256_set1_ps(12582912.f));
    __m256i l = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), _mm256_set1_epi32(0x007fffff)),
                                 _mm256_set1_epi32(0x00400000));
    l = _mm256_min_epi32(_mm256_max_epi32(l, _mm256_setzero_si256()), _mm256_set1_epi32(2));
    /* the fields do not overlap, so OR-ing the shifted lanes is the key */
    __m256i f = _mm256_sllv_epi32(l, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    __m128i h = _mm_or_si128(_mm256_castsi256_si128(f), _mm256_extracti128_si256(f, 1));
    h = _mm_or_si128(h, _mm_shuffle_epi32(h, 0x4E));
    h = _mm_or_si128(h, _mm_shuffle_epi32(h, 0xB1));
    __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
    _mm_storel_epi64((__m128i *)L, _mm_packs_epi16(w16, w16));
    return (uint32_t)_mm_cvtsi128_si32(h);
}
#endif

int kiln_iq2_ctx_init(kiln_iq2_ctx *c, kiln_iq2_grid_id id) {
    c->s = kiln_iq2_search_tables(id);
    c->scan = kiln_iq2_scan_pick();
#ifdef KILN_X86
    c->round = kiln_simd() >= KILN_SIMD_AVX2 ? round_avx2 : round_scalar;
#else
    c->round = round_scalar;
#endif
    return c->s ? 0 : -1;
}

int kiln_iq2_to_grid(const kiln_iq2_ctx *c, const float *xval, const float *waux, float id, float scale,
                     int8_t *L, bool *on_grid) {
    int g = c->s->map[c->round(xval, id, L)];
    if (on_grid) *on_grid = g >= 0;
    if (g < 0) {
        const kiln_iq2_list *li = &c->s->lists[-g - 1];
        int j = li->start + c->scan(c->s->keys + li->start, li->n, li->npad, xval, waux, scale);
        g = c->s->idx[j];
        for (int i = 0; i < 8; i++) L[i] = (int8_t)((c->s->keys[j] >> 2 * i) & 3);
    }
    return g;
}

/* ---- IQ2_XS / IQ2_S: one group of 16 ------------------------------------ */

float kiln_iq2_search16(const kiln_iq2_ctx *c, const float *xval, const float *weight, const float *waux,
                        uint16_t gidx[2]) {
    int8_t L[16], Laux[16];
    bool on[2] = {true, true}, on_aux[2];
    memset(L, 0, sizeof L);
    float max = xval[0];
    for (int i = 1; i < 16; i++) max = max > xval[i] ? max : xval[i];
    /* levels 1, 3, 5: the largest value on the top level, then 19 scales
     * around it; a scale is kept when its fit explains more */
    float best = 0, scale = max / 5;
    for (int is = -9; is <= 9; ++is) {
        float id = (5 + (float)is * 0.1f) / max;
        float this_scale = 1 / id;
        for (int k = 0; k < 2; k++)
            kiln_iq2_to_grid(c, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k, &on_aux[k]);
        float sumqx, sumq2;
        kiln_grid_lattice_sums(16, xval, weight, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, sizeof L);
            on[0] = on_aux[0];
            on[1] = on_aux[1];
        }
    }
    /* groups of 8 that were moved onto the grid: round again at the fitted
     * scale, and refit */
    if ((!on[0] || !on[1]) && scale > 0) {
        float id = 1 / scale;
        for (int k = 0; k < 2; k++)
            if (!on[k]) kiln_iq2_to_grid(c, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k, NULL);
        float sumqx, sumq2;
        kiln_grid_lattice_sums(16, xval, weight, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    for (int k = 0; k < 2; k++) {
        uint32_t key = 0;
        for (int i = 0; i < 8; i++) key |= (uint32_t)L[8 * k + i] << 2 * i;
        /* every L above is a grid point: rounded on it, moved to it, or 0 */
        gidx[k] = (uint16_t)c->s->map[key];
    }
    return scale;
}
