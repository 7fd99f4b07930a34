/* inspect/diff.c - builds the diff report (see diff.h). */
#include "diff.h"

#include "../core/name_regex.h"
#include "../core/progress.h"
#include "format.h"
#include "stats.h"

#include <stdlib.h>
#include <string.h>

static char *key_cstr(kiln_str k) {
    return kiln_str_dup(k);
}

static json_t *metadata_diff(const kiln_gguf *a, const kiln_gguf *b) {
    json_t *added = json_array(), *removed = json_array(), *changed = json_array();
    for (uint64_t i = 0; a && i < a->n_kv; i++) {
        char *k = key_cstr(a->kv[i].key);
        const kiln_kv *other = b ? kiln_gguf_find_kv(b, k) : NULL;
        if (!other) {
            json_array_append_new(removed, json_string(k));
        } else if (!kiln_value_equal(&a->kv[i].val, &other->val)) {
            json_t *c = json_object();
            json_object_set_new(c, "key", json_string(k));
            char va[512], vb[512];
            kiln_value_str(&a->kv[i].val, va, sizeof va, 8);
            kiln_value_str(&other->val, vb, sizeof vb, 8);
            json_object_set_new(c, "a", json_string(va));
            json_object_set_new(c, "b", json_string(vb));
            json_array_append_new(changed, c);
        }
        free(k);
    }
    for (uint64_t i = 0; b && i < b->n_kv; i++) {
        char *k = key_cstr(b->kv[i].key);
        if (!a || !kiln_gguf_find_kv(a, k)) json_array_append_new(added, json_string(k));
        free(k);
    }
    json_t *o = json_object();
    json_object_set_new(o, "added", added);
    json_object_set_new(o, "removed", removed);
    json_object_set_new(o, "changed", changed);
    return o;
}

static json_t *shape_json(const kiln_view_tensor *t) {
    json_t *s = json_array();
    for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(s, json_integer(t->shape[d]));
    return s;
}

static bool same_shape(const kiln_view_tensor *x, const kiln_view_tensor *y) {
    if (x->n_dims != y->n_dims) return false;
    for (uint32_t d = 0; d < x->n_dims; d++)
        if (x->shape[d] != y->shape[d]) return false;
    return true;
}

static bool gated(const kiln_diff_opts *o) {
    return o->max_abs >= 0 || o->max_rmse >= 0 || o->max_rel >= 0 || o->min_cosine >= -1;
}

/* Which of v's tensors the --tensors pattern (NULL: every one) selects, as
 * a malloc'd array of v->n_tensors flags; NULL with a message on error. */
static bool *select_tensors(const kiln_view *v, const char *pattern, kiln_err *err) {
    kiln_name_regex *re = NULL;
    if (pattern && !(re = kiln_name_regex_compile(pattern, "--tensors", err))) return NULL;
    bool *sel = calloc(v->n_tensors + 1, sizeof *sel);
    if (!sel) kiln_fail(err, v->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; sel && i < v->n_tensors; i++) {
        int hit = re ? kiln_name_regex_match(re, v->tensors[i].name, strlen(v->tensors[i].name), err) : 1;
        if (hit < 0) {
            free(sel);
            sel = NULL;
        } else sel[i] = hit;
    }
    kiln_name_regex_free(re);
    return sel;
}

