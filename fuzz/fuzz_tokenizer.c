/* fuzz/fuzz_tokenizer.c - tokenizer.json and its companions
 * (convert/vocab.c, vocab_hf.c, vocab_bpe.c, special.c, pre_name.c).
 *
 * The input is up to four files joined by FUZZ_SEP, in this order:
 * tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * added_tokens.json (missing parts are absent files). They are written
 * into a model folder beside a fixed config.json, loaded the way the
 * converter loads them, and exported as tokenizer.* keys for a llama
 * (BPE with byte fallback, "llama" vocab) and a qwen2 (byte-level BPE,
 * "gpt2" vocab, pre-tokenizer detection) architecture. An export that
 * succeeds must produce a GGUF image that parses back. */
#include <stdlib.h>

#include "../convert/arch.h"
#include "../convert/hparams.h"
#include "../convert/kv.h"
#include "../convert/source.h"
#include "../convert/vocab.h"
#include "../core/gguf.h"
#include "fuzz.h"
#include "harnesses.h"

static const char CONFIG[] = "{\"architectures\":[\"Qwen2ForCausalLM\"],\"vocab_size\":300}";
static const char *const FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                    "added_tokens.json"};
#define N_FILES (sizeof FILES / sizeof *FILES)

static void export(const cv_arch *a, cv_source *src, const cv_tok_files *f) {
    kiln_err err = {{0}};
    json_t *flat = cv_config_flatten(f->config);
    if (!flat) return;
    kiln_gguf_writer *w = kiln_writer_new("(fuzz tokenizer)", NULL, &err);
    if (!w) abort();
    cv_kv k = {.w = w, .arch = a->gguf_arch, .err = &err};
    if (fuzz_expect_err(cv_vocab_write(a, src, f, flat, NULL, &k), &err, "cv_vocab_write") < 0) {
        kiln_writer_abort(w);
    } else {
        uint8_t *image;
        uint64_t len;
        if (fuzz_expect_err(kiln_writer_finish_image(w, &image, &len, &err), &err, "finish_image") == 0) {
            kiln_gguf *g = kiln_gguf_parse_owned(image, len, "(fuzz tokenizer)", &err);
            if (!g) abort(); /* kiln wrote a GGUF it cannot read back */
            kiln_gguf_close(g);
        }
    }
    json_decref(flat);
}

int fuzz_tokenizer(const uint8_t *data, size_t size) {
    static int config_written;
    if (!config_written) {
        fuzz_put("config.json", CONFIG, sizeof CONFIG - 1);
        config_written = 1;
    }
    const uint8_t *part[N_FILES];
    size_t len[N_FILES];
    size_t n = fuzz_split(data, size, part, len, N_FILES);
    for (size_t i = 0; i < N_FILES; i++) {
        if (i < n) fuzz_put(FILES[i], part[i], len[i]);
        else fuzz_unlink(FILES[i]);
    }
    kiln_err err = {{0}};
    cv_source *src = cv_source_open(fuzz_dir(), &err);
    if (!src) abort(); /* the folder is ours and holds config.json */
    cv_tok_files f;
    if (fuzz_expect_err(cv_tok_files_load(src, &f, &err), &err, "cv_tok_files_load") == 0) {
        export(&cv_arch_llama, src, &f);
        export(&cv_arch_qwen2, src, &f);
        cv_tok_files_free(&f);
    }
    cv_source_close(src);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_tokenizer)
