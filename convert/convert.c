/* convert/convert.c - the conversion driver: opens a source, reads the
 * config and tokenizer files, plans the tensors, and writes the GGUF
 * (see convert.h). The pieces it strings together live in source*.c,
 * stlist.c, plan.c, emit.c, meta*.c and vocab*.c. */
#include "convert.h"

#include <stdlib.h>
#include <string.h>

#include "../core/types.h"
#include "arch.h"
#include "emit.h"
#include "hparams.h"
#include "json.h"
#include "meta.h"
#include "plan.h"
#include "source.h"
#include "stlist.h"
#include "vocab.h"
#include "write_pipe.h"

struct kiln_hf_model {
    kiln_convert_opts opts;
    cv_source *src;
    cv_tok_files tok;
    json_t *hparams; /* config.json with text_config merged */
    const cv_arch *arch;
    cv_hp hp;
    cv_stlist st;
    cv_plan plan;
    cv_reader reader;
    bool reader_ready;
    cv_json_reads reads; /* which config keys the lookups read (--verbose) */
};

int kiln_outtype_parse(const char *name) { return cv_outtype_parse(name); }
const char *kiln_outtype_name(kiln_outtype t) { return cv_outtype_name((cv_outtype)t); }

static const char *architecture(kiln_hf_model *m, kiln_err *err) {
    json_t *archs = cv_json_get(m->tok.config, "architectures");
    const char *name = cv_json_str(json_array_get(archs, 0));
    if (!name) {
        kiln_fail(err, "config.json", "architectures", -1, "missing: cannot tell the architecture (kiln supports %s)",
                  cv_arch_list());
        return NULL;
    }
    m->arch = cv_arch_find(name);
    if (!m->arch) kiln_fail(err, "config.json", "architectures", -1, "unsupported architecture '%s'; kiln supports %s",
                            name, cv_arch_list());
    return m->arch ? name : NULL;
}

/* Watches what the lookups read of config.json and tokenizer_config.json,
 * through the object as found, its text_config and the flattened copy (see
 * kiln_hf_unread_keys). */
static int watch_configs(kiln_hf_model *m, kiln_err *err) {
    cv_json_reads *r = &m->reads;
    const json_t *config = m->tok.config;
    const json_t *text = cv_json_get(config, "text_config");
    if (cv_json_reads_watch(r, config) < 0 || cv_json_reads_alias(r, text, config) < 0 ||
        cv_json_reads_alias(r, m->hparams, config) < 0 || cv_json_reads_watch(r, m->tok.tokenizer_config) < 0)
        return kiln_fail(err, "config.json", NULL, -1, "too many objects to watch");
    return 0;
}

static int open_model(kiln_hf_model *m, const char *path, kiln_err *err) {
    if (!(m->src = cv_source_open(path, err))) return -1;
    if (cv_tok_files_load(m->src, &m->tok, err) < 0) return -1;
    if (!json_is_object(m->tok.config)) return kiln_fail(err, "config.json", NULL, -1, "not a JSON object");
    if (!(m->hparams = cv_config_flatten(m->tok.config))) return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    if (watch_configs(m, err) < 0 || !architecture(m, err)) return -1;
    if (cv_hp_load(m->arch, m->hparams, &m->hp, err) < 0) return -1;
    if (m->opts.pre_tokenizer && !cv_pretok_known(m->opts.pre_tokenizer))
        return kiln_fail(err, NULL, "--pre-tokenizer", -1, "unknown pre-tokenizer '%s' (llama.cpp does not know it)",
                         m->opts.pre_tokenizer);
    if (m->opts.vocab_only) return 0;
    if (cv_stlist_load(m->src, &m->st, err) < 0) return -1;
    return cv_plan_build(m->arch, m->hparams, &m->hp, &m->st, (cv_outtype)m->opts.outtype, &m->plan, err);
}

