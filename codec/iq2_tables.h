/* codec/iq2_tables.h - the fixed codebooks of IQ2_XXS, and the
 * neighbour map its quantizer searches.
 *
 * The grid and sign tables are facts of the file format (ggml-common.h's
 * iq2xxs_grid and ksigns_iq2xs): every IQ2_XXS file in the world indexes
 * them, so they are constants, built at compile time. The neighbour map is
 * only needed to quantize; it is derived from the grid on first use
 * (thread-safe) so that dequantizing tools never pay for it.
 *
 * Levels: a grid point has 8 coordinates, each a level 0, 1 or 2. The file
 * format decodes them as 8, 25, 43 (in units of d*(0.5+ls)/4); ggml's
 * quantizer models them as 1, 3, 5 (odd integers 2*level+1), and kiln's
 * ggml-compatible search must use that model to pick the same points. */
#ifndef KILN_IQ2_TABLES_H
#define KILN_IQ2_TABLES_H

#include <stdint.h>

#define KILN_IQ2XXS_GRID 256

/* Decoding grid: entry k holds 8 bytes, coordinate j in byte j, each one of
 * 8, 25, 43. Read it with memcpy or as bytes (little-endian order). */
extern const uint64_t kiln_iq2xxs_grid[KILN_IQ2XXS_GRID];

/* The same points as the quantizer's model: bytes 1, 3, 5 (2*level+1). */
extern const uint64_t kiln_iq2xxs_grid_odd[KILN_IQ2XXS_GRID];

/* Sign table: entry s (0..127) is the 8-bit sign mask of a group of 8,
 * s's 7 bits plus an eighth bit making the count of set bits even. Bit j
 * set means coordinate j is negative. */
extern const uint8_t kiln_iq2_signs[128];

/* A point's key: level of coordinate j in bits 2j..2j+1 (levels <= 2, so
 * keys are < KILN_IQ2_KEYS). */
#define KILN_IQ2_KEYS 0xAAABu

/* Where the quantizer goes for a point that may be off the grid.
 *
 * map[key] >= 0: the point is grid entry map[key].
 * map[key] <  0: list -map[key]-1 of `lists` holds the grid entries nearest
 *   to it (all entries at the smallest and the second-smallest squared
 *   distance, ordered by distance then entry - ggml's iq2xs_init_impl with
 *   nwant = 2), which the search scans for the best weighted fit.
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

typedef struct kiln_iq2xxs_search {
    int32_t map[KILN_IQ2_KEYS];
    const kiln_iq2_list *lists;
    const uint8_t *idx;
    const uint8_t *q;
    int nlists;
    /* Decoded coordinate i of every grid entry g, as floats, coordinate-
     * major: the full-grid search (iq2_xxs_fit.c) scores 8 or 16 entries
     * per instruction from it. */
    float dec[8][KILN_IQ2XXS_GRID];
} kiln_iq2xxs_search;

/* The neighbour map (and dec[][]), built on the first call (by whichever thread gets
 * there first; the others wait) and kept for the life of the process.
 * Returns NULL only if memory ran out on that first call. */
const kiln_iq2xxs_search *kiln_iq2xxs_search_tables(void);

#endif
