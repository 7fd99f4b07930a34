/* codec/iq3_tables.c - IQ3_XXS's and IQ3_S's grids (compile-time
 * constants) and the neighbour maps their quantizers search (built once,
 * on first use). See iq3_tables.h for what each table means. */
#include "iq3_tables.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* The grid points, in grid-index order. Each octal literal spells a
 * point's key, one digit per coordinate, coordinate 0 last (rightmost):
 * 00017 is levels (7, 1, 0, 0). Every other form is derived from it. */
#define IQ3XXS_POINTS(P) \
    P(00000) P(00002) P(00004) P(00011) P(00013) P(00017) P(00020) P(00022) P(00031) P(00042) P(00073) P(00075) \
    P(00101) P(00103) P(00110) P(00112) P(00121) P(00125) P(00130) P(00132) P(00141) P(00154) P(00170) P(00200) \
    P(00202) P(00204) P(00211) P(00220) P(00222) P(00231) P(00233) P(00237) P(00251) P(00257) P(00275) P(00301) \
    P(00307) P(00310) P(00312) P(00325) P(00370) P(00413) P(00437) P(00444) P(00457) P(00473) P(00475) P(00501) \
    P(00507) P(00532) P(00552) P(00635) P(00664) P(00710) P(00714) P(00716) P(00743) P(00761) P(01001) P(01003) \
    P(01010) P(01012) P(01021) P(01023) P(01030) P(01032) P(01034) P(01047) P(01050) P(01100) P(01102) P(01111) \
    P(01120) P(01122) P(01201) P(01203) P(01210) P(01212) P(01221) P(01230) P(01272) P(01300) P(01302) P(01320) \
    P(01331) P(01346) P(01366) P(01401) P(01405) P(01450) P(01520) P(01524) P(01546) P(01571) P(01605) P(01722) \
    P(01740) P(02000) P(02002) P(02011) P(02013) P(02020) P(02022) P(02026) P(02031) P(02042) P(02101) P(02103) \
    P(02105) P(02110) P(02112) P(02121) P(02130) P(02163) P(02167) P(02170) P(02200) P(02202) P(02211) P(02217) \
    P(02220) P(02222) P(02237) P(02240) P(02255) P(02301) P(02310) P(02314) P(02370) P(02374) P(02435) P(02453) \
    P(02503) P(02527) P(02541) P(02574) P(02701) P(02703) P(02716) P(02745) P(03001) P(03010) P(03012) P(03021) \
    P(03023) P(03050) P(03065) P(03072) P(03100) P(03102) P(03120) P(03131) P(03144) P(03146) P(03201) P(03203) \
    P(03210) P(03225) P(03252) P(03272) P(03311) P(03333) P(03430) P(03447) P(03472) P(03500) P(03506) P(03522) \
    P(03555) P(03614) P(03636) P(03663) P(03733) P(03760) P(04004) P(04017) P(04035) P(04037) P(04053) P(04057) \
    P(04174) P(04220) P(04237) P(04240) P(04260) P(04266) P(04307) P(04345) P(04404) P(04451) P(04464) P(04525) \
    P(04543) P(04570) P(04705) P(04710) P(04712) P(04730) P(05012) P(05041) P(05070) P(05100) P(05106) P(05126) \
    P(05155) P(05214) P(05232) P(05272) P(05302) P(05353) P(05410) P(05423) P(05427) P(05472) P(05502) P(05531) \
    P(05650) P(05724) P(05742) P(06024) P(06044) P(06046) P(06064) P(06121) P(06161) P(06217) P(06264) P(06330) \
    P(06336) P(06444) P(06505) P(06552) P(06633) P(06703) P(06721) P(07003) P(07005) P(07007) P(07010) P(07032) \
    P(07052) P(07126) P(07140) P(07212) P(07245) P(07252) P(07300) P(07315) P(07333) P(07360) P(07421) P(07441) \
    P(07500) P(07502) P(07524) P(07630)

