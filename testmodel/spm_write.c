/* testmodel/spm_write.c - writes a SentencePiece tokenizer.model: the
 * ModelProto protobuf with its pieces {piece, score, type}, a trainer_spec
 * and a normalizer_spec, for testmodel_tok.c (convert/spm.c is the reader;
 * the writer lives here, below convert/, because only testmodel/ and the
 * tests use it).
 *
 * The specs are fixed to what `spm_train --model_type=bpe --byte_fallback`
 * records for a Llama-style vocabulary (ids unk 0, bos 1, eos 2, no pad;
 * identity normalizer that adds a dummy prefix and escapes whitespace as
 * U+2581), field for field as sentencepiece 0.1.97 serializes them, so the
 * file loads in sentencepiece (hence llama.cpp's converter) and in kiln's
 * reader. Only vocab_size varies. It does not train anything, and it does
 * not check that the pieces make a sensible vocabulary. */
#include "testmodel.h"

#include <stdlib.h>
#include <string.h>

#include "../core/bytebuf.h"
#include "../core/fileio.h"

static void pb_varint(kiln_bytebuf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    kiln_bytebuf_put(b, tmp, n);
}

enum { WT_VARINT = 0, WT_LEN = 2, WT_FIXED32 = 5 };

static void pb_tag(kiln_bytebuf *b, uint32_t field, int wt) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wt); }

/* int32 fields are sign-extended to 64 bits on the wire, so -1 takes ten bytes */
static void pb_int(kiln_bytebuf *b, uint32_t field, int64_t v) {
    pb_tag(b, field, WT_VARINT);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(kiln_bytebuf *b, uint32_t field, const void *s, size_t n) {
    pb_tag(b, field, WT_LEN);
    pb_varint(b, n);
    kiln_bytebuf_put(b, s, n);
}

static void pb_str(kiln_bytebuf *b, uint32_t field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

static void pb_float(kiln_bytebuf *b, uint32_t field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    pb_tag(b, field, WT_FIXED32);
    kiln_bytebuf_put(b, le, 4);
}

static void pb_msg(kiln_bytebuf *b, uint32_t field, kiln_bytebuf *sub) {
    if (sub->oom) b->oom = true;
    pb_bytes(b, field, sub->p, sub->len);
    kiln_bytebuf_free(sub);
}

/* TrainerSpec, in sentencepiece's field order (which is not numeric). */
static void trainer_spec(kiln_bytebuf *t, size_t vocab_size) {
    pb_str(t, 1, "/dev/null");  /* input */
    pb_str(t, 2, "tokenizer");  /* model_prefix */
    pb_int(t, 3, 2);            /* model_type = BPE */
    pb_int(t, 4, (int64_t)vocab_size);
    pb_str(t, 7, "text");       /* input_format */
    pb_float(t, 10, 0.99995f);  /* character_coverage */
    pb_int(t, 20, 16);          /* max_sentencepiece_length */
    pb_int(t, 21, 1);           /* split_by_unicode_script */
    pb_int(t, 22, 1);           /* split_by_whitespace */
    pb_int(t, 23, 1);           /* split_by_number */
    pb_int(t, 25, 1);           /* split_digits */
    pb_int(t, 26, 1);           /* allow_whitespace_only_pieces */
    pb_int(t, 32, 1);           /* vocabulary_output_piece_score */
    pb_int(t, 33, 1);           /* hard_vocab_limit */
    pb_int(t, 35, 1);           /* byte_fallback */
    pb_int(t, 40, 0);           /* unk_id */
    pb_int(t, 41, 1);           /* bos_id */
    pb_int(t, 42, 2);           /* eos_id */
    pb_int(t, 43, -1);          /* pad_id: none */
    pb_str(t, 44, " \xe2\x81\x87 "); /* unk_surface " ⁇ " */
    pb_str(t, 45, "<unk>");
    pb_str(t, 46, "<s>");
    pb_str(t, 47, "</s>");
    pb_str(t, 48, "<pad>");
}

int kiln_spm_encode(const kiln_spm_piece *pieces, size_t n, uint8_t **out, size_t *len, kiln_err *err) {
    kiln_bytebuf b = {0}, sub = {0};
    for (size_t i = 0; i < n; i++) {
        if (!pieces[i].piece || !pieces[i].piece[0]) {
            kiln_bytebuf_free(&b); /* sub is empty here: pb_msg() freed it */
            return kiln_fail(err, "tokenizer.model", "pieces", (int64_t)i, "empty piece");
        }
        pb_str(&sub, 1, pieces[i].piece);
        pb_float(&sub, 2, pieces[i].score);
        pb_int(&sub, 3, pieces[i].type);
        pb_msg(&b, 1, &sub);
    }
    trainer_spec(&sub, n);
    pb_msg(&b, 2, &sub);
    pb_str(&sub, 1, "identity"); /* normalizer name */
    pb_bytes(&sub, 2, "", 0);    /* precompiled_charsmap: none */
    pb_int(&sub, 3, 1);          /* add_dummy_prefix */
    pb_int(&sub, 4, 0);          /* remove_extra_whitespaces */
    pb_int(&sub, 5, 1);          /* escape_whitespaces */
    pb_msg(&b, 3, &sub);
    if (b.oom) {
        kiln_bytebuf_free(&b);
        return kiln_fail(err, "tokenizer.model", NULL, -1, "out of memory");
    }
    *out = b.p;
    *len = (size_t)b.len;
    return 0;
}

int kiln_spm_write(const char *path, const kiln_spm_piece *pieces, size_t n, kiln_err *err) {
    uint8_t *buf;
    size_t len;
    if (kiln_spm_encode(pieces, n, &buf, &len, err)) return -1;
    int rc = kiln_write_file_atomic(path, buf, len, err);
    free(buf);
    return rc;
}
