/* tests/test_gguf.c - the GGUF reader and writer.
 *
 *  - round trips: every metadata value type (nested and string arrays
 *    included) and a tensor of every type in the table, written by the
 *    writer and read back; split output and its reassembly;
 *  - malformed input: a small file truncated at every byte, and counts,
 *    lengths, offsets, types and alignment corrupted one at a time; each
 *    must give an error (never a crash: `make check` runs this under ASan);
 *  - ground truth: every GGUF in ../shared/golden/MANIFEST.tsv parses with
 *    exactly the names, types, shapes and offsets llama.cpp's gguf-py
 *    lists, and FILES.tsv's header facts. */
#include "shared.h"

#include <unistd.h>

#include "../core/gguf.h"
#include "../core/types.h"

/* Writes a file with one key of every value type and `n_types` tensors. */
static void write_sample(const char *path, bool all_types, const kiln_write_opts *opts) {
    kiln_err err = {{0}};
    kiln_gguf_writer *w = kiln_writer_new(path, opts, &err);
    assert_non_null(w);
    kiln_value v;
    v = (kiln_value){.type = KILN_GGUF_UINT8, .u8 = 200}; assert_int_equal(kiln_writer_set(w, "t.u8", &v, &err), 0);
    v = (kiln_value){.type = KILN_GGUF_INT8, .i8 = -100}; assert_int_equal(kiln_writer_set(w, "t.i8", &v, &err), 0);
    v = (kiln_value){.type = KILN_GGUF_UINT16, .u16 = 60000}; assert_int_equal(kiln_writer_set(w, "t.u16", &v, &err), 0);
    v = (kiln_value){.type = KILN_GGUF_INT16, .i16 = -30000}; assert_int_equal(kiln_writer_set(w, "t.i16", &v, &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "t.u32", 4000000000u, &err), 0);
    assert_int_equal(kiln_writer_set_i32(w, "t.i32", -2000000000, &err), 0);
    assert_int_equal(kiln_writer_set_f32(w, "t.f32", 1.5f, &err), 0);
    assert_int_equal(kiln_writer_set_bool(w, "t.bool", true, &err), 0);
    assert_int_equal(kiln_writer_set_str(w, "t.str", "héllo", &err), 0);
    assert_int_equal(kiln_writer_set_u64(w, "t.u64", 1ull << 60, &err), 0);
    v = (kiln_value){.type = KILN_GGUF_INT64, .i64 = -(1ll << 60)}; assert_int_equal(kiln_writer_set(w, "t.i64", &v, &err), 0);
    v = (kiln_value){.type = KILN_GGUF_FLOAT64, .f64 = 3.25}; assert_int_equal(kiln_writer_set(w, "t.f64", &v, &err), 0);
    int32_t ints[5] = {1, -2, 3, -4, 5};
    assert_int_equal(kiln_writer_set_arr(w, "t.arr_i32", KILN_GGUF_INT32, ints, 5, &err), 0);
    const char *strs[3] = {"a", "", "ccc"};
    assert_int_equal(kiln_writer_set_str_arr(w, "t.arr_str", strs, 3, &err), 0);
    /* nested: [[1,2],[3]] of uint8 */
    uint8_t a1[2] = {1, 2}, a2[1] = {3};
    kiln_value inner[2] = {
        {.type = KILN_GGUF_ARRAY, .arr = {.type = KILN_GGUF_UINT8, .n = 2, .data = a1}},
        {.type = KILN_GGUF_ARRAY, .arr = {.type = KILN_GGUF_UINT8, .n = 1, .data = a2}},
    };
    v = (kiln_value){.type = KILN_GGUF_ARRAY, .arr = {.type = KILN_GGUF_ARRAY, .n = 2, .vals = inner}};
    assert_int_equal(kiln_writer_set(w, "t.nested", &v, &err), 0);
    /* replacing a value keeps the key's position */
    assert_int_equal(kiln_writer_set_u32(w, "t.u32", 7, &err), 0);

    int n = 0;
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        const kiln_type_info *ti = kiln_type_get(t);
        if (!ti || (!all_types && n >= 3)) continue;
        char name[64];
        snprintf(name, sizeof name, "tensor.%s", ti->name);
        int64_t ne[2] = {ti->block_size * 2, 3};
        assert_int_equal(kiln_writer_add_tensor(w, name, t, 2, ne, &err), 0);
        n++;
    }
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    n = 0;
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        const kiln_type_info *ti = kiln_type_get(t);
        if (!ti || (!all_types && n >= 3)) continue;
        uint64_t nb = kiln_type_row_bytes(t, ti->block_size * 2) * 3;
        uint8_t *buf = malloc(nb);
        for (uint64_t i = 0; i < nb; i++) buf[i] = (uint8_t)(i * 7 + t);
        /* in two pieces, to exercise partial writes */
        assert_int_equal(kiln_writer_write(w, buf, nb / 2, &err), 0);
        assert_int_equal(kiln_writer_write(w, buf + nb / 2, nb - nb / 2, &err), 0);
        free(buf);
        n++;
    }
    if (kiln_writer_finish(w, &err) != 0) fail_msg("%s", err.msg);
}

