/* tests/test_tokenizer.c - kiln_tokenize() against llama.cpp's own output.
 *
 * Ground truth (../shared/golden, README sections 1 and 6):
 *   - tokens/FIXTURE.tsv: llama_tokenize() ids for 49 strings x add_special
 *     x parse_special with the vocabulary of gguf/FIXTURE-f32.gguf;
 *   - tokenizers/ggml-vocab-NAME.gguf{.inp,.out}: llama.cpp's
 *     test-tokenizer-0 vectors (add_special=false, parse_special=false);
 *   - ppl/: llama-perplexity's chunk counts, which bound how many tokens
 *     it made of the 40 KB text/ppl.txt.
 * Every id sequence must match exactly; a failing case prints the first
 * differences. The suites without ../shared check load errors. */
#include "shared.h"

#include "../tokenizer/tokenizer.h"

#include <time.h>

/* ---- helpers --------------------------------------------------------- */

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the JSON string literal s[0..n) (quotes included) into out,
 * which must hold n bytes; returns the decoded length. */
static size_t json_unquote(const char *s, size_t n, char *out) {
    assert_true(n >= 2 && s[0] == '"' && s[n - 1] == '"');
    size_t k = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (s[i] != '\\') {
            out[k++] = s[i];
            continue;
        }
        char e = s[++i];
        switch (e) {
        case 'n': out[k++] = '\n'; break;
        case 'r': out[k++] = '\r'; break;
        case 't': out[k++] = '\t'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'u': {
            char hex[5] = {s[i + 1], s[i + 2], s[i + 3], s[i + 4], 0};
            uint32_t cp = (uint32_t)strtoul(hex, NULL, 16);
            i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[i + 1] == '\\' && s[i + 2] == 'u') {
                char lo[5] = {s[i + 3], s[i + 4], s[i + 5], s[i + 6], 0};
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)strtoul(lo, NULL, 16) - 0xDC00);
                i += 6;
            }
            k += put_utf8(cp, out + k);
            break;
        }
        default: out[k++] = e; break; /* \" \\ \/ */
        }
    }
    return k;
}

/* Parses space-separated ids of s[0..n) into ids (capacity cap). */
static size_t parse_ids(const char *s, size_t n, int32_t *ids, size_t cap) {
    size_t k = 0;
    char *end;
    const char *p = s, *stop = s + n;
    while (p < stop) {
        while (p < stop && (*p == ' ' || *p == '\r')) p++;
        if (p >= stop) break;
        long v = strtol(p, &end, 10);
        assert_true(end > p && k < cap);
        ids[k++] = (int32_t)v;
        p = end;
    }
    return k;
}

