/* codec/iq3_search.c - the group search of IQ3_XXS and IQ3_S (see
 * iq3_search.h), step for step ggml's, so that the codecs' blocks are
 * llama.cpp's byte for byte. Every float expression keeps ggml's operand
 * order; the build's -ffp-contract=off matches ggml-base, which is built
 * without FMA. */
#include "iq3_search.h"

#include "blocks.h"
#include "quants.h"
#include "search.h"


#include <math.h>
#include <string.h>

const kiln_iq3_variant kiln_iq3_xxs_variant = {KILN_IQ3XXS_GRID, 15, true};
const kiln_iq3_variant kiln_iq3_s_variant = {KILN_IQ3S_GRID, 9, false};

bool kiln_iq3_ctx_init(kiln_iq3_ctx *c, const kiln_iq3_variant *v) {
    c->v = v;
    c->s = kiln_iq3_search_tables(v->grid_size);
    c->scan = kiln_grid_scan_pick();
    return c->s != NULL;
}

/* ---- the group search --------------------------------------------------- */

/* Levels of grid entry g into L[0..3]. */
static void grid_levels(const kiln_iq3_search *s, int g, int8_t *L) {
    for (int i = 0; i < 4; i++) L[i] = (int8_t)((s->keys[g] >> 3 * i) & 7);
}

/* Rounds the 4 magnitudes at inverse scale id to levels 0..7; if that
 * point is off the grid, moves to its best neighbour at `scale`. Writes
 * the levels to L, the grid index to *g; returns whether the rounded
 * point was on the grid. */
static bool to_grid(const kiln_iq3_ctx *c, const float *xval, const float *waux, float id, float scale, int8_t *L,
                    int *g) {
    unsigned key = 0;
    for (int i = 0; i < 4; i++) {
        int l = kiln_nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        L[i] = (int8_t)l;
        key |= (unsigned)l << 3 * i;
    }
    int m = c->s->map[key];
    if (m >= 0) {
        *g = m;
        return true;
    }
    const kiln_iq3_list *li = &c->s->lists[-m - 1];
    *g = c->s->idx[li->start + c->scan(c->s->q + 4 * (size_t)li->start, 4, li->n, li->npad, xval, waux, scale)];
    grid_levels(c->s, *g, L);
    return false;
}

float kiln_iq3_search_group(const kiln_iq3_ctx *c, const float *xval, float max, const float *weight,
                            const float *waux, uint16_t gidx[8]) {
    int8_t L[32], Laux[32];
    bool on_grid[8], on_grid_aux[8];
    memset(L, 0, sizeof L);
    float best = 0;
    float scale = max / 15;
    for (int k = 0; k < 8; k++) on_grid[k] = c->v->refit_off_grid_only;
    for (int is = -c->v->steps; is <= c->v->steps; ++is) {
        float id = (15 + (float)is * 0.2f) / max;
        float this_scale = 1 / id;
        for (int k = 0; k < 8; k++) {
            int g;
            on_grid_aux[k] = to_grid(c, xval + 4 * k, waux + 4 * k, id, this_scale, Laux + 4 * k, &g);
        }
        float sumqx, sumq2;
        kiln_grid_lattice_sums(32, xval, weight, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, sizeof L);
            memcpy(on_grid, on_grid_aux, sizeof on_grid);
        }
    }
    int n_off = 0;
    for (int k = 0; k < 8; k++) n_off += !on_grid[k];
    if (n_off > 0 && scale > 0) {
        float id = 1 / scale;
        for (int k = 0; k < 8; k++) {
            if (c->v->refit_off_grid_only && on_grid[k]) continue;
            int g;
            to_grid(c, xval + 4 * k, waux + 4 * k, id, scale, L + 4 * k, &g);
        }
        float sumqx, sumq2;
        kiln_grid_lattice_sums(32, xval, weight, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    /* every quadruple of L is a grid point now: map hits by construction */
    for (int k = 0; k < 8; k++) {
        unsigned key = 0;
        for (int i = 0; i < 4; i++) key |= (unsigned)L[4 * k + i] << 3 * i;
        int m = c->s->map[key];
        gidx[k] = (uint16_t)(m >= 0 ? m : 0);
    }
    return scale;
}

float kiln_iq3_sigma2(const float *xbl) {
    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    return 2 * sumx2 / KILN_QK_K;
}

void kiln_iq3_weights(const float *xb, const float *qw, float sigma2, float *weight, float *waux) {
    if (qw)
        for (int i = 0; i < 32; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
    else
        for (int i = 0; i < 32; i++) weight[i] = xb[i] * xb[i];
    for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
}
