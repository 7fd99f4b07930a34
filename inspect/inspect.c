/* inspect/inspect.c - builds the inspect report (see inspect.h). */
#include "inspect.h"

#include "../core/progress.h"
#include "../core/types.h"
#include "format.h"
#include "stats.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

static json_t *metadata_json(const kiln_gguf *g, size_t max_items) {
    json_t *arr = json_array();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kiln_kv *kv = &g->kv[i];
        json_t *o = json_object();
        json_object_set_new(o, "key", json_stringn_nocheck(kv->key.ptr, kv->key.len));
        json_object_set_new(o, "type", json_string(kiln_gguf_vtype_name(kv->val.type)));
        if (kv->val.type == KILN_GGUF_ARRAY) {
            json_object_set_new(o, "array_type", json_string(kiln_gguf_vtype_name(kv->val.arr.type)));
            json_object_set_new(o, "count", json_integer((json_int_t)kv->val.arr.n));
        }
        json_object_set_new(o, "value", kiln_value_json(&kv->val, max_items));
        json_object_set_new(o, "offset", json_integer((json_int_t)kv->offset));
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *num(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

json_t *kiln_inspect_report(const kiln_view *v, const kiln_inspect_opts *o, kiln_err *err) {
    regex_t re;
    if (o->tensor_regex && regcomp(&re, o->tensor_regex, REG_EXTENDED | REG_NOSUB) != 0) {
        kiln_fail(err, NULL, "--tensors", -1, "invalid regular expression '%s'", o->tensor_regex);
        return NULL;
    }
    json_t *r = json_object();
    json_object_set_new(r, "schema", json_string("kiln.inspect/1"));
    json_object_set_new(r, "path", json_string(v->path));
    json_object_set_new(r, "format", json_string(v->kind == KILN_VIEW_GGUF ? "gguf" : "safetensors"));
    json_t *files = json_array();
    if (v->gguf) {
        json_object_set_new(r, "version", json_integer(v->gguf->version));
        json_object_set_new(r, "alignment", json_integer((json_int_t)v->gguf->alignment));
        for (uint32_t s = 0; s < v->gguf->n_shards; s++) json_array_append_new(files, json_string(v->gguf->shards[s].path));
    } else {
        for (uint32_t s = 0; s < v->st->n_files; s++) json_array_append_new(files, json_string(v->st->files[s].path));
    }
    json_object_set_new(r, "files", files);
    json_object_set_new(r, "file_size", json_integer((json_int_t)v->total_size));
    json_object_set_new(r, "n_tensors", json_integer((json_int_t)v->n_tensors));
    json_object_set_new(r, "n_kv", json_integer(v->gguf ? (json_int_t)v->gguf->n_kv : 0));
    json_object_set_new(r, "metadata", v->gguf ? metadata_json(v->gguf, o->max_items) : json_array());

    /* Selected tensors, then optional stats over them with one progress bar. */
    uint64_t n_sel = 0, sel_bytes = 0;
    const kiln_view_tensor **sel = calloc(v->n_tensors + 1, sizeof *sel);
    for (uint64_t i = 0; sel && i < v->n_tensors; i++) {
        if (o->tensor_regex && regexec(&re, v->tensors[i].name, 0, NULL, 0) != 0) continue;
        sel[n_sel++] = &v->tensors[i];
        sel_bytes += v->tensors[i].nbytes;
    }
    if (o->tensor_regex) regfree(&re);
    if (!sel) {
        json_decref(r);
        kiln_fail(err, v->path, NULL, -1, "out of memory");
        return NULL;
    }
    kiln_progress prog;
    if (o->stats) kiln_progress_start(&prog, "stats", sel_bytes, "B");

    json_t *tensors = json_array();
    json_t *types = json_object(); /* type -> {count, bytes}, in first-seen order */
    uint64_t total_bytes = 0, total_el = 0;
    for (uint64_t i = 0; i < n_sel; i++) {
        const kiln_view_tensor *t = sel[i];
        json_t *tj = json_object();
        json_object_set_new(tj, "name", json_string(t->name));
        json_object_set_new(tj, "type", json_string(t->type_name));
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(tj, "shape", shape);
        json_object_set_new(tj, "elements", json_integer(t->nelements));
        json_object_set_new(tj, "offset", json_integer((json_int_t)t->offset));
        json_object_set_new(tj, "bytes", json_integer((json_int_t)t->nbytes));
        json_object_set_new(tj, "bpw", json_real(t->nelements ? (double)t->nbytes * 8 / (double)t->nelements : 0));
        if (o->stats) {
            kiln_stats s;
            if (!kiln_view_can_dequantize(t)) {
                json_object_set_new(tj, "stats", json_null());
            } else if (kiln_tensor_stats(t, &s, &prog, err) < 0) {
                kiln_progress_end(&prog);
                json_decref(tj);
                json_decref(tensors);
                json_decref(types);
                json_decref(r);
                free(sel);
                return NULL;
            } else {
                json_t *sj = json_object();
                json_object_set_new(sj, "min", num(s.min));
                json_object_set_new(sj, "max", num(s.max));
                json_object_set_new(sj, "mean", num(s.mean));
                json_object_set_new(sj, "std", num(s.std));
                json_object_set_new(sj, "nan", json_integer((json_int_t)s.n_nan));
                json_object_set_new(sj, "inf", json_integer((json_int_t)s.n_inf));
                json_object_set_new(tj, "stats", sj);
            }
        }
        json_array_append_new(tensors, tj);
        json_t *ty = json_object_get(types, t->type_name);
        if (!ty) {
            ty = json_object();
            json_object_set_new(ty, "count", json_integer(0));
            json_object_set_new(ty, "bytes", json_integer(0));
            json_object_set_new(types, t->type_name, ty);
        }
        json_object_set_new(ty, "count", json_integer(json_integer_value(json_object_get(ty, "count")) + 1));
        json_object_set_new(ty, "bytes", json_integer(json_integer_value(json_object_get(ty, "bytes")) + (json_int_t)t->nbytes));
        total_bytes += t->nbytes;
        total_el += (uint64_t)t->nelements;
    }
    if (o->stats) kiln_progress_end(&prog);
    free(sel);
    json_object_set_new(r, "tensors", tensors);

    json_t *type_list = json_array();
    const char *tname;
    json_t *ty;
    json_object_foreach(types, tname, ty) {
        json_t *e = json_object();
        json_object_set_new(e, "type", json_string(tname));
        json_object_set(e, "count", json_object_get(ty, "count"));
        json_object_set(e, "bytes", json_object_get(ty, "bytes"));
        double b = (double)json_integer_value(json_object_get(ty, "bytes"));
        json_object_set_new(e, "share", json_real(total_bytes ? b / (double)total_bytes : 0));
        json_array_append_new(type_list, e);
    }
    json_decref(types);
    json_object_set_new(r, "types", type_list);
    json_t *tot = json_object();
    json_object_set_new(tot, "tensors", json_integer((json_int_t)n_sel));
    json_object_set_new(tot, "elements", json_integer((json_int_t)total_el));
    json_object_set_new(tot, "bytes", json_integer((json_int_t)total_bytes));
    json_object_set_new(tot, "bpw", json_real(total_el ? (double)total_bytes * 8 / (double)total_el : 0));
    json_object_set_new(r, "totals", tot);
    return r;
}
