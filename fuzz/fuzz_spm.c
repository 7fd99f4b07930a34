/* fuzz/fuzz_spm.c - a SentencePiece tokenizer.model (convert/spm.c, and
 * its export in convert/vocab_spm.c).
 *
 * The input is a tokenizer.model. It is parsed in memory with
 * cv_spm_parse() (every piece's text must lie inside the input), then
 * written into a llama model folder and exported as tokenizer.* keys the
 * way the converter does; an export that succeeds must produce a GGUF
 * image that parses back. */
#include <stdlib.h>

#include "../convert/arch.h"
#include "../convert/hparams.h"
#include "../convert/kv.h"
#include "../convert/source.h"
#include "../convert/spm.h"
#include "../convert/vocab.h"
#include "../core/gguf.h"
#include "fuzz.h"
#include "harnesses.h"

static const char CONFIG[] = "{\"architectures\":[\"LlamaForCausalLM\"]}";

static volatile uint32_t sink;

static void parse_in_memory(const uint8_t *data, size_t size) {
    kiln_err err = {{0}};
    cv_spm spm = {0};
    if (fuzz_expect_err(cv_spm_parse(data, size, "tokenizer.model", &spm, &err), &err, "cv_spm_parse") < 0) return;
    for (uint32_t i = 0; i < spm.n; i++) {
        const cv_spm_piece *p = &spm.pieces[i];
        if (p->len && ((const uint8_t *)p->text < data || (const uint8_t *)p->text + p->len > data + size))
            abort(); /* a piece outside the buffer */
        if (p->len) sink += (uint8_t)p->text[p->len - 1];
    }
    cv_spm_free(&spm);
}

static void export(void) {
    kiln_err err = {{0}};
    cv_source *src = cv_source_open(fuzz_dir(), &err);
    if (!src) abort(); /* the folder is ours and holds config.json */
    cv_tok_files f;
    if (fuzz_expect_err(cv_tok_files_load(src, &f, &err), &err, "cv_tok_files_load") == 0) {
        json_t *flat = cv_config_flatten(f.config);
        kiln_gguf_writer *w = flat ? kiln_writer_new("(fuzz spm)", NULL, &err) : NULL;
        if (w) {
            cv_kv k = {.w = w, .arch = cv_arch_llama.gguf_arch, .err = &err};
            uint8_t *image;
            uint64_t len;
            if (fuzz_expect_err(cv_vocab_write(&cv_arch_llama, src, &f, flat, NULL, &k), &err, "cv_vocab_write") < 0)
                kiln_writer_abort(w);
            else if (fuzz_expect_err(kiln_writer_finish_image(w, &image, &len, &err), &err, "finish_image") == 0) {
                kiln_gguf *g = kiln_gguf_parse_owned(image, len, "(fuzz spm)", &err);
                if (!g) abort(); /* kiln wrote a GGUF it cannot read back */
                kiln_gguf_close(g);
            }
        }
        json_decref(flat);
        cv_tok_files_free(&f);
    }
    cv_source_close(src);
}

int fuzz_spm(const uint8_t *data, size_t size) {
    static int config_written;
    if (!config_written) {
        fuzz_put("config.json", CONFIG, sizeof CONFIG - 1);
        config_written = 1;
    }
    parse_in_memory(data, size);
    fuzz_put("tokenizer.model", data, size);
    export();
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_spm)
