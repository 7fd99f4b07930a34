/* runtime/vecdot_panel.c - the data layouts of the panel kernels: 16 weight
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

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"

#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#endif

int64_t kiln_panel_bytes(const kiln_qtype *qt, int64_t n_in) {
    int64_t nb = n_in / qt->block;
    return nb * (int64_t)(qt->block == KILN_QK ? sizeof(kiln_pblk32) : sizeof(kiln_pblk256));
}

/* u[0..n) = q + 128, n a multiple of 32: the sign bit flipped. */
#ifdef __x86_64__
__attribute__((target("avx2"))) static void to_unsigned_avx2(const int8_t *q, uint8_t *u, int n) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int j = 0; j < n; j += 32)
        _mm256_storeu_si256((__m256i *)(u + j), _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + j)), flip));
}
#endif

static void to_unsigned(const int8_t *q, uint8_t *u, int n) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX2) {
        to_unsigned_avx2(q, u, n);
        return;
    }
#endif
    for (int j = 0; j < n; j++) u[j] = (uint8_t)(q[j] ^ 0x80);
}

void kiln_pact_pack(const kiln_qtype *qt, const void *act, int64_t n, uint8_t *u, float *d,
                    int16_t *bsums) {
    if (qt->act_type == KILN_Q8_0) {
        const kiln_block_q8_0 *a = act;
        for (int64_t b = 0; b < n / KILN_QK; b++) {
            to_unsigned(a[b].qs, u + KILN_QK * b, KILN_QK);
            d[b] = kiln_fp16_to_fp32(a[b].d);
        }
        return;
    }
    const kiln_block_q8_k *a = act;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        to_unsigned(a[b].qs, u + KILN_QK_K * b, KILN_QK_K);
        d[b] = a[b].d;
        memcpy(bsums + 16 * b, a[b].bsums, sizeof a[b].bsums);
    }
}

/* ---- scalar packing (any CPU) ----------------------------------------- */

/* Block j (of up to 8) of each row's unpacked levels. */
static void pack32_scalar(const kiln_qblock *q, int j, kiln_pblk32 *P) {
    for (int r = 0; r < KILN_PANEL; r++) {
        int32_t sum = 0;
        for (int g = 0; g < 8; g++)
            for (int i = 0; i < 4; i++) {
                P->w[g][r][i] = q[r].q[32 * j + 4 * g + i];
                sum += q[r].q[32 * j + 4 * g + i];
            }
        P->bias[r] = -128 * sum;
        P->d[r] = q[r].d[j];
    }
}

static void pack256_scalar(const kiln_qblock *q, kiln_pblk256 *P) {
    memset(P->bias, 0, sizeof P->bias);
    memset(P->cbias, 0, sizeof P->cbias);
    for (int r = 0; r < KILN_PANEL; r++) {
        for (int c = 0; c < 8; c++)
            for (int l = 0; l < 8; l++)
                for (int i = 0; i < 4; i++) {
                    const int p = 32 * c + 4 * l + i;
                    P->w[c][l][r][i] = q[r].q[p];
                    P->bias[l][r] -= 128 * q[r].sc[p / 16] * q[r].q[p];
                }
        for (int c = 0; c < 8; c++) {
            for (int h = 0; h < 2; h++) P->sc[c][h][r][0] = P->sc[c][h][r][1] = q[r].sc[2 * c + h];
            P->mn[c][r][0] = q[r].mn[2 * c];
            P->mn[c][r][1] = q[r].mn[2 * c + 1];
        }
        P->d[r] = q[r].d[0];
        P->dmin[r] = q[r].dmin;
    }
    for (int r = 0; r < KILN_PANEL; r++)
        for (int p = 0; p < KILN_QK_K; p++) P->cbias[p / 32][r] -= 128 * q[r].sc[p / 16] * q[r].q[p];
}

#ifdef __x86_64__
/* ---- AVX-512 packing: the interleave as a register transpose ----------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

/* 32 bytes of each of 16 rows (row r at src + r * stride), seen as 8
 * dwords, out as dst[j][r] = dword j of row r (8 x 64 bytes). */
AVX512 static void transpose16x8(const uint8_t *src, size_t stride, void *dst) {
    __m512i y[8], a[8], b[8];
    for (int r = 0; r < 8; r++) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(src + r * stride));
        __m256i hi = _mm256_loadu_si256((const __m256i *)(src + (r + 8) * stride));
        y[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    for (int r = 0; r < 8; r += 2) {
        a[r] = _mm512_unpacklo_epi32(y[r], y[r + 1]);
        a[r + 1] = _mm512_unpackhi_epi32(y[r], y[r + 1]);
    }
    for (int r = 0; r < 8; r += 4)
        for (int j = 0; j < 2; j++) {
            b[r + 2 * j] = _mm512_unpacklo_epi64(a[r + j], a[r + j + 2]);
            b[r + 2 * j + 1] = _mm512_unpackhi_epi64(a[r + j], a[r + j + 2]);
        }
    /* b[k] (k < 4) holds, in 128-bit lane 2h, dword k of rows 0-3 of half
     * h and in lane 2h + 1 dword k + 4; b[k + 4] the same for rows 4-7.
     * Pairing the lanes of b[k] and b[k + 4] gives whole dwords. */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512i *out = dst;
    for (int k = 0; k < 4; k++) {
        _mm512_store_si512(out + k, _mm512_permutex2var_epi64(b[k], lo, b[k + 4]));
        _mm512_store_si512(out + k + 4, _mm512_permutex2var_epi64(b[k], hi, b[k + 4]));
    }
}

