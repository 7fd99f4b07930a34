/* testmodel/testmodel_impl.h - what the synthetic model generator's files
 * share, and nothing else includes: testmodel.c (architectures, plan,
 * config.json, the directory), testmodel_weights.c (values, safetensors),
 * testmodel_tok.c (tokenizers) and testmodel_json.c (writing a JSON file),
 * and deepseek.c (full-shape DeepSeek checkpoints). Callers use testmodel.h.
 *
 * The files call each other one way only: each calls only files listed
 * below it (scripts/check_file_circles.sh fails on two files that call
 * each other). testmodel.c knows the architectures and hands the
 * tokenizer files the tokenizer kind rather than being asked for it:
 *
 *   deepseek.c             full-shape DeepSeek V3 / V4 checkpoints
 *   testmodel.c            architectures, plan, config.json, the directory
 *     testmodel_weights.c  testmodel_tok.c
 *       testmodel_json.c   one JSON file (a leaf)
 *       spm_write.c        tokenizer.model (testmodel_tok.c; a leaf)
 */
#ifndef KILN_TESTMODEL_IMPL_H
#define KILN_TESTMODEL_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "testmodel.h"

/* The tokenizer an architecture ships with (testmodel.c's table). */
enum kiln_tm_tok { KILN_TM_TOK_SPM, KILN_TM_TOK_QWEN, KILN_TM_TOK_GPT2 };

/* FNV-1a: seeds tensors by name, hashes vocabulary pieces. */
static inline uint64_t kiln_tm_fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* testmodel_json.c: writes dir/name atomically as json_dumps(root, flags) plus a newline,
 * save_pretrained style. Steals `root` (NULL allowed: an error). Returns 0
 * or -1. */
int kiln_tm_write_json(const char *dir, const char *name, json_t *root, size_t flags, kiln_err *err);

/* testmodel_weights.c: declares the plan's tensors, then generates and
 * streams them into dir/model.safetensors (or shards); fills sum. */
int kiln_tm_write_weights(const kiln_tm_config *c, const char *dir, const kiln_tm_tensor *t, size_t n,
                          const kiln_tm_opts *o, kiln_tm_summary *sum, kiln_err *err);

/* testmodel.c, the directory (also for deepseek.c):
 * kiln_tm_prepare_dir creates `dir` or checks it: refused if it holds
 * model files unless `force`, and then its config.json is removed first so
 * the directory does not look complete until the new one lands. Returns 0
 * or -1. kiln_tm_remove_stale, after the new model is written, removes the
 * old one's files it did not replace: other shard counts, and the
 * tokenizer files of the other kind than `tok` (an enum kiln_tm_tok; -1:
 * no tokenizer was written, leave them all). Returns 0 or -1. */
int kiln_tm_prepare_dir(const char *dir, bool force, kiln_err *err);
int kiln_tm_remove_stale(const char *dir, uint32_t n_files, int tok, kiln_err *err);

/* testmodel_tok.c: the special token ids config.json names, and the
 * tokenizer files (tokenizer.model or tokenizer.json + vocab.json +
 * merges.txt, tokenizer_config.json, special_tokens_map.json), for
 * tokenizer kind `tok` (the architecture's). */
void kiln_tm_bos_eos(const kiln_tm_config *c, enum kiln_tm_tok tok, int *bos, int *eos);
int kiln_tm_write_tokenizer(const kiln_tm_config *c, enum kiln_tm_tok tok, const char *dir, kiln_err *err);

#endif
