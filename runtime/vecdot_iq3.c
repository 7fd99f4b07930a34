/* runtime/vecdot_iq3.c - IQ3_XXS and IQ3_S against Q8_K activations: the
 * unpacking of a super-block to signed levels, which kiln_kdot_ref
 * (vecdot_korder.c) and the direct kernel (vecdot_kdirect.c) sum.
 *
 * ggml's ggml_vec_dot_iq3_xxs_q8_K and ggml_vec_dot_iq3_s_q8_K (the
 * __AVX2__ branches, which llama.cpp's AVX-512 build runs) take grid byte *
 * signed q8 in vpmaddubsw, weight each 32-weight sum by ls = 2 * (scale
 * nibble) + 1 in vpmaddwd, so int32 lane l sums the weights p with
 * (p / 4) % 8 == l; per super-block acc = fma(x.d * y.d, lanes, acc), then
 * hsum_float_8, IQ3_XXS's total times 0.25 (its grid is in quarters:
 * weight = d * (0.5 + ls) / 2 * grid = d * (2 ls + 1) * grid / 4). Those
 * are the k-quants' vec_dot steps (KILN_COMB_IQ3 and KILN_COMB_IQ3S), so
 * unpacked, a level is the signed grid byte (IQ3_XXS +-4..62, IQ3_S
 * +-1..15) and sc is 2 ls + 1. No integer leaves int16 in ggml's
 * vpmaddubsw (62 * 127 * 2 < 32768), so its sums are exact.
 *
 * llama.cpp repacks neither type (ggml-cpu/repack.cpp) and llamafile's
 * sgemm takes neither: vec_dot is their only order. */
#include "vecdot.h"

#include "../codec/iq2_tables.h"
#include "../codec/iq3_tables.h"
#include "../core/fp16.h"

#include <string.h>

/* 4 grid bytes with the signs of bits 0..3 of `signs` (set: negative). */
static void quad(uint32_t grid, unsigned signs, int8_t *q) {
    for (int j = 0; j < 4; j++) {
        const int v = (int)((grid >> 8 * j) & 0xFF);
        q[j] = (int8_t)(signs >> j & 1 ? -v : v);
    }
}

void kiln_unpack_iq3_xxs(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq3_xxs *b = blocks;
    (void)n;
    for (int g = 0; g < 8; g++) {
        uint32_t word;
        memcpy(&word, b->qs + KILN_QK_K / 4 + 4 * g, 4);
        for (int l = 0; l < 4; l++) {
            const unsigned signs = kiln_iq2_signs[(word >> 7 * l) & 127];
            quad(kiln_iq3xxs_grid[b->qs[8 * g + 2 * l]], signs, out->q + 32 * g + 8 * l);
            quad(kiln_iq3xxs_grid[b->qs[8 * g + 2 * l + 1]], signs >> 4, out->q + 32 * g + 8 * l + 4);
        }
        out->sc[2 * g] = out->sc[2 * g + 1] = (int16_t)(2 * (word >> 28) + 1);
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}

void kiln_unpack_iq3_s(const void *blocks, int n, kiln_qblock *out) {
    const kiln_block_iq3_s *b = blocks;
    (void)n;
    for (int g = 0; g < 8; g++) {
        for (int k = 0; k < 8; k++) {
            const unsigned idx = b->qs[8 * g + k] | (unsigned)((b->qh[g] >> k) & 1) << 8;
            quad(kiln_iq3s_grid[idx], (unsigned)b->signs[4 * g + k / 2] >> 4 * (k % 2), out->q + 32 * g + 4 * k);
        }
        const int ls = (b->scales[g / 2] >> 4 * (g % 2)) & 0xF;
        out->sc[2 * g] = out->sc[2 * g + 1] = (int16_t)(2 * ls + 1);
        out->mn[2 * g] = out->mn[2 * g + 1] = 0;
    }
    out->d[0] = kiln_fp16_to_fp32(b->d);
    out->dmin = 0;
}
