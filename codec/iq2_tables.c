/* codec/iq2_tables.c - IQ2_XXS's grid and sign tables (compile-time
 * constants) and the neighbour map its quantizer searches (built once, on
 * first use). See iq2_tables.h for what each table means. */
#include "iq2_tables.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The 256 grid points, in grid-index order. Each hex literal spells a
 * point's 8 levels, coordinate 0 first (leftmost digit): 0x20000000 is
 * (2,0,0,0,0,0,0,0). Written this way the list can be checked by eye
 * against any decoder's table, and every other form is derived from it. */
#define IQ2XXS_POINTS(P) \
    P(0x00000000) P(0x20000000) P(0x11000000) P(0x02000000) P(0x22000000) P(0x10100000) P(0x01100000) P(0x00200000) \
    P(0x20200000) P(0x02200000) P(0x22200000) P(0x10010000) P(0x01010000) P(0x00110000) P(0x02110000) P(0x10210000) \
    P(0x01210000) P(0x00020000) P(0x20020000) P(0x22020000) P(0x20220000) P(0x10001000) P(0x01001000) P(0x00101000) \
    P(0x11101000) P(0x00011000) P(0x01021000) P(0x02121000) P(0x00002000) P(0x20002000) P(0x20202000) P(0x20022000) \
    P(0x10000100) P(0x01000100) P(0x00100100) P(0x10200100) P(0x01200100) P(0x00010100) P(0x20010100) P(0x02010100) \
    P(0x00210100) P(0x10020100) P(0x01020100) P(0x00120100) P(0x01220100) P(0x00001100) P(0x20001100) P(0x02001100) \
    P(0x00201100) P(0x21011100) P(0x12211100) P(0x00021100) P(0x10121100) P(0x12002100) P(0x00102100) P(0x00012100) \
    P(0x01022100) P(0x01222100) P(0x00000200) P(0x11000200) P(0x02000200) P(0x01100200) P(0x02200200) P(0x10010200) \
    P(0x01010200) P(0x00110200) P(0x20110200) P(0x02020200) P(0x01001200) P(0x00011200) P(0x20002200) P(0x01102200) \
    P(0x10000010) P(0x01000010) P(0x00100010) P(0x10200010) P(0x00010010) P(0x00210010) P(0x01020010) P(0x00120010) \
    P(0x11120010) P(0x00001010) P(0x02001010) P(0x00201010) P(0x00111010) P(0x22111010) P(0x00021010) P(0x01202010) \
    P(0x11012010) P(0x00000110) P(0x02000110) P(0x00200110) P(0x11200110) P(0x12010110) P(0x00020110) P(0x02101110) \
    P(0x20211110) P(0x00002110) P(0x21102110) P(0x10000210) P(0x01000210) P(0x00100210) P(0x00010210) P(0x10020210) \
    P(0x00001210) P(0x11001210) P(0x00221210) P(0x10112210) P(0x00000020) P(0x20000020) P(0x22000020) P(0x01010020) \
    P(0x10210020) P(0x00020020) P(0x20020020) P(0x12201020) P(0x02011020) P(0x00002020) P(0x20002020) P(0x10000120) \
    P(0x01000120) P(0x00100120) P(0x00010120) P(0x21110120) P(0x00001120) P(0x10011120) P(0x01211120) P(0x00122120) \
    P(0x02000220) P(0x00200220) P(0x01120220) P(0x01012220) P(0x10000001) P(0x01000001) P(0x00100001) P(0x02100001) \
    P(0x10200001) P(0x01200001) P(0x00010001) P(0x02010001) P(0x21110001) P(0x00210001) P(0x10020001) P(0x01020001) \
    P(0x00120001) P(0x00001001) P(0x00201001) P(0x10211001) P(0x00021001) P(0x11021001) P(0x10002001) P(0x00102001) \
    P(0x02012001) P(0x21112001) P(0x02212001) P(0x00000101) P(0x02000101) P(0x00200101) P(0x00020101) P(0x12120101) \
    P(0x20101101) P(0x01201101) P(0x00002101) P(0x10000201) P(0x01000201) P(0x00100201) P(0x00010201) P(0x11010201) \
    P(0x00001201) P(0x02111201) P(0x10211201) P(0x20021201) P(0x11012201) P(0x00122201) P(0x00000011) P(0x02000011) \
    P(0x10100011) P(0x12100011) P(0x00200011) P(0x00020011) P(0x02020011) P(0x01001011) P(0x20011011) P(0x01221011) \
    P(0x10122011) P(0x00120111) P(0x20120111) P(0x22001111) P(0x10002111) P(0x01112111) P(0x00000211) P(0x10100211) \
    P(0x12100211) P(0x01210211) P(0x00011211) P(0x02002211) P(0x01000021) P(0x00100021) P(0x00010021) P(0x02210021) \
    P(0x00001021) P(0x11111021) P(0x02102021) P(0x00212021) P(0x00000121) P(0x11000121) P(0x00101121) P(0x20101121) \
    P(0x01021121) P(0x20010221) P(0x00000002) P(0x20000002) P(0x22000002) P(0x10010002) P(0x20020002) P(0x01001002) \
    P(0x02101002) P(0x00011002) P(0x10102002) P(0x10000102) P(0x01000102) P(0x00100102) P(0x11100102) P(0x00010102) \
    P(0x00210102) P(0x00001102) P(0x21011102) P(0x01121102) P(0x12002102) P(0x00012102) P(0x00212102) P(0x20000202) \
    P(0x01001202) P(0x10102202) P(0x01000012) P(0x00100012) P(0x01200012) P(0x00010012) P(0x10220012) P(0x21101012) \
    P(0x00021012) P(0x11012012) P(0x00000112) P(0x20200112) P(0x01010112) P(0x10111112) P(0x10020212) P(0x00201212) \
    P(0x20000022) P(0x00110022) P(0x11020022) P(0x12001022) P(0x00002022) P(0x02100122) P(0x00110222) P(0x01001222)

