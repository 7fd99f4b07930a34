/* imatrix/merge_files.h - several importance-matrix files (either format,
 * mixed) read into one, as llama-imatrix's repeated --in-file does: sums
 * and counts added entry by entry, datasets listed in order, chunk counts
 * added. */
#ifndef KILN_IMATRIX_MERGE_FILES_H
#define KILN_IMATRIX_MERGE_FILES_H

#include <stdint.h>

#include "../core/error.h"
#include "../core/imatrix_file.h"

/* Reads and merges `paths` (n >= 1). When chunk_size > 0, a file whose
 * counts are in chunks (legacy .dat) is first converted to tokens of that
 * many per chunk, as llama-imatrix does with its -c; with 0 the first
 * file's unit is kept. NULL with one line naming the file on error. */
kiln_imatrix *kiln_imatrix_read_all(const char *const *paths, int n, uint32_t chunk_size, kiln_err *err);

#endif