kiln_hf_model *kiln_hf_open(const char *path, const kiln_convert_opts *opts, kiln_err *err) {
    kiln_hf_model *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    if (opts) m->opts = *opts;
    cv_json_reads *prev = cv_json_reads_use(&m->reads);
    int rc = open_model(m, path, err);
    cv_json_reads_use(prev);
    if (rc < 0) {
        kiln_hf_close(m);
        return NULL;
    }
    return m;
}

void kiln_hf_close(kiln_hf_model *m) {
    if (!m) return;
    if (m->reader_ready) cv_reader_free(&m->reader);
    cv_plan_free(&m->plan);
    cv_stlist_free(&m->st);
    json_decref(m->hparams);
    cv_tok_files_free(&m->tok);
    cv_source_close(m->src);
    cv_json_reads_free(&m->reads);
    free(m);
}

const char *kiln_hf_arch(const kiln_hf_model *m) { return m->arch->gguf_arch; }
const char *kiln_hf_class(const kiln_hf_model *m) { return m->arch->hf_name; }
kiln_outtype kiln_hf_outtype(const kiln_hf_model *m) { return (kiln_outtype)m->plan.outtype; }
uint64_t kiln_hf_n_tensors(const kiln_hf_model *m) { return m->plan.n; }
uint64_t kiln_hf_data_bytes(const kiln_hf_model *m) { return m->plan.data_bytes; }

void kiln_hf_tensor_info(const kiln_hf_model *m, uint64_t i, kiln_hf_tensor *out) {
    const cv_out *o = &m->plan.t[i];
    *out = (kiln_hf_tensor){.name = o->name, .hf_name = o->hf_name, .n_dims = o->n_dims, .type = o->type,
                            .nbytes = o->nbytes, .src_dtype = o->gen ? "F32" : kiln_st_dtype_name(o->dtype)};
    memcpy(out->ne, o->ne, sizeof out->ne);
    out->f32_by_rule = o->f32_rule;
}

static int set_metadata(kiln_hf_model *m, kiln_gguf_writer *w, uint64_t *kv_bytes, kiln_err *err) {
    cv_kv k = {.w = w, .arch = m->arch->gguf_arch, .err = err};
    const cv_plan *plan = m->opts.vocab_only ? NULL : &m->plan;
    /* vocab-only reads no tensors, so auto falls back to llama.cpp's f16 */
    static const uint32_t ft[] = {1, 0, 1, 32, 7};
    uint32_t file_type = m->opts.vocab_only ? ft[m->opts.outtype] : m->plan.file_type;
    if (cv_meta_general(m->src, m->hparams, plan, m->arch, &m->hp, &k) < 0 ||
        cv_meta_arch(m->arch, m->hparams, &m->hp, file_type, &k) < 0 ||
        cv_kv_u32(&k, "general.quantization_version", 2) < 0 ||
        cv_vocab_write(m->arch, m->src, &m->tok, m->hparams, m->opts.pre_tokenizer, &k) < 0)
        return -1;
    /* A slot an arch reserved for the template (deepseek4, where llama.cpp
     * puts its own) that the checkpoint did not fill: no key beats "". */
    if (!k.chat_template) kiln_writer_remove(w, "tokenizer.chat_template");
    if (kv_bytes) *kv_bytes = k.bytes;
    return 0;
}

int kiln_hf_set_metadata(kiln_hf_model *m, kiln_gguf_writer *w, uint64_t *kv_bytes, kiln_err *err) {
    cv_json_reads *prev = cv_json_reads_use(&m->reads);
    int rc = set_metadata(m, w, kv_bytes, err);
    cv_json_reads_use(prev);
    return rc;
}

/* `key` of the flattened config was read, through whichever object held it
 * (text_config itself was: its members are the flattened config's). */
static bool config_key_read(const kiln_hf_model *m, const char *key) {
    return !strcmp(key, "text_config") || cv_json_reads_hit(&m->reads, m->tok.config, key);
}

