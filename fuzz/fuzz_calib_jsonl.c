/* fuzz/fuzz_calib_jsonl.c - calibration text in JSON Lines
 * (imatrix/calib_jsonl.c, through imatrix/calib.c).
 *
 * The input is written as calib.jsonl and read with kiln_calib_read(),
 * the entry point `kiln imatrix` uses; zstd-compressed input is
 * recognised by its magic and decompressed first, so the fuzzer reaches
 * imatrix/calib_zstd.c too. A read that succeeds must give a
 * NUL-terminated text of the length it reports. */
#include <stdlib.h>

#include "../imatrix/calib.h"
#include "fuzz.h"
#include "harnesses.h"

int fuzz_calib_jsonl(const uint8_t *data, size_t size) {
    fuzz_put("calib.jsonl", data, size);
    const char *paths[] = {fuzz_path("calib.jsonl")};
    char *text = NULL;
    size_t len = 0;
    kiln_err err = {{0}};
    if (fuzz_expect_err(kiln_calib_read(paths, 1, NULL, &text, &len, &err), &err, "kiln_calib_read") == 0 &&
        text[len] != '\0')
        abort();
    free(text);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_calib_jsonl)