static void check_sample(kiln_gguf *g, bool all_types) {
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    kiln_str s;
    assert_true(kiln_gguf_get_u64(g, "t.u8", &u)); assert_int_equal(u, 200);
    assert_true(kiln_gguf_get_i64(g, "t.i8", &i)); assert_int_equal(i, -100);
    assert_true(kiln_gguf_get_u64(g, "t.u16", &u)); assert_int_equal(u, 60000);
    assert_true(kiln_gguf_get_i64(g, "t.i16", &i)); assert_int_equal(i, -30000);
    assert_true(kiln_gguf_get_u64(g, "t.u32", &u)); assert_int_equal(u, 7);
    assert_true(kiln_gguf_get_i64(g, "t.i32", &i)); assert_int_equal(i, -2000000000);
    assert_true(kiln_gguf_get_f64(g, "t.f32", &d)); assert_true(d == 1.5);
    assert_true(kiln_gguf_get_bool(g, "t.bool", &b)); assert_true(b);
    assert_true(kiln_gguf_get_str(g, "t.str", &s)); assert_true(kiln_str_eq(s, "héllo"));
    assert_true(kiln_gguf_get_u64(g, "t.u64", &u)); assert_true(u == 1ull << 60);
    assert_true(kiln_gguf_get_i64(g, "t.i64", &i)); assert_true(i == -(1ll << 60));
    assert_true(kiln_gguf_get_f64(g, "t.f64", &d)); assert_true(d == 3.25);
    assert_false(kiln_gguf_get_u64(g, "t.i8", &u)); /* negative does not fit */
    assert_true(kiln_str_eq(g->kv[4].key, "t.u32"));  /* position kept on replace */
    const kiln_array *a = kiln_gguf_get_arr(g, "t.arr_i32", KILN_GGUF_INT32);
    assert_non_null(a);
    assert_int_equal(a->n, 5);
    assert_int_equal(kiln_array_i64(a, 3), -4);
    a = kiln_gguf_get_arr(g, "t.arr_str", KILN_GGUF_STRING);
    assert_non_null(a);
    assert_int_equal(a->n, 3);
    assert_true(kiln_str_eq(a->strs[1], ""));
    assert_true(kiln_str_eq(a->strs[2], "ccc"));
    a = kiln_gguf_get_arr(g, "t.nested", KILN_GGUF_ARRAY);
    assert_non_null(a);
    assert_int_equal(a->n, 2);
    assert_int_equal(a->vals[0].arr.n, 2);
    assert_int_equal(kiln_array_i64(&a->vals[0].arr, 1), 2);
    assert_int_equal(kiln_array_i64(&a->vals[1].arr, 0), 3);
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const kiln_tensor *t = &g->tensors[k];
        const kiln_type_info *ti = kiln_type_get(t->type);
        assert_non_null(ti);
        assert_int_equal(t->ne[0], ti->block_size * 2);
        assert_int_equal(t->ne[1], 3);
        assert_int_equal(t->nbytes, kiln_type_row_bytes(t->type, ti->block_size * 2) * 3);
        assert_int_equal(t->file_offset % 32, 0);
        for (uint64_t j = 0; j < t->nbytes; j++)
            if (t->data[j] != (uint8_t)(j * 7 + t->type)) fail_msg("tensor %s byte %llu differs", ti->name, (unsigned long long)j);
    }
    (void)all_types;
}

