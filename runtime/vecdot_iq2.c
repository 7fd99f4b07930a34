/* runtime/vecdot_iq2.c - IQ2_XXS against Q8_K activations: the reference
 * dot product and the unpacking of a super-block to signed levels.
 *
 * ggml's scalar ggml_vec_dot_iq2_xxs_q8_K sums grid * q8 * sign per 32
 * weights, weights each sum by ls = 2 * (scale nibble) + 1 into one
 * integer per super-block, adds d * bsum in float and scales the row's
 * total by 1/8 at the end (the grid is in eighths). Unpacked, a level is
 * the signed grid coordinate (+-8, 25 or 43) and sc is ls. */
#include "vecdot.h"

#include "../core/fp16.h"
#include "../quantize/iq2_tables.h"

#include <string.h>

void kiln_unpack_iq2_xxs(const void *block, kiln_qblock *out) {
    const kiln_block_iq2_xxs *b = block;
    for (int g = 0; g < 8; g++) {
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * g, 8);
        const int16_t ls = (int16_t)(2 * (aux[1] >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = kiln_iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
            const uint8_t signs = kiln_iq2_signs[(aux[1] >> (7 * l)) & 127];
            for (int j = 0; j < 8; j++) {
                int v = (int)((grid >> (8 * j)) & 0xFF);
                out->q[32 * g + 8 * l + j] = (int8_t)(signs >> j & 1 ? -v : v);
            }
        }
        out->sc[2 * g] = out->sc[2 * g + 1] = ls;
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
    out->d = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

float kiln_vec_dot_iq2_xxs(int64_t n, const void *w, const void *act) {
    return kiln_kdot_ref(n, w, sizeof(kiln_block_iq2_xxs), kiln_unpack_iq2_xxs, KILN_COMB_IQ2, act);
}
