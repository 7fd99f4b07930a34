/* testmodel/testmodel_json.c - writing one JSON file of a synthetic model
 * the way transformers' save_pretrained does (see testmodel_impl.h).
 *
 * A leaf of testmodel/: testmodel.c (config.json) and testmodel_tok.c (the
 * tokenizer files) both write through it, so neither calls the other for
 * it. */
#include "testmodel_impl.h"

#include <stdio.h>

#include "../core/fileio.h"

int kiln_tm_write_json(const char *dir, const char *name, json_t *root, size_t flags, kiln_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = kiln_write_json_atomic(path, root, flags | JSON_REAL_PRECISION(15), err);
    json_decref(root);
    return rc;
}
