/* convert/spm.h - reading a SentencePiece tokenizer.model.
 *
 * The file is a protobuf ModelProto; kiln needs only its repeated field 1,
 * the pieces (SentencePiece: 1 = piece text, 2 = score, 3 = type). The
 * reader is a small bounded protobuf wire-format walker: every length is
 * checked against what remains, varints are at most 10 bytes, unknown
 * fields are skipped by wire type, and group wire types (deprecated) are
 * rejected. It does not need or use the sentencepiece library. */
#ifndef KILN_CONVERT_SPM_H
#define KILN_CONVERT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

/* SentencePiece's piece types (sentencepiece_model.proto). */
enum { CV_SPM_NORMAL = 1, CV_SPM_UNKNOWN = 2, CV_SPM_CONTROL = 3, CV_SPM_USER_DEFINED = 4, CV_SPM_UNUSED = 5,
       CV_SPM_BYTE = 6 };

typedef struct cv_spm_piece {
    const char *text; /* into the caller's buffer, not NUL-terminated */
    uint32_t len;
    float score;
    int32_t type;
} cv_spm_piece;

typedef struct cv_spm {
    cv_spm_piece *pieces; /* malloc'd */
    uint32_t n;
} cv_spm;

/* Parses `len` bytes. Pieces point into `buf`, which must outlive `out`.
 * 0, or -1 with "NAME: FIELD at offset N: what" in err. */
int cv_spm_parse(const uint8_t *buf, size_t len, const char *name, cv_spm *out, kiln_err *err);
void cv_spm_free(cv_spm *s);

#endif
