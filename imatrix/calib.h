/* imatrix/calib.h - the calibration text of `kiln imatrix`, read from
 * whatever the user has it in.
 *
 * Each input is a *document source*:
 *   - plain text (a file, or "-" for standard input);
 *   - zstd-compressed text (recognised by the zstd magic, not the name);
 *   - JSON Lines (name ending in .jsonl or .ndjson, before any .zst): one
 *     JSON object per line, whose string field `field` ("text" by default)
 *     is one document;
 *   - a tar or zip archive (tar/zip magic, or .tar.gz/.tgz/.tar.zst/
 *     .tar.xz/.tar.bz2 names): every regular member, in archive order, is
 *     itself one of the above (archives inside archives are refused;
 *     hidden members and __MACOSX/ are skipped).
 *
 * All documents are joined into one text in input order. A newline is put
 * between two documents only when the first does not already end with
 * one, so a file split into line-aligned pieces (several files, JSONL
 * records that keep their '\n', archive members) joins back into exactly
 * the original bytes, and tokenizes the same. Empty documents are dropped.
 *
 * What this does not do: tokenize, or check that the text is UTF-8 (the
 * tokenizer handles invalid bytes the way llama.cpp does). */
#ifndef KILN_IMATRIX_CALIB_H
#define KILN_IMATRIX_CALIB_H

#include <stddef.h>

#include "../core/error.h"

/* Reads and joins every source in `paths`. `field` is the JSON Lines field
 * (NULL: "text"). On success *text is a malloc'd, NUL-terminated buffer of
 * *len bytes (NUL bytes inside are kept) that the caller frees, and 0 is
 * returned. Returns -1 with one line in err ("PATH: ..." or
 * "ARCHIVE:MEMBER: ...", with the JSONL line number where it applies). */
int kiln_calib_read(const char *const *paths, int n_paths, const char *field, char **text, size_t *len,
                    kiln_err *err);

#endif
