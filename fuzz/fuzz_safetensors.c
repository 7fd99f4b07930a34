/* fuzz/fuzz_safetensors.c - one safetensors file (core/safetensors.c).
 *
 * The input is a whole .safetensors file: its header is parsed directly
 * with kiln_st_parse_header(), and the file is opened with kiln_st_open()
 * (which maps it and checks every offset against its size). The first and
 * last byte of each tensor are read and a few elements converted to f32,
 * so that any bound the reader got wrong shows up under ASan. */
#include <stdlib.h>
#include <string.h>

#include "../core/safetensors.h"
#include "fuzz.h"
#include "harnesses.h"

static volatile float sink;

static void parse_header_only(const uint8_t *data, size_t size) {
    if (size < 8) return;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | data[i];
    if (len > size - 8) len = size - 8;
    kiln_st_tensor *t = NULL;
    uint64_t n = 0;
    kiln_err err = {{0}};
    int rc = kiln_st_parse_header((const char *)data + 8, len, size, "fuzz.safetensors", 0, &t, &n, &err);
    fuzz_expect_err(rc, &err, "kiln_st_parse_header");
    for (uint64_t i = 0; i < n; i++) free(t[i].name);
    free(t);
}

int fuzz_safetensors(const uint8_t *data, size_t size) {
    parse_header_only(data, size);
    fuzz_put("model.safetensors", data, size);
    kiln_err err = {{0}};
    kiln_st *st = kiln_st_open(fuzz_path("model.safetensors"), &err);
    if (!st) {
        fuzz_expect_err(-1, &err, "kiln_st_open");
        return 0;
    }
    for (uint64_t i = 0; i < st->n_tensors; i++) {
        const kiln_st_tensor *t = &st->tensors[i];
        if (kiln_st_find(st, t->name) == NULL) abort(); /* every listed tensor must be found by name */
        if (!t->nbytes) continue;
        sink += t->data[0] + t->data[t->nbytes - 1];
        float f[4];
        int64_t k = t->nelements < 4 ? t->nelements : 4;
        if (kiln_st_to_f32(t->dtype, t->data, f, k) == 0 && k) sink += f[k - 1];
    }
    kiln_st_close(st);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_safetensors)
