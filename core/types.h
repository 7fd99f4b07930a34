/* core/types.h - the ggml tensor type table.
 *
 * Every ggml type id that can appear in a GGUF file has an entry: its name,
 * how many weights a block holds, and how many bytes a block takes. Sizes
 * are what `kiln inspect` needs to show correct offsets and byte counts even
 * for types kiln cannot (de)quantize. Whether kiln can dequantize or
 * quantize a type is asked of quantize/codec.h, which owns the codecs. */
#ifndef KILN_TYPES_H
#define KILN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ids are ggml's (ggml.h, enum ggml_type); they are stored in GGUF files. */
enum kiln_type {
    KILN_F32 = 0,
    KILN_F16 = 1,
    KILN_Q4_0 = 2,
    KILN_Q4_1 = 3,
    KILN_Q5_0 = 6,
    KILN_Q5_1 = 7,
    KILN_Q8_0 = 8,
    KILN_Q8_1 = 9,
    KILN_Q2_K = 10,
    KILN_Q3_K = 11,
    KILN_Q4_K = 12,
    KILN_Q5_K = 13,
    KILN_Q6_K = 14,
    KILN_Q8_K = 15,
    KILN_IQ2_XXS = 16,
    KILN_IQ2_XS = 17,
    KILN_IQ3_XXS = 18,
    KILN_IQ1_S = 19,
    KILN_IQ4_NL = 20,
    KILN_IQ3_S = 21,
    KILN_IQ2_S = 22,
    KILN_IQ4_XS = 23,
    KILN_I8 = 24,
    KILN_I16 = 25,
    KILN_I32 = 26,
    KILN_I64 = 27,
    KILN_F64 = 28,
    KILN_IQ1_M = 29,
    KILN_BF16 = 30,
    KILN_TQ1_0 = 34,
    KILN_TQ2_0 = 35,
    KILN_MXFP4 = 39,
    KILN_NVFP4 = 40,
    KILN_Q1_0 = 41,
    KILN_Q2_0 = 42,
    KILN_TYPE_COUNT = 43,
};

typedef struct kiln_type_info {
    const char *name;     /* ggml's name, e.g. "Q4_K"; NULL for unused ids */
    uint32_t block_size;  /* weights per block */
    uint32_t type_size;   /* bytes per block */
} kiln_type_info;

/* Returns the entry for `type`, or NULL when the id is unknown or was
 * removed from ggml (4, 5, 31-33, 36-38). */
const kiln_type_info *kiln_type_get(uint32_t type);

/* Name of `type`, or "?" for an unknown id. */
const char *kiln_type_name(uint32_t type);

/* Looks a type up by name, case-insensitively ("q4_k" works). Returns the
 * id, or -1 when no type has that name. */
int kiln_type_from_name(const char *name);

/* Bytes taken by `n` weights of `type`; `n` must be a multiple of the block
 * size (callers validate that first). Returns 0 for an unknown type. */
uint64_t kiln_type_row_bytes(uint32_t type, uint64_t n);

/* Bits per weight of `type` (type_size * 8 / block_size). */
double kiln_type_bpw(uint32_t type);

#endif
