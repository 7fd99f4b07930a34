/* tests/test_gguf_index.c - the checks a GGUF open makes over all its
 * tensors at once (core/gguf_read.c finish_index): names are unique and
 * data ranges do not overlap, whether the tensor infos list the data in
 * offset order (one pass) or not (a sorted copy); a duplicate name is
 * reported before an overlap; an out-of-order file that is valid opens
 * and finds every tensor's bytes. Three F32 tensors of 256 bytes, a, b
 * and c, written in order and then given other offsets in the image. */
#include "shared.h"

#include "../core/gguf.h"
#include "../core/types.h"

static uint8_t *image;
static size_t image_len;

static int write_three(void **state) {
    (void)state;
    const char *path = kiln_test_tmp_path("index.gguf");
    kiln_err err;
    kiln_gguf_writer *w = kiln_writer_new(path, NULL, &err);
    assert_non_null(w);
    int64_t ne[1] = {64};
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) assert_int_equal(kiln_writer_add_tensor(w, names[i], KILN_F32, 1, ne, &err), 0);
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    float vals[64];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 64; k++) vals[k] = (float)(i * 100 + k);
        assert_int_equal(kiln_writer_write(w, vals, sizeof vals, &err), 0);
    }
    assert_int_equal(kiln_writer_finish(w, &err), 0);
    image = kiln_test_read_file(path, &image_len);
    assert_non_null(image);
    return 0;
}

static int free_image(void **state) {
    (void)state;
    free(image);
    return 0;
}

/* A copy of the image with tensor i's data offset set to offsets[i] and
 * its name's one byte to names[i]; parsed, or NULL with err. */
static kiln_gguf *patched(const uint64_t offsets[3], const char names[3], uint8_t **copy, kiln_err *err) {
    kiln_gguf *g = kiln_gguf_parse(image, image_len, "index.gguf", err);
    assert_non_null(g);
    size_t name_at[3], offset_at[3];
    for (int i = 0; i < 3; i++) {
        name_at[i] = (size_t)((const uint8_t *)g->tensors[i].name.ptr - image);
        offset_at[i] = name_at[i] + 1 + 4 + 8 + 4; /* name, n_dims, ne[0], type */
    }
    kiln_gguf_close(g);
    *copy = malloc(image_len);
    assert_non_null(*copy);
    memcpy(*copy, image, image_len);
    for (int i = 0; i < 3; i++) {
        memcpy(*copy + offset_at[i], &offsets[i], 8);
        (*copy)[name_at[i]] = (uint8_t)names[i];
    }
    err->msg[0] = 0;
    return kiln_gguf_parse(*copy, image_len, "index.gguf", err);
}

static void expect_error(const uint64_t offsets[3], const char names[3], const char *want) {
    uint8_t *copy;
    kiln_err err;
    kiln_gguf *g = patched(offsets, names, &copy, &err);
    if (g) fail_msg("parsed, expected '%s'", want);
    if (!strstr(err.msg, want)) fail_msg("'%s' lacks '%s'", err.msg, want);
    free(copy);
}

static void test_in_order_opens(void **state) {
    (void)state;
    uint8_t *copy;
    kiln_err err;
    const uint64_t offsets[3] = {0, 256, 512};
    kiln_gguf *g = patched(offsets, "abc", &copy, &err);
    if (!g) fail_msg("%s", err.msg);
    kiln_gguf_close(g);
    free(copy);
}

static void test_out_of_order_opens(void **state) {
    (void)state;
    uint8_t *copy;
    kiln_err err;
    const uint64_t offsets[3] = {512, 0, 256}; /* a's bytes last, b's first */
    kiln_gguf *g = patched(offsets, "abc", &copy, &err);
    if (!g) fail_msg("%s", err.msg);
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        const kiln_tensor *t = kiln_gguf_find_tensor(g, names[i]);
        assert_non_null(t);
        assert_int_equal(t - g->tensors, i);
        assert_int_equal(t->offset, offsets[i]);
        float first;
        memcpy(&first, t->data, 4);
        assert_true(first == (float)(offsets[i] / 256 * 100)); /* the bytes written there */
    }
    kiln_gguf_close(g);
    free(copy);
}

static void test_overlap_in_order(void **state) {
    (void)state;
    const uint64_t offsets[3] = {0, 256, 384}; /* c starts inside b */
    expect_error(offsets, "abc", "tensor 'c' overlaps tensor 'b'");
}

static void test_overlap_out_of_order(void **state) {
    (void)state;
    const uint64_t offsets[3] = {512, 0, 128}; /* sorted: b, c (inside b), a */
    expect_error(offsets, "abc", "tensor 'c' overlaps tensor 'b'");
    const uint64_t later[3] = {256, 0, 288}; /* out of order at b; then c inside a */
    expect_error(later, "abc", "tensor 'c' overlaps tensor 'a'");
}

static void test_duplicate_before_overlap(void **state) {
    (void)state;
    const uint64_t overlapping[3] = {0, 256, 384};
    expect_error(overlapping, "aba", "duplicate tensor 'a'");
    const uint64_t in_order[3] = {0, 256, 512};
    expect_error(in_order, "abb", "duplicate tensor 'b'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order_opens),
        cmocka_unit_test(test_out_of_order_opens),
        cmocka_unit_test(test_overlap_in_order),
        cmocka_unit_test(test_overlap_out_of_order),
        cmocka_unit_test(test_duplicate_before_overlap),
    };
    return cmocka_run_group_tests(tests, write_three, free_image);
}