static void test_round_trip(void **state) {
    const char *path = kiln_test_tmp_path("rt.gguf");
    write_sample(path, true, NULL);
    kiln_err err;
    kiln_gguf *g = kiln_gguf_open(path, &err);
    if (!g) fail_msg("%s", err.msg);
    int n_types = 0;
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) n_types += kiln_type_get(t) != NULL;
    assert_int_equal(g->n_tensors, (uint64_t)n_types);
    assert_non_null(kiln_gguf_find_tensor(g, "tensor.IQ2_XXS"));
    check_sample(g, true);
    kiln_gguf_close(g);
    /* no temporary left behind */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
}

static void test_refuses_overwrite(void **state) {
    const char *path = kiln_test_tmp_path("ow.gguf");
    write_sample(path, false, NULL);
    kiln_err err;
    kiln_gguf_writer *w = kiln_writer_new(path, NULL, &err);
    int64_t ne[1] = {32};
    kiln_writer_add_tensor(w, "x", KILN_F32, 1, ne, &err);
    assert_int_equal(kiln_writer_begin(w, &err), -1);
    assert_non_null(strstr(err.msg, "--force"));
    kiln_writer_abort(w);
    /* an input is never overwritten, even with force */
    const char *inputs[1] = {path};
    kiln_write_opts o = {.force = true, .inputs = inputs, .n_inputs = 1};
    w = kiln_writer_new(path, &o, &err);
    kiln_writer_add_tensor(w, "x", KILN_F32, 1, ne, &err);
    assert_int_equal(kiln_writer_begin(w, &err), -1);
    assert_non_null(strstr(err.msg, "input"));
    kiln_writer_abort(w);
    /* an unfinished tensor aborts and leaves neither file nor temp */
    const char *p2 = kiln_test_tmp_path("partial.gguf");
    w = kiln_writer_new(p2, NULL, &err);
    kiln_writer_add_tensor(w, "x", KILN_F32, 1, ne, &err);
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    float half[16] = {0};
    assert_int_equal(kiln_writer_write(w, half, sizeof half, &err), 0);
    assert_int_equal(kiln_writer_finish(w, &err), -1);
    assert_non_null(strstr(err.msg, "of 128 bytes"));
    assert_int_not_equal(access(p2, F_OK), 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", p2);
    assert_int_not_equal(access(tmp, F_OK), 0);
}

static void test_split(void **state) {
    const char *path = kiln_test_tmp_path("split.gguf");
    kiln_write_opts o = {.split_max_tensors = 4};
    write_sample(path, true, &o);
    kiln_err err;
    int n_types = 0;
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) n_types += kiln_type_get(t) != NULL;
    int shards = (n_types + 3) / 4;
    char name[600];
    snprintf(name, sizeof name, "%s/split-00002-of-%05d.gguf", kiln_test_tmpdir(), shards);
    kiln_gguf *g = kiln_gguf_open(name, &err); /* any shard opens the whole model */
    if (!g) fail_msg("%s", err.msg);
    assert_int_equal(g->n_shards, (uint32_t)shards);
    assert_int_equal(g->n_tensors, (uint64_t)n_types);
    check_sample(g, true);
    uint64_t v;
    assert_true(kiln_gguf_get_u64(g, "split.count", &v));
    assert_int_equal(v, (uint64_t)shards);
    assert_true(kiln_gguf_get_u64(g, "split.tensors.count", &v));
    assert_int_equal(v, (uint64_t)n_types);
    kiln_gguf_close(g);
    /* later shards carry only the split keys */
    snprintf(name, sizeof name, "%s/split-%05d-of-%05d.gguf", kiln_test_tmpdir(), shards, shards);
    size_t len;
    uint8_t *buf = kiln_test_read_file(name, &len);
    assert_non_null(buf);
    kiln_gguf *last = kiln_gguf_parse(buf, len, name, &err);
    assert_non_null(last);
    assert_int_equal(last->n_kv, 3);
    assert_true(kiln_gguf_get_u64(last, "split.no", &v));
    assert_int_equal(v, (uint64_t)shards - 1);
    kiln_gguf_close(last);
    free(buf);
    /* a missing shard is an error naming it */
    snprintf(name, sizeof name, "%s/split-00001-of-%05d.gguf", kiln_test_tmpdir(), shards);
    char moved[700];
    snprintf(moved, sizeof moved, "%s.moved", name);
    assert_int_equal(rename(name, moved), 0);
    snprintf(name, sizeof name, "%s/split-00002-of-%05d.gguf", kiln_test_tmpdir(), shards);
    assert_null(kiln_gguf_open(name, &err));
    assert_non_null(strstr(err.msg, "00001-of"));
    snprintf(name, sizeof name, "%s/split-00001-of-%05d.gguf", kiln_test_tmpdir(), shards);
    assert_int_equal(rename(moved, name), 0);
}

