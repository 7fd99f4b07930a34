/* fuzz/fuzz_imatrix.c - importance-matrix files (core/imatrix_file.c):
 * llama-imatrix's GGUF format and the legacy .dat format (told apart by
 * the "GGUF" magic).
 *
 * The input is written to a file and read with kiln_imatrix_read(); every
 * entry of a matrix that reads is then looked up by name and its weights
 * computed, touching each value, so a length the reader trusted shows up
 * under ASan. */
#include <stdlib.h>

#include "../core/imatrix_file.h"
#include "fuzz.h"
#include "harnesses.h"

static volatile float sink;

int fuzz_imatrix(const uint8_t *data, size_t size) {
    fuzz_put("fuzz.imatrix", data, size);
    kiln_err err = {{0}};
    kiln_imatrix *im = kiln_imatrix_read(fuzz_path("fuzz.imatrix"), &err);
    if (!im) {
        fuzz_expect_err(-1, &err, "kiln_imatrix_read");
        return 0;
    }
    for (uint64_t i = 0; i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        if (kiln_imatrix_find(im, e->name) != e) abort(); /* names must be sorted and unique */
        if (e->n <= 0 || e->n_mat <= 0 || e->n > (1 << 20) / e->n_mat) continue;
        float *w = malloc((size_t)(e->n * e->n_mat) * sizeof *w);
        if (!w) continue;
        int64_t zero = 0;
        if (fuzz_expect_err(kiln_imatrix_weights(e, e->n, e->n_mat, w, &zero, &err), &err, "weights") == 0)
            sink += w[e->n * e->n_mat - 1];
        free(w);
    }
    for (uint64_t i = 0; i < im->n_datasets; i++) sink += (float)im->datasets[i][0];
    kiln_imatrix_free(im);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_imatrix)