int kiln_hf_unread_keys(const kiln_hf_model *m, kiln_convert_unread fn, void *ud, kiln_err *err) {
    if (m->reads.incomplete)
        return kiln_fail(err, "config.json", NULL, -1, "out of memory (or objects) keeping the keys read");
    const json_t *tc = json_is_object(m->tok.tokenizer_config) ? m->tok.tokenizer_config : NULL;
    const char *key;
    json_t *v;
    json_object_foreach(m->hparams, key, v) {
        if (!config_key_read(m, key)) fn(ud, "config.json", key);
    }
    json_object_foreach((json_t *)tc, key, v) {
        if (!cv_json_reads_hit(&m->reads, tc, key)) fn(ud, "tokenizer_config.json", key);
    }
    return 0;
}

kiln_gguf *kiln_hf_metadata(kiln_hf_model *m, kiln_err *err) {
    static const char NAME[] = "(converted metadata)"; /* no file: names it in messages */
    kiln_gguf_writer *w = kiln_writer_new(NAME, NULL, err);
    if (!w) return NULL;
    if (kiln_hf_set_metadata(m, w, NULL, err) < 0) {
        kiln_writer_abort(w);
        return NULL;
    }
    uint8_t *image;
    uint64_t len;
    if (kiln_writer_finish_image(w, &image, &len, err) < 0) return NULL;
    return kiln_gguf_parse_owned(image, len, NAME, err);
}

int kiln_hf_add_tensors(kiln_hf_model *m, kiln_gguf_writer *w, kiln_err *err) {
    for (uint64_t i = 0; i < m->plan.n; i++) {
        const cv_out *o = &m->plan.t[i];
        if (kiln_writer_add_tensor(w, o->name, o->type, o->n_dims ? o->n_dims : 1, o->ne, err) < 0) return -1;
    }
    return 0;
}

static int ready(kiln_hf_model *m, kiln_err *err) {
    if (m->reader_ready) return 0;
    cv_json_reads *prev = cv_json_reads_use(&m->reads);
    int rc = cv_reader_init(&m->reader, m->src, &m->st, &m->plan, err);
    cv_json_reads_use(prev);
    if (rc < 0) return -1;
    m->reader_ready = true;
    return 0;
}

static int writer_sink(void *user, const void *data, uint64_t n, kiln_err *err) {
    return kiln_writer_write(user, data, n, err);
}

int kiln_hf_write_tensor(kiln_hf_model *m, uint64_t i, kiln_gguf_writer *w, kiln_err *err) {
    if (ready(m, err) < 0) return -1;
    return cv_emit_tensor(&m->reader, i, writer_sink, w, err);
}

int kiln_hf_read_f32(kiln_hf_model *m, uint64_t i, int64_t row0, int64_t nrows, float *dst, kiln_err *err) {
    if (ready(m, err) < 0) return -1;
    const cv_out *o = &m->plan.t[i];
    if (row0 < 0 || nrows < 0 || row0 + nrows > o->nelements / o->ne[0])
        return kiln_fail(err, o->name, NULL, -1, "rows [%lld, %lld) out of range", (long long)row0,
                         (long long)(row0 + nrows));
    return cv_read_f32(&m->reader, i, row0, row0 + nrows, dst, err);
}

void kiln_hf_tensor_done(kiln_hf_model *m, uint64_t i) {
    if (m->reader_ready) cv_reader_done(&m->reader, i);
}

static uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t kiln_hf_output_size(kiln_hf_model *m, kiln_err *err) {
    kiln_gguf_writer *w = kiln_writer_new("/dev/null/kiln-size", NULL, err);
    uint64_t kv = 0;
    if (!w || kiln_hf_set_metadata(m, w, &kv, err) < 0) {
        kiln_writer_abort(w);
        return 0;
    }
    kiln_writer_abort(w);
    uint64_t size = 4 + 4 + 8 + 8 + kv, data = 0;
    for (uint64_t i = 0; i < m->plan.n; i++) {
        const cv_out *o = &m->plan.t[i];
        size += 8 + strlen(o->name) + 4 + 8 * (o->n_dims ? o->n_dims : 1) + 4 + 8;
        data += pad(o->nbytes, KILN_GGUF_DEFAULT_ALIGNMENT);
    }
    return pad(size, KILN_GGUF_DEFAULT_ALIGNMENT) + data;
}

