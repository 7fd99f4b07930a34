/* tests/test_testmodel.c - the safetensors writer, the SentencePiece
 * writer and `kiln testmodel`'s generator.
 *
 *  - safetensors writer: byte-exact against the safetensors library's own
 *    test vectors; every dtype round-trips through kiln's reader with an
 *    8-byte aligned header and aligned data; shards follow huggingface_hub's
 *    rule and their index opens; failures leave no file behind.
 *  - SentencePiece writer: re-encoding the pieces of ../shared's llama
 *    tokenizer.model gives the file back byte for byte.
 *  - generator: for every architecture, the tensors found by the reader are
 *    exactly those the architecture defines (tables below, written from
 *    the transformers modules, not from the generator); config.json,
 *    tokenizer.model / tokenizer.json are complete and consistent; where
 *    ../shared has a fixture of the same shape, the safetensors headers are
 *    byte-identical to the fixture's and the JSON files equal its values.
 *  - weights: same options give byte-identical directories; values are
 *    heavy-tailed (kurtosis well above a Gaussian's 3), have outlier
 *    channels, norms near 1; f32 files hold exactly kiln_tm_values().
 *  - full-shape DeepSeek plans (testmodel/deepseek.c): the published
 *    parameter counts, and a few tensors' dtypes and shapes written out;
 *    --sparse files (kiln_stw_skip holes) read back as zeros, full size. */
#include "shared.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../testmodel/testmodel.h"
#include "../core/fp16.h"
#include "../core/safetensors.h"
#include "../core/safetensors_write.h"

