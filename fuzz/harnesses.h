/* fuzz/harnesses.h - every fuzz harness, by name, for the replay test
 * (tests/test_fuzz_regress.c). A new harness fuzz/fuzz_NAME.c adds one
 * name to FUZZ_HARNESS_LIST; its name is also its folder under fuzz/corpus/ and
 * fuzz/regress/. */
#ifndef KILN_FUZZ_HARNESSES_H
#define KILN_FUZZ_HARNESSES_H

#include <stddef.h>
#include <stdint.h>

/* X(NAME) for each harness fuzz_NAME. */
#define FUZZ_HARNESS_LIST(X) \
    X(gguf) X(safetensors) X(st_index) X(config) X(tokenizer) X(spm) X(imatrix) X(calib_jsonl) X(archive)

#define FUZZ_DECLARE(name) int fuzz_##name(const uint8_t *data, size_t size);
FUZZ_HARNESS_LIST(FUZZ_DECLARE)
#undef FUZZ_DECLARE

#endif
