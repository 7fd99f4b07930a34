/* golden/fingerprint.h - what identifies a model in golden and KLD base
 * files, so that a check can say whether it compares the very same weights,
 * the same network quantized differently, or something else.
 *
 * The fingerprint is a JSON object:
 *   "arch"           general.architecture
 *   "name"           general.name ("" when absent)
 *   "file"           the file's base name, informative only
 *   "n_tensors", "n_vocab"
 *   "layout_xxh64"   XXH64 over every tensor's name and shape
 *   "types_xxh64"    XXH64 over every tensor's name and ggml type
 *   "data_xxh64"     XXH64 over every tensor's bytes
 *                    (all three in name order, so reordering is no change)
 *   "vocab_xxh64"    XXH64 over tokenizer.ggml.tokens (length + bytes each)
 *   "types"          {"Q4_K": 120, "F32": 37, ...} tensor counts per type
 * Hashes are 16 lower-case hex digits. Hashing the data reads the whole
 * model once (about 1 s per 3 GB). */
#ifndef KILN_FINGERPRINT_H
#define KILN_FINGERPRINT_H

#include <jansson.h>

#include "../core/error.h"
#include "../core/gguf.h"

/* Returns a new JSON object (caller decrefs), or NULL with err filled. */
json_t *kiln_fingerprint(const kiln_gguf *g, kiln_err *err);

typedef enum kiln_fp_relation {
    KILN_FP_SAME_WEIGHTS,  /* identical layout, types and data */
    KILN_FP_REQUANTIZED,   /* same arch, layout and vocabulary; types or data differ */
    KILN_FP_DIFFERENT,     /* another architecture, layout or vocabulary */
    KILN_FP_UNKNOWN,       /* one side has no fingerprint (e.g. a KLGT file) */
} kiln_fp_relation;

/* How fingerprint `a` relates to `b` (either may be NULL). */
kiln_fp_relation kiln_fingerprint_relation(const json_t *a, const json_t *b);
const char *kiln_fp_relation_name(kiln_fp_relation r); /* "same weights", ... */

#endif