#define IQ3S_POINTS(P) \
    P(00000) P(00001) P(00002) P(00005) P(00007) P(00010) P(00011) P(00012) P(00014) P(00016) P(00020) P(00021) \
    P(00025) P(00033) P(00040) P(00042) P(00045) P(00047) P(00051) P(00053) P(00060) P(00062) P(00071) P(00074) \
    P(00077) P(00100) P(00101) P(00102) P(00104) P(00110) P(00111) P(00115) P(00120) P(00123) P(00127) P(00131) \
    P(00135) P(00144) P(00161) P(00165) P(00172) P(00200) P(00201) P(00205) P(00207) P(00210) P(00213) P(00216) \
    P(00221) P(00225) P(00230) P(00234) P(00242) P(00245) P(00247) P(00251) P(00253) P(00270) P(00273) P(00303) \
    P(00311) P(00315) P(00320) P(00322) P(00331) P(00333) P(00336) P(00344) P(00350) P(00352) P(00367) P(00371) \
    P(00375) P(00400) P(00413) P(00417) P(00421) P(00424) P(00432) P(00440) P(00443) P(00451) P(00470) P(00502) \
    P(00504) P(00520) P(00522) P(00526) P(00533) P(00541) P(00545) P(00547) P(00566) P(00573) P(00606) P(00611) \
    P(00613) P(00631) P(00652) P(00671) P(00700) P(00702) P(00704) P(00720) P(00722) P(00726) P(00733) P(00750) \
    P(00754) P(01000) P(01001) P(01002) P(01004) P(01010) P(01011) P(01013) P(01015) P(01017) P(01020) P(01022) \
    P(01031) P(01034) P(01036) P(01054) P(01056) P(01061) P(01072) P(01100) P(01101) P(01103) P(01106) P(01110) \
    P(01114) P(01121) P(01130) P(01133) P(01141) P(01150) P(01152) P(01170) P(01176) P(01200) P(01212) P(01215) \
    P(01217) P(01220) P(01224) P(01232) P(01240) P(01243) P(01255) P(01260) P(01272) P(01301) P(01304) P(01307) \
    P(01310) P(01313) P(01321) P(01327) P(01330) P(01334) P(01341) P(01362) P(01370) P(01403) P(01405) P(01412) \
    P(01414) P(01431) P(01433) P(01442) P(01446) P(01450) P(01454) P(01501) P(01510) P(01513) P(01521) P(01530) \
    P(01532) P(01551) P(01620) P(01624) P(01627) P(01644) P(01646) P(01701) P(01703) P(01710) P(01712) P(01721) \
    P(01735) P(01741) P(01762) P(01770) P(02000) P(02001) P(02003) P(02005) P(02007) P(02010) P(02012) P(02014) \
    P(02016) P(02021) P(02023) P(02027) P(02030) P(02032) P(02041) P(02043) P(02045) P(02050) P(02052) P(02067) \
    P(02070) P(02073) P(02075) P(02100) P(02102) P(02110) P(02113) P(02117) P(02122) P(02125) P(02131) P(02134) \
    P(02142) P(02151) P(02201) P(02204) P(02207) P(02221) P(02223) P(02230) P(02237) P(02241) P(02253) P(02257) \
    P(02271) P(02274) P(02300) P(02302) P(02305) P(02311) P(02322) P(02324) P(02331) P(02333) P(02342) P(02350) \
    P(02366) P(02401) P(02407) P(02420) P(02423) P(02432) P(02435) P(02441) P(02472) P(02475) P(02504) P(02511) \
    P(02522) P(02537) P(02540) P(02553) P(02570) P(02600) P(02602) P(02607) P(02621) P(02655) P(02661) P(02705) \
    P(02711) P(02726) P(02730) P(02743) P(02750) P(03002) P(03011) P(03013) P(03015) P(03017) P(03022) P(03031) \
    P(03033) P(03035) P(03042) P(03044) P(03047) P(03051) P(03063) P(03071) P(03101) P(03103) P(03105) P(03114) \
    P(03121) P(03123) P(03140) P(03160) P(03172) P(03176) P(03200) P(03212) P(03220) P(03232) P(03234) P(03250) \
    P(03301) P(03310) P(03314) P(03321) P(03323) P(03327) P(03330) P(03341) P(03343) P(03347) P(03355) P(03373) \
    P(03403) P(03411) P(03416) P(03422) P(03431) P(03452) P(03460) P(03464) P(03501) P(03510) P(03512) P(03525) \
    P(03532) P(03544) P(03556) P(03573) P(03616) P(03641) P(03701) P(03703) P(03720) P(03722) P(03735) P(04000) \
    P(04004) P(04012) P(04020) P(04024) P(04027) P(04032) P(04041) P(04050) P(04070) P(04102) P(04107) P(04111) \
    P(04113) P(04122) P(04130) P(04135) P(04143) P(04151) P(04155) P(04201) P(04203) P(04210) P(04215) P(04221) \
    P(04233) P(04240) P(04257) P(04262) P(04270) P(04304) P(04311) P(04313) P(04320) P(04322) P(04331) P(04335) \
    P(04400) P(04402) P(04424) P(04437) P(04440) P(04471) P(04505) P(04507) P(04521) P(04562) P(04613) P(04634) \
    P(04660) P(04710) P(04715) P(04730) P(04743) P(04751) P(05002) P(05010) P(05014) P(05022) P(05040) P(05044) \
    P(05047) P(05052) P(05066) P(05074) P(05101) P(05103) P(05105) P(05112) P(05121) P(05132) P(05172) P(05200) \
    P(05211) P(05223) P(05230) P(05236) P(05253) P(05302) P(05307) P(05310) P(05327) P(05344) P(05351) P(05365) \
    P(05373) P(05401) P(05404) P(05420) P(05432) P(05446) P(05512) P(05526) P(05551) P(05553) P(05642) P(05702) \
    P(05704) P(05722) P(06011) P(06013) P(06015) P(06031) P(06033) P(06060) P(06100) P(06120) P(06127) P(06164) \
    P(06212) P(06234) P(06242) P(06255) P(06262) P(06270) P(06300) P(06314) P(06321) P(06340) P(06425) P(06443) \
    P(06462) P(06500) P(06503) P(06534) P(06560) P(06605) P(06640) P(06711) P(06713) P(07000) P(07004) P(07007) \
    P(07020) P(07022) P(07036) P(07040) P(07054) P(07062) P(07102) P(07111) P(07124) P(07143) P(07145) P(07201) \
    P(07204) P(07210) P(07216) P(07221) P(07230) P(07251) P(07302) P(07332) P(07335) P(07353) P(07401) P(07405) \
    P(07413) P(07420) P(07450) P(07522) P(07542) P(07602) P(07631) P(07700)

