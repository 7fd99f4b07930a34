/* codec/iq2_tables.h - the fixed codebooks of the 2-bit i-quants (IQ2_XXS,
 * IQ2_XS, IQ2_S), and the neighbour map of each that the quantizers search.
 *
 * The grid and sign tables are facts of the file format (ggml-common.h's
 * iq2xxs_grid, iq2xs_grid, iq2s_grid and ksigns_iq2xs): every such file in
 * the world indexes them, so they are constants, built at compile time.
 * A neighbour map is only needed to quantize; it is derived from its grid
 * on first use (thread-safe) so that dequantizing tools never pay for it.
 *
 * Levels: a grid point has 8 coordinates, each a level 0, 1 or 2 (in all
 * three grids). The file format decodes them as 8, 25, 43 (in units of the
 * group scale / 8); ggml's quantizer models them as 1, 3, 5 (odd integers
 * 2*level+1), and kiln's ggml-compatible searches must use that model to
 * pick the same points. */
#ifndef KILN_IQ2_TABLES_H
#define KILN_IQ2_TABLES_H

#include <stdint.h>

#define KILN_IQ2XXS_GRID 256
#define KILN_IQ2XS_GRID 512
#define KILN_IQ2S_GRID 1024

/* Decoding grids: entry k holds 8 bytes, coordinate j in byte j, each one
 * of 8, 25, 43. Read them with memcpy or as bytes (little-endian order). */
extern const uint64_t kiln_iq2xxs_grid[KILN_IQ2XXS_GRID];
extern const uint64_t kiln_iq2xs_grid[KILN_IQ2XS_GRID];
extern const uint64_t kiln_iq2s_grid[KILN_IQ2S_GRID];

/* The same points as the quantizer's model: bytes 1, 3, 5 (2*level+1). */
extern const uint64_t kiln_iq2xxs_grid_odd[KILN_IQ2XXS_GRID];
extern const uint64_t kiln_iq2xs_grid_odd[KILN_IQ2XS_GRID];
extern const uint64_t kiln_iq2s_grid_odd[KILN_IQ2S_GRID];

/* Sign table of IQ2_XXS and IQ2_XS: entry s (0..127) is the 8-bit sign
 * mask of a group of 8, s's 7 bits plus an eighth bit making the count of
 * set bits even. Bit j set means coordinate j is negative. (IQ2_S stores
 * all 8 sign bits.) */
extern const uint8_t kiln_iq2_signs[128];

/* A point's key: level of coordinate j in bits 2j..2j+1 (levels <= 2, so
 * keys are < KILN_IQ2_KEYS). */
#define KILN_IQ2_KEYS 0xAAABu

/* IQ2_XXS's points as keys, by grid index (the decoders that expand a
 * point from its levels in registers read them). */
extern const uint16_t *const kiln_iq2xxs_keys;

/* Where the quantizer goes for a point that may be off the grid.
 *
 * map[key] >= 0: the point is grid entry map[key].
 * map[key] <  0: list -map[key]-1 of `lists` holds the grid entries nearest
 *   to it (all entries at the smallest distances, ordered by distance then
 *   entry - ggml's iq2xs_init_impl: two distances for IQ2_XXS and IQ2_XS,
 *   one for IQ2_S), which the search scans for the best weighted fit.
 *
 * A list of n entries (padded to npad, a multiple of 16) starts at `start`
 * in two pools: idx[start + j] is entry j's grid index, and the odd-model
 * coordinate i of entry j is q[8*start + i*npad + j] (coordinate-major, so
 * SIMD code compares 8 or 16 candidates per instruction). Padding lanes
 * repeat the last entry. */
typedef struct kiln_iq2_list {
    uint32_t start;
    uint16_t n, npad;
} kiln_iq2_list;

typedef struct kiln_iq2_search {
    int32_t map[KILN_IQ2_KEYS];
    const kiln_iq2_list *lists;
    const uint16_t *idx;
    const uint8_t *q;
    const uint16_t *keys; /* keys[start + j]: entry j's key (iq2_scan.h) */
    const uint64_t *grid_odd; /* the grid, odd model */
    int nlists;
} kiln_iq2_search;

typedef enum kiln_iq2_grid_id {
    KILN_IQ2_GRID_XXS, /* 256 points */
    KILN_IQ2_GRID_XS,  /* 512 points */
    KILN_IQ2_GRID_S,   /* 1024 points */
    KILN_IQ2_GRID_COUNT
} kiln_iq2_grid_id;

/* The neighbour map of grid `id`, built on the first call (by whichever
 * thread gets there first; the others wait) and kept for the life of the
 * process. Returns NULL only if memory ran out on that first call. */
const kiln_iq2_search *kiln_iq2_search_tables(kiln_iq2_grid_id id);

#endif
