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
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

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

/* Bytes that differ between a and b (n each). */
static inline size_t qf_bytes_differ(const void *a, const void *b, size_t n) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += ((const uint8_t *)a)[i] != ((const uint8_t *)b)[i];
    return diff;
}

/* Products of `type` weights w (n_out rows of n_in) with nt activation rows
 * against ggml's vec_dot results ref[t * n_out + r]: bad[0] counts the
 * reference dot on ggml's own activation bytes aq that differ bit for bit,
 * bad[1] kiln_matmul one token at a time (activations converted by kiln
 * from act), bad[2] kiln_matmul of all nt tokens at once. */
static inline void qf_dot_mismatches(uint32_t type, const uint8_t *w, const float *act, const uint8_t *aq,
                                     const float *ref, int nt, int64_t n_in, int64_t n_out, int64_t bad[3]) {
    const kiln_qtype *qt = kiln_qtype_get(type);
    assert_non_null(qt);
    const size_t wrow = kiln_type_row_bytes(type, n_in);
    const size_t arow = kiln_type_row_bytes(qt->act_type, n_in);
    float *y = malloc(sizeof(float) * (size_t)(nt * n_out));
    assert_non_null(y);
    bad[0] = bad[1] = bad[2] = 0;
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < n_out; r++) {
            const uint8_t *wr = w + r * wrow, *a = aq + t * arow;
            float v = qt->act_type == KILN_Q8_K
                          ? kiln_kdot_ref(n_in, wr, qt, KILN_KORDER_VECDOT, (const kiln_block_q8_k *)a)
                          : qt->dot(n_in, wr, a);
            bad[0] += memcmp(&v, &ref[t * n_out + r], 4) != 0;
        }
    for (int t = 0; t < nt; t++) {
        assert_int_equal(kiln_matmul(type, w, n_in, n_out, act + t * n_in, 1, y, KILN_NUM_GGML), 0);
        bad[1] += memcmp(y, ref + t * n_out, sizeof(float) * (size_t)n_out) != 0;
    }
    assert_int_equal(kiln_matmul(type, w, n_in, n_out, act, nt, y, KILN_NUM_GGML), 0);
    for (int64_t i = 0; i < nt * n_out; i++) bad[2] += memcmp(&y[i], &ref[i], 4) != 0;
    free(y);
}

#endif
