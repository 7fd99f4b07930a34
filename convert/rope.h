/* convert/rope.h - RoPE settings from config.json, read the way
 * convert_hf_to_gguf.py reads them: "rope_parameters" (transformers 5) or
 * "rope_scaling", with rope_theta mirrored in from the top level, and
 * "type" accepted for "rope_type".
 *
 * Llama 3's "llama3" scaling is not a metadata key but a rope_freqs
 * tensor of per-dimension factors, computed here with the float32
 * roundings of llama.cpp's LlamaModel (torch); tests/test_llama3.c checks
 * them against torch's own numbers. */
#ifndef KILN_CONVERT_ROPE_H
#define KILN_CONVERT_ROPE_H

#include <jansson.h>
#include <stdint.h>

#include "../core/error.h"
#include "hparams.h"
#include "kv.h"

/* A new reference to the effective rope parameters object (possibly
 * empty). */
json_t *cv_rope_params(json_t *config);

/* Writes the rope.scaling.* keys, then rope.freq_base(_swa), in
 * llama.cpp's order. 0 or -1. */
int cv_rope_keys(json_t *config, cv_kv *k);

/* For llama3 scaling: *out (malloc'd) gets head_dim / 2 factors and *n
 * their count; otherwise *out = NULL. 0 or -1. */
int cv_rope_freqs(json_t *config, const cv_hp *hp, float **out, int64_t *n, kiln_err *err);

#endif