#define LEVEL(h, j) (((h) >> (28 - 4 * (j))) & 0xF)
#define DECODED(l) ((l) == 0 ? 8u : (l) == 1 ? 25u : 43u)
#define AS_BYTES(h, F)                                                                        \
    ((uint64_t)F(LEVEL(h, 0)) | (uint64_t)F(LEVEL(h, 1)) << 8 | (uint64_t)F(LEVEL(h, 2)) << 16 | \
     (uint64_t)F(LEVEL(h, 3)) << 24 | (uint64_t)F(LEVEL(h, 4)) << 32 |                         \
     (uint64_t)F(LEVEL(h, 5)) << 40 | (uint64_t)F(LEVEL(h, 6)) << 48 |                         \
     (uint64_t)F(LEVEL(h, 7)) << 56)
#define ODD(l) (2u * (l) + 1u)
#define KEY(h)                                                                              \
    (LEVEL(h, 0) | LEVEL(h, 1) << 2 | LEVEL(h, 2) << 4 | LEVEL(h, 3) << 6 | LEVEL(h, 4) << 8 | \
     LEVEL(h, 5) << 10 | LEVEL(h, 6) << 12 | LEVEL(h, 7) << 14)

#define P_DECODED(h) AS_BYTES(h, DECODED),
#define P_ODD(h) AS_BYTES(h, ODD),
#define P_KEY(h) KEY(h),

const uint64_t kiln_iq2xxs_grid[KILN_IQ2XXS_GRID] = {IQ2XXS_POINTS(P_DECODED)};
const uint64_t kiln_iq2xxs_grid_odd[KILN_IQ2XXS_GRID] = {IQ2XXS_POINTS(P_ODD)};
static const uint16_t GRID_KEYS[KILN_IQ2XXS_GRID] = {IQ2XXS_POINTS(P_KEY)};

/* Sign masks: the 7 stored bits, and bit 7 = their parity. */
#define PARITY7(s) (((s) ^ (s) >> 1 ^ (s) >> 2 ^ (s) >> 3 ^ (s) >> 4 ^ (s) >> 5 ^ (s) >> 6) & 1)
#define SIGN(s) (uint8_t)((s) | PARITY7(s) << 7)
#define SIGN4(s) SIGN(s), SIGN((s) + 1), SIGN((s) + 2), SIGN((s) + 3)
#define SIGN16(s) SIGN4(s), SIGN4((s) + 4), SIGN4((s) + 8), SIGN4((s) + 12)
const uint8_t kiln_iq2_signs[128] = {
    SIGN16(0), SIGN16(16), SIGN16(32), SIGN16(48), SIGN16(64), SIGN16(80), SIGN16(96), SIGN16(112),
};

