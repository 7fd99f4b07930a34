/* codec/iq1_tables.h - the codebook of IQ1_S and IQ1_M, and the
 * neighbour lists their quantizers search.
 *
 * Both formats store, per 8 weights, an 11-bit index into one grid of
 * 2048 points (ggml-common.h's iq1s_grid) whose coordinates are -1, 0 or
 * +1, plus a shift of +-1/8 shared by the group. The grid is a fact of
 * the file format; it is written out in iq1_tables.c once, as levels
 * 0..2 (coordinate = level - 1), and every other form is derived from
 * that list on first use (thread-safe); the quantizers' neighbour lists
 * (a fraction of a second to build) only when a quantizer asks, so that
 * dequantizing and multiplying never pay for them.
 *
 * Keys: a point of levels l_0..l_7 has key sum l_j << 2j (< KILN_IQ1_KEYS). */
#ifndef KILN_IQ1_TABLES_H
#define KILN_IQ1_TABLES_H

#include <stdint.h>

#define KILN_IQ1_GRID 2048
#define KILN_IQ1_KEYS 0xAAABu
/* ggml's IQ1S_DELTA and IQ1M_DELTA: the shift, in units of the scale. */
#define KILN_IQ1_DELTA 0.125f

typedef struct kiln_iq1_tables {
    /* Decoding grid: entry k holds 8 int8 coordinates (-1, 0, 1),
     * coordinate j in byte j (little-endian), as ggml's iq1s_grid. */
    uint64_t grid[KILN_IQ1_GRID];
    /* Entry k's levels (coordinate + 1) as bytes. */
    uint8_t level[KILN_IQ1_GRID][8];
    /* Filled by kiln_iq1_search_tables() only.
     * map[key] >= 0: the point is grid entry map[key]; map[key] < 0: the
     * entries nearest to it are nbr[-map[key] - 1 ...]: a count n, then n
     * grid indices - every entry at the three smallest squared distances
     * (coordinates modelled as 2l+1), by distance then index (ggml's
     * iq2xs_init_impl with nwant = 3). Only keys of levels <= 2 have lists. */
    int32_t map[KILN_IQ1_KEYS];
    uint16_t *nbr;
} kiln_iq1_tables;

/* The grid and levels (map and nbr not yet valid), built on the first
 * call (the other threads wait) in static storage: never NULL. */
const kiln_iq1_tables *kiln_iq1_tables_get(void);

/* The same tables with map and nbr built too (on the first call of this
 * one). NULL only if memory for the lists ran out then. */
const kiln_iq1_tables *kiln_iq1_search_tables(void);

#endif