json_t *kiln_diff_report(const kiln_view *a, const kiln_view *b, const kiln_diff_opts *o, kiln_err *err) {
    bool *sel_a = select_tensors(a, o->tensor_regex, err), *sel_b = sel_a ? select_tensors(b, o->tensor_regex, err) : NULL;
    if (!sel_b) {
        free(sel_a);
        return NULL;
    }
    json_t *r = json_object();
    json_object_set_new(r, "schema", json_string("kiln.diff/1"));
    json_object_set_new(r, "a", json_string(a->path));
    json_object_set_new(r, "b", json_string(b->path));
    json_object_set_new(r, "metadata", metadata_diff(a->gguf, b->gguf));
    json_t *added = json_array(), *removed = json_array(), *changed = json_array(), *values = json_array();
    json_t *failures = json_array();
    bool structural = false;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const kiln_view_tensor *ta = &a->tensors[i], *tb = kiln_view_find(b, ta->name);
        if (sel_a[i] && tb && o->values) bytes += ta->nbytes + tb->nbytes;
    }
    kiln_progress prog;
    if (o->values) kiln_progress_start(&prog, "compare", bytes, "B");
    int rc = 0;
    for (uint64_t i = 0; i < a->n_tensors && rc == 0; i++) {
        const kiln_view_tensor *ta = &a->tensors[i];
        if (!sel_a[i]) continue;
        const kiln_view_tensor *tb = kiln_view_find(b, ta->name);
        if (!tb) {
            json_array_append_new(removed, json_string(ta->name));
            structural = true;
            continue;
        }
        bool shape_differs = !same_shape(ta, tb);
        if (strcmp(ta->type_name, tb->type_name) || shape_differs) {
            json_t *c = json_object();
            json_object_set_new(c, "name", json_string(ta->name));
            json_object_set_new(c, "type_a", json_string(ta->type_name));
            json_object_set_new(c, "type_b", json_string(tb->type_name));
            json_object_set_new(c, "shape_a", shape_json(ta));
            json_object_set_new(c, "shape_b", shape_json(tb));
            json_array_append_new(changed, c);
            structural |= shape_differs;
        }
        if (!o->values || shape_differs || !kiln_view_can_dequantize(ta) || !kiln_view_can_dequantize(tb)) continue;
        kiln_compare cmp;
        if (kiln_tensor_compare(ta, tb, &cmp, &prog, err) < 0) {
            rc = -1;
            break;
        }
        json_t *v = json_object();
        json_object_set_new(v, "name", json_string(ta->name));
        json_object_set_new(v, "max_abs", json_real(cmp.max_abs));
        json_object_set_new(v, "rmse", json_real(cmp.rmse));
        json_object_set_new(v, "rel", json_real(cmp.rel));
        json_object_set_new(v, "cosine", json_real(cmp.cosine));
        json_array_append_new(values, v);
        const char *broke = NULL;
        if (o->max_abs >= 0 && !(cmp.max_abs <= o->max_abs)) broke = "max_abs";
        else if (o->max_rmse >= 0 && !(cmp.rmse <= o->max_rmse)) broke = "rmse";
        else if (o->max_rel >= 0 && !(cmp.rel <= o->max_rel)) broke = "rel";
        else if (o->min_cosine >= -1 && !(cmp.cosine >= o->min_cosine)) broke = "cosine";
        if (broke) {
            json_t *f = json_object();
            json_object_set_new(f, "name", json_string(ta->name));
            json_object_set_new(f, "metric", json_string(broke));
            json_array_append_new(failures, f);
        }
    }
    for (uint64_t i = 0; i < b->n_tensors && rc == 0; i++)
        if (sel_b[i] && !kiln_view_find(a, b->tensors[i].name)) {
            json_array_append_new(added, json_string(b->tensors[i].name));
            structural = true;
        }
    if (o->values) kiln_progress_end(&prog);
    free(sel_a);
    free(sel_b);
    json_t *t = json_object();
    json_object_set_new(t, "added", added);
    json_object_set_new(t, "removed", removed);
    json_object_set_new(t, "changed", changed);
    json_object_set_new(r, "tensors", t);
    json_object_set_new(r, "values", values);
    json_object_set_new(r, "failures", failures);
    bool passed = !gated(o) || (json_array_size(failures) == 0 && !structural);
    json_object_set_new(r, "gated", json_boolean(gated(o)));
    json_object_set_new(r, "passed", json_boolean(passed));
    if (rc < 0) {
        json_decref(r);
        return NULL;
    }
    return r;
}
