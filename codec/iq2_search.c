/* codec/iq2_search.c - the shared steps of ggml's 2-bit grid searches
 * (see iq2_search.h); the neighbour scan they call is grid_search.c's. */
#include "iq2_search.h"

#include "quants.h"
#include "search.h"


#include <string.h>

int kiln_iq2_ctx_init(kiln_iq2_ctx *c, kiln_iq2_grid_id id) {
    c->s = kiln_iq2_search_tables(id);
    c->scan = kiln_grid_scan_pick();
    return c->s ? 0 : -1;
}

/* ---- lattice steps ------------------------------------------------------ */

int kiln_iq2_to_grid(const kiln_iq2_ctx *c, const float *xval, const float *waux, float id, float scale,
                     int8_t *L, bool *on_grid) {
    uint32_t key = 0;
    for (int i = 0; i < 8; i++) {
        int l = kiln_nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 2 ? 2 : l;
        L[i] = (int8_t)l;
        key |= (uint32_t)l << 2 * i;
    }
    int g = c->s->map[key];
    if (on_grid) *on_grid = g >= 0;
    if (g < 0) {
        const kiln_iq2_list *li = &c->s->lists[-g - 1];
        g = c->s->idx[li->start + c->scan(c->s->q + 8 * (size_t)li->start, 8, li->n, li->npad, xval, waux, scale)];
        uint64_t p = c->s->grid_odd[g];
        for (int i = 0; i < 8; i++) L[i] = (int8_t)((((p >> 8 * i) & 0xff) - 1) / 2);
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
