/* runtime/kv_cache.h - the attention keys and values of every position a
 * context has read, in f32 (as the golden logits were made: type_k =
 * type_v = F32). For KILN_ATTN_LLAMACPP (llama.cpp's F16 cache) the rows
 * are rounded to f16 as they are written (kiln_f16_round) and kept as the
 * floats those halves stand for: the same values llama.cpp's F16 cache
 * holds, though not its halved memory.
 *
 * One block per layer, each n_ctx rows of n_head_kv * head_dim floats:
 * keys and values both position-major, so one position's heads are
 * adjacent and appending a batch is a copy of whole rows. Pages are
 * touched only as positions are written, so a large n_ctx costs address
 * space, not memory, until it is used. */
#ifndef KILN_KV_CACHE_H
#define KILN_KV_CACHE_H

#include <stdint.h>

#include "../core/error.h"

typedef struct kiln_kv_cache {
    int64_t n_layer, n_ctx, row; /* row: floats per position */
    float *k, *v;
} kiln_kv_cache;

/* Allocates an empty cache. Returns 0, or -1 with a message when out of
 * memory. */
int kiln_kv_init(kiln_kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row, kiln_err *err);

/* Frees the buffers; the struct may be initialised again. */
void kiln_kv_free(kiln_kv_cache *c);

/* y[i] = x[i] rounded to the nearest f16 (ties to even, as F16C and
 * ggml's fp32 -> fp16 do), as a float; y may be x. Every SIMD level gives
 * the same bits. */
void kiln_f16_round(const float *x, float *y, int64_t n);

/* The length of llama.cpp's KV view (llama_kv_cache::get_n_kv) when
 * n_used cells are filled: rounded up to a multiple of 256 (its context
 * pads n_ctx to 256, so the cache always has that many). The non-flash
 * attention's softmax rows are this long. */
static inline int64_t kiln_kv_view(int64_t n_used) {
    return (n_used + 255) / 256 * 256;
}

/* Row of position pos in layer il. */
static inline float *kiln_kv_k(const kiln_kv_cache *c, int64_t il, int64_t pos) {
    return c->k + (il * c->n_ctx + pos) * c->row;
}
static inline float *kiln_kv_v(const kiln_kv_cache *c, int64_t il, int64_t pos) {
    return c->v + (il * c->n_ctx + pos) * c->row;
}

#endif
