/* runtime/kv_cache.c - allocating the f32 key/value cache (layout in
 * kv_cache.h). */
#include "kv_cache.h"

#include <stdlib.h>

int kiln_kv_init(kiln_kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row, kiln_err *err) {
    *c = (kiln_kv_cache){.n_layer = n_layer, .n_ctx = n_ctx, .row = row};
    const double bytes = (double)n_layer * (double)n_ctx * (double)row * sizeof(float);
    if (n_layer <= 0 || n_ctx <= 0 || row <= 0 || bytes > (double)SIZE_MAX / 2)
        return kiln_fail(err, NULL, "n_ctx", -1, "a KV cache of %lld positions is impossible",
                         (long long)n_ctx);
    /* malloc, not calloc: no position is read before it is written */
    c->k = malloc((size_t)bytes);
    c->v = malloc((size_t)bytes);
    if (!c->k || !c->v) {
        kiln_kv_free(c);
        return kiln_fail(err, NULL, "n_ctx", -1, "out of memory for a KV cache of %.0f MB",
                         2 * bytes / 1e6);
    }
    return 0;
}

void kiln_kv_free(kiln_kv_cache *c) {
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}