/* Truncating a valid file at every byte must give an error each time,
 * except at lengths that still hold every tensor byte (trailing padding). */
static void test_truncation(void **state) {
    const char *path = kiln_test_tmp_path("trunc.gguf");
    write_sample(path, false, NULL);
    size_t len;
    uint8_t *full = kiln_test_read_file(path, &len);
    assert_non_null(full);
    kiln_err err;
    kiln_gguf *g = kiln_gguf_parse(full, len, path, &err);
    assert_non_null(g);
    uint64_t data_end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].file_offset + g->tensors[i].nbytes > data_end) data_end = g->tensors[i].file_offset + g->tensors[i].nbytes;
    kiln_gguf_close(g);
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n + 1); /* exact size so ASan sees any over-read */
        memcpy(copy, full, n);
        err.msg[0] = 0;
        g = kiln_gguf_parse(copy, n, "t.gguf", &err);
        if (n < data_end) {
            if (g) fail_msg("truncated at %zu of %zu bytes but parsed", n, len);
            assert_non_null(strstr(err.msg, "t.gguf"));
            assert_non_null(strstr(err.msg, "offset"));
        }
        kiln_gguf_close(g);
        free(copy);
    }
    free(full);
}

/* Corrupting one field at a time gives an error that names it. */
static void test_corruption(void **state) {
    const char *path = kiln_test_tmp_path("corrupt.gguf");
    kiln_err err;
    kiln_gguf_writer *w = kiln_writer_new(path, NULL, &err);
    kiln_writer_set_str(w, "general.architecture", "llama", &err);
    kiln_writer_set_u32(w, "general.alignment", 32, &err);
    int64_t ne[2] = {64, 2};
    kiln_writer_add_tensor(w, "a", KILN_F32, 2, ne, &err);
    kiln_writer_add_tensor(w, "b", KILN_Q8_0, 2, ne, &err);
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    uint8_t zeros[512] = {0};
    kiln_writer_write(w, zeros, 512, &err);
    kiln_writer_write(w, zeros, 136, &err);
    assert_int_equal(kiln_writer_finish(w, &err), 0);
    size_t len;
    uint8_t *orig = kiln_test_read_file(path, &len);
    assert_non_null(orig);
    /* layout: magic 0, version 4, n_tensors 8, n_kv 16, key0 at 24:
     * len(8) "general.architecture"(20) type(4) strlen(8) "llama"(5) = 45 -> 69
     * key1 at 69: len(8) "general.alignment"(17) type(4) u32(4) -> 102
     * tensor a at 102: len 8, "a", n_dims 4 @111, ne0 @115, ne1 @123, type @131, offset @135
     * tensor b at 143: len 8, "b", n_dims @152, ne0 @156, ne1 @164, type @172, offset @176 */
    struct { size_t at; uint64_t val; int width; const char *expect; } cases[] = {
        {0, 0x46554746, 4, "magic"},
        {4, 0x03000000, 4, "big-endian"},
        {4, 9, 4, "version"},
        {8, 1ull << 40, 8, "tensor_count"},
        {16, 1ull << 40, 8, "kv_count"},
        {24, 1ull << 40, 8, "key #0"},
        {52, 99, 4, "unknown value type"},
        {56, 1ull << 40, 8, "general.architecture"},
        {98, 3, 4, "alignment"},
        {94, 5, 4, "must be uint32"},
        {102, 1ull << 40, 8, "tensor #0"},
        {111, 5, 4, "n_dims"},
        {111, 0, 4, "n_dims"},
        {115, 0, 8, "ne[0]"},
        {123, 1ull << 62, 8, "overflow"},
        {131, 4, 4, "unknown or removed"},
        {131, 99, 4, "unknown or removed"},
        {172, KILN_Q4_K, 4, "block size"},
        {135, 16, 8, "not aligned"},
        {176, 1ull << 30, 8, "past the end"},
        {176, 0, 8, "overlaps"},
        {151, 'a', 1, "duplicate tensor"},
        {24 + 8 + 8, 'x', 1, NULL}, /* harmless: key renamed */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *copy = malloc(len);
        memcpy(copy, orig, len);
        memcpy(copy + cases[c].at, &cases[c].val, (size_t)cases[c].width);
        err.msg[0] = 0;
        kiln_gguf *g = kiln_gguf_parse(copy, len, "c.gguf", &err);
        if (cases[c].expect) {
            if (g) fail_msg("case %zu (%s) parsed", c, cases[c].expect);
            if (!strstr(err.msg, cases[c].expect)) fail_msg("case %zu: '%s' lacks '%s'", c, err.msg, cases[c].expect);
            assert_non_null(strstr(err.msg, "c.gguf: "));
        } else {
            if (!g) fail_msg("case %zu: %s", c, err.msg);
        }
        kiln_gguf_close(g);
        free(copy);
    }
    free(orig);
}

