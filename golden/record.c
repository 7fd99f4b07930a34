/* golden/record.c - `kiln golden record`: evaluating prompts and writing
 * their logits, with the model's fingerprint, as a golden file (see
 * golden_file.h for what the file holds). */
#include "golden_file.h"

#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "logits_file.h"

static json_t *record_meta(const kiln_model *m, char *const *prompts, size_t n, const kiln_golden_record_params *p,
                           kiln_err *err) {
    json_t *fp = kiln_fingerprint(m->gguf, err);
    if (!fp) return NULL;
    json_t *texts = json_array();
    for (size_t i = 0; texts && i < n; i++)
        if (json_array_append_new(texts, json_string(prompts[i]))) {
            json_decref(texts);
            texts = NULL;
        }
    json_t *meta = texts ? json_pack("{s:s, s:o, s:o, s:s, s:b}", "kind", KILN_GOLDEN_KIND, "model", fp, "prompts",
                                     texts, "numeric_mode", p->mode == KILN_NUM_EXACT ? "exact" : "ggml",
                                     "add_special", 1)
                         : NULL;
    if (!meta) {
        if (!texts) json_decref(fp);
        kiln_fail(err, NULL, NULL, -1, "out of memory (prompt texts must be UTF-8)");
    }
    return meta;
}

int kiln_golden_record(const kiln_model *m, char *const *prompts, size_t n_prompts, const char *out,
                       const kiln_golden_record_params *p, kiln_err *err) {
    int32_t **ids = calloc(n_prompts, sizeof *ids);
    size_t *lens = calloc(n_prompts, sizeof *lens);
    if (!ids || !lens) {
        free(ids);
        free(lens);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    int rc = 0;
    size_t longest = 0;
    for (size_t i = 0; !rc && i < n_prompts; i++) {
        rc = kiln_tokenize(m->tok, prompts[i], strlen(prompts[i]), true, false, &ids[i], &lens[i], err);
        if (!rc && lens[i] == 0) rc = kiln_fail(err, NULL, NULL, -1, "prompt %zu tokenizes to nothing", i + 1);
        if (!rc && lens[i] > longest) longest = lens[i];
    }
    kiln_ctx *ctx = NULL;
    float *logits = NULL;
    kiln_lgf_writer *w = NULL;
    kiln_lgf_header h = {.n_vocab = (uint32_t)m->hp.n_vocab, .n_records = (uint32_t)n_prompts, .f16 = p->f16};
    if (!rc && !(h.meta = record_meta(m, prompts, n_prompts, p, err))) rc = -1;
    if (!rc) {
        kiln_ctx_params cp = {.n_ctx = (int64_t)longest, .mode = p->mode};
        ctx = kiln_ctx_new(m, &cp, err);
        logits = malloc(longest * (size_t)m->hp.n_vocab * sizeof *logits);
        if (!ctx) rc = -1;
        else if (!logits) rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    if (!rc && !(w = kiln_lgf_create(out, &h, p->force, err))) rc = -1;
    for (size_t i = 0; !rc && i < n_prompts; i++) {
        kiln_ctx_clear(ctx);
        rc = kiln_eval(ctx, ids[i], (int64_t)lens[i], logits, err) ||
             kiln_lgf_put(w, ids[i], (uint32_t)lens[i], 0, (uint32_t)lens[i], logits, err);
    }
    if (w) {
        if (rc) kiln_lgf_abort(w);
        else rc = kiln_lgf_finish(w, err);
    }
    json_decref(h.meta);
    free(logits);
    if (ctx) kiln_ctx_free(ctx);
    for (size_t i = 0; i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(lens);
    return rc ? -1 : 0;
}
