/* fuzz/fuzz_archive.c - archives read in place (convert/source_archive.c
 * for `kiln convert model.tar`, imatrix/calib_archive.c for calibration
 * text in a tar or zip).
 *
 * The input is written as input.tar (libarchive tells tar, zip, gzip and
 * zstd apart by content) and given to both readers: kiln_hf_open() lists
 * the members, reads config.json and the tokenizer files and the
 * safetensors headers from the stream, then the metadata is built, and
 * kiln_calib_read() joins every member as calibration text. */
#include <stdlib.h>
#include <string.h>

#include "../convert/convert.h"
#include "../imatrix/calib.h"
#include "fuzz.h"
#include "harnesses.h"

int fuzz_archive(const uint8_t *data, size_t size) {
    fuzz_put("input.tar", data, size);
    const char *path = fuzz_path("input.tar");
    kiln_err err = {{0}};
    kiln_convert_opts opts = {.outtype = KILN_OUT_F32};
    kiln_hf_model *m = kiln_hf_open(path, &opts, &err);
    if (!m) {
        fuzz_expect_err(-1, &err, "kiln_hf_open (archive)");
    } else {
        kiln_gguf *g = kiln_hf_metadata(m, &err);
        if (!g) fuzz_expect_err(-1, &err, "kiln_hf_metadata (archive)");
        kiln_gguf_close(g);
        kiln_hf_close(m);
    }

    const char *paths[] = {path};
    char *text = NULL;
    size_t len = 0;
    memset(&err, 0, sizeof err);
    if (fuzz_expect_err(kiln_calib_read(paths, 1, NULL, &text, &len, &err), &err, "kiln_calib_read") == 0 &&
        text[len] != '\0')
        abort();
    free(text);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_archive)