/* The convert team's tokenizer.model reader, used when it is there. */
#if defined(__has_include)
#if __has_include("../convert/spm.h")
#include "../convert/spm.h"
#define HAVE_CV_SPM 1
#endif
#endif

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static char *path_in(const char *dir, const char *name) {
    static char bufs[8][4096];
    static int slot;
    char *b = bufs[slot++ & 7];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

/* Number of entries of dir whose name contains `part` ("" for all). */
static int count_files(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

static json_t *load_json(const char *path) {
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) fail_msg("%s: %s (line %d)", path, jerr.text, jerr.line);
    return j;
}

static void write_model(const kiln_tm_config *c, const char *dir) {
    kiln_err err = {{0}};
    kiln_tm_opts o = {.force = true};
    if (kiln_tm_write(c, dir, &o, NULL, &err)) fail_msg("kiln_tm_write %s: %s", dir, err.msg);
}

static kiln_tm_config config_for(kiln_tm_arch a) {
    kiln_tm_config c;
    kiln_err err = {{0}};
    if (kiln_tm_defaults(&c, a, NULL, &err)) fail_msg("%s", err.msg);
    return c;
}

/* ------------------------------------------------------------------ */
/* safetensors writer                                                  */

typedef struct st_item {
    const char *name;
    kiln_st_dtype dtype;
    uint32_t n_dims;
    int64_t shape[4];
} st_item;

/* Writes items with byte pattern i*7 + k (k = index of the item) */
static int write_items(const char *path, const st_item *it, int n, const kiln_stw_opts *o, const char *meta_k,
                       const char *meta_v, kiln_err *err) {
    kiln_stw *w = kiln_stw_create(path, o, err);
    if (!w) return -1;
    if (meta_k && kiln_stw_metadata(w, meta_k, meta_v, err)) return kiln_stw_abort(w), -1;
    for (int i = 0; i < n; i++)
        if (kiln_stw_declare(w, it[i].name, it[i].dtype, it[i].n_dims, it[i].shape, err) != i)
            return kiln_stw_abort(w), -1;
    if (kiln_stw_begin(w, err)) return kiln_stw_abort(w), -1;
    int64_t idx;
    int r;
    while ((r = kiln_stw_next(w, &idx, err)) == 1) {
        uint64_t nb = kiln_stw_nbytes(w, idx);
        /* in uneven pieces, to exercise streaming */
        for (uint64_t s = 0; s < nb;) {
            uint8_t buf[13];
            uint64_t k = nb - s < sizeof buf ? nb - s : sizeof buf;
            for (uint64_t j = 0; j < k; j++) buf[j] = (uint8_t)((s + j) * 7 + (uint64_t)idx);
            if (kiln_stw_write(w, buf, k, err)) return kiln_stw_abort(w), -1;
            s += k;
        }
    }
    if (r < 0) return kiln_stw_abort(w), -1;
    return kiln_stw_finish(w, err);
}

/* The expected bytes are the safetensors library's test_serialization,
 * test_serialization_forced_alignement and test_empty (tensor.rs). */
static void test_stw_library_vectors(void **state) {
    kiln_err err = {{0}};
    const char *p = kiln_test_tmp_path("vec.safetensors");
    float vals[6] = {0, 1, 2, 3, 4, 5};
    static const uint8_t want1[] = {
        64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34,
        58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100,
        97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0, 0, 0,
        0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};
    static const uint8_t want2[] = {
        72, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34, 58,
        34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 49, 44, 50, 44, 51, 93, 44, 34,
        100, 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 32, 32,
        32, 32, 32, 32, 32, 0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64};
    static const uint8_t want3[] = {40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97,
                                    116, 97, 95, 95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114,
                                    107, 34, 58, 34, 112, 116, 34, 125, 125, 32, 32, 32, 32, 32};
    struct {
        const char *name;
        uint32_t n_dims;
        int64_t shape[4];
        const uint8_t *want;
        size_t len;
    } cases[] = {{"attn.0", 3, {1, 2, 3}, want1, sizeof want1},
                 {"attn0", 4, {1, 1, 2, 3}, want2, sizeof want2},
                 {NULL, 0, {0}, want3, sizeof want3}};
    for (int k = 0; k < 3; k++) {
        kiln_stw *w = kiln_stw_create(p, NULL, &err);
        assert_non_null(w);
        if (!cases[k].name) assert_int_equal(kiln_stw_metadata(w, "framework", "pt", &err), 0);
        else
            assert_int_equal(kiln_stw_declare(w, cases[k].name, KILN_ST_F32, cases[k].n_dims, cases[k].shape, &err), 0);
        assert_int_equal(kiln_stw_begin(w, &err), 0);
        int64_t idx;
        if (cases[k].name) {
            assert_int_equal(kiln_stw_next(w, &idx, &err), 1);
            assert_int_equal(kiln_stw_write(w, vals, sizeof vals, &err), 0);
        }
        assert_int_equal(kiln_stw_next(w, &idx, &err), 0);
        if (kiln_stw_finish(w, &err)) fail_msg("%s", err.msg);
        size_t len;
        uint8_t *got = kiln_test_read_file(p, &len);
        assert_non_null(got);
        assert_int_equal(len, cases[k].len);
        assert_memory_equal(got, cases[k].want, len);
        free(got);
    }
}

static const st_item ALL_DTYPES[] = {
    {"z.f64", KILN_ST_F64, 2, {3, 5}},  {"y.f32", KILN_ST_F32, 1, {7}},     {"x.f16", KILN_ST_F16, 3, {2, 1, 3}},
    {"w.bf16", KILN_ST_BF16, 1, {5}},   {"v.i64", KILN_ST_I64, 0, {0}},     {"u.i32", KILN_ST_I32, 2, {1, 3}},
    {"t.i16", KILN_ST_I16, 1, {3}},     {"s.i8", KILN_ST_I8, 1, {9}},       {"r.u8", KILN_ST_U8, 1, {11}},
    {"q.bool", KILN_ST_BOOL, 1, {2}},   {"p.e4m3", KILN_ST_F8_E4M3, 1, {5}}, {"o.e5m2", KILN_ST_F8_E5M2, 2, {1, 1}},
    {"n.empty", KILN_ST_F32, 2, {0, 4}}, {"m.\xc3\xa9t\xc3\xa9", KILN_ST_F16, 1, {1}},
};
#define N_ALL (int)(sizeof ALL_DTYPES / sizeof ALL_DTYPES[0])

/* Every dtype written, read back by the reader with the same bytes. */
static void test_stw_roundtrip_dtypes(void **state) {
    kiln_err err = {{0}};
    const char *p = kiln_test_tmp_path("dtypes.safetensors");
    if (write_items(p, ALL_DTYPES, N_ALL, NULL, "format", "pt", &err)) fail_msg("%s", err.msg);
    assert_false(kiln_test_exists(path_in(kiln_test_tmpdir(), "dtypes.safetensors.tmp")));
    kiln_st *st = kiln_st_open(p, &err);
    if (!st) fail_msg("%s", err.msg);
    assert_int_equal(st->n_files, 1);
    assert_int_equal(st->files[0].header_len % 8, 0);
    assert_int_equal(st->n_tensors, N_ALL);
    /* file order is the safetensors library's: dtype rank descending, then name */
    static const char *const order[] = {"v.i64", "z.f64", "n.empty", "y.f32", "u.i32", "w.bf16", "m.\xc3\xa9t\xc3\xa9",
                                        "x.f16", "t.i16", "p.e4m3", "o.e5m2", "s.i8", "r.u8", "q.bool"};
    for (int i = 0; i < N_ALL; i++) assert_string_equal(st->tensors[i].name, order[i]);
    for (int k = 0; k < N_ALL; k++) {
        const st_item *it = &ALL_DTYPES[k];
        const kiln_st_tensor *t = kiln_st_find(st, it->name);
        assert_non_null(t);
        assert_int_equal(t->dtype, it->dtype);
        assert_int_equal(t->n_dims, it->n_dims);
        int64_t ne = 1;
        for (uint32_t d = 0; d < it->n_dims; d++) {
            assert_int_equal(t->shape[d], it->shape[d]);
            ne *= it->shape[d];
        }
        assert_int_equal(t->nbytes, (uint64_t)ne * kiln_st_dtype_size(it->dtype));
        assert_int_equal(t->file_offset % kiln_st_dtype_size(it->dtype), 0);
        for (uint64_t j = 0; j < t->nbytes; j++) assert_int_equal(t->data[j], (uint8_t)(j * 7 + (uint64_t)k));
    }
    const char *fmt = NULL;
    size_t len;
    uint8_t *raw = kiln_test_read_file(p, &len);
    assert_non_null(raw);
    fmt = strstr((const char *)raw + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"v.i64\"");
    assert_ptr_equal(fmt, raw + 8); /* metadata first, then the first tensor */
    free(raw);
    kiln_st_close(st);
}

/* huggingface_hub's rule: declaration order, a new shard when the next
 * tensor would pass the limit, an oversized tensor alone in a shard
 * numbered when it is met. */
static void test_stw_shards(void **state) {
    kiln_err err = {{0}};
    const char *dir = kiln_test_tmp_path("shards");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    const st_item items[] = {
        {"a", KILN_ST_F32, 1, {10}},  /* 40 bytes  -> shard 1 */
        {"b", KILN_ST_F32, 1, {10}},  /* 80        -> shard 1 */
        {"c", KILN_ST_F32, 1, {40}},  /* 160 > 100 -> shard 2 (own) */
        {"d", KILN_ST_F32, 1, {10}},  /* 120 > 100 -> shard 3 */
        {"e", KILN_ST_F16, 1, {20}},  /* 80        -> shard 3 */
        {"f", KILN_ST_U8, 1, {25}},   /* 105 > 100 -> shard 4 */
    };
    const char *want[] = {"model-00001-of-00004.safetensors", "model-00001-of-00004.safetensors",
                          "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                          "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
    kiln_stw_opts o = {.shard_size = 100};
    if (write_items(path_in(dir, "model.safetensors"), items, 6, &o, "format", "pt", &err)) fail_msg("%s", err.msg);
    assert_false(kiln_test_exists(path_in(dir, "model.safetensors")));
    assert_int_equal(count_files(dir, ".tmp"), 0);
    json_t *idx = load_json(path_in(dir, "model.safetensors.index.json"));
    json_t *total = json_object_get(json_object_get(idx, "metadata"), "total_size");
    assert_int_equal(json_integer_value(total), 40 + 40 + 160 + 40 + 40 + 25);
    json_t *map = json_object_get(idx, "weight_map");
    assert_int_equal(json_object_size(map), 6);
    for (int i = 0; i < 6; i++) assert_string_equal(json_string_value(json_object_get(map, items[i].name)), want[i]);
    json_decref(idx);
    /* opens through the index, the directory, and as single shards */
    kiln_st *st = kiln_st_open(dir, &err);
    if (!st) fail_msg("%s", err.msg);
    assert_int_equal(st->n_files, 4);
    assert_int_equal(st->n_tensors, 6);
    for (int k = 0; k < 6; k++) {
        const kiln_st_tensor *t = kiln_st_find(st, items[k].name);
        assert_non_null(t);
        for (uint64_t j = 0; j < t->nbytes; j++) assert_int_equal(t->data[j], (uint8_t)(j * 7 + (uint64_t)k));
    }
    kiln_st_close(st);
    /* under the limit: one plain file and no index, as save_pretrained does */
    const char *dir2 = kiln_test_tmp_path("noshard");
    assert_int_equal(mkdir(dir2, 0755) == 0 || errno == EEXIST, 1);
    o.shard_size = 10000;
    if (write_items(path_in(dir2, "model.safetensors"), items, 6, &o, NULL, NULL, &err)) fail_msg("%s", err.msg);
    assert_true(kiln_test_exists(path_in(dir2, "model.safetensors")));
    assert_int_equal(count_files(dir2, ""), 1);
}

static void test_stw_errors(void **state) {
    kiln_err err = {{0}};
    const char *dir = kiln_test_tmp_path("errors");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    const char *p = path_in(dir, "model.safetensors");
    int64_t shape[2] = {2, 2}, idx;
    uint8_t buf[64] = {0};

    assert_null(kiln_stw_create(path_in(dir, "model.bin"), NULL, &err));
    assert_non_null(strstr(err.msg, ".safetensors"));

    /* a short tensor is refused when moving on; nothing is left behind */
    kiln_stw *w = kiln_stw_create(p, NULL, &err);
    assert_int_equal(kiln_stw_declare(w, "a", KILN_ST_F32, 2, shape, &err), 0);
    assert_int_equal(kiln_stw_declare(w, "b", KILN_ST_F32, 2, shape, &err), 1);
    assert_int_equal(kiln_stw_begin(w, &err), 0);
    assert_int_equal(kiln_stw_next(w, &idx, &err), 1);
    assert_int_equal(kiln_stw_write(w, buf, 8, &err), 0);
    assert_int_equal(kiln_stw_next(w, &idx, &err), -1);
    assert_non_null(strstr(err.msg, "only 8 of 16 bytes"));
    kiln_stw_abort(w);
    assert_int_equal(count_files(dir, ""), 0);

    /* overrun */
    w = kiln_stw_create(p, NULL, &err);
    kiln_stw_declare(w, "a", KILN_ST_F32, 2, shape, &err);
    kiln_stw_begin(w, &err);
    kiln_stw_next(w, &idx, &err);
    assert_int_equal(kiln_stw_write(w, buf, 17, &err), -1);
    kiln_stw_abort(w);

    /* finish with a tensor missing: error, and no file */
    w = kiln_stw_create(p, NULL, &err);
    kiln_stw_declare(w, "a", KILN_ST_F32, 2, shape, &err);
    kiln_stw_declare(w, "b", KILN_ST_F32, 2, shape, &err);
    kiln_stw_begin(w, &err);
    kiln_stw_next(w, &idx, &err);
    kiln_stw_write(w, buf, 16, &err);
    assert_int_equal(kiln_stw_finish(w, &err), -1);
    assert_non_null(strstr(err.msg, "never written"));
    assert_int_equal(count_files(dir, ""), 0);

    /* duplicate names, and declarations after begin */
    w = kiln_stw_create(p, NULL, &err);
    kiln_stw_declare(w, "a", KILN_ST_F32, 2, shape, &err);
    kiln_stw_declare(w, "a", KILN_ST_F16, 2, shape, &err);
    assert_int_equal(kiln_stw_begin(w, &err), -1);
    assert_non_null(strstr(err.msg, "declared twice"));
    kiln_stw_abort(w);
    w = kiln_stw_create(p, NULL, &err);
    kiln_stw_begin(w, &err);
    assert_int_equal(kiln_stw_declare(w, "late", KILN_ST_F32, 2, shape, &err), -1);
    kiln_stw_abort(w);
    assert_int_equal(count_files(dir, ""), 0);
}

/* ------------------------------------------------------------------ */
/* SentencePiece                                                       */

/* A minimal protobuf reader, enough for ModelProto. */
typedef struct pb {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *b, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && b->p < b->end; s += 7) {
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return true;
    }
    return false;
}

/* Next field: its number, wire type, and value (varint / fixed32 bits) or
 * sub-buffer (length-delimited). false at the end or on malformed input. */
static bool pb_field(pb *b, uint32_t *field, int *wt, uint64_t *v, pb *sub) {
    uint64_t key;
    if (b->p >= b->end || !pb_varint(b, &key)) return false;
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    if (*wt == 0) return pb_varint(b, v);
    if (*wt == 5) {
        if (b->end - b->p < 4) return false;
        *v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 | (uint64_t)b->p[3] << 24;
        b->p += 4;
        return true;
    }
    if (*wt == 2) {
        if (!pb_varint(b, v) || (uint64_t)(b->end - b->p) < *v) return false;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return true;
    }
    return false;
}

typedef struct spm_model {
    size_t n;
    kiln_spm_piece *pieces; /* strings malloc'd */
    int64_t vocab_size, model_type, byte_fallback;
} spm_model;

static void spm_free(spm_model *m) {
    for (size_t i = 0; i < m->n; i++) free((char *)m->pieces[i].piece);
    free(m->pieces);
}

static bool spm_parse(const uint8_t *buf, size_t len, spm_model *m) {
    memset(m, 0, sizeof *m);
    pb b = {buf, buf + len}, sub, s2;
    uint32_t f, f2;
    int wt, wt2;
    uint64_t v, v2;
    while (pb_field(&b, &f, &wt, &v, &sub)) {
        if (f == 1 && wt == 2) {
            kiln_spm_piece p = {NULL, 0, KILN_SPM_NORMAL};
            while (pb_field(&sub, &f2, &wt2, &v2, &s2)) {
                if (f2 == 1 && wt2 == 2) p.piece = strndup((const char *)s2.p, (size_t)(s2.end - s2.p));
                if (f2 == 2 && wt2 == 5) p.score = kiln_bits_f32((uint32_t)v2);
                if (f2 == 3 && wt2 == 0) p.type = (kiln_spm_type)v2;
            }
            if (sub.p != sub.end || !p.piece) return false;
            m->pieces = realloc(m->pieces, (m->n + 1) * sizeof *m->pieces);
            m->pieces[m->n++] = p;
        } else if (f == 2 && wt == 2) {
            while (pb_field(&sub, &f2, &wt2, &v2, &s2)) {
                if (f2 == 4) m->vocab_size = (int64_t)v2;
                if (f2 == 3) m->model_type = (int64_t)v2;
                if (f2 == 35) m->byte_fallback = (int64_t)v2;
            }
            if (sub.p != sub.end) return false;
        }
    }
    return b.p == b.end;
}

static void test_spm_reencodes_fixture(void **state) {
    SKIP_WITHOUT_SHARED();
    size_t len;
    uint8_t *orig = kiln_test_read_file(kiln_shared_path("models/llama/tokenizer.model"), &len);
    assert_non_null(orig);
    spm_model m;
    assert_true(spm_parse(orig, len, &m));
    assert_int_equal(m.n, 1024);
    uint8_t *out;
    size_t out_len;
    kiln_err err = {{0}};
    assert_int_equal(kiln_spm_encode(m.pieces, m.n, &out, &out_len, &err), 0);
    assert_int_equal(out_len, len);
    assert_memory_equal(out, orig, len);
    free(out);
    free(orig);
    spm_free(&m);
}

/* kiln's own tokenizer.model reader sees the pieces, scores and types we wrote. */
static void test_spm_convert_reader(void **state) {
#ifdef HAVE_CV_SPM
    kiln_tm_config c = config_for(KILN_TM_MIXTRAL);
    c.layers = 1;
    c.vocab = 4000;
    const char *dir = kiln_test_tmp_path("cv-spm");
    write_model(&c, dir);
    size_t len;
    uint8_t *buf = kiln_test_read_file(path_in(dir, "tokenizer.model"), &len);
    assert_non_null(buf);
    spm_model m;
    assert_true(spm_parse(buf, len, &m));
    cv_spm s;
    kiln_err err = {{0}};
    if (cv_spm_parse(buf, len, "tokenizer.model", &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.n, c.vocab);
    for (uint32_t i = 0; i < s.n; i++) {
        assert_int_equal(s.pieces[i].len, strlen(m.pieces[i].piece));
        assert_memory_equal(s.pieces[i].text, m.pieces[i].piece, s.pieces[i].len);
        assert_true(s.pieces[i].score == m.pieces[i].score);
        assert_int_equal(s.pieces[i].type, m.pieces[i].type);
    }
    cv_spm_free(&s);
    spm_free(&m);
    free(buf);
#else
    skip();
#endif
}

/* ------------------------------------------------------------------ */
/* architectures: what transformers defines                            */

enum { D_NONE, D_1, D_H, D_Q, D_KV, D_HD, D_F, D_S, D_E, D_V, D_3H, D_CTX };

typedef struct tpl {
    const char *name; /* %u = layer; a second %u = expert */
    uint8_t d0, d1;
} tpl;

static const tpl ATTN[] = {{"model.layers.%u.self_attn.q_proj.weight", D_Q, D_H},
                           {"model.layers.%u.self_attn.k_proj.weight", D_KV, D_H},
                           {"model.layers.%u.self_attn.v_proj.weight", D_KV, D_H},
                           {"model.layers.%u.self_attn.o_proj.weight", D_H, D_Q},
                           {"model.layers.%u.input_layernorm.weight", D_H, D_NONE},
                           {"model.layers.%u.post_attention_layernorm.weight", D_H, D_NONE},
                           {0}};
static const tpl QKV_BIAS[] = {{"model.layers.%u.self_attn.q_proj.bias", D_Q, D_NONE},
                               {"model.layers.%u.self_attn.k_proj.bias", D_KV, D_NONE},
                               {"model.layers.%u.self_attn.v_proj.bias", D_KV, D_NONE},
                               {0}};
static const tpl QK_NORM[] = {{"model.layers.%u.self_attn.q_norm.weight", D_HD, D_NONE},
                              {"model.layers.%u.self_attn.k_norm.weight", D_HD, D_NONE},
                              {0}};
static const tpl MLP[] = {{"model.layers.%u.mlp.gate_proj.weight", D_F, D_H},
                          {"model.layers.%u.mlp.up_proj.weight", D_F, D_H},
                          {"model.layers.%u.mlp.down_proj.weight", D_H, D_F},
                          {0}};
static const tpl MIXTRAL_GATE[] = {{"model.layers.%u.block_sparse_moe.gate.weight", D_E, D_H}, {0}};
static const tpl MIXTRAL_EXPERT[] = {{"model.layers.%u.block_sparse_moe.experts.%u.w1.weight", D_F, D_H},
                                     {"model.layers.%u.block_sparse_moe.experts.%u.w2.weight", D_H, D_F},
                                     {"model.layers.%u.block_sparse_moe.experts.%u.w3.weight", D_F, D_H},
                                     {0}};
static const tpl QWEN_GATE[] = {{"model.layers.%u.mlp.gate.weight", D_E, D_H}, {0}};
static const tpl QWEN_EXPERT[] = {{"model.layers.%u.mlp.experts.%u.gate_proj.weight", D_F, D_H},
                                  {"model.layers.%u.mlp.experts.%u.up_proj.weight", D_F, D_H},
                                  {"model.layers.%u.mlp.experts.%u.down_proj.weight", D_H, D_F},
                                  {0}};
static const tpl QWEN2_SHARED[] = {{"model.layers.%u.mlp.shared_expert.gate_proj.weight", D_S, D_H},
                                   {"model.layers.%u.mlp.shared_expert.up_proj.weight", D_S, D_H},
                                   {"model.layers.%u.mlp.shared_expert.down_proj.weight", D_H, D_S},
                                   {"model.layers.%u.mlp.shared_expert_gate.weight", D_1, D_H},
                                   {0}};
static const tpl DECODER_TOP[] = {{"model.embed_tokens.weight", D_V, D_H}, {"model.norm.weight", D_H, D_NONE}, {0}};
static const tpl GPT2_TOP[] = {{"transformer.wte.weight", D_V, D_H},
                               {"transformer.wpe.weight", D_CTX, D_H},
                               {"transformer.ln_f.weight", D_H, D_NONE},
                               {"transformer.ln_f.bias", D_H, D_NONE},
                               {0}};
/* GPT-2's Conv1D keeps weights as [in, out] */
static const tpl GPT2_LAYER[] = {{"transformer.h.%u.ln_1.weight", D_H, D_NONE},
                                 {"transformer.h.%u.ln_1.bias", D_H, D_NONE},
                                 {"transformer.h.%u.attn.c_attn.weight", D_H, D_3H},
                                 {"transformer.h.%u.attn.c_attn.bias", D_3H, D_NONE},
                                 {"transformer.h.%u.attn.c_proj.weight", D_H, D_H},
                                 {"transformer.h.%u.attn.c_proj.bias", D_H, D_NONE},
                                 {"transformer.h.%u.ln_2.weight", D_H, D_NONE},
                                 {"transformer.h.%u.ln_2.bias", D_H, D_NONE},
                                 {"transformer.h.%u.mlp.c_fc.weight", D_H, D_F},
                                 {"transformer.h.%u.mlp.c_fc.bias", D_F, D_NONE},
                                 {"transformer.h.%u.mlp.c_proj.weight", D_F, D_H},
                                 {"transformer.h.%u.mlp.c_proj.bias", D_H, D_NONE},
                                 {0}};

typedef struct arch_spec {
    const tpl *top, *layer[4], *expert;
} arch_spec;

static const arch_spec SPECS[KILN_TM_ARCH_COUNT] = {
    [KILN_TM_LLAMA] = {DECODER_TOP, {ATTN, MLP}, NULL},
    [KILN_TM_MISTRAL] = {DECODER_TOP, {ATTN, MLP}, NULL},
    [KILN_TM_QWEN2] = {DECODER_TOP, {ATTN, QKV_BIAS, MLP}, NULL},
    [KILN_TM_QWEN3] = {DECODER_TOP, {ATTN, QK_NORM, MLP}, NULL},
    [KILN_TM_MIXTRAL] = {DECODER_TOP, {ATTN, MIXTRAL_GATE}, MIXTRAL_EXPERT},
    [KILN_TM_QWEN2MOE] = {DECODER_TOP, {ATTN, QKV_BIAS, QWEN_GATE, QWEN2_SHARED}, QWEN_EXPERT},
    [KILN_TM_QWEN3MOE] = {DECODER_TOP, {ATTN, QK_NORM, QWEN_GATE}, QWEN_EXPERT},
    [KILN_TM_GPT2] = {GPT2_TOP, {GPT2_LAYER}, NULL},
};

static int64_t dim(const kiln_tm_config *c, int d) {
    int64_t hd = c->hidden / c->heads;
    switch (d) {
    case D_1: return 1;
    case D_H: return c->hidden;
    case D_Q: return hd * c->heads;
    case D_KV: return hd * c->kv_heads;
    case D_HD: return hd;
    case D_F: return c->ffn;
    case D_S: return (int64_t)c->ffn * c->experts_used;
    case D_E: return c->experts;
    case D_V: return c->vocab;
    case D_3H: return 3 * (int64_t)c->hidden;
    case D_CTX: return c->ctx;
    default: return -1;
    }
}

/* checks one expected tensor against the file; returns 1 */
static int expect(const kiln_st *st, const kiln_tm_config *c, const tpl *t, unsigned l, unsigned e) {
    char name[160];
    /* t->name is one of the "%u" templates above, all literals in this file */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, t->name, l, e);
#pragma GCC diagnostic pop
    const kiln_st_tensor *x = kiln_st_find(st, name);
    if (!x) fail_msg("%s: missing tensor %s", kiln_tm_arch_name(c->arch), name);
    uint32_t nd = t->d1 == D_NONE ? 1 : 2;
    if (x->n_dims != nd || x->shape[0] != dim(c, t->d0) || (nd == 2 && x->shape[1] != dim(c, t->d1)))
        fail_msg("%s: %s has shape [%lld, %lld], expected [%lld, %lld]", kiln_tm_arch_name(c->arch), name,
                 (long long)x->shape[0], (long long)(x->n_dims > 1 ? x->shape[1] : 0), (long long)dim(c, t->d0),
                 (long long)(nd == 2 ? dim(c, t->d1) : 0));
    if (x->dtype != c->dtype) fail_msg("%s: dtype %s", name, kiln_st_dtype_name(x->dtype));
    return 1;
}

static void check_tensors(const char *dir, const kiln_tm_config *c) {
    kiln_err err = {{0}};
    kiln_st *st = kiln_st_open(dir, &err);
    if (!st) fail_msg("%s", err.msg);
    const arch_spec *s = &SPECS[c->arch];
    uint64_t n = 0;
    for (const tpl *t = s->top; t->name; t++) n += (uint64_t)expect(st, c, t, 0, 0);
    static const tpl LM_HEAD = {"lm_head.weight", D_V, D_H};
    if (!c->tie_embeddings) n += (uint64_t)expect(st, c, &LM_HEAD, 0, 0);
    else assert_null(kiln_st_find(st, "lm_head.weight"));
    for (unsigned l = 0; l < c->layers; l++) {
        for (int g = 0; g < 4 && s->layer[g]; g++)
            for (const tpl *t = s->layer[g]; t->name; t++) n += (uint64_t)expect(st, c, t, l, 0);
        for (unsigned e = 0; s->expert && e < c->experts; e++)
            for (const tpl *t = s->expert; t->name; t++) n += (uint64_t)expect(st, c, t, l, e);
    }
    if (st->n_tensors != n) fail_msg("%s: %llu tensors, expected %llu", kiln_tm_arch_name(c->arch),
                                     (unsigned long long)st->n_tensors, (unsigned long long)n);
    kiln_st_close(st);
}

typedef struct key_int {
    const char *key;
    int64_t want;
} key_int;

/* config.json: the keys kiln's converter and llama.cpp's read, with the
 * values of the configuration */
static void check_config(const char *dir, const kiln_tm_config *c) {
    json_t *j = load_json(path_in(dir, "config.json"));
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        kiln_tm_arch_class(c->arch));
    const char *dt = c->dtype == KILN_ST_BF16 ? "bfloat16" : c->dtype == KILN_ST_F16 ? "float16" : "float32";
    assert_string_equal(json_string_value(json_object_get(j, "torch_dtype")), dt);
    assert_true(json_is_string(json_object_get(j, "model_type")));
    assert_int_equal(json_integer_value(json_object_get(j, "vocab_size")), c->vocab);
    assert_int_equal(json_is_true(json_object_get(j, "tie_word_embeddings")), c->tie_embeddings);
    assert_true(json_is_integer(json_object_get(j, "bos_token_id")));
    assert_true(json_is_integer(json_object_get(j, "eos_token_id")));
    key_int ints[16];
    int n = 0;
    if (c->arch == KILN_TM_GPT2) {
        ints[n++] = (key_int){"n_embd", c->hidden};
        ints[n++] = (key_int){"n_layer", c->layers};
        ints[n++] = (key_int){"n_head", c->heads};
        ints[n++] = (key_int){"n_positions", c->ctx};
        ints[n++] = (key_int){"n_ctx", c->ctx};
        ints[n++] = (key_int){"n_inner", c->ffn};
        assert_true(json_is_real(json_object_get(j, "layer_norm_epsilon")));
    } else {
        ints[n++] = (key_int){"hidden_size", c->hidden};
        ints[n++] = (key_int){"num_hidden_layers", c->layers};
        ints[n++] = (key_int){"num_attention_heads", c->heads};
        ints[n++] = (key_int){"num_key_value_heads", c->kv_heads};
        ints[n++] = (key_int){"max_position_embeddings", c->ctx};
        assert_true(json_is_real(json_object_get(j, "rms_norm_eps")));
        assert_true(json_is_real(json_object_get(j, "rope_theta")));
        bool qwen_moe = c->arch == KILN_TM_QWEN2MOE || c->arch == KILN_TM_QWEN3MOE;
        ints[n++] = (key_int){"intermediate_size", qwen_moe ? (int64_t)c->ffn * c->experts_used : c->ffn};
        if (c->arch == KILN_TM_MIXTRAL) {
            ints[n++] = (key_int){"num_local_experts", c->experts};
            ints[n++] = (key_int){"num_experts_per_tok", c->experts_used};
        }
        if (qwen_moe) {
            ints[n++] = (key_int){"num_experts", c->experts};
            ints[n++] = (key_int){"num_experts_per_tok", c->experts_used};
            ints[n++] = (key_int){"moe_intermediate_size", c->ffn};
            assert_true(json_is_boolean(json_object_get(j, "norm_topk_prob")));
        }
        if (c->arch == KILN_TM_QWEN2MOE)
            ints[n++] = (key_int){"shared_expert_intermediate_size", (int64_t)c->ffn * c->experts_used};
        if (c->arch == KILN_TM_QWEN3 || c->arch == KILN_TM_QWEN3MOE)
            ints[n++] = (key_int){"head_dim", c->hidden / c->heads};
    }
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(j, ints[i].key);
        if (!json_is_integer(v) || json_integer_value(v) != ints[i].want)
            fail_msg("%s config.json: %s should be %lld", kiln_tm_arch_name(c->arch), ints[i].key,
                     (long long)ints[i].want);
    }
    json_t *g = load_json(path_in(dir, "generation_config.json"));
    assert_true(json_equal(json_object_get(g, "eos_token_id"), json_object_get(j, "eos_token_id")));
    json_decref(g);
    json_decref(j);
}

