/* tests/quant_fixture.h - what the suites over kiln's own quant fixtures
 * (tests/fixtures/quant_*: ggml's bytes and hashes written by each
 * fixture's gen_vectors.c) have in common: a printf-style file loader, the
 * FNV-1a hash the fixtures store dequantizations as, and the type
 * llama-quantize's rules give one tensor of a synthetic llama (16 layers of
 * attn_v, ffn_down and attn_output, 4096 wide), for the preset rules the
 * 4-layer fixtures cannot reach. */
#ifndef KILN_TESTS_QUANT_FIXTURE_H
#define KILN_TESTS_QUANT_FIXTURE_H

#include "shared.h"

#include "../core/types.h"
#include "../quantize/policy.h"

/* Reads a whole file (path as printf would format it) into a malloc'd
 * buffer; fails the test when absent. */
__attribute__((format(printf, 2, 3))) static inline void *qf_load(size_t *len, const char *fmt, ...) {
    char path[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    void *buf = kiln_test_read_file(path, len);
    if (!buf) fail_msg("cannot open %s", path);
    return buf;
}

/* FNV-1a 64 of n bytes: how the fixtures' deq.tsv stores ggml's
 * dequantizations. */
static inline uint64_t qf_fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The type `target` (a preset) gives tensor `want` of a synthetic llama of
 * n_layer layers, n_head_kv KV heads (of 32) and n_expert experts, whose
 * ffn_down rows are ne0 long. */
static inline uint32_t qf_plan_type(const char *target, bool imatrix, uint32_t n_layer, uint32_t n_head_kv, uint32_t n_expert,
                                    const char *want, int64_t ne0) {
    kiln_policy_model m = {"llama", n_layer, 32, n_head_kv, n_expert};
    char names[64][48];
    kiln_policy_tensor t[70];
    kiln_tensor_plan p[70];
    int n = 0;
    for (uint32_t i = 0; i < n_layer && n < 60; i++) {
        snprintf(names[n], 48, "blk.%u.attn_v.weight", i);
        t[n] = (kiln_policy_tensor){names[n], 2, {4096, 1024, 1, 1}, KILN_F32};
        n++;
        snprintf(names[n], 48, "blk.%u.ffn_down.weight", i);
        t[n] = (kiln_policy_tensor){names[n], 2, {ne0, 4096, 1, 1}, KILN_F32};
        n++;
        snprintf(names[n], 48, "blk.%u.attn_output.weight", i);
        t[n] = (kiln_policy_tensor){names[n], 2, {4096, 4096, 1, 1}, KILN_F32};
        n++;
    }
    t[n++] = (kiln_policy_tensor){"output.weight", 2, {4096, 32000, 1, 1}, KILN_F32};
    t[n++] = (kiln_policy_tensor){"token_embd.weight", 2, {4096, 32000, 1, 1}, KILN_F32};
    kiln_policy_opts po = {.output_type = -1, .token_embd_type = -1, .has_imatrix = imatrix};
    kiln_err err;
    if (kiln_quant_target_parse(target, &po.target, &err) < 0) fail_msg("%s", err.msg);
    if (kiln_policy_plan(&m, t, (uint64_t)n, &po, p, &err) < 0) fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, want)) return p[i].to;
    fail_msg("%s not planned", want);
    return 0;
}

#endif
