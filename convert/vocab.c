/* convert/vocab.c - the top of the tokenizer export: loading the
 * tokenizer files, and the choice of exporter (see vocab.h for the order
 * of the vocab files; the token list they share is in tokens.c). */
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"

static int load_json(cv_source *src, const char *name, json_t **out, kiln_err *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int got = cv_source_read_all(src, name, &text, &len, err);
    if (got <= 0) return got;
    *out = cv_json_parse(text, len, name, err);
    free(text);
    return *out ? 0 : -1;
}

int cv_tok_files_load(cv_source *src, cv_tok_files *f, kiln_err *err) {
    memset(f, 0, sizeof *f);
    if (load_json(src, "config.json", &f->config, err) < 0 || load_json(src, "tokenizer.json", &f->tokenizer, err) < 0 ||
        load_json(src, "tokenizer_config.json", &f->tokenizer_config, err) < 0 ||
        load_json(src, "special_tokens_map.json", &f->special_map, err) < 0 ||
        load_json(src, "added_tokens.json", &f->added_tokens, err) < 0) {
        cv_tok_files_free(f);
        return -1;
    }
    return 0;
}

void cv_tok_files_free(cv_tok_files *f) {
    json_decref(f->config);
    json_decref(f->tokenizer);
    json_decref(f->tokenizer_config);
    json_decref(f->special_map);
    json_decref(f->added_tokens);
    memset(f, 0, sizeof *f);
}

int cv_vocab_write(const cv_arch *a, cv_source *src, const cv_tok_files *f, json_t *hparams,
                   const char *pre_override, cv_kv *k) {
    if ((a->flags & CV_A_ADD_PREFIX_SPACE) && f->tokenizer_config) {
        json_t *aps = cv_json_get(f->tokenizer_config, "add_prefix_space");
        if (json_is_boolean(aps) && cv_kv_bool(k, "tokenizer.ggml.add_space_prefix", json_is_true(aps)) < 0) return -1;
    }
    int r = 0;
    if (a->flags & CV_A_VOCAB_SPM) r = cv_vocab_spm(src, f, hparams, k);
    if (a->flags & CV_A_VOCAB_PHI3) r = cv_vocab_phi3(src, f, hparams, pre_override, k);
    /* Gemma: after a tokenizer.model vocab only */
    if (r > 0 && (a->flags & CV_A_NO_SPACE_PREFIX) && cv_kv_bool(k, "tokenizer.ggml.add_space_prefix", false) < 0)
        return -1;
    if (r == 0 && (a->flags & CV_A_VOCAB_LLAMA_HF)) r = cv_vocab_llama_hf(src, f, k);
    if (r == 0) r = cv_vocab_gpt2(src, f, hparams, pre_override, k);
    if (r == 0)
        return kiln_fail(k->err, src->path, "tokenizer", -1, "no tokenizer: %s needs %s",
                         a->hf_name, (a->flags & CV_A_VOCAB_SPM) ? "tokenizer.model or a BPE tokenizer.json"
                                                                 : "a byte-level BPE tokenizer.json");
    return r < 0 ? -1 : 0;
}
