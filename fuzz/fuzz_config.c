/* fuzz/fuzz_config.c - config.json (convert/json.c, convert/hparams.c and
 * the architecture keys of convert/meta_arch.c).
 *
 * The input is a config.json. It is parsed with cv_json_parse() and, for
 * every architecture kiln converts, flattened (text_config merged), its
 * hyperparameters loaded and its GGUF architecture keys written to an
 * in-memory GGUF image, which must then parse back (and _name_or_path is
 * split into naming parts as general.name is made from it): whatever a config
 * holds, kiln either refuses it with a message or writes a valid GGUF. */
#include <stdlib.h>

#include "../convert/arch.h"
#include "../convert/hparams.h"
#include "../convert/json.h"
#include "../convert/kv.h"
#include "../convert/meta.h"
#include "../core/gguf.h"
#include "fuzz.h"
#include "harnesses.h"

static const cv_arch *const ARCHS[] = {&cv_arch_llama,   &cv_arch_mistral,  &cv_arch_mixtral,  &cv_arch_qwen2,
                                       &cv_arch_qwen3,   &cv_arch_qwen2moe, &cv_arch_qwen3moe, &cv_arch_gpt2};

static void one_arch(const cv_arch *a, json_t *config) {
    kiln_err err = {{0}};
    json_t *flat = cv_config_flatten(config);
    if (!flat) return; /* out of memory */
    cv_hp hp;
    int rc = fuzz_expect_err(cv_hp_load(a, flat, &hp, &err), &err, "cv_hp_load");
    if (rc == 0) {
        kiln_gguf_writer *w = kiln_writer_new("(fuzz metadata)", NULL, &err);
        if (!w) abort();
        cv_kv k = {.w = w, .arch = a->gguf_arch, .err = &err};
        if (fuzz_expect_err(cv_meta_arch(a, flat, &hp, 1, &k), &err, "cv_meta_arch") < 0) {
            kiln_writer_abort(w);
        } else {
            uint8_t *image;
            uint64_t len;
            if (fuzz_expect_err(kiln_writer_finish_image(w, &image, &len, &err), &err, "finish_image") == 0) {
                kiln_gguf *g = kiln_gguf_parse_owned(image, len, "(fuzz metadata)", &err);
                if (!g) abort(); /* kiln wrote a GGUF it cannot read back */
                kiln_gguf_close(g);
            }
        }
    }
    json_decref(flat);
}

int fuzz_config(const uint8_t *data, size_t size) {
    kiln_err err = {{0}};
    json_t *config = cv_json_parse((const char *)data, size, "config.json", &err);
    if (!config) {
        fuzz_expect_err(-1, &err, "cv_json_parse");
        return 0;
    }
    const char *id = cv_json_str(json_object_get(config, "_name_or_path"));
    cv_name_parts parts;
    if (id && cv_model_id_parts(id, 0, &parts) == 0) cv_name_parts_free(&parts);
    if (json_is_object(config))
        for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++) one_arch(ARCHS[i], config);
    json_decref(config);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_config)
