/* codec/blocks.h - every block struct kiln reads or writes, with its
 * byte diagram and a static_assert on its size. One header per family so
 * each stays short: legacy 32-weight blocks, k-quant 256-weight super-blocks,
 * and the i-quants. The runtime's dot products include this too. */
#ifndef KILN_BLOCKS_H
#define KILN_BLOCKS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_QK 32    /* weights per legacy block */
#define KILN_QK_K 256 /* weights per k-quant / i-quant super-block */

typedef uint16_t kiln_half; /* IEEE fp16 bits; see core/fp16.h */

#include "blocks_legacy.h"
#include "blocks_k.h"
#include "blocks_iq.h"
#include "blocks_tq.h"
#include "blocks_fp4.h"

#endif
