/* codec/iq1_search.c - the sort and neighbour search IQ1_S and IQ1_M
 * share (see iq1_search.h). */
#include "iq1_search.h"

#include <float.h>

void kiln_iq1_sort(const float *x, int n, int *order) {
    /* insertion sort: stable, so the unique stable order; n is 16 or 32 */
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && x[order[j - 1]] > x[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

int kiln_iq1_to_grid(const kiln_iq1_tables *t, int8_t L[8], const float *x, const float *w, float scale,
                     const float shift[3], bool *moved) {
    uint32_t key = 0;
    for (int i = 0; i < 8; i++) key |= (uint32_t)L[i] << 2 * i;
    int g = t->map[key];
    if (g >= 0) return g;
    *moved = true;
    const uint16_t *list = t->nbr + (-g - 1);
    float best = FLT_MAX;
    g = list[1];
    for (int k = 1; k <= list[0]; k++) {
        const uint8_t *lv = t->level[list[k]];
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            float diff = scale * shift[lv[i]] - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            g = list[k];
        }
    }
    for (int i = 0; i < 8; i++) L[i] = (int8_t)t->level[g][i];
    return g;
}