#define LEVEL(k, j) (((k) >> (3 * (j))) & 7u)
#define XXS_BYTE(l) ((l) == 7 ? 62u : 8u * (l) + 4u)
#define S_BYTE(l) (2u * (l) + 1u)
#define AS_BYTES(k, F) \
    (F(LEVEL(k, 0)) | F(LEVEL(k, 1)) << 8 | F(LEVEL(k, 2)) << 16 | F(LEVEL(k, 3)) << 24)
#define P_XXS(k) AS_BYTES(k, XXS_BYTE),
#define P_S(k) AS_BYTES(k, S_BYTE),
#define P_KEY(k) k,

const uint32_t kiln_iq3xxs_grid[KILN_IQ3XXS_GRID] = {IQ3XXS_POINTS(P_XXS)};
const uint32_t kiln_iq3s_grid[KILN_IQ3S_GRID] = {IQ3S_POINTS(P_S)};
const uint16_t kiln_iq3xxs_keys[KILN_IQ3XXS_GRID] = {IQ3XXS_POINTS(P_KEY)};
const uint16_t kiln_iq3s_keys[KILN_IQ3S_GRID] = {IQ3S_POINTS(P_KEY)};

/* ---- neighbour maps ---------------------------------------------------- */

static int squared_distance(unsigned a, unsigned b) {
    int d2 = 0;
    for (int i = 0; i < 4; i++) {
        int d = 2 * ((int)LEVEL(a, i) - (int)LEVEL(b, i));
        d2 += d * d;
    }
    return d2;
}