/* The number of UTF-8 characters of s. */
static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xc0) != 0x80;
    return n;
}

/* tokenizer.model: Llama's layout, unique pieces, every word piece reachable
 * by merging its last character onto a shorter piece. */
static void check_spm(const char *dir, const kiln_tm_config *c) {
    size_t len;
    uint8_t *buf = kiln_test_read_file(path_in(dir, "tokenizer.model"), &len);
    assert_non_null(buf);
    spm_model m;
    assert_true(spm_parse(buf, len, &m));
    assert_int_equal(m.n, c->vocab);
    assert_int_equal(m.vocab_size, c->vocab);
    assert_int_equal(m.model_type, 2); /* BPE */
    assert_int_equal(m.byte_fallback, 1);
    assert_string_equal(m.pieces[0].piece, "<unk>");
    assert_int_equal(m.pieces[0].type, KILN_SPM_UNKNOWN);
    assert_string_equal(m.pieces[1].piece, "<s>");
    assert_int_equal(m.pieces[1].type, KILN_SPM_CONTROL);
    assert_string_equal(m.pieces[2].piece, "</s>");
    assert_int_equal(m.pieces[2].type, KILN_SPM_CONTROL);
    for (int b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        assert_string_equal(m.pieces[3 + b].piece, want);
        assert_int_equal(m.pieces[3 + b].type, KILN_SPM_BYTE);
    }
    json_t *seen = json_object();
    for (size_t i = 0; i < m.n; i++) {
        if (json_object_get(seen, m.pieces[i].piece)) fail_msg("duplicate piece '%s'", m.pieces[i].piece);
        json_object_set_new(seen, m.pieces[i].piece, json_true());
    }
    for (size_t i = 259; i < m.n; i++) {
        assert_int_equal(m.pieces[i].type, KILN_SPM_NORMAL);
        const char *p = m.pieces[i].piece;
        if (utf8_chars(p) < 3) continue;
        char left[64];
        snprintf(left, sizeof left, "%.*s", (int)strlen(p) - 1, p); /* pieces end in ASCII */
        if (!json_object_get(seen, left)) fail_msg("piece '%s' cannot be reached: no '%s'", p, left);
    }
    json_decref(seen);
    spm_free(&m);
    free(buf);
}