AVX512 static void pack32_avx512(const kiln_qblock *q, int j, kiln_pblk32 *P) {
    transpose16x8((const uint8_t *)q[0].q + 32 * j, sizeof *q, P->w);
    /* bias = -128 * sum of levels: vpmaddubsw by 128 cannot saturate for
     * 8-bit levels (2 * 128 * 127 < 32768) */
    const __m512i k128 = _mm512_set1_epi8((char)0x80), ones = _mm512_set1_epi16(1);
    __m512i acc = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++)
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(k128, _mm512_load_si512(P->w[g])), ones));
    _mm512_store_si512(P->bias, _mm512_sub_epi32(_mm512_setzero_si512(), acc));
    for (int r = 0; r < KILN_PANEL; r++) P->d[r] = q[r].d[j];
}

AVX512 static void pack256_avx512(const kiln_qblock *q, kiln_pblk256 *P) {
    for (int c = 0; c < 8; c++) transpose16x8((const uint8_t *)q[0].q + 32 * c, sizeof *q, P->w[c]);
    /* each scale twice in a dword (s | s << 16), sub-block order: dword
     * 2c + h is sc[c][h] */
    int32_t dup[KILN_PANEL][16];
    for (int r = 0; r < KILN_PANEL; r++) {
        const __m512i s = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)q[r].sc));
        _mm512_storeu_si512(dup[r], _mm512_or_si512(s, _mm512_slli_epi32(s, 16)));
    }
    transpose16x8((const uint8_t *)dup[0], sizeof dup[0], P->sc[0]);
    transpose16x8((const uint8_t *)dup[0] + 32, sizeof dup[0], P->sc[4]);
    /* mn[] is 16 int16 = 8 dwords of pairs (2c, 2c + 1) */
    transpose16x8((const uint8_t *)q[0].mn, sizeof *q, P->mn);
    /* term (c, l) = 128 * sum(scale * level) of lane l in chunk c:
     * vpmaddubsw by 128 cannot saturate for levels within +-64 */
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    __m512i lane[8], chunk[8];
    for (int l = 0; l < 8; l++) lane[l] = _mm512_setzero_si512();
    for (int c = 0; c < 8; c++) {
        chunk[c] = _mm512_setzero_si512();
        for (int l = 0; l < 8; l++) {
            const __m512i t = _mm512_madd_epi16(_mm512_maddubs_epi16(k128, _mm512_load_si512(P->w[c][l])),
                                                _mm512_load_si512(P->sc[c][l / 4]));
            lane[l] = _mm512_sub_epi32(lane[l], t);
            chunk[c] = _mm512_sub_epi32(chunk[c], t);
        }
    }
    for (int j = 0; j < 8; j++) {
        _mm512_store_si512(P->bias[j], lane[j]);
        _mm512_store_si512(P->cbias[j], chunk[j]);
    }
    for (int r = 0; r < KILN_PANEL; r++) {
        P->d[r] = q[r].d[0];
        P->dmin[r] = q[r].dmin;
    }
}
#endif

void kiln_panel_pack(const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_rows,
                     int64_t r0, void *panel) {
    const int64_t nb = n_in / qt->block, row_bytes = nb * qt->block_bytes;
    const int per = qt->block == KILN_QK ? 8 : 1; /* blocks per unpack */
    const uint8_t *rows[KILN_PANEL];
    kiln_qblock q[KILN_PANEL];
    for (int r = 0; r < KILN_PANEL; r++) {
        rows[r] = r0 + r < n_rows ? (const uint8_t *)w + (r0 + r) * row_bytes : NULL;
        if (!rows[r]) memset(&q[r], 0, sizeof q[r]); /* missing rows: zero weights */
    }
#ifdef __x86_64__
    const bool simd = kiln_simd() >= KILN_SIMD_AVX512;
#endif
    for (int64_t b = 0; b < nb; b += per) {
        const int n = nb - b < per ? (int)(nb - b) : per;
        /* 16 rows are 16 streams, more than the hardware prefetchers
         * follow: fetch the next step's blocks now */
        const int64_t ahead = (b + 2 * per) * qt->block_bytes, len = (int64_t)per * qt->block_bytes;
        for (int r = 0; r < KILN_PANEL; r++) {
            if (!rows[r]) continue;
            if (b + 2 * per < nb)
                for (int64_t o = 0; o < len; o += 64) __builtin_prefetch(rows[r] + ahead + o);
            qt->unpack(rows[r] + b * qt->block_bytes, n, &q[r]);
        }
        for (int j = 0; j < n; j++) {
            if (qt->block == KILN_QK) {
                kiln_pblk32 *P = (kiln_pblk32 *)panel + b + j;
#ifdef __x86_64__
                if (simd) {
                    pack32_avx512(q, j, P);
                    continue;
                }
#endif
                pack32_scalar(q, j, P);
            } else {
                kiln_pblk256 *P = (kiln_pblk256 *)panel + b;
#ifdef __x86_64__
                if (simd) {
                    pack256_avx512(q, P);
                    continue;
                }
#endif
                pack256_scalar(q, P);
            }
        }
    }
}