/* Grid entries of `ng` keys ordered by (distance from key, index), as
 * ggml's qsort with iq3_compare_func leaves them, up to and including the
 * nwant-th distinct distance; written to out[], count returned. */
static int neighbours(const uint16_t *keys, int ng, unsigned key, int nwant, uint16_t *out, int *d2buf) {
    for (int j = 0; j < ng; j++) d2buf[j] = squared_distance(key, keys[j]);
    int n = 0, prev = -1;
    for (int have = 0; have < nwant; have++) {
        int d = INT32_MAX; /* the next distance above prev */
        for (int j = 0; j < ng; j++)
            if (d2buf[j] > prev && d2buf[j] < d) d = d2buf[j];
        if (d == INT32_MAX) break;
        for (int j = 0; j < ng; j++)
            if (d2buf[j] == d) out[n++] = (uint16_t)j;
        prev = d;
    }
    return n;
}

typedef struct built {
    kiln_iq3_search s;
    int ok;
} built;

static built g_built[2];
static pthread_once_t g_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void build(built *b, const uint16_t *keys, int ng, int nwant) {
    kiln_iq3_search *s = &b->s;
    for (int k = 0; k < KILN_IQ3_KEYS; k++) s->map[k] = INT32_MIN;
    for (int g = 0; g < ng; g++) s->map[keys[g]] = g;
    int nlists = 0;
    for (int k = 0; k < KILN_IQ3_KEYS; k++) nlists += s->map[k] < 0;
    kiln_iq3_list *lists = malloc((size_t)nlists * sizeof *lists);
    uint16_t *tmp = malloc((size_t)ng * sizeof *tmp);
    int *d2buf = malloc((size_t)ng * sizeof *d2buf);
    uint16_t *idx = NULL;
    uint8_t *q = NULL;
    size_t cap = 0, used = 0;
    if (!lists || !tmp || !d2buf) goto fail;
    int li = 0;
    for (int k = 0; k < KILN_IQ3_KEYS; k++) {
        if (s->map[k] >= 0) continue;
        int n = neighbours(keys, ng, (unsigned)k, nwant, tmp, d2buf);
        int npad = (n + 15) / 16 * 16;
        if (used + (size_t)npad > cap) {
            size_t ncap = cap ? 2 * cap : 65536;
            while (ncap < used + (size_t)npad) ncap *= 2;
            uint16_t *ni = realloc(idx, ncap * sizeof *ni);
            if (!ni) goto fail;
            idx = ni;
            uint8_t *nq = realloc(q, 4 * ncap);
            if (!nq) goto fail;
            q = nq;
            cap = ncap;
        }
        lists[li] = (kiln_iq3_list){(uint32_t)used, (uint16_t)n, (uint16_t)npad};
        for (int j = 0; j < npad; j++) {
            uint16_t g = tmp[j < n ? j : n - 1];
            idx[used + (size_t)j] = g;
            /* the quantizer's model 2l + 1 (which IQ3_S also decodes to) */
            for (int i = 0; i < 4; i++) q[4 * used + (size_t)i * npad + j] = (uint8_t)S_BYTE(LEVEL(keys[g], i));
        }
        s->map[k] = -(li + 1);
        used += (size_t)npad;
        li++;
    }
    s->keys = keys;
    s->lists = lists;
    s->idx = idx;
    s->q = q;
    s->nlists = nlists;
    b->ok = 1;
    free(tmp);
    free(d2buf);
    return;
fail:
    free(lists);
    free(tmp);
    free(d2buf);
    free(idx);
    free(q);
}

static void build_xxs(void) { build(&g_built[0], kiln_iq3xxs_keys, KILN_IQ3XXS_GRID, 2); }
static void build_s(void) { build(&g_built[1], kiln_iq3s_keys, KILN_IQ3S_GRID, 3); }

const kiln_iq3_search *kiln_iq3_search_tables(int grid_size) {
    if (grid_size != KILN_IQ3XXS_GRID && grid_size != KILN_IQ3S_GRID) return NULL;
    const int w = grid_size == KILN_IQ3S_GRID;
    pthread_once(&g_once[w], w ? build_s : build_xxs);
    return g_built[w].ok ? &g_built[w].s : NULL;
}