/* tokenizer.json: ids 0..vocab-1 each used once (model vocab + added
 * tokens), every merge joins two tokens into a third with a larger id. */
static void check_bpe(const char *dir, const kiln_tm_config *c) {
    json_t *j = load_json(path_in(dir, "tokenizer.json"));
    json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
    assert_string_equal(json_string_value(json_object_get(model, "type")), "BPE");
    assert_true(json_is_object(json_object_get(j, "pre_tokenizer")));
    uint8_t *used = calloc(c->vocab, 1);
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_integer_value(v);
        assert_true(id >= 0 && id < c->vocab);
        assert_int_equal(used[id]++, 0);
    }
    size_t i;
    json_array_foreach(json_object_get(j, "added_tokens"), i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        assert_true(id >= 0 && id < c->vocab);
        json_t *in_vocab = json_object_get(vocab, json_string_value(json_object_get(v, "content")));
        if (!in_vocab) assert_int_equal(used[id]++, 0);
        else assert_int_equal(json_integer_value(in_vocab), id);
        assert_true(json_is_true(json_object_get(v, "special")));
    }
    for (uint32_t t = 0; t < c->vocab; t++)
        if (used[t] != 1) fail_msg("token id %u is used %d times", t, used[t]);
    free(used);
    json_t *merges = json_object_get(model, "merges");
    assert_true(json_array_size(merges) > 0);
    json_array_foreach(merges, i, v) {
        const char *m = json_string_value(v), *sp = strchr(m, ' ');
        assert_non_null(sp);
        char a[64], b[64], ab[128];
        snprintf(a, sizeof a, "%.*s", (int)(sp - m), m);
        snprintf(b, sizeof b, "%s", sp + 1);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        json_t *ia = json_object_get(vocab, a), *ib = json_object_get(vocab, b), *iab = json_object_get(vocab, ab);
        if (!ia || !ib || !iab) fail_msg("merge '%s' joins or makes an unknown token", m);
        assert_true(json_integer_value(iab) > json_integer_value(ia));
        assert_true(json_integer_value(iab) > json_integer_value(ib));
    }
    /* eos is the end-of-text token */
    json_t *cfg = load_json(path_in(dir, "config.json"));
    json_int_t eos = json_integer_value(json_object_get(cfg, "eos_token_id"));
    bool found = false;
    json_array_foreach(json_object_get(j, "added_tokens"), i, v) found |=
        json_integer_value(json_object_get(v, "id")) == eos &&
        !strcmp(json_string_value(json_object_get(v, "content")), "<|endoftext|>");
    assert_true(found);
    json_decref(cfg);
    json_decref(j);
    assert_true(kiln_test_exists(path_in(dir, "vocab.json")));
    assert_true(kiln_test_exists(path_in(dir, "merges.txt")));
}

