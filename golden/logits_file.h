/* golden/logits_file.h - kiln's compressed logits container, shared by
 * golden files (`kiln golden record`) and KL-divergence base files
 * (`kiln perplexity --save-logits`).
 *
 * Logits are large (n_vocab floats per position) and hard to compress as
 * they are; split into byte planes (every float's low byte together, then
 * the next byte, ...) the sign/exponent planes shrink to almost nothing and
 * zstd gets a useful ratio. The file is streamed in both directions, so a
 * base file of a long text never has to fit in memory.
 *
 * Layout, little-endian:
 *     0  char magic[8] = "KILNLOGT"
 *     8  u32 version = 1
 *    12  u32 flags             bit 0: rows are f16 (else f32)
 *    16  u32 n_vocab
 *    20  u32 n_records
 *    24  u32 meta_len
 *    28  char meta[meta_len]   a JSON object: "kind" plus what the writer
 *                              records (model fingerprint, text hash, ...)
 *        u64 header_hash       XXH64 of bytes 0 .. 28 + meta_len
 *        one zstd frame, with its content checksum, holding n_records
 *        records: u32 n_ids; u32 row0; u32 n_rows; i32 ids[n_ids];
 *                 rows[n_rows][n_vocab] as byte planes of f32 or f16
 *        u64 frame_hash        XXH64 of the frame's bytes
 *     and nothing after that.
 * A record's rows are the logits at positions row0 .. row0 + n_rows - 1 of
 * its ids (row t: after reading ids[0..t]). Any flipped bit is caught by
 * the header hash or the frame hash (zstd's own checksum only covers the
 * decompressed bytes, and zstd ignores some frame header bits); a cut
 * file by the frame's end. */
#ifndef KILN_LOGITS_FILE_H
#define KILN_LOGITS_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "../core/error.h"

#define KILN_LGF_MAGIC "KILNLOGT"
#define KILN_LGF_VERSION 1u

typedef struct kiln_lgf_header {
    uint32_t n_vocab;
    uint32_t n_records;
    bool f16;          /* rows stored as IEEE half: half the size, ~3 digits */
    json_t *meta;      /* an object with at least "kind"; owned by the header */
} kiln_lgf_header;

typedef struct kiln_lgf_record {
    uint32_t n_ids, row0, n_rows;
    int32_t *ids;      /* owned by the reader, valid until the next call */
    float *rows;       /* n_rows x n_vocab f32 (converted back from f16) */
} kiln_lgf_record;

typedef struct kiln_lgf_writer kiln_lgf_writer;
typedef struct kiln_lgf_reader kiln_lgf_reader;

/* True when the first bytes of `path` are the KILNLOGT magic. */
bool kiln_lgf_sniff(const char *path);

/* Starts path.tmp (an existing `path` is replaced only when `force`) and
 * writes the header; h->meta is serialised, not taken. Returns NULL with
 * err filled on failure. */
kiln_lgf_writer *kiln_lgf_create(const char *path, const kiln_lgf_header *h, bool force, kiln_err *err);

/* Appends one record. row0 + n_rows must not exceed n_ids. Returns 0/-1. */
int kiln_lgf_put(kiln_lgf_writer *w, const int32_t *ids, uint32_t n_ids, uint32_t row0, uint32_t n_rows,
                 const float *rows, kiln_err *err);

/* Ends the frame, checks that n_records records were put, fsyncs and
 * renames into place; frees w in every case. Returns 0/-1. */
int kiln_lgf_finish(kiln_lgf_writer *w, kiln_err *err);

/* Removes the temporary file and frees w. NULL is fine. */
void kiln_lgf_abort(kiln_lgf_writer *w);

/* Opens and checks the header (magic, version, hash, JSON). *h gets its
 * own reference to the meta object; free it with kiln_lgf_header_free. */
kiln_lgf_reader *kiln_lgf_open(const char *path, kiln_lgf_header *h, kiln_err *err);

/* Reads the next record into *rec. Returns 1 for a record, 0 after the
 * last one (having checked that the frame ends there, intact, and that
 * nothing follows), -1 on any error. */
int kiln_lgf_next(kiln_lgf_reader *r, kiln_lgf_record *rec, kiln_err *err);

void kiln_lgf_close(kiln_lgf_reader *r);
void kiln_lgf_header_free(kiln_lgf_header *h);

/* The meta object's "kind" string, or "" when absent. */
const char *kiln_lgf_kind(const kiln_lgf_header *h);

#endif
