/* core/types.c - the ggml type table, indexed by the type id itself. */
#include "types.h"

#include <strings.h>

static const kiln_type_info TYPES[KILN_TYPE_COUNT] = {
    [KILN_F32] = {"F32", 1, 4},
    [KILN_F16] = {"F16", 1, 2},
    [KILN_Q4_0] = {"Q4_0", 32, 18},
    [KILN_Q4_1] = {"Q4_1", 32, 20},
    [KILN_Q5_0] = {"Q5_0", 32, 22},
    [KILN_Q5_1] = {"Q5_1", 32, 24},
    [KILN_Q8_0] = {"Q8_0", 32, 34},
    [KILN_Q8_1] = {"Q8_1", 32, 36},
    [KILN_Q2_K] = {"Q2_K", 256, 84},
    [KILN_Q3_K] = {"Q3_K", 256, 110},
    [KILN_Q4_K] = {"Q4_K", 256, 144},
    [KILN_Q5_K] = {"Q5_K", 256, 176},
    [KILN_Q6_K] = {"Q6_K", 256, 210},
    [KILN_Q8_K] = {"Q8_K", 256, 292},
    [KILN_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [KILN_IQ2_XS] = {"IQ2_XS", 256, 74},
    [KILN_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [KILN_IQ1_S] = {"IQ1_S", 256, 50},
    [KILN_IQ4_NL] = {"IQ4_NL", 32, 18},
    [KILN_IQ3_S] = {"IQ3_S", 256, 110},
    [KILN_IQ2_S] = {"IQ2_S", 256, 82},
    [KILN_IQ4_XS] = {"IQ4_XS", 256, 136},
    [KILN_I8] = {"I8", 1, 1},
    [KILN_I16] = {"I16", 1, 2},
    [KILN_I32] = {"I32", 1, 4},
    [KILN_I64] = {"I64", 1, 8},
    [KILN_F64] = {"F64", 1, 8},
    [KILN_IQ1_M] = {"IQ1_M", 256, 56},
    [KILN_BF16] = {"BF16", 1, 2},
    [KILN_TQ1_0] = {"TQ1_0", 256, 54},
    [KILN_TQ2_0] = {"TQ2_0", 256, 66},
    [KILN_MXFP4] = {"MXFP4", 32, 17},
    [KILN_NVFP4] = {"NVFP4", 64, 36},
    [KILN_Q1_0] = {"Q1_0", 128, 18},
    [KILN_Q2_0] = {"Q2_0", 64, 18},
};

const kiln_type_info *kiln_type_get(uint32_t type) {
    if (type >= KILN_TYPE_COUNT || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

const char *kiln_type_name(uint32_t type) {
    const kiln_type_info *t = kiln_type_get(type);
    return t ? t->name : "?";
}

int kiln_type_from_name(const char *name) {
    for (int i = 0; i < KILN_TYPE_COUNT; i++)
        if (TYPES[i].name && strcasecmp(TYPES[i].name, name) == 0) return i;
    return -1;
}

uint64_t kiln_type_row_bytes(uint32_t type, uint64_t n) {
    const kiln_type_info *t = kiln_type_get(type);
    if (!t) return 0;
    return n / t->block_size * t->type_size;
}

double kiln_type_bpw(uint32_t type) {
    const kiln_type_info *t = kiln_type_get(type);
    if (!t) return 0;
    return t->type_size * 8.0 / t->block_size;
}