/* ../shared/golden/MANIFEST.tsv and FILES.tsv against kiln's reader. */
static void test_golden_manifest(void **state) {
    SKIP_WITHOUT_SHARED();
    FILE *files = fopen(kiln_shared_path("golden/FILES.tsv"), "r");
    assert_non_null(files);
    char line[1024];
    int n_files = 0;
    assert_non_null(fgets(line, sizeof line, files)); /* header */
    while (fgets(line, sizeof line, files)) {
        char file[512];
        unsigned version;
        unsigned long long align, n_t, n_kv, size;
        assert_int_equal(sscanf(line, "%511s %u %llu %llu %llu %llu", file, &version, &align, &n_t, &n_kv, &size), 6);
        char rel[600];
        snprintf(rel, sizeof rel, "golden/%s", file);
        kiln_err err;
        kiln_gguf *g = kiln_gguf_open(kiln_shared_path(rel), &err);
        if (!g) fail_msg("%s", err.msg);
        assert_int_equal(g->version, version);
        assert_int_equal(g->alignment, align);
        assert_int_equal(g->n_tensors, n_t);
        assert_int_equal(g->n_kv, n_kv);
        assert_int_equal(g->total_size, size);
        kiln_gguf_close(g);
        n_files++;
    }
    fclose(files);
    assert_int_equal(n_files, 32);

    FILE *m = fopen(kiln_shared_path("golden/MANIFEST.tsv"), "r");
    assert_non_null(m);
    assert_non_null(fgets(line, sizeof line, m));
    char cur[512] = "";
    kiln_gguf *g = NULL;
    uint64_t idx = 0;
    int rows = 0;
    while (fgets(line, sizeof line, m)) {
        char file[512], name[256], type[32], shape[128];
        unsigned long long off, bytes;
        assert_int_equal(sscanf(line, "%511s %255s %31s %127s %llu %llu", file, name, type, shape, &off, &bytes), 6);
        if (strcmp(file, cur)) {
            kiln_gguf_close(g);
            char rel[600];
            snprintf(rel, sizeof rel, "golden/%s", file);
            kiln_err err;
            g = kiln_gguf_open(kiln_shared_path(rel), &err);
            if (!g) fail_msg("%s", err.msg);
            strcpy(cur, file);
            idx = 0;
        }
        assert_true(idx < g->n_tensors);
        const kiln_tensor *t = &g->tensors[idx++]; /* manifest rows are in file order */
        if (!kiln_str_eq(t->name, name)) fail_msg("%s: tensor %llu is '%.*s', manifest says '%s'", file, (unsigned long long)idx - 1, (int)t->name.len, t->name.ptr, name);
        assert_string_equal(kiln_type_name(t->type), type);
        char mine[128] = "";
        for (uint32_t d = 0; d < t->n_dims; d++)
            snprintf(mine + strlen(mine), sizeof mine - strlen(mine), d ? ",%lld" : "%lld", (long long)t->ne[d]);
        assert_string_equal(mine, shape);
        assert_int_equal(t->file_offset, off);
        assert_int_equal(t->nbytes, bytes);
        rows++;
    }
    kiln_gguf_close(g);
    fclose(m);
    assert_int_equal(rows, 948);
}