/* Bytes of each of the write pipe's two buffers: as large as the largest
 * chunk convert emits (34 MiB of Q8_0 from FP8, emit.c), so that a whole
 * chunk is written while the next one is made, and a Q8_0 chunk is handed
 * over uncopied (cv_write_pipe_give). */
#define WRITE_PIPE_BUF (34u << 20)

/* The writer sink, counting bytes for the progress callback (called from
 * the write pipe's thread). */
typedef struct progress_sink {
    kiln_gguf_writer *w;
    kiln_convert_progress cb;
    void *ud;
    uint64_t done, total;
} progress_sink;

static int progress_write(void *user, const void *data, uint64_t n, kiln_err *err) {
    progress_sink *ps = user;
    if (kiln_writer_write(ps->w, data, n, err) < 0) return -1;
    ps->done += n;
    if (ps->cb) ps->cb(ps->ud, ps->done, ps->total);
    return 0;
}

/* True when the page cache holds (at least half of) every large input file. */
static bool input_cached(cv_source *s) {
    for (uint32_t f = 0; f < s->n_files; f++)
        if (s->files[f].size >= (1u << 20) && !cv_source_cached(s, f, 0, s->files[f].size)) return false;
    return true;
}

int kiln_convert(const char *src, const char *out, const kiln_convert_opts *opts, const kiln_write_opts *wopts,
                 kiln_convert_progress progress, void *ud, kiln_err *err) {
    kiln_hf_model *m = kiln_hf_open(src, opts, err);
    if (!m) return -1;
    kiln_write_opts wo = wopts ? *wopts : (kiln_write_opts){0};
    const char *inputs[1] = {src};
    if (!wo.inputs) wo.inputs = inputs, wo.n_inputs = 1;
    /* Gigabytes written once, read later if at all: past the page cache
     * (kiln_out_direct), unless the input is already cached. Then reading
     * costs nothing and buffered writes, one kernel copy straight from the
     * mapping, measured faster than direct ones through the aligned buffer
     * (1B bf16 -> bf16, idle: 1.29x against 0.85x cp + sync); from disk the
     * page-cache copy is the cost and direct output wins (full-shape
     * DeepSeek-V3: 0.74-1.02x against 0.63x). */
    wo.direct_io = !input_cached(m->src);
    kiln_gguf_writer *w = kiln_writer_new(out, &wo, err);
    int rc = w ? 0 : -1;
    if (rc == 0) rc = kiln_hf_set_metadata(m, w, NULL, err);
    if (rc == 0) rc = kiln_hf_add_tensors(m, w, err);
    if (rc == 0) rc = kiln_writer_begin(w, err);
    progress_sink ps = {.w = w, .cb = progress, .ud = ud, .total = m->plan.data_bytes};
    if (rc == 0) rc = ready(m, err);
    /* the output is written by a thread while the next chunk is converted */
    cv_write_pipe *pipe = rc == 0 ? cv_write_pipe_new(progress_write, &ps, WRITE_PIPE_BUF, err) : NULL;
    if (!pipe) rc = -1;
    m->reader.give = cv_write_pipe_give; /* whole chunks change hands uncopied */
    for (uint64_t i = 0; rc == 0 && i < m->plan.n; i++) {
        rc = cv_emit_tensor(&m->reader, i, cv_write_pipe_put, pipe, err);
        kiln_hf_tensor_done(m, i);
    }
    m->reader.give = NULL;
    if (rc == 0) rc = cv_write_pipe_flush(pipe, err);
    cv_write_pipe_free(pipe);
    /* every lookup is done: the keys nobody read are known */
    if (rc == 0 && m->opts.unread) rc = kiln_hf_unread_keys(m, m->opts.unread, m->opts.unread_ud, err);
    if (rc == 0) {
        rc = kiln_writer_finish(w, err);
    } else {
        kiln_writer_abort(w);
    }
    kiln_hf_close(m);
    return rc;
}
