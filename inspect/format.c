/* inspect/format.c - metadata values as text and JSON (see format.h). */
#include "format.h"
#include "../core/escape.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void kiln_value_type_str(const kiln_value *v, char *out, size_t cap) {
    if (v->type != KILN_GGUF_ARRAY) {
        snprintf(out, cap, "%s", kiln_gguf_vtype_name(v->type));
        return;
    }
    if (v->arr.type == KILN_GGUF_ARRAY && v->arr.n > 0) {
        char inner[64];
        kiln_value_type_str(&v->arr.vals[0], inner, sizeof inner);
        snprintf(out, cap, "[%s x %" PRIu64 "]", inner, v->arr.n);
        return;
    }
    snprintf(out, cap, "[%s x %" PRIu64 "]", kiln_gguf_vtype_name(v->arr.type), v->arr.n);
}

/* Appends to a bounded buffer; marks truncation with "...". */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool full;
} sbuf;

static void add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(sbuf *b, const char *fmt, ...) {
    if (b->full) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->full = true;
        if (b->cap >= 4) strcpy(b->p + b->cap - 4, "...");
        b->len = b->cap - 1;
        return;
    }
    b->len += (size_t)n;
}

/* A string value in double quotes, escaped by core/escape.h. */
static void add_quoted(sbuf *b, const char *s, uint64_t len) {
    add(b, "\"");
    if (b->full) return;
    size_t room = b->cap - b->len;
    bool cut = kiln_escape(b->p + b->len, room, s, (size_t)len, '"') >= room;
    b->len += strlen(b->p + b->len);
    if (cut) b->full = true; /* it already ends in "..." */
    else add(b, "\"");
}

static void add_scalar(sbuf *b, uint32_t type, const void *p) {
    kiln_value v = {.type = type};
    memcpy(&v.u64, p, kiln_gguf_vtype_size(type));
    switch (type) {
    case KILN_GGUF_UINT8: add(b, "%u", v.u8); break;
    case KILN_GGUF_INT8: add(b, "%d", v.i8); break;
    case KILN_GGUF_UINT16: add(b, "%u", v.u16); break;
    case KILN_GGUF_INT16: add(b, "%d", v.i16); break;
    case KILN_GGUF_UINT32: add(b, "%u", v.u32); break;
    case KILN_GGUF_INT32: add(b, "%d", v.i32); break;
    case KILN_GGUF_FLOAT32: add(b, "%.9g", v.f32); break;
    case KILN_GGUF_BOOL: add(b, "%s", v.b ? "true" : "false"); break;
    case KILN_GGUF_UINT64: add(b, "%" PRIu64, v.u64); break;
    case KILN_GGUF_INT64: add(b, "%" PRId64, v.i64); break;
    case KILN_GGUF_FLOAT64: add(b, "%.17g", v.f64); break;
    }
}

static void add_value(sbuf *b, const kiln_value *v, size_t max_items) {
    if (v->type == KILN_GGUF_STRING) {
        add_quoted(b, v->str.ptr, v->str.len);
        return;
    }
    if (v->type != KILN_GGUF_ARRAY) {
        add_scalar(b, v->type, &v->u64);
        return;
    }
    const kiln_array *a = &v->arr;
    uint64_t shown = max_items && a->n > max_items ? max_items : a->n;
    add(b, "[");
    for (uint64_t i = 0; i < shown && !b->full; i++) {
        if (i) add(b, ", ");
        if (a->type == KILN_GGUF_STRING) add_quoted(b, a->strs[i].ptr, a->strs[i].len);
        else if (a->type == KILN_GGUF_ARRAY) add_value(b, &a->vals[i], max_items);
        else add_scalar(b, a->type, (const uint8_t *)a->data + i * kiln_gguf_vtype_size(a->type));
    }
    if (shown < a->n) add(b, ", ... (%" PRIu64 " items)", a->n);
    add(b, "]");
}

void kiln_value_str(const kiln_value *v, char *out, size_t cap, size_t max_items) {
    sbuf b = {out, 0, cap, false};
    out[0] = 0;
    add_value(&b, v, max_items);
}

static void scalar_jw(kiln_jsonw *w, uint32_t type, const void *p) {
    kiln_value v = {.type = type};
    memcpy(&v.u64, p, kiln_gguf_vtype_size(type));
    switch (type) {
    case KILN_GGUF_UINT8: kiln_jw_uint(w, v.u8); break;
    case KILN_GGUF_INT8: kiln_jw_int(w, v.i8); break;
    case KILN_GGUF_UINT16: kiln_jw_uint(w, v.u16); break;
    case KILN_GGUF_INT16: kiln_jw_int(w, v.i16); break;
    case KILN_GGUF_UINT32: kiln_jw_uint(w, v.u32); break;
    case KILN_GGUF_INT32: kiln_jw_int(w, v.i32); break;
    case KILN_GGUF_FLOAT32: kiln_jw_real(w, v.f32); break;
    case KILN_GGUF_BOOL: kiln_jw_bool(w, v.b); break;
    case KILN_GGUF_UINT64: kiln_jw_uint(w, v.u64); break;
    case KILN_GGUF_INT64: kiln_jw_int(w, v.i64); break;
    case KILN_GGUF_FLOAT64: kiln_jw_real(w, v.f64); break;
    default: kiln_jw_null(w); break;
    }
}

void kiln_jw_value(kiln_jsonw *w, const kiln_value *v, size_t max_items) {
    if (v->type == KILN_GGUF_STRING) {
        kiln_jw_strn(w, v->str.ptr, v->str.len);
        return;
    }
    if (v->type != KILN_GGUF_ARRAY) {
        scalar_jw(w, v->type, &v->u64);
        return;
    }
    const kiln_array *a = &v->arr;
    uint64_t shown = max_items && a->n > max_items ? max_items : a->n;
    kiln_jw_arr(w);
    for (uint64_t i = 0; i < shown; i++) {
        if (a->type == KILN_GGUF_STRING) kiln_jw_strn(w, a->strs[i].ptr, a->strs[i].len);
        else if (a->type == KILN_GGUF_ARRAY) kiln_jw_value(w, &a->vals[i], max_items);
        else scalar_jw(w, a->type, (const uint8_t *)a->data + i * kiln_gguf_vtype_size(a->type));
    }
    kiln_jw_end_arr(w);
}

bool kiln_value_equal(const kiln_value *a, const kiln_value *b) {
    if (a->type != b->type) return false;
    if (a->type == KILN_GGUF_STRING)
        return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    if (a->type != KILN_GGUF_ARRAY)
        return !memcmp(&a->u64, &b->u64, kiln_gguf_vtype_size(a->type));
    const kiln_array *x = &a->arr, *y = &b->arr;
    if (x->type != y->type || x->n != y->n) return false;
    if (x->type == KILN_GGUF_STRING) {
        for (uint64_t i = 0; i < x->n; i++)
            if (x->strs[i].len != y->strs[i].len || memcmp(x->strs[i].ptr, y->strs[i].ptr, x->strs[i].len)) return false;
        return true;
    }
    if (x->type == KILN_GGUF_ARRAY) {
        for (uint64_t i = 0; i < x->n; i++)
            if (!kiln_value_equal(&x->vals[i], &y->vals[i])) return false;
        return true;
    }
    return !memcmp(x->data, y->data, x->n * kiln_gguf_vtype_size(x->type));
}