/* Compares one case; prints the first mismatch of a failing run. */
static bool same_ids(const char *what, const char *text, const int32_t *want, size_t n_want, const int32_t *got,
                     size_t n_got, int *printed) {
    bool ok = n_want == n_got && (n_want == 0 || !memcmp(want, got, n_want * sizeof *want));
    if (!ok && (*printed)++ < 5) {
        fprintf(stderr, "# %s: text \"%.60s\"\n#   want", what, text);
        for (size_t i = 0; i < n_want && i < 40; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n#   got ");
        for (size_t i = 0; i < n_got && i < 40; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static kiln_tokenizer *open_tokenizer(const char *rel, kiln_gguf **g) {
    kiln_err err = {{0}};
    *g = kiln_gguf_open(kiln_shared_path(rel), &err);
    if (!*g) fail_msg("%s", err.msg);
    kiln_tokenizer *t = kiln_tokenizer_load(*g, &err);
    if (!t) fail_msg("%s", err.msg);
    return t;
}

/* ---- tokens/FIXTURE.tsv ------------------------------------------------ */

static void check_tsv(const char *fixture) {
    SKIP_WITHOUT_SHARED();
    char rel[256];
    snprintf(rel, sizeof rel, "golden/gguf/%s-f32.gguf", fixture);
    kiln_gguf *g;
    kiln_tokenizer *t = open_tokenizer(rel, &g);
    snprintf(rel, sizeof rel, "golden/tokens/%s.tsv", fixture);
    size_t len;
    char *tsv = kiln_test_read_file(kiln_shared_path(rel), &len);
    assert_non_null(tsv);

    int32_t want[4096];
    char *text = malloc(len + 1);
    assert_non_null(text);
    int rows = 0, bad = 0, printed = 0;
    char *line = strchr(tsv, '\n') + 1; /* after the header */
    while (line && *line) {
        char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        char *col[5] = {line};
        for (int c = 1; c < 5; c++) {
            col[c] = memchr(col[c - 1], '\t', (size_t)(eol - col[c - 1]));
            assert_non_null(col[c]);
            col[c]++;
        }
        bool add_special = col[1][0] == '1', parse_special = col[2][0] == '1';
        size_t n_want = parse_ids(col[3], (size_t)(col[4] - 1 - col[3]), want, 4096);
        size_t n_text = json_unquote(col[4], (size_t)(eol - col[4]), text);

        int32_t *ids;
        size_t n;
        kiln_err err = {{0}};
        if (kiln_tokenize(t, text, n_text, add_special, parse_special, &ids, &n, &err) < 0)
            fail_msg("%s", err.msg);
        char what[64];
        snprintf(what, sizeof what, "%s row %d (add_special %d, parse_special %d)", fixture, rows,
                 add_special, parse_special);
        text[n_text] = 0;
        bad += !same_ids(what, text, want, n_want, ids, n, &printed);
        free(ids);
        rows++;
        line = *eol ? eol + 1 : NULL;
    }
    fprintf(stderr, "# tokens/%s.tsv: %d/%d rows match\n", fixture, rows - bad, rows);
    assert_int_equal(rows, 49 * 4);
    assert_int_equal(bad, 0);
    free(text);
    free(tsv);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
}

static void test_tokens_llama(void **state) { check_tsv("llama"); }
static void test_tokens_mixtral(void **state) { check_tsv("mixtral"); }
static void test_tokens_qwen2(void **state) { check_tsv("qwen2"); }

/* ---- tokenizers/ggml-vocab-NAME.gguf (test-tokenizer-0) --------------- */

static void check_vocab(const char *name) {
    SKIP_WITHOUT_SHARED();
    char rel[256];
    snprintf(rel, sizeof rel, "golden/tokenizers/ggml-vocab-%s.gguf", name);
    kiln_gguf *g;
    kiln_tokenizer *t = open_tokenizer(rel, &g);
    size_t n_inp, n_out;
    snprintf(rel, sizeof rel, "golden/tokenizers/ggml-vocab-%s.gguf.inp", name);
    char *inp = kiln_test_read_file(kiln_shared_path(rel), &n_inp);
    snprintf(rel, sizeof rel, "golden/tokenizers/ggml-vocab-%s.gguf.out", name);
    char *out = kiln_test_read_file(kiln_shared_path(rel), &n_out);
    assert_non_null(inp);
    assert_non_null(out);

    /* inputs are separated by this line; the file ends with it */
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    int32_t want[4096];
    int cases = 0, bad = 0, printed = 0;
    char *p = inp, *o = out;
    while (p < inp + n_inp) {
        char *next = strstr(p, SEP);
        size_t n_text = next ? (size_t)(next - p) : strlen(p);
        char *eol = strchr(o, '\n');
        assert_non_null(eol); /* one output line per input */
        size_t n_want = parse_ids(o, (size_t)(eol - o), want, 4096);

        int32_t *ids;
        size_t n;
        kiln_err err = {{0}};
        if (kiln_tokenize(t, p, n_text, false, false, &ids, &n, &err) < 0) fail_msg("%s", err.msg);
        char what[64], saved = p[n_text];
        snprintf(what, sizeof what, "%s case %d", name, cases);
        p[n_text] = 0;
        bad += !same_ids(what, p, want, n_want, ids, n, &printed);
        p[n_text] = saved;
        free(ids);
        cases++;
        o = eol + 1;
        p = next ? next + sizeof SEP - 1 : inp + n_inp;
    }
    fprintf(stderr, "# ggml-vocab-%s: %d/%d cases match\n", name, cases - bad, cases);
    assert_int_equal(cases, 46);
    assert_true(o == out + n_out); /* every output line was used */
    assert_int_equal(bad, 0);
    free(inp);
    free(out);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
}

static void test_vocab_gpt2(void **state) { check_vocab("gpt-2"); }
static void test_vocab_llama_spm(void **state) { check_vocab("llama-spm"); }
static void test_vocab_phi3(void **state) { check_vocab("phi-3"); }
static void test_vocab_deepseek_llm(void **state) { check_vocab("deepseek-llm"); }
static void test_vocab_deepseek_coder(void **state) { check_vocab("deepseek-coder"); }
static void test_vocab_falcon(void **state) { check_vocab("falcon"); }
static void test_vocab_starcoder(void **state) { check_vocab("starcoder"); }

/* ---- a long text: llama-perplexity's chunk counts ------------------------ */

/* llama-perplexity -c 128 made floor(n_tokens / 128) chunks of ppl.txt
 * (tokenized with add_special): 146 for the SPM vocabulary, 135 for qwen2.
 * Also times the 40 KB text, which must not be slow. */
static void check_long_text(const char *fixture, int chunks) {
    SKIP_WITHOUT_SHARED();
    char rel[256];
    snprintf(rel, sizeof rel, "golden/gguf/%s-f32.gguf", fixture);
    kiln_gguf *g;
    kiln_tokenizer *t = open_tokenizer(rel, &g);
    size_t len;
    char *text = kiln_test_read_file(kiln_shared_path("golden/text/ppl.txt"), &len);
    assert_non_null(text);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int32_t *ids;
    size_t n;
    kiln_err err = {{0}};
    if (kiln_tokenize(t, text, len, true, false, &ids, &n, &err) < 0) fail_msg("%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    fprintf(stderr, "# %s: %zu bytes -> %zu tokens in %.1f ms\n", fixture, len, n, ms);
    assert_int_equal(n / 128, chunks);
    assert_true(ms < 2000);
    free(ids);
    free(text);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
}

static void test_long_text_llama(void **state) { check_long_text("llama", 146); }
static void test_long_text_qwen2(void **state) { check_long_text("qwen2", 135); }

/* ---- without ../shared: load errors ------------------------------------ */

/* A GGUF v3 image with no tensors, built key by key. */
typedef struct gguf_img {
    uint8_t *b;
    size_t n, cap;
    uint64_t n_kv;
} gguf_img;

static void img_put(gguf_img *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 4096;
        g->b = realloc(g->b, g->cap);
        assert_non_null(g->b);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void img_str(gguf_img *g, const char *s) {
    uint64_t n = strlen(s);
    img_put(g, &n, 8);
    img_put(g, s, n);
}

static void img_begin(gguf_img *g) {
    memset(g, 0, sizeof *g);
    uint32_t version = 3;
    uint64_t zero = 0;
    img_put(g, "GGUF", 4);
    img_put(g, &version, 4);
    img_put(g, &zero, 8); /* tensors */
    img_put(g, &zero, 8); /* keys, patched by img_end */
}

static void img_kv_str(gguf_img *g, const char *key, const char *val) {
    uint32_t type = KILN_GGUF_STRING;
    img_str(g, key);
    img_put(g, &type, 4);
    img_str(g, val);
    g->n_kv++;
}

static void img_kv_strs(gguf_img *g, const char *key, const char *const *vals, uint64_t n) {
    uint32_t type = KILN_GGUF_ARRAY, elem = KILN_GGUF_STRING;
    img_str(g, key);
    img_put(g, &type, 4);
    img_put(g, &elem, 4);
    img_put(g, &n, 8);
    for (uint64_t i = 0; i < n; i++) img_str(g, vals[i]);
    g->n_kv++;
}

static void img_kv_u32(gguf_img *g, const char *key, uint32_t val) {
    uint32_t type = KILN_GGUF_UINT32;
    img_str(g, key);
    img_put(g, &type, 4);
    img_put(g, &val, 4);
    g->n_kv++;
}

static void img_kv_bool(gguf_img *g, const char *key, bool val) {
    uint32_t type = KILN_GGUF_BOOL;
    uint8_t b = val;
    img_str(g, key);
    img_put(g, &type, 4);
    img_put(g, &b, 1);
    g->n_kv++;
}

static kiln_gguf *img_end(gguf_img *g) {
    memcpy(g->b + 16, &g->n_kv, 8);
    kiln_err err = {{0}};
    kiln_gguf *gg = kiln_gguf_parse(g->b, g->n, "mem.gguf", &err);
    if (!gg) fail_msg("%s", err.msg);
    return gg;
}

static void expect_load_error(const char *const *kv, int n_kv, const char *needle) {
    gguf_img img;
    img_begin(&img);
    for (int i = 0; i < n_kv; i++) img_kv_str(&img, kv[2 * i], kv[2 * i + 1]);
    kiln_gguf *g = img_end(&img);
    kiln_err err = {{0}};
    kiln_tokenizer *t = kiln_tokenizer_load(g, &err);
    assert_null(t);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' does not mention '%s'", err.msg, needle);
    assert_non_null(strstr(err.msg, "mem.gguf"));
    kiln_gguf_close(g);
    free(img.b);
}

static void test_load_errors(void **state) {
    expect_load_error(NULL, 0, "tokenizer.ggml.model");
    const char *bert[] = {"tokenizer.ggml.model", "bert"};
    expect_load_error(bert, 1, "'bert' vocabularies are not supported");
    const char *no_tokens[] = {"tokenizer.ggml.model", "llama"};
    expect_load_error(no_tokens, 1, "tokenizer.ggml.tokens");
    const char *bad_pre[] = {"tokenizer.ggml.model", "gpt2", "tokenizer.ggml.pre", "no-such-pre"};
    expect_load_error(bad_pre, 2, "pre-tokenizer 'no-such-pre' is not supported");
}

/* With a vocabulary of GPT-2's 256 byte characters and no merges, every
 * byte is one token, so any pre-tokenizer must give back the text exactly
 * - also for a 200,000-letter word, which needs more than PCRE2's default
 * JIT stack with the case-splitting regexes of tekken / gpt-4o. */
static void test_byte_vocab_round_trip(void **state) {
    static const char *const PRES[] = {"gpt-2", "llama3", "qwen2", "tekken", "gpt-4o", "deepseek-llm",
                                       "deepseek-coder", "falcon", "default"};
    char tokens[256][3];
    const char *tok_ptrs[256];
    int next = 0x100; /* bytes_to_unicode(): printable Latin-1 as itself, the rest from U+0100 */
    for (int b = 0; b < 256; b++) {
        int cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b : next++;
        tokens[b][put_utf8((uint32_t)cp, tokens[b])] = 0;
        tok_ptrs[b] = tokens[b];
    }
    size_t word = 200000;
    const char head[] = "Hello w\xc3\xb6rld 123, it's \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 ";
    size_t len = sizeof head - 1 + word + 5;
    char *text = malloc(len + 1), *back = malloc(len + 1);
    assert_non_null(text);
    assert_non_null(back);
    memcpy(text, head, sizeof head - 1);
    memset(text + sizeof head - 1, 'a', word);
    memcpy(text + len - 5, " end\n", 5);
    for (size_t i = 0; i < sizeof PRES / sizeof PRES[0]; i++) {
        gguf_img img;
        img_begin(&img);
        img_kv_str(&img, "tokenizer.ggml.model", "gpt2");
        img_kv_str(&img, "tokenizer.ggml.pre", PRES[i]);
        img_kv_strs(&img, "tokenizer.ggml.tokens", tok_ptrs, 256);
        img_kv_strs(&img, "tokenizer.ggml.merges", NULL, 0);
        kiln_gguf *g = img_end(&img);
        kiln_err err = {{0}};
        kiln_tokenizer *t = kiln_tokenizer_load(g, &err);
        if (!t) fail_msg("%s: %s", PRES[i], err.msg);
        int32_t *ids;
        size_t n;
        if (kiln_tokenize(t, text, len, false, false, &ids, &n, &err) < 0) fail_msg("%s: %s", PRES[i], err.msg);
        assert_int_equal(n, len);
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
            size_t pl;
            const char *piece = kiln_token_piece(t, ids[j], &pl);
            assert_int_equal(pl, 1);
            back[k++] = piece[0];
        }
        if (memcmp(back, text, len)) fail_msg("%s: pieces do not spell the text", PRES[i]);
        free(ids);
        kiln_tokenizer_free(t);
        kiln_gguf_close(g);
        free(img.b);
    }
    free(text);
    free(back);
}

/* SentencePiece-style BPE (tokenizer.ggml.pre granite-embed-multi-311m,
 * llama.cpp's Gemma 4 type, what Gemma 3's tokenizer.json becomes): spaces
 * are merged as U+2581, words are cut only at newline runs, a newline run
 * that is a token is taken whole without merges, a character that is not a
 * token falls back to its <0xXX> tokens, and BOS is added even when the
 * file says add_bos_token false (llama.cpp's Gemma 4 workaround). */
static void test_spm_style_bpe(void **state) {
    enum { BOS, AB = 257, SPACE_AB, NL, NL2, A, B, SPACE, N_TOKENS };
    static char bytes[256][7];
    const char *tokens[N_TOKENS] = {[BOS] = "<bos>", [AB] = "ab", [SPACE_AB] = "\xe2\x96\x81" "ab", [NL] = "\n",
                                    [NL2] = "\n\n", [A] = "a", [B] = "b", [SPACE] = "\xe2\x96\x81"};
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[1 + b] = bytes[b];
    }
    const char *merges[] = {"a b", "\xe2\x96\x81 ab"};
    gguf_img img;
    img_begin(&img);
    img_kv_str(&img, "tokenizer.ggml.model", "gpt2");
    img_kv_str(&img, "tokenizer.ggml.pre", "granite-embed-multi-311m");
    img_kv_strs(&img, "tokenizer.ggml.tokens", tokens, N_TOKENS);
    img_kv_strs(&img, "tokenizer.ggml.merges", merges, 2);
    img_kv_u32(&img, "tokenizer.ggml.bos_token_id", BOS);
    img_kv_bool(&img, "tokenizer.ggml.add_bos_token", false);
    kiln_gguf *g = img_end(&img);
    kiln_err err = {{0}};
    kiln_tokenizer *t = kiln_tokenizer_load(g, &err);
    if (!t) fail_msg("%s", err.msg);
    static const char text[] = "ab ab\n\nc";
    const int32_t want[] = {BOS, AB, SPACE_AB, NL2, 1 + 'c'};
    int32_t *ids;
    size_t n;
    if (kiln_tokenize(t, text, sizeof text - 1, true, false, &ids, &n, &err) < 0) fail_msg("%s", err.msg);
    int printed = 0;
    if (!same_ids("spm-style bpe", text, want, sizeof want / sizeof want[0], ids, n, &printed)) fail();
    size_t pl;
    const char *piece = kiln_token_piece(t, SPACE_AB, &pl);
    assert_int_equal(pl, 3);
    assert_memory_equal(piece, " ab", 3);
    free(ids);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
    free(img.b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_byte_vocab_round_trip),
        cmocka_unit_test(test_spm_style_bpe),
        cmocka_unit_test(test_tokens_llama),
        cmocka_unit_test(test_tokens_mixtral),
        cmocka_unit_test(test_tokens_qwen2),
        cmocka_unit_test(test_vocab_gpt2),
        cmocka_unit_test(test_vocab_llama_spm),
        cmocka_unit_test(test_vocab_phi3),
        cmocka_unit_test(test_vocab_deepseek_llm),
        cmocka_unit_test(test_vocab_deepseek_coder),
        cmocka_unit_test(test_vocab_falcon),
        cmocka_unit_test(test_vocab_starcoder),
        cmocka_unit_test(test_long_text_llama),
        cmocka_unit_test(test_long_text_qwen2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
