/* runtime/find_tensor.c - kiln_find_tensor (model.h): one checked lookup
 * of a weight by name, shape and type, shared by the loaders of model.c
 * and deepseek4_load.c, each of which runs a whole table of them and
 * reports the first error. */
#include "model.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const kiln_tensor *kiln_find_tensor(kiln_find *L, int flags, int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt,
                                    ...) {
    if (L->failed) return NULL;
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const kiln_tensor *t = kiln_gguf_find_tensor(L->g, name);
    if (!t) {
        if (flags & KILN_FIND_REQ) {
            kiln_fail(L->err, L->path, name, -1, "tensor is missing");
            L->failed = true;
        }
        return NULL;
    }
    int64_t want[KILN_GGUF_MAX_DIMS] = {ne0, ne1, ne2, 1};
    if (memcmp(t->ne, want, sizeof want) != 0) {
        kiln_fail(L->err, L->path, name, -1, "shape [%lld, %lld, %lld, %lld] but expected [%lld, %lld, %lld, 1]",
                  (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                  (long long)ne0, (long long)ne1, (long long)ne2);
        L->failed = true;
        return NULL;
    }
    const kiln_type_info *ti = kiln_type_get(t->type);
    bool ok = (flags & KILN_FIND_VEC)   ? t->type == KILN_F32
              : (flags & KILN_FIND_I32) ? t->type == KILN_I32
                                        : ti && kiln_can_dequantize(t->type) && ne0 % ti->block_size == 0;
    if (!ok) {
        const char *need = (flags & KILN_FIND_VEC)   ? "F32 (norms and biases)"
                           : (flags & KILN_FIND_I32) ? "I32 (an index table)"
                                                     : "a type kiln evaluates, with whole blocks per row";
        kiln_fail(L->err, L->path, name, -1, "type %s with rows of %lld, but it must be %s", kiln_type_name(t->type),
                  (long long)ne0, need);
        L->failed = true;
        return NULL;
    }
    return t;
}
