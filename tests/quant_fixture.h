/* tests/quant_fixture.h - what the suites over kiln's own quant fixtures
 * (tests/fixtures/quant_*: ggml's bytes and hashes written by each
 * fixture's gen_vectors.c) have in common: a printf-style file loader, the
 * FNV-1a hash the fixtures store dequantizations as, the source tensors
 * and their deq.tsv look-up, the byte-for-byte codec comparison of one
 * (source, type, imatrix) case, the dot-product comparison, and the type
 * llama-quantize's rules give one tensor of a synthetic llama (16 layers of
 * attn_v, ffn_down and attn_output, 4096 wide), for the preset rules the
 * 4-layer fixtures cannot reach. */
#ifndef KILN_TESTS_QUANT_FIXTURE_H
#define KILN_TESTS_QUANT_FIXTURE_H

#include "shared.h"

#include "../codec/codec.h"
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

/* A source tensor of a fixture: rows x cols f32 values NAME.f32 and cols
 * imatrix weights NAME.imatrix.f32, in KILN_SHARED's golden/quant when
 * `shared`, else in the fixture's own vectors folder. */
typedef struct qf_src {
    const char *name;
    int64_t rows, cols;
    bool shared;
} qf_src;

/* Loads src's values into *x and its imatrix into *w (malloc'd, the
 * caller frees both); fails the test when a file is absent or the wrong
 * size. vec: the fixture's vectors folder, ending in '/'. */
static inline void qf_load_src(const char *vec, const qf_src *src, float **x, float **w) {
    size_t xlen, wlen;
    if (src->shared) {
        *x = qf_load(&xlen, "%s/golden/quant/%s.f32", kiln_shared(), src->name);
        *w = qf_load(&wlen, "%s/golden/quant/%s.imatrix.f32", kiln_shared(), src->name);
    } else {
        *x = qf_load(&xlen, "%s%s.f32", vec, src->name);
        *w = qf_load(&wlen, "%s%s.imatrix.f32", vec, src->name);
    }
    assert_int_equal(xlen, (size_t)(src->rows * src->cols) * 4);
    assert_int_equal(wlen, (size_t)src->cols * 4);
}

/* A case whose ggml bytes are the same with and without an imatrix (the
 * fixture stores one file, NAME.TYPE.q, and deq.tsv has no imx column). */
#define QF_IMX_IGNORED (-1)

/* ggml's FNV-1a hash of its dequantization from VEC/deq.tsv, whose lines
 * are "src [type] [imx] hash": type NULL for a one-type fixture without
 * the type column, imx QF_IMX_IGNORED without the imx column. Fails the
 * test when no line matches. */
static inline uint64_t qf_deq_hash(const char *vec, const char *src, const char *type, int imx) {
    char path[4096];
    snprintf(path, sizeof path, "%sdeq.tsv", vec);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    char line[512], want[320];
    snprintf(want, sizeof want, "%s", src);
    if (type) snprintf(want + strlen(want), sizeof want - strlen(want), " %s", type);
    if (imx != QF_IMX_IGNORED) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", imx);
    while (fgets(line, sizeof line, f)) {
        /* fold the fields' white space to single blanks before comparing */
        char fields[4][256];
        int nf = sscanf(line, "%255s %255s %255s %255s", fields[0], fields[1], fields[2], fields[3]);
        if (nf < 2) continue;
        char key[1024] = "";
        for (int i = 0; i < nf - 1; i++)
            snprintf(key + strlen(key), sizeof key - strlen(key), "%s%s", i ? " " : "", fields[i]);
        if (strcmp(key, want)) continue;
        unsigned long long h;
        if (sscanf(fields[nf - 1], "%llx", &h) != 1) break;
        fclose(f);
        return h;
    }
    fclose(f);
    fail_msg("%s has no line for %s", path, want);
    return 0;
}

/* One codec case against ggml's bytes VEC/SRC.TYPE[.imx].q: kiln's
 * quantization of x (with the imatrix w when imx is 1, both ways when
 * imx is QF_IMX_IGNORED) and, where ggml's row reference gives these bytes
 * (imx 0 or ignored; row_ref NULL: no reference), row_ref's, byte for
 * byte; and kiln's dequantization of ggml's bytes against deq.tsv (type
 * column when type_column). Prints one line tagged `isa`; adds 1 to
 * bad[0] when any byte differs, to bad[1] when the dequantization does. */
