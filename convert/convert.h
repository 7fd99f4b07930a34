/* convert/convert.h - Hugging Face model -> GGUF, the library side of
 * `kiln convert` (and of `kiln quantize HFDIR`, which quantizes straight
 * from a Hugging Face model).
 *
 * A model is opened from a directory, a Hugging Face cache folder or an
 * archive; opening reads config.json, the tokenizer files and the
 * safetensors headers, validates them and plans every output tensor in
 * llama.cpp's order. Nothing is converted yet. Then:
 *
 *   kiln_hf_set_metadata()  every metadata key, in llama.cpp's order
 *   kiln_hf_add_tensors()   declares the planned tensors on a writer
 *   kiln_hf_write_tensor()  streams tensor i, converted, into the writer
 *   kiln_hf_read_f32()      or reads rows of tensor i as f32, for a caller
 *                           that converts them itself (the quantizer)
 *
 * Tensors are produced one at a time, a chunk of rows at a time; the model
 * is never held in memory. kiln_convert() does all of it for one output.
 * Functions return 0 / non-NULL on success, -1 / NULL with err filled. */
#ifndef KILN_CONVERT_H
#define KILN_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"

typedef enum kiln_outtype {
    KILN_OUT_AUTO = 0, /* keep the source precision: BF16 -> bf16, F16 -> f16, F8 -> bf16, F32 -> f32 */
    KILN_OUT_F32,
    KILN_OUT_F16,
    KILN_OUT_BF16,
    KILN_OUT_Q8_0,
    KILN_OUT_TQ1_0, /* ternary types for BitNet: embeddings F16, 1-D F32 */
    KILN_OUT_TQ2_0,
} kiln_outtype;

/* Called once per key of `file` (config.json, its text_config merged in,
 * or tokenizer_config.json) that the conversion did not read. */
typedef void (*kiln_convert_unread)(void *ud, const char *file, const char *key);

typedef struct kiln_convert_opts {
    kiln_outtype outtype;
    const char *pre_tokenizer; /* tokenizer.ggml.pre to use; NULL detects it */
    bool vocab_only;           /* metadata only, no tensors */
    kiln_convert_unread unread; /* kiln_convert() reports ignored keys here; may be NULL */
    void *unread_ud;
} kiln_convert_opts;

typedef struct kiln_hf_model kiln_hf_model;

typedef struct kiln_hf_tensor {
    const char *name;      /* GGUF name */
    const char *hf_name;   /* (first) source tensor */
    uint32_t n_dims;
    int64_t ne[4];         /* GGUF order */
    uint32_t type;         /* planned ggml type for the chosen outtype */
    bool f32_by_rule;      /* llama.cpp keeps it F32 whatever the outtype */
    uint64_t nbytes;       /* in the planned type */
    const char *src_dtype; /* "BF16", "F8_E4M3", ... */
} kiln_hf_tensor;

/* "f32" ... "auto" -> value; -1 for an unknown name. */
int kiln_outtype_parse(const char *name);
const char *kiln_outtype_name(kiln_outtype t);

/* Opens and plans. `opts` may be NULL (auto, detect, tensors). */
kiln_hf_model *kiln_hf_open(const char *path, const kiln_convert_opts *opts, kiln_err *err);
void kiln_hf_close(kiln_hf_model *m);

/* "llama", "qwen2", ... and the HF class ("LlamaForCausalLM"). */
const char *kiln_hf_arch(const kiln_hf_model *m);
const char *kiln_hf_class(const kiln_hf_model *m);
/* The outtype after resolving auto, and general.file_type. */
kiln_outtype kiln_hf_outtype(const kiln_hf_model *m);

/* Sets every metadata key on w. *kv_bytes (may be NULL) gets their
 * serialized size. */
int kiln_hf_set_metadata(kiln_hf_model *m, kiln_gguf_writer *w, uint64_t *kv_bytes, kiln_err *err);
/* The same keys as a tensorless GGUF built in memory, so that they can be
 * read exactly like a GGUF input's (kiln quantize's policy does). Close
 * with kiln_gguf_close(). */
kiln_gguf *kiln_hf_metadata(kiln_hf_model *m, kiln_err *err);

uint64_t kiln_hf_n_tensors(const kiln_hf_model *m);
void kiln_hf_tensor_info(const kiln_hf_model *m, uint64_t i, kiln_hf_tensor *out);
/* Sum of the planned tensors' bytes. */
uint64_t kiln_hf_data_bytes(const kiln_hf_model *m);

/* Declares every planned tensor (name, planned type, shape) on w. */
int kiln_hf_add_tensors(kiln_hf_model *m, kiln_gguf_writer *w, kiln_err *err);

/* Writes tensor i in its planned type through kiln_writer_write(). Tensors
 * must be written in order for a writer (the writer's rule). */
int kiln_hf_write_tensor(kiln_hf_model *m, uint64_t i, kiln_gguf_writer *w, kiln_err *err);

/* Rows [row0, row0 + nrows) of tensor i as f32, after every transform (a
 * row is ne[0] values; dst holds nrows * ne[0] floats). Reading a tensor
 * in increasing row order is fastest. */
int kiln_hf_read_f32(kiln_hf_model *m, uint64_t i, int64_t row0, int64_t nrows, float *dst, kiln_err *err);

/* Tells the reader tensor i is finished: buffers and archive spool space
 * it held are released. */
void kiln_hf_tensor_done(kiln_hf_model *m, uint64_t i);

/* The size of the GGUF kiln_convert() would write as one file (a split
 * output adds a header per shard). 0 on error. */
uint64_t kiln_hf_output_size(kiln_hf_model *m, kiln_err *err);

/* Calls fn for every top-level key of config.json (text_config's merged
 * in, as the converter sees them) and of tokenizer_config.json that no
 * lookup so far read: after kiln_hf_set_metadata() (or
 * kiln_hf_output_size()), the keys the conversion ignores. Returns -1
 * (err set) when the marks could not all be kept (out of memory). */
int kiln_hf_unread_keys(const kiln_hf_model *m, kiln_convert_unread fn, void *ud, kiln_err *err);

/* Progress callback: bytes of tensor data written so far, of total. */
typedef void (*kiln_convert_progress)(void *ud, uint64_t done, uint64_t total);

/* The whole conversion to `out` (atomic; split per wopts). wopts and
 * progress may be NULL. */
int kiln_convert(const char *src, const char *out, const kiln_convert_opts *opts, const kiln_write_opts *wopts,
                 kiln_convert_progress progress, void *ud, kiln_err *err);

#endif
