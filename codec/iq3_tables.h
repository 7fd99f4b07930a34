/* codec/iq3_tables.h - the fixed codebooks of IQ3_XXS (256 points) and
 * IQ3_S (512 points), and the neighbour maps their quantizers search.
 *
 * A grid point has 4 coordinates, each a level 0..7. Its key holds level
 * i in bits 3i..3i+2 (keys < KILN_IQ3_KEYS). The file formats decode the
 * levels as bytes: IQ3_XXS as 4, 12, 20, 28, 36, 44, 52, 62 (8l + 4, the
 * top one 62), IQ3_S as 1, 3, ..., 15 (2l + 1); both quantizers model them
 * as the odd integers 2l + 1 (ggml's iq3xs_init_impl), and kiln's search
 * must use that model to pick ggml's points.
 *
 * The grids are facts of the format (every IQ3 file indexes them) and so
 * compile-time constants; the neighbour maps are needed only to quantize
 * and are derived from the grids on first use. */
#ifndef KILN_IQ3_TABLES_H
#define KILN_IQ3_TABLES_H

#include <stdint.h>

#define KILN_IQ3XXS_GRID 256
#define KILN_IQ3S_GRID 512
#define KILN_IQ3_KEYS 4096

/* Decoding grids: entry k holds coordinate j in byte j (little-endian). */
extern const uint32_t kiln_iq3xxs_grid[KILN_IQ3XXS_GRID];
extern const uint32_t kiln_iq3s_grid[KILN_IQ3S_GRID];

/* The keys of the grid points, in grid-index order (ascending). */
extern const uint16_t kiln_iq3xxs_keys[KILN_IQ3XXS_GRID];
extern const uint16_t kiln_iq3s_keys[KILN_IQ3S_GRID];

/* Where the quantizer goes for a 4-level point that may be off the grid.
 *
 * map[key] >= 0: the point is grid entry map[key].
 * map[key] <  0: list -map[key]-1 of `lists` holds the grid entries at the
 *   `nwant` smallest squared distances from it (IQ3_XXS 2, IQ3_S 3), in
 *   order of distance then grid index, as ggml's iq3xs_init_impl sorts
 *   them; the search scans them for the best weighted fit.
 *
 * A list of n entries (padded to npad, a multiple of 16) starts at `start`
 * in two pools: idx[start + j] is entry j's grid index, and the odd-model
 * coordinate i of entry j (2l + 1) is q[4*start + i*npad + j]
 * (coordinate-major, so SIMD code scores 8 or 16 entries per
 * instruction). Padding repeats the last entry. */
typedef struct kiln_iq3_list {
    uint32_t start;
    uint16_t n, npad;
} kiln_iq3_list;

typedef struct kiln_iq3_search {
    int32_t map[KILN_IQ3_KEYS];
    const uint16_t *keys; /* kiln_iq3xxs_keys or kiln_iq3s_keys */
    const kiln_iq3_list *lists;
    const uint16_t *idx;
    const uint8_t *q;
    int nlists;
} kiln_iq3_search;

/* The map of the grid with grid_size points (256: IQ3_XXS, 512: IQ3_S),
 * built on the first call (other threads wait) and kept for the life of
 * the process. Returns NULL for another size or if memory ran out on that
 * first call. */
const kiln_iq3_search *kiln_iq3_search_tables(int grid_size);

#endif