static inline void qf_codec_case(const char *isa, const char *vec, const qf_src *src, const float *x,
                                 const float *w, uint32_t type, bool type_column, int imx,
                                 void (*row_ref)(const float *, void *, int64_t), int64_t bad[2]) {
    const char *tname = kiln_type_name(type);
    const int64_t n = src->rows * src->cols;
    const char *suffix = imx == 1 ? ".imx" : "";
    size_t qlen;
    uint8_t *ref = qf_load(&qlen, "%s%s.%s%s.q", vec, src->name, tname, suffix);
    assert_int_equal(qlen, kiln_type_row_bytes(type, (uint64_t)src->cols) * (size_t)src->rows);
    uint8_t *mine = malloc(qlen);
    float *deq = malloc((size_t)n * 4);
    assert_non_null(mine);
    assert_non_null(deq);
    kiln_err err = {{0}};
    size_t diff = 0;
    int runs = 0;
    for (int with_w = imx == 1; with_w <= (imx != 0); with_w++) {
        memset(mine, 0, qlen);
        assert_int_equal(kiln_quantize_rows(type, x, mine, src->rows, src->cols, with_w ? w : NULL, &err), qlen);
        diff += qf_bytes_differ(mine, ref, qlen);
        runs++;
    }
    if (imx != 1 && row_ref) {
        memset(mine, 0, qlen);
        row_ref(x, mine, n);
        diff += qf_bytes_differ(mine, ref, qlen);
        runs++;
    }
    assert_int_equal(kiln_dequantize(type, ref, deq, n, &err), 0);
    const bool deq_ok = qf_fnv1a(deq, (size_t)n * 4) == qf_deq_hash(vec, src->name, type_column ? tname : NULL, imx);
    printf("# %s %-22s %s%-4s bytes differing from ggml (%d runs): %zu of %zu; dequantization %s\n", isa,
           src->name, tname, suffix, runs, diff, qlen, deq_ok ? "identical" : "DIFFERS");
    bad[0] += diff != 0;
    bad[1] += !deq_ok;
    free(deq);
    free(mine);
    free(ref);
}

/* A type of a fixture's codec comparison: ggml's bytes exist for imx
 * first_imx..1 (1: only with an imatrix; QF_IMX_IGNORED: one file for
 * both), and row_ref (NULL: none) is ggml's row reference, which gives
 * the bytes without an imatrix. */
typedef struct qf_codec_type {
    uint32_t type;
    int first_imx;
    void (*row_ref)(const float *, void *, int64_t);
} qf_codec_type;

/* Every (source, type, imx) case of a fixture through qf_codec_case at
 * the current SIMD level (named isa); fails the test when any byte or any
 * dequantization differs. Returns the number of cases compared. */
static inline int64_t qf_codec_suite(const char *isa, const char *vec, const qf_src *srcs, size_t nsrc,
                                     const qf_codec_type *types, size_t ntypes, bool type_column) {
    int64_t bad[2] = {0, 0}, cases = 0;
    for (size_t s = 0; s < nsrc; s++) {
        float *x, *w;
        qf_load_src(vec, &srcs[s], &x, &w);
        for (size_t t = 0; t < ntypes; t++) {
            const int imx_last = types[t].first_imx == QF_IMX_IGNORED ? QF_IMX_IGNORED : 1;
            for (int imx = types[t].first_imx; imx <= imx_last; imx++, cases++)
                qf_codec_case(isa, vec, &srcs[s], x, w, types[t].type, type_column, imx, types[t].row_ref, bad);
        }
        free(w);
        free(x);
    }
    assert_int_equal(bad[0], 0);
    assert_int_equal(bad[1], 0);
    return cases;
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


/* One product case against ggml: loads ggml's weights VEC/WNAME (n_out
 * rows of n_in, of `type`, whose activations are act_type) and its
 * vec_dot results VEC/DNAME (nt x n_out floats), runs qf_dot_mismatches
 * on them with the activations act (f32) and aq (ggml's bytes of them),
 * prints one line tagged `isa` and returns the mismatches of all three
 * paths together (0: every product bit-identical). */
static inline int64_t qf_dot_case(const char *isa, const char *vec, uint32_t type, uint32_t act_type,
                                  const char *wname, const char *dname, const float *act, const uint8_t *aq,
                                  int nt, int64_t n_in, int64_t n_out) {
    size_t wlen, dlen;
    uint8_t *w = qf_load(&wlen, "%s%s", vec, wname);
    float *ref = qf_load(&dlen, "%s%s", vec, dname);
    assert_int_equal(wlen, kiln_type_row_bytes(type, (uint64_t)n_in) * (size_t)n_out);
    assert_int_equal(dlen, sizeof(float) * (size_t)(nt * n_out));
    assert_int_equal(kiln_qtype_get(type)->act_type, act_type);
    int64_t bad[3];
    qf_dot_mismatches(type, w, act, aq, ref, nt, n_in, n_out, bad);
    printf("# %s %-38s dot products differing from ggml's: reference %lld, matmul 1 token %lld, 8 tokens %lld "
           "(of %lld)\n",
           isa, wname, (long long)bad[0], (long long)bad[1], (long long)bad[2], (long long)(nt * n_out));
    free(ref);
    free(w);
    return bad[0] + bad[1] + bad[2];
}

/* Whether kiln's Q8_K activations of act (nt rows of n_in) are ggml's
 * bytes aq (qlen long), so that product tests on aq see kiln's own. */
static inline bool qf_act_q8_k_matches(const float *act, const uint8_t *aq, size_t qlen, int nt, int64_t n_in) {
    assert_int_equal(qlen, sizeof(kiln_block_q8_k) * (size_t)(nt * n_in / KILN_QK_K));
    kiln_block_q8_k *mine = malloc(qlen);
    assert_non_null(mine);
    for (int t = 0; t < nt; t++) kiln_act_q8_k(act + t * n_in, mine + t * n_in / KILN_QK_K, n_in);
    const bool same = qf_bytes_differ(mine, aq, qlen) == 0;
    free(mine);
    return same;
}

#endif