static void check_arch(kiln_tm_arch a, bool tie, kiln_st_dtype dtype) {
    kiln_tm_config c = config_for(a);
    c.tie_embeddings |= tie;
    c.dtype = dtype;
    char name[64];
    snprintf(name, sizeof name, "arch-%s", kiln_tm_arch_name(a));
    const char *dir = kiln_test_tmp_path(name);
    write_model(&c, dir);
    check_tensors(dir, &c);
    check_config(dir, &c);
    if (a == KILN_TM_LLAMA || a == KILN_TM_MISTRAL || a == KILN_TM_MIXTRAL) {
        check_spm(dir, &c);
        assert_false(kiln_test_exists(path_in(dir, "tokenizer.json")));
    } else {
        check_bpe(dir, &c);
        assert_false(kiln_test_exists(path_in(dir, "tokenizer.model")));
    }
    json_t *tc = load_json(path_in(dir, "tokenizer_config.json"));
    assert_true(json_object_size(json_object_get(tc, "added_tokens_decoder")) > 0);
    json_decref(tc);
    assert_int_equal(count_files(dir, ".tmp"), 0);
}

static void test_arch_llama(void **s) { check_arch(KILN_TM_LLAMA, false, KILN_ST_BF16); }
static void test_arch_mistral(void **s) { check_arch(KILN_TM_MISTRAL, false, KILN_ST_F16); }
static void test_arch_qwen2(void **s) { check_arch(KILN_TM_QWEN2, true, KILN_ST_BF16); }
static void test_arch_qwen3(void **s) { check_arch(KILN_TM_QWEN3, false, KILN_ST_BF16); }
static void test_arch_mixtral(void **s) { check_arch(KILN_TM_MIXTRAL, false, KILN_ST_BF16); }
static void test_arch_qwen2moe(void **s) { check_arch(KILN_TM_QWEN2MOE, false, KILN_ST_BF16); }
static void test_arch_qwen3moe(void **s) { check_arch(KILN_TM_QWEN3MOE, true, KILN_ST_F32); }
static void test_arch_gpt2(void **s) { check_arch(KILN_TM_GPT2, true, KILN_ST_BF16); }

/* Real vocabulary sizes: the piece generator runs past its English words
 * into syllable words and stays unique and reachable. */
static void test_big_vocab(void **state) {
    const kiln_tm_arch archs[3] = {KILN_TM_LLAMA, KILN_TM_QWEN2, KILN_TM_GPT2};
    const uint32_t vocab[3] = {32000, 32000, 50257};
    for (int i = 0; i < 3; i++) {
        kiln_tm_config c = config_for(archs[i]);
        c.layers = 1;
        c.hidden = 64;
        c.heads = c.kv_heads = 2;
        c.ffn = 64;
        c.vocab = vocab[i];
        const char *dir = kiln_test_tmp_path("bigvocab");
        write_model(&c, dir);
        if (i == 0) check_spm(dir, &c);
        else check_bpe(dir, &c);
        check_tensors(dir, &c);
    }
}

/* ------------------------------------------------------------------ */
/* the fixtures in ../shared                                           */

/* The first 8 + header_len bytes of a safetensors file. */
static uint8_t *header_bytes(const char *path, size_t *len) {
    size_t n;
    uint8_t *b = kiln_test_read_file(path, &n);
    if (!b || n < 8) fail_msg("cannot read %s", path);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)b[i] << (8 * i);
    *len = (size_t)(8 + h);
    return b;
}

/* Our JSON file has the fixture's keys with equal values (extra keys are
 * allowed only when `exact` is false). */
static void same_json(const char *fixture_dir, const char *dir, const char *file, bool exact) {
    json_t *want = load_json(path_in(fixture_dir, file)), *got = load_json(path_in(dir, file));
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        json_t *g = json_object_get(got, k);
        if (!g || !json_equal(g, v)) {
            char *ws = json_dumps(v, JSON_ENCODE_ANY), *gs = g ? json_dumps(g, JSON_ENCODE_ANY) : NULL;
            fail_msg("%s/%s: %s is %s, fixture has %s", dir, file, k, gs ? gs : "missing", ws);
        }
    }
    if (exact)
        json_object_foreach(got, k, v) if (!json_object_get(want, k)) fail_msg("%s/%s: extra key %s", dir, file, k);
    json_decref(want);
    json_decref(got);
}