/* ---- neighbour map ---------------------------------------------------- */

static kiln_iq2xxs_search g_search;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ok;

/* True when every 2-bit field of key is a level 0..2. */
static int key_is_valid(uint32_t key) {
    for (int j = 0; j < 8; j++)
        if (((key >> 2 * j) & 3) == 3) return 0;
    return 1;
}

/* Squared distances, in the odd model, from the point `key` to every grid
 * entry; returns the smallest and second-smallest distinct values. */
static void distances(uint32_t key, int d2[KILN_IQ2XXS_GRID], int *min1, int *min2) {
    int m1 = 1 << 30, m2 = 1 << 30;
    for (int k = 0; k < KILN_IQ2XXS_GRID; k++) {
        int d = 0;
        for (int j = 0; j < 8; j++) {
            int diff = 2 * ((int)((key >> 2 * j) & 3) - (int)((GRID_KEYS[k] >> 2 * j) & 3));
            d += diff * diff;
        }
        d2[k] = d;
        if (d < m1) {
            m2 = m1;
            m1 = d;
        } else if (d > m1 && d < m2) {
            m2 = d;
        }
    }
    *min1 = m1;
    *min2 = m2;
}

static void build(void) {
    kiln_iq2xxs_search *s = &g_search;
    for (int k = 0; k < KILN_IQ2XXS_GRID; k++)
        for (int i = 0; i < 8; i++) s->dec[i][k] = (float)(uint8_t)(kiln_iq2xxs_grid[k] >> 8 * i);
    for (uint32_t key = 0; key < KILN_IQ2_KEYS; key++) s->map[key] = INT32_MIN;
    for (int k = 0; k < KILN_IQ2XXS_GRID; k++) s->map[GRID_KEYS[k]] = k;

    /* Pass 1 sizes the pools, pass 2 fills them. */
    int d2[KILN_IQ2XXS_GRID];
    int nlists = 0;
    size_t total = 0;
    for (uint32_t key = 0; key < KILN_IQ2_KEYS; key++) {
        if (s->map[key] >= 0 || !key_is_valid(key)) continue;
        int m1, m2, n = 0;
        distances(key, d2, &m1, &m2);
        for (int k = 0; k < KILN_IQ2XXS_GRID; k++) n += d2[k] <= m2;
        total += (size_t)(n + 15) / 16 * 16;
        nlists++;
    }
    kiln_iq2_list *lists = malloc((size_t)nlists * sizeof *lists);
    uint8_t *idx = malloc(total);
    uint8_t *q = malloc(8 * total);
    if (!lists || !idx || !q) {
        free(lists);
        free(idx);
        free(q);
        return;
    }
    int li = 0;
    uint32_t start = 0;
    for (uint32_t key = 0; key < KILN_IQ2_KEYS; key++) {
        if (s->map[key] >= 0 || !key_is_valid(key)) continue;
        int m1, m2, n = 0;
        distances(key, d2, &m1, &m2);
        /* ggml sorts by (distance, index) and keeps the two nearest shells. */
        for (int shell = 0; shell < 2; shell++)
            for (int k = 0; k < KILN_IQ2XXS_GRID; k++)
                if (d2[k] == (shell ? m2 : m1)) idx[start + n++] = (uint8_t)k;
        int npad = (n + 15) / 16 * 16;
        for (int j = n; j < npad; j++) idx[start + j] = idx[start + n - 1];
        for (int j = 0; j < npad; j++) {
            uint64_t g = kiln_iq2xxs_grid_odd[idx[start + j]];
            for (int i = 0; i < 8; i++) q[8 * (size_t)start + (size_t)i * npad + j] = (uint8_t)(g >> 8 * i);
        }
        lists[li] = (kiln_iq2_list){start, (uint16_t)n, (uint16_t)npad};
        s->map[key] = -(li + 1);
        li++;
        start += (uint32_t)npad;
    }
    s->lists = lists;
    s->idx = idx;
    s->q = q;
    s->nlists = nlists;
    g_ok = 1;
}

const kiln_iq2xxs_search *kiln_iq2xxs_search_tables(void) {
    pthread_once(&g_once, build);
    return g_ok ? &g_search : NULL;
}
