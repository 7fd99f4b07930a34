/* codec/kscales.h - what Q4_K and Q5_K have in common.
 *
 * Both formats cut a 256-weight super-block into 8 sub-blocks of 32 and
 * store x = d * sc * q - dmin * m, with a 6-bit scale sc and a 6-bit min m
 * per sub-block packed into 12 bytes, and two fp16 super-block factors.
 * They differ only in the width of q (4 or 5 bits) and in where its bits
 * go, so the packing, the level search and the dequantization live here
 * once and q4_k.c / q5_k.c only lay out the bits of q.
 *
 * Not here: the generic scale searches (search.h) this builds on. */
#ifndef KILN_KSCALES_H
#define KILN_KSCALES_H

#include <stdint.h>

#include "blocks.h"

/* Sub-block j's 6-bit scale and min from the 12 packed bytes (ggml's
 * get_scale_min_k4 layout): j < 4 keeps both whole in bytes j and j + 4;
 * j >= 4 keeps the low nibbles in byte j + 4 and the top two bits in the
 * spare high bits of bytes j - 4 (scale) and j (min). */
static inline void kiln_kscale_get(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Packs 8 scales and 8 mins (each 0..63) into the 12-byte layout above. */
void kiln_kscales_pack(uint8_t out[12], const uint8_t ls[8], const uint8_t lm[8]);

/* How the no-imatrix (reference) search steps through candidate scales;
 * ggml tuned these per format. */
typedef struct kiln_kscale_ref {
    float rmin;
    int nstep;
} kiln_kscale_ref;

/* Chooses one super-block's factors and levels, as ggml's Q4_K/Q5_K
 * quantizers do: a scale+min search per sub-block, then the 6-bit
 * quantization of those scales and mins, then every weight requantized
 * against the rounded factors. `x` is 256 weights, `qw` their imatrix
 * weights or NULL for the reference path, `nmax` 15 or 31. Writes d, dmin,
 * the packed scales and L[256] in 0..nmax. */
void kiln_kscale_block(const float *x, const float *qw, int nmax, kiln_kscale_ref ref,
                       kiln_half *d, kiln_half *dmin, uint8_t scales[12], uint8_t L[KILN_QK_K]);

/* Dequantizes one super-block: low 4 bits of weight 64*c + l in qs[32*c + l]
 * (low nibble) and of weight 64*c + 32 + l in its high nibble; with qh
 * non-NULL, weight 32*b + l adds 16 when bit b of qh[l] is set (Q5_K). */
void kiln_kscale_dequant(kiln_half d, kiln_half dmin, const uint8_t scales[12], const uint8_t *qs,
                         const uint8_t *qh, float *y);

#endif