static void check_fixture(const char *fixture, const kiln_tm_config *c, const char *const *files, int n_files) {
    const char *fdir = kiln_shared_path(fixture);
    char name[64];
    snprintf(name, sizeof name, "fixture-%s", kiln_tm_arch_name(c->arch));
    const char *dir = kiln_test_tmp_path(name);
    write_model(c, dir);
    for (int i = 0; i < n_files; i++) {
        size_t a, b;
        uint8_t *want = header_bytes(path_in(fdir, files[i]), &a), *got = header_bytes(path_in(dir, files[i]), &b);
        if (a != b || memcmp(want, got, a)) fail_msg("%s: header differs from the fixture's", path_in(dir, files[i]));
        free(want);
        free(got);
    }
    if (n_files > 1) same_json(fdir, dir, "model.safetensors.index.json", true);
    static const char *const json_files[] = {"config.json", "generation_config.json", "tokenizer_config.json",
                                             "special_tokens_map.json"};
    for (int i = 0; i < 4; i++) same_json(fdir, dir, json_files[i], true);
}

static void test_fixture_llama(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_tm_config c = config_for(KILN_TM_LLAMA);
    c.layers = 4;
    c.vocab = 1024;
    c.shard_size = 3000000; /* save_pretrained(max_shard_size="3MB") */
    const char *const files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    check_fixture("models/llama", &c, files, 2);
}

static void test_fixture_mixtral(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_tm_config c = config_for(KILN_TM_MIXTRAL);
    c.layers = 4;
    c.vocab = 1024;
    const char *const files[] = {"model.safetensors"};
    check_fixture("models/mixtral", &c, files, 1);
}

static void test_fixture_qwen2(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_tm_config c = config_for(KILN_TM_QWEN2);
    c.vocab = 1027;
    c.ctx = 32768;
    c.dtype = KILN_ST_F16;
    c.tie_embeddings = true;
    const char *const files[] = {"model.safetensors"};
    check_fixture("models/qwen2", &c, files, 1);
    /* tokenizer.json: the fixture's structure, with our own vocabulary */
    json_t *want = load_json(kiln_shared_path("models/qwen2/tokenizer.json"));
    json_t *got = load_json(path_in(kiln_test_tmp_path("fixture-qwen2"), "tokenizer.json"));
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        if (!strcmp(k, "model")) continue;
        if (!json_equal(v, json_object_get(got, k))) fail_msg("tokenizer.json: %s differs from the fixture's", k);
    }
    json_object_foreach(json_object_get(want, "model"), k, v) {
        json_t *g = json_object_get(json_object_get(got, "model"), k);
        if (!strcmp(k, "vocab") || !strcmp(k, "merges")) assert_int_equal(json_typeof(g), json_typeof(v));
        else if (!json_equal(v, g)) fail_msg("tokenizer.json: model.%s differs from the fixture's", k);
    }
    /* the 256 byte tokens are the same ids */
    size_t n = 0;
    json_object_foreach(json_object_get(json_object_get(want, "model"), "vocab"), k, v) {
        if (json_integer_value(v) >= 256) continue;
        assert_true(json_equal(v, json_object_get(json_object_get(json_object_get(got, "model"), "vocab"), k)));
        n++;
    }
    assert_int_equal(n, 256);
    json_decref(want);
    json_decref(got);
}

/* ------------------------------------------------------------------ */
/* weights                                                             */

/* Every file of dir a equals the file of the same name in b. */
static void same_dirs(const char *a, const char *b) {
    DIR *d = opendir(a);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t la, lb;
        uint8_t *x = kiln_test_read_file(path_in(a, e->d_name), &la), *y = kiln_test_read_file(path_in(b, e->d_name), &lb);
        if (!x || !y || la != lb || memcmp(x, y, la)) fail_msg("%s differs between %s and %s", e->d_name, a, b);
        free(x);
        free(y);
        n++;
    }
    closedir(d);
    assert_int_equal(n, count_files(b, ""));
}

static void test_deterministic(void **state) {
    kiln_tm_config c = config_for(KILN_TM_QWEN2MOE);
    c.shard_size = 1000000;
    c.seed = 42;
    write_model(&c, kiln_test_tmp_path("det-a"));
    write_model(&c, kiln_test_tmp_path("det-b"));
    same_dirs(kiln_test_tmp_path("det-a"), kiln_test_tmp_path("det-b"));
    assert_true(count_files(kiln_test_tmp_path("det-a"), "-of-") > 1);
    /* sharding does not change a single value */
    c.shard_size = 0;
    write_model(&c, kiln_test_tmp_path("det-c"));
    kiln_err err = {{0}};
    kiln_st *a = kiln_st_open(kiln_test_tmp_path("det-a"), &err), *b = kiln_st_open(kiln_test_tmp_path("det-c"), &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->n_tensors, b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const kiln_st_tensor *x = &a->tensors[i], *y = kiln_st_find(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    kiln_st_close(b);
    /* another seed, other values */
    c.seed = 43;
    write_model(&c, kiln_test_tmp_path("det-d"));
    b = kiln_st_open(kiln_test_tmp_path("det-d"), &err);
    const kiln_st_tensor *x = kiln_st_find(a, "model.layers.0.self_attn.q_proj.weight"),
                         *y = kiln_st_find(b, "model.layers.0.self_attn.q_proj.weight");
    assert_true(memcmp(x->data, y->data, x->nbytes) != 0);
    kiln_st_close(a);
    kiln_st_close(b);
}

static float *tensor_f32(const kiln_st *st, const char *name, int64_t *n) {
    const kiln_st_tensor *t = kiln_st_find(st, name);
    if (!t) fail_msg("no tensor %s", name);
    float *f = malloc((size_t)t->nelements * sizeof *f);
    assert_int_equal(kiln_st_to_f32(t->dtype, t->data, f, t->nelements), 0);
    *n = t->nelements;
    return f;
}

static void moments(const float *x, int64_t n, double *mean, double *sd, double *kurt) {
    double m = 0, m2 = 0, m4 = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - m;
        m2 += d * d;
        m4 += d * d * d * d;
    }
    m2 /= (double)n;
    m4 /= (double)n;
    *mean = m;
    *sd = sqrt(m2);
    *kurt = m4 / (m2 * m2);
}

/* Largest over median of the per-input-channel RMS of a [rows, cols]
 * Linear weight. */
static double outlier_ratio(const float *x, int64_t rows, int64_t cols) {
    double *rms = calloc((size_t)cols, sizeof *rms), mx = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) rms[k] += (double)x[r * cols + k] * x[r * cols + k];
    for (int64_t k = 0; k < cols; k++) mx = rms[k] > mx ? rms[k] : mx;
    /* median by counting: the smallest value with at least half below or equal */
    double med = mx;
    for (int64_t k = 0; k < cols; k++) {
        int64_t le = 0;
        for (int64_t q = 0; q < cols; q++) le += rms[q] <= rms[k];
        if (le >= cols / 2 && rms[k] < med) med = rms[k];
    }
    free(rms);
    return sqrt(mx / med);
}

static void test_weights_realistic(void **state) {
    kiln_tm_config c = config_for(KILN_TM_QWEN2);
    c.layers = 4;
    const char *dir = kiln_test_tmp_path("weights");
    write_model(&c, dir);
    kiln_err err = {{0}};
    kiln_st *st = kiln_st_open(dir, &err);
    assert_non_null(st);
    double mean, sd, kurt;
    int64_t n;
    char name[128];
    /* down_proj never has outlier channels: the bare Student-t */
    float *x = tensor_f32(st, "model.layers.0.mlp.down_proj.weight", &n);
    moments(x, n, &mean, &sd, &kurt);
    assert_true(fabs(mean) < 0.05 * sd);
    assert_true(fabs(sd * sqrt((double)c.ffn) - 1.0) < 0.1); /* scale 1/sqrt(fan_in) */
    if (!(kurt > 5.0)) fail_msg("kurtosis %.2f, want a heavy tail (> 5)", kurt);
    free(x);
    /* about half of the matrices reading the residual stream have outlier channels */
    int with = 0, total = 0;
    const char *const mats[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                                "mlp.up_proj"};
    for (unsigned l = 0; l < c.layers; l++)
        for (int m = 0; m < 5; m++) {
            snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, mats[m]);
            const kiln_st_tensor *t = kiln_st_find(st, name);
            x = tensor_f32(st, name, &n);
            double r = outlier_ratio(x, t->shape[0], t->shape[1]);
            with += r > 8;
            total++;
            /* 10-50x channels, or none: a t(4) column alone does not go past 4x */
            if (!(r < 100 && (r > 8 || r < 4))) fail_msg("%s: channel RMS max/median %.1f", name, r);
            free(x);
        }
    if (with < total / 5 || with > total * 4 / 5) fail_msg("%d of %d matrices have outlier channels", with, total);
    /* norms near 1, biases small */
    x = tensor_f32(st, "model.layers.1.input_layernorm.weight", &n);
    moments(x, n, &mean, &sd, &kurt);
    assert_true(fabs(mean - 1.0) < 0.01 && sd > 0.005 && sd < 0.05);
    free(x);
    x = tensor_f32(st, "model.layers.1.self_attn.k_proj.bias", &n);
    moments(x, n, &mean, &sd, &kurt);
    assert_true(fabs(mean) < 0.01 && sd > 0.005 && sd < 0.05);
    free(x);
    kiln_st_close(st);
}

