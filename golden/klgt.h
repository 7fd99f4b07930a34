/* golden/klgt.h - logits of whole prompts held in memory, and the KLGT
 * file that carries them between engines.
 *
 * A kiln_logit_set is what a golden check compares against: a list of
 * token sequences, each with one row of n_vocab logits per position (row t
 * is the distribution after reading ids[0..t]). It is filled from a KLGT
 * file (llama.cpp's references in ../shared/golden/logits/ use it) or from
 * kiln's own compressed golden files (golden_file.h).
 *
 * KLGT, little-endian, packed, no padding:
 *     char magic[4] = "KLGT"; u32 version = 1; u32 n_vocab; u32 n_prompts;
 *     per prompt: u32 n_tokens; i32 ids[n_tokens]; f32 logits[n_tokens][n_vocab]
 * and nothing after the last prompt. The format has no checksum, so the
 * reader checks every size against the file and every id against n_vocab;
 * flipped logit bits cannot be detected (kiln's own files can, see
 * logits_file.h). */
#ifndef KILN_KLGT_H
#define KILN_KLGT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"

#define KILN_KLGT_MAGIC "KLGT"
#define KILN_KLGT_VERSION 1u

typedef struct kiln_logit_seq {
    uint32_t n_tokens;
    int32_t *ids;     /* n_tokens ids */
    float *logits;    /* n_tokens x n_vocab, row-major */
} kiln_logit_seq;

typedef struct kiln_logit_set {
    uint32_t n_vocab;
    uint32_t n_seqs;
    kiln_logit_seq *seqs;
} kiln_logit_set;

/* Reads a KLGT file into *out (which the caller frees with
 * kiln_logit_set_free). Returns 0, or -1 with "FILE: FIELD at offset N:
 * what" in err for a short, oversized, or inconsistent file. */
int kiln_klgt_read(const char *path, kiln_logit_set *out, kiln_err *err);

/* Writes `s` as a KLGT file, atomically (path.tmp, then rename). An
 * existing file is replaced only when `force`. Returns 0 or -1. */
int kiln_klgt_write(const char *path, const kiln_logit_set *s, bool force, kiln_err *err);

/* Appends a sequence, taking ownership of ids and logits (malloc'd) on
 * success. Returns 0, or -1 when out of memory (nothing is taken then). */
int kiln_logit_set_add(kiln_logit_set *s, uint32_t n_tokens, int32_t *ids, float *logits, kiln_err *err);

/* Frees every sequence and zeroes *s. NULL is fine. */
void kiln_logit_set_free(kiln_logit_set *s);

/* Total positions over all sequences. */
uint64_t kiln_logit_set_positions(const kiln_logit_set *s);

#endif
