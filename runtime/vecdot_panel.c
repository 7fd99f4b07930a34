/* runtime/vecdot_panel.c - the table of quantized weight types in
 * KILN_NUM_GGML mode, and the data layouts of the panel kernels: 16 weight
 * rows interleaved so that one SIMD lane is one row (kiln_pblk32 /
 * kiln_pblk256 in vecdot.h), and activations as bytes q + 128.
 *
 * Why +128: the integer instructions multiply unsigned by signed bytes
 * (vpdpbusd, vpmaddubsw), so activations become unsigned and each row's
 * sum picks up 128 * sum(levels), which the panel stores negated as the
 * starting value of the accumulator ("bias"). Levels are used as they are
 * (signed), so no per-token correction is needed.
 *
 * Packing is done per panel, once per product: unpacking a block costs
 * about as much as one token's worth of multiply-adds, so it vanishes
 * when a panel serves hundreds of tokens. */
#include "vecdot.h"

#include "../core/fp16.h"
#include "../core/types.h"

#include <string.h>

#define LEGACY(T, t, comb_)                                                                 \
    {T, KILN_Q8_0, KILN_QK, sizeof(kiln_block_##t), sizeof(kiln_block_q8_0), kiln_vec_dot_##t, \
     kiln_unpack_##t, comb_}
#define KQUANT(T, t, comb_)                                                                   \
    {T, KILN_Q8_K, KILN_QK_K, sizeof(kiln_block_##t), sizeof(kiln_block_q8_k), kiln_vec_dot_##t, \
     kiln_unpack_##t, comb_}

static const kiln_qtype QTYPES[] = {
    LEGACY(KILN_Q8_0, q8_0, KILN_COMB_Q8_0),
    LEGACY(KILN_Q4_0, q4_0, KILN_COMB_Q4_0),
    LEGACY(KILN_Q5_0, q5_0, KILN_COMB_Q8_0),
    LEGACY(KILN_IQ4_NL, iq4_nl, KILN_COMB_Q8_0),
    KQUANT(KILN_Q2_K, q2_k, KILN_COMB_Q2_K),
    KQUANT(KILN_Q3_K, q3_k, KILN_COMB_LANES),
    KQUANT(KILN_Q4_K, q4_k, KILN_COMB_LANES_MIN),
    KQUANT(KILN_Q5_K, q5_k, KILN_COMB_LANES_MIN),
    KQUANT(KILN_Q6_K, q6_k, KILN_COMB_LANES),
    KQUANT(KILN_IQ2_XXS, iq2_xxs, KILN_COMB_IQ2),
};

const kiln_qtype *kiln_qtype_get(uint32_t type) {
    for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++)
        if (QTYPES[i].type == type) return &QTYPES[i];
    return NULL;
}

int64_t kiln_panel_bytes(const kiln_qtype *qt, int64_t n_in) {
    int64_t nb = n_in / qt->block;
    return nb * (int64_t)(qt->block == KILN_QK ? sizeof(kiln_pblk32) : sizeof(kiln_pblk256));
}

void kiln_pact_pack(const kiln_qtype *qt, const void *act, int64_t n, uint8_t *u, float *d,
                    int16_t *bsums) {
    if (qt->act_type == KILN_Q8_0) {
        const kiln_block_q8_0 *a = act;
        for (int64_t b = 0; b < n / KILN_QK; b++) {
            for (int j = 0; j < KILN_QK; j++) u[KILN_QK * b + j] = (uint8_t)(a[b].qs[j] ^ 0x80);
            d[b] = kiln_fp16_to_fp32(a[b].d);
        }
        return;
    }
    const kiln_block_q8_k *a = act;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        uint8_t *o = u + KILN_QK_K * b;
        for (int c = 0; c < 8; c++)
            for (int l = 0; l < 8; l++)
                for (int i = 0; i < 4; i++)
                    o[32 * c + 4 * l + i] = (uint8_t)(a[b].qs[32 * c + l + 8 * i] ^ 0x80);
        d[b] = a[b].d;
        memcpy(bsums + 16 * b, a[b].bsums, sizeof a[b].bsums);
    }
}

static void pack32(const kiln_qtype *qt, const uint8_t *rows[KILN_PANEL], int64_t b,
                   kiln_pblk32 *P) {
    kiln_qblock q;
    for (int r = 0; r < KILN_PANEL; r++) {
        if (rows[r]) {
            qt->unpack(rows[r] + b * qt->block_bytes, &q);
        } else {
            memset(q.q, 0, KILN_QK);
            q.d = 0;
        }
        int32_t sum = 0;
        for (int g = 0; g < 8; g++)
            for (int i = 0; i < 4; i++) {
                P->w[g][r][i] = q.q[4 * g + i];
                sum += q.q[4 * g + i];
            }
        P->bias[r] = -128 * sum;
        P->d[r] = q.d;
    }
}

static void pack256(const kiln_qtype *qt, const uint8_t *rows[KILN_PANEL], int64_t b,
                    kiln_pblk256 *P) {
    kiln_qblock q;
    for (int r = 0; r < KILN_PANEL; r++) {
        if (rows[r]) {
            qt->unpack(rows[r] + b * qt->block_bytes, &q);
        } else {
            memset(&q, 0, sizeof q);
        }
        int32_t all = 0;
        for (int l = 0; l < 8; l++) {
            int32_t sum = 0;
            for (int c = 0; c < 8; c++)
                for (int i = 0; i < 4; i++) {
                    int p = 32 * c + l + 8 * i;
                    P->w[c][l][r][i] = q.q[p];
                    sum += q.sc[p / 16] * q.q[p];
                }
            P->bias[l][r] = -128 * sum;
            all += P->bias[l][r];
        }
        P->bias_all[r] = all;
        for (int c = 0; c < 8; c++) {
            P->sc[c][r][0] = q.sc[2 * c];
            P->sc[c][r][1] = q.sc[2 * c + 1];
            P->mn[c][r][0] = q.mn[2 * c];
            P->mn[c][r][1] = q.mn[2 * c + 1];
        }
        P->d[r] = q.d;
        P->dmin[r] = q.dmin;
    }
}

void kiln_panel_pack(const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_rows,
                     int64_t r0, void *panel) {
    const int64_t nb = n_in / qt->block, row_bytes = nb * qt->block_bytes;
    const uint8_t *rows[KILN_PANEL];
    for (int r = 0; r < KILN_PANEL; r++)
        rows[r] = r0 + r < n_rows ? (const uint8_t *)w + (r0 + r) * row_bytes : NULL;
    for (int64_t b = 0; b < nb; b++) {
        if (qt->block == KILN_QK)
            pack32(qt, rows, b, (kiln_pblk32 *)panel + b);
        else
            pack256(qt, rows, b, (kiln_pblk256 *)panel + b);
    }
}