/* f32 files hold kiln_tm_values() exactly; bf16 files hold them rounded. */
static void test_values_exact(void **state) {
    kiln_tm_config c = config_for(KILN_TM_GPT2);
    c.layers = 1;
    c.dtype = KILN_ST_F32;
    write_model(&c, kiln_test_tmp_path("exact-f32"));
    c.dtype = KILN_ST_BF16;
    write_model(&c, kiln_test_tmp_path("exact-bf16"));
    kiln_tm_tensor *plan;
    size_t n;
    kiln_err err = {{0}};
    assert_int_equal(kiln_tm_plan(&c, &plan, &n, &err), 0);
    kiln_st *f = kiln_st_open(kiln_test_tmp_path("exact-f32"), &err), *b = kiln_st_open(kiln_test_tmp_path("exact-bf16"), &err);
    assert_non_null(f);
    assert_non_null(b);
    assert_int_equal(f->n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        const kiln_st_tensor *tf = kiln_st_find(f, plan[i].name), *tb = kiln_st_find(b, plan[i].name);
        float *v = malloc((size_t)tf->nelements * sizeof *v);
        assert_int_equal(kiln_tm_values(&c, &plan[i], 0, (uint64_t)tf->nelements, v, &err), 0);
        assert_memory_equal(tf->data, v, tf->nbytes);
        for (int64_t k = 0; k < tb->nelements; k++) {
            uint16_t h = (uint16_t)(tb->data[2 * k] | tb->data[2 * k + 1] << 8);
            if (h != kiln_fp32_to_bf16(v[k])) fail_msg("%s[%lld]", plan[i].name, (long long)k);
        }
        /* any sub-range gives the same values (chunking cannot matter) */
        if (tf->nelements > 70000) {
            float w[100];
            assert_int_equal(kiln_tm_values(&c, &plan[i], 65500, 100, w, &err), 0);
            assert_memory_equal(w, v + 65500, sizeof w);
        }
        free(v);
    }
    free(plan);
    kiln_st_close(f);
    kiln_st_close(b);
}

/* ------------------------------------------------------------------ */
/* the directory                                                       */

static void test_overwrite(void **state) {
    const char *dir = kiln_test_tmp_path("overwrite");
    kiln_tm_config c = config_for(KILN_TM_LLAMA);
    kiln_err err = {{0}};
    assert_int_equal(kiln_tm_write(&c, dir, NULL, NULL, &err), 0);
    assert_int_equal(kiln_tm_write(&c, dir, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "--force"));
    /* forced, sharded, other tokenizer: no stale file survives */
    kiln_tm_config q = config_for(KILN_TM_QWEN3);
    q.shard_size = 500000;
    kiln_tm_opts o = {.force = true};
    kiln_tm_summary sum;
    assert_int_equal(kiln_tm_write(&q, dir, &o, &sum, &err), 0);
    assert_true(sum.n_files > 1);
    assert_int_equal(count_files(dir, "-of-"), (int)sum.n_files);
    assert_false(kiln_test_exists(path_in(dir, "model.safetensors")));
    assert_false(kiln_test_exists(path_in(dir, "tokenizer.model")));
    check_tensors(dir, &q);
    /* back to one file */
    assert_int_equal(kiln_tm_write(&c, dir, &o, &sum, &err), 0);
    assert_int_equal(sum.n_files, 1);
    assert_int_equal(count_files(dir, "-of-"), 0);
    assert_false(kiln_test_exists(path_in(dir, "model.safetensors.index.json")));
    assert_false(kiln_test_exists(path_in(dir, "tokenizer.json")));
    check_tensors(dir, &c);
}

static void test_config_checks(void **state) {
    kiln_err err = {{0}};
    kiln_tm_config c = config_for(KILN_TM_LLAMA);
    c.heads = 3;
    assert_int_equal(kiln_tm_check(&c, &err), -1);
    c = config_for(KILN_TM_LLAMA);
    c.experts = 4;
    assert_int_equal(kiln_tm_check(&c, &err), -1);
    c = config_for(KILN_TM_MIXTRAL);
    c.experts_used = 5;
    assert_int_equal(kiln_tm_check(&c, &err), -1);
    c = config_for(KILN_TM_QWEN2);
    c.vocab = 200;
    assert_int_equal(kiln_tm_check(&c, &err), -1);
    c = config_for(KILN_TM_GPT2);
    c.kv_heads = 2;
    assert_int_equal(kiln_tm_check(&c, &err), -1);
    assert_int_equal(kiln_tm_defaults(&c, KILN_TM_LLAMA, "7b", &err), -1);
    assert_int_equal(kiln_tm_defaults(&c, KILN_TM_LLAMA, "1b", &err), 0);
    assert_int_equal(kiln_tm_check(&c, &err), 0);
    kiln_tm_arch a;
    assert_int_equal(kiln_tm_arch_parse("Qwen2MoeForCausalLM", &a), 0);
    assert_int_equal(a, KILN_TM_QWEN2MOE);
    assert_int_equal(kiln_tm_arch_parse("qwen3_moe", &a), 0);
    assert_int_equal(a, KILN_TM_QWEN3MOE);
    assert_int_equal(kiln_tm_arch_parse("bert", &a), -1);
    /* the 1b preset is the README's llama-bench shape: 1.10 B parameters */
    kiln_tm_tensor *plan;
    size_t n;
    assert_int_equal(kiln_tm_plan(&c, &plan, &n, &err), 0);
    uint64_t params = 0;
    for (size_t i = 0; i < n; i++)
        params += (uint64_t)plan[i].shape[0] * (plan[i].n_dims == 2 ? (uint64_t)plan[i].shape[1] : 1);
    assert_true(params > 1095000000ull && params < 1105000000ull);
    free(plan);
}

/* ------------------------------------------------------------------ */
/* full-shape DeepSeek checkpoints (testmodel/deepseek.c)              */