/* A metadata-only writer finished in memory gives the very bytes it would
 * have written to a file, and the image opens like the file. */
static void set_metadata_keys(kiln_gguf_writer *w) {
    kiln_err err = {{0}};
    const char *strs[3] = {"a", "", "ccc"};
    assert_int_equal(kiln_writer_set_str(w, "general.architecture", "llama", &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "general.alignment", 64, &err), 0);
    assert_int_equal(kiln_writer_set_f32(w, "t.f32", 1.5f, &err), 0);
    assert_int_equal(kiln_writer_set_str_arr(w, "t.arr_str", strs, 3, &err), 0);
}

static void test_memory_image(void **state) {
    (void)state;
    kiln_err err = {{0}};
    const char *path = kiln_test_tmp_path("meta-only.gguf");
    kiln_write_opts o = {.force = true};
    kiln_gguf_writer *w = kiln_writer_new(path, &o, &err);
    assert_non_null(w);
    set_metadata_keys(w);
    if (kiln_writer_finish(w, &err) < 0) fail_msg("%s", err.msg);

    w = kiln_writer_new("in memory", NULL, &err);
    assert_non_null(w);
    set_metadata_keys(w);
    uint8_t *image;
    uint64_t len;
    if (kiln_writer_finish_image(w, &image, &len, &err) < 0) fail_msg("%s", err.msg);
    size_t file_len;
    uint8_t *file = kiln_test_read_file(path, &file_len);
    assert_non_null(file);
    assert_int_equal(len, file_len);
    assert_memory_equal(image, file, file_len);
    free(file);

    kiln_gguf *g = kiln_gguf_parse_owned(image, len, "in memory", &err);
    if (!g) fail_msg("%s", err.msg);
    assert_int_equal(g->n_kv, 4);
    assert_int_equal(g->n_tensors, 0);
    kiln_str arch;
    assert_true(kiln_gguf_get_str(g, "general.architecture", &arch));
    assert_true(kiln_str_eq(arch, "llama"));
    kiln_gguf_close(g);

    /* tensors cannot go in memory */
    w = kiln_writer_new("in memory", NULL, &err);
    assert_non_null(w);
    int64_t ne[1] = {32};
    assert_int_equal(kiln_writer_add_tensor(w, "t", KILN_F32, 1, ne, &err), 0);
    assert_int_equal(kiln_writer_finish_image(w, &image, &len, &err), -1);
    assert_null(image);
    assert_non_null(strstr(err.msg, "metadata only"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refuses_overwrite),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_memory_image),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_golden_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