static const kiln_tm_ds_tensor *ds_find(const kiln_tm_ds_tensor *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static void ds_expect(const kiln_tm_ds_tensor *t, size_t n, const char *name, kiln_st_dtype dtype, int64_t d0,
                      int64_t d1) {
    const kiln_tm_ds_tensor *x = ds_find(t, n, name);
    if (!x) fail_msg("%s: missing", name);
    assert_int_equal(x->dtype, dtype);
    assert_int_equal(x->n_dims, d1 ? 2 : 1);
    assert_int_equal(x->shape[0], d0);
    if (d1) assert_int_equal(x->shape[1], d1);
}

/* The full shapes against the published sizes (DeepSeek-V3: 671 B
 * parameters without its MTP layer; V4-Flash: 284 B) and a few tensors
 * spelled out from the checkpoints' index files. */
static void test_deepseek_plan(void **state) {
    kiln_err err = {{0}};
    kiln_tm_ds_config c;
    kiln_tm_ds_tensor *t;
    size_t n;
    kiln_tm_summary sum = {0};
    kiln_tm_ds_defaults(&c, KILN_TM_DS_V3);
    assert_int_equal(kiln_tm_ds_plan(&c, &t, &n, &err), 0);
    kiln_tm_ds_totals(t, n, &sum);
    assert_true(sum.n_params > 670500000000ull && sum.n_params < 671500000000ull);
    assert_int_equal(sum.largest_tensor_bytes, 129280ull * 7168 * 2); /* the BF16 embeddings */
    ds_expect(t, n, "model.layers.2.mlp.gate_proj.weight", KILN_ST_F8_E4M3, 18432, 7168);
    ds_expect(t, n, "model.layers.2.mlp.gate_proj.weight_scale_inv", KILN_ST_F32, 144, 56);
    assert_null(ds_find(t, n, "model.layers.3.mlp.gate_proj.weight"));
    ds_expect(t, n, "model.layers.60.mlp.experts.255.down_proj.weight", KILN_ST_F8_E4M3, 7168, 2048);
    ds_expect(t, n, "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv", KILN_ST_F32, 56, 16);
    ds_expect(t, n, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight_scale_inv", KILN_ST_F32, 5, 56);
    ds_expect(t, n, "model.layers.3.mlp.gate.e_score_correction_bias", KILN_ST_F32, 256, 0);
    assert_null(ds_find(t, n, "model.layers.61.input_layernorm.weight"));
    free(t);

    kiln_tm_ds_defaults(&c, KILN_TM_DS_V4);
    assert_int_equal(kiln_tm_ds_plan(&c, &t, &n, &err), 0);
    kiln_tm_ds_totals(t, n, &sum);
    assert_true(sum.n_params > 284000000000ull && sum.n_params < 284700000000ull);
    ds_expect(t, n, "layers.42.ffn.experts.255.w2.weight", KILN_ST_I8, 4096, 1024);
    ds_expect(t, n, "layers.42.ffn.experts.255.w2.scale", KILN_ST_F8_E8M0, 4096, 64);
    ds_expect(t, n, "layers.0.attn.wq_b.scale", KILN_ST_F8_E8M0, 256, 8);
    ds_expect(t, n, "layers.2.ffn.gate.tid2eid", KILN_ST_I64, 129280, 6);
    assert_null(ds_find(t, n, "layers.3.ffn.gate.tid2eid"));
    ds_expect(t, n, "layers.3.ffn.gate.bias", KILN_ST_F32, 256, 0);
    assert_null(ds_find(t, n, "layers.1.attn.compressor.ape"));
    ds_expect(t, n, "layers.2.attn.compressor.ape", KILN_ST_F32, 4, 1024); /* ratio 4: twice as wide */
    ds_expect(t, n, "layers.2.attn.indexer.wq_b.weight", KILN_ST_F8_E4M3, 8192, 1024);
    ds_expect(t, n, "layers.3.attn.compressor.ape", KILN_ST_F32, 128, 512);
    assert_null(ds_find(t, n, "layers.3.attn.indexer.wq_b.weight"));
    ds_expect(t, n, "layers.0.hc_attn_fn", KILN_ST_F32, 24, 16384);
    ds_expect(t, n, "hc_head_fn", KILN_ST_F32, 4, 16384);
    free(t);

    c.experts = 257;
    assert_int_equal(kiln_tm_ds_check(&c, &err), -1);
    kiln_tm_ds_defaults(&c, KILN_TM_DS_V3);
    c.layers = 62;
    assert_int_equal(kiln_tm_ds_check(&c, &err), -1);
    c.layers = 1;
    c.vocab = 100; /* too small for kiln's tokenizer */
    assert_int_equal(kiln_tm_ds_check(&c, &err), -1);
    kiln_tm_ds_arch a;
    assert_int_equal(kiln_tm_ds_arch_parse("DeepseekV4ForCausalLM", &a), 0);
    assert_int_equal(a, KILN_TM_DS_V4);
    assert_int_equal(kiln_tm_ds_arch_parse("deepseek2", &a), 0);
    assert_int_equal(a, KILN_TM_DS_V3);
}

/* kiln_stw_skip: holes read back as zeros, between written bytes and at
 * the end of the file, and the file has its full size. */
static void test_stw_holes(void **state) {
    const char *p = kiln_test_tmp_path("holes.safetensors");
    kiln_err err = {{0}};
    kiln_stw *w = kiln_stw_create(p, NULL, &err);
    assert_non_null(w);
    int64_t a_shape[1] = {16}, b_shape[1] = {1 << 20};
    assert_int_equal(kiln_stw_declare(w, "a", KILN_ST_U8, 1, a_shape, &err), 0);
    assert_int_equal(kiln_stw_declare(w, "b", KILN_ST_U8, 1, b_shape, &err), 1);
    assert_int_equal(kiln_stw_begin(w, &err), 0);
    int64_t idx;
    const uint8_t head[4] = {1, 2, 3, 4}, tail[4] = {5, 6, 7, 8};
    assert_int_equal(kiln_stw_next(w, &idx, &err), 1);
    assert_int_equal(kiln_stw_write(w, head, 4, &err), 0);
    assert_int_equal(kiln_stw_skip(w, 8, &err), 0);
    assert_int_equal(kiln_stw_write(w, tail, 4, &err), 0);
    assert_int_equal(kiln_stw_skip(w, 1, &err), -1); /* past the tensor's end */
    assert_int_equal(kiln_stw_next(w, &idx, &err), 1);
    assert_int_equal(kiln_stw_skip(w, 1 << 20, &err), 0);
    assert_int_equal(kiln_stw_finish(w, &err), 0);
    kiln_st *st = kiln_st_open(p, &err);
    if (!st) fail_msg("%s", err.msg);
    const kiln_st_tensor *a = kiln_st_find(st, "a"), *b = kiln_st_find(st, "b");
    assert_non_null(a);
    assert_non_null(b);
    const uint8_t want[16] = {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 7, 8};
    assert_memory_equal(a->data, want, 16);
    assert_int_equal(b->nbytes, 1 << 20);
    for (uint64_t i = 0; i < b->nbytes; i++)
        if (b->data[i]) fail_msg("b[%llu] = %u, not a hole", (unsigned long long)i, b->data[i]);
    assert_int_equal(st->files[0].size, b->file_offset + b->nbytes);
    kiln_st_close(st);
}

/* --sparse: shards of the declared size whose data takes (almost) no disk,
 * and that kiln's reader opens with every tensor of the plan. */
static void test_deepseek_sparse(void **state) {
    const char *dir = kiln_test_tmp_path("ds-sparse");
    kiln_err err = {{0}};
    kiln_tm_ds_config c;
    kiln_tm_ds_defaults(&c, KILN_TM_DS_V3);
    c.layers = 2, c.experts = 4, c.vocab = 1024, c.shard_size = 200000000, c.sparse = true;
    kiln_tm_summary sum;
    assert_int_equal(kiln_tm_ds_write(&c, dir, NULL, &sum, &err), 0);
    assert_true(sum.n_files > 1);
    kiln_st *st = kiln_st_open(dir, &err);
    if (!st) fail_msg("%s", err.msg);
    assert_int_equal(st->n_tensors, sum.n_tensors);
    uint64_t size = 0, disk = 0, data = 0;
    for (uint32_t i = 0; i < st->n_files; i++) {
        struct stat sb;
        assert_int_equal(stat(st->files[i].path, &sb), 0);
        size += (uint64_t)sb.st_size;
        disk += (uint64_t)sb.st_blocks * 512;
        data += (uint64_t)sb.st_size - 8 - st->files[i].header_len;
    }
    assert_int_equal(data, sum.tensor_bytes);
    /* a filesystem without holes would store every byte: say so, don't fail */
    if (disk > size / 100) fprintf(stderr, "# %s: no sparse files here (%llu of %llu bytes on disk)\n", dir,
                                   (unsigned long long)disk, (unsigned long long)size);
    else assert_true(disk < size / 100);
    const kiln_st_tensor *x = kiln_st_find(st, "model.layers.1.mlp.experts.3.up_proj.weight");
    assert_non_null(x);
    assert_int_equal(x->dtype, KILN_ST_F8_E4M3);
    kiln_st_close(st);
    assert_true(kiln_test_exists(path_in(dir, "tokenizer.json")));
    assert_true(kiln_test_exists(path_in(dir, "config.json")));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stw_library_vectors),
        cmocka_unit_test(test_stw_roundtrip_dtypes),
        cmocka_unit_test(test_stw_shards),
        cmocka_unit_test(test_stw_errors),
        cmocka_unit_test(test_spm_reencodes_fixture),
        cmocka_unit_test(test_spm_convert_reader),
        cmocka_unit_test(test_arch_llama),
        cmocka_unit_test(test_arch_mistral),
        cmocka_unit_test(test_arch_qwen2),
        cmocka_unit_test(test_arch_qwen3),
        cmocka_unit_test(test_arch_mixtral),
        cmocka_unit_test(test_arch_qwen2moe),
        cmocka_unit_test(test_arch_qwen3moe),
        cmocka_unit_test(test_arch_gpt2),
        cmocka_unit_test(test_big_vocab),
        cmocka_unit_test(test_fixture_llama),
        cmocka_unit_test(test_fixture_mixtral),
        cmocka_unit_test(test_fixture_qwen2),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_weights_realistic),
        cmocka_unit_test(test_values_exact),
        cmocka_unit_test(test_overwrite),
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_deepseek_plan),
        cmocka_unit_test(test_stw_holes),
        cmocka_unit_test(test_deepseek_sparse),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", kiln_test_tmpdir());
    if (!rc && system(cmd) != 0) return 1;
    return rc;
}
