/* inspect/inspect.c - collects and renders the inspect report (see
 * inspect.h). */
#include "inspect.h"

#include "../core/escape.h"
#include "../core/jsonw.h"
#include "../core/name_regex.h"
#include "../core/progress.h"
#include "format.h"
#include "../core/units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kiln_inspect_collect(const kiln_view *v, const kiln_inspect_opts *o, kiln_inspect_result *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    kiln_name_regex *re = NULL;
    if (o->tensor_regex && !(re = kiln_name_regex_compile(o->tensor_regex, "--tensors", err))) return -1;
    r->sel = calloc(v->n_tensors + 1, sizeof *r->sel);
    r->stats = o->stats ? calloc(v->n_tensors + 1, sizeof *r->stats) : NULL;
    r->has_stats = o->stats ? calloc(v->n_tensors + 1, sizeof *r->has_stats) : NULL;
    if (!r->sel || (o->stats && (!r->stats || !r->has_stats))) {
        kiln_name_regex_free(re);
        kiln_inspect_free(r);
        return kiln_fail(err, v->path, NULL, -1, "out of memory");
    }
    for (uint64_t i = 0; i < v->n_tensors; i++) {
        const kiln_view_tensor *t = &v->tensors[i];
        int hit = re ? kiln_name_regex_match(re, t->name, strlen(t->name), err) : 1;
        if (hit < 0) {
            kiln_name_regex_free(re);
            kiln_inspect_free(r);
            return -1;
        }
        if (!hit) continue;
        r->sel[r->n_sel++] = t;
        r->total_bytes += t->nbytes;
        r->total_elements += (uint64_t)t->nelements;
        int k = 0;
        while (k < r->n_types && strcmp(r->types[k].type, t->type_name)) k++;
        if (k == r->n_types && k < 64) r->types[r->n_types++] = (kiln_type_total){t->type_name, 0, 0};
        if (k < 64) {
            r->types[k].count++;
            r->types[k].bytes += t->nbytes;
        }
    }
    kiln_name_regex_free(re);
    if (!o->stats) return 0;
    kiln_progress prog;
    kiln_progress_start(&prog, "stats", r->total_bytes, "B");
    for (uint64_t i = 0; i < r->n_sel; i++) {
        if (!kiln_view_can_dequantize(r->sel[i])) continue;
        if (kiln_tensor_stats(r->sel[i], &r->stats[i], &prog, err) < 0) {
            kiln_progress_end(&prog);
            kiln_inspect_free(r);
            return -1;
        }
        r->has_stats[i] = true;
    }
    kiln_progress_end(&prog);
    return 0;
}

void kiln_inspect_free(kiln_inspect_result *r) {
    free(r->sel);
    free(r->stats);
    free(r->has_stats);
    memset(r, 0, sizeof *r);
}

static double bpw(uint64_t bytes, uint64_t elements) {
    return elements ? (double)bytes * 8 / (double)elements : 0;
}

void kiln_inspect_write_json(FILE *out, const kiln_view *v, const kiln_inspect_result *r, const kiln_inspect_opts *o) {
    kiln_jsonw w;
    kiln_jw_init(&w, out, true);
    kiln_jw_obj(&w);
    kiln_jw_key(&w, "schema"); kiln_jw_str(&w, "kiln.inspect/1");
    kiln_jw_key(&w, "path"); kiln_jw_str(&w, v->path);
    kiln_jw_key(&w, "format"); kiln_jw_str(&w, v->gguf ? "gguf" : "safetensors");
    if (v->gguf) {
        kiln_jw_key(&w, "version"); kiln_jw_uint(&w, v->gguf->version);
        kiln_jw_key(&w, "alignment"); kiln_jw_uint(&w, v->gguf->alignment);
    }
    kiln_jw_key(&w, "files");
    kiln_jw_arr(&w);
    if (v->gguf)
        for (uint32_t s = 0; s < v->gguf->n_shards; s++) kiln_jw_str(&w, v->gguf->shards[s].path);
    else
        for (uint32_t s = 0; s < v->st->n_files; s++) kiln_jw_str(&w, v->st->files[s].path);
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "file_size"); kiln_jw_uint(&w, v->total_size);
    kiln_jw_key(&w, "n_tensors"); kiln_jw_uint(&w, v->n_tensors);
    kiln_jw_key(&w, "n_kv"); kiln_jw_uint(&w, v->gguf ? v->gguf->n_kv : 0);
    kiln_jw_key(&w, "metadata");
    kiln_jw_arr(&w);
    for (uint64_t i = 0; v->gguf && i < v->gguf->n_kv; i++) {
        const kiln_kv *kv = &v->gguf->kv[i];
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "key"); kiln_jw_strn(&w, kv->key.ptr, kv->key.len);
        kiln_jw_key(&w, "type"); kiln_jw_str(&w, kiln_gguf_vtype_name(kv->val.type));
        if (kv->val.type == KILN_GGUF_ARRAY) {
            kiln_jw_key(&w, "array_type"); kiln_jw_str(&w, kiln_gguf_vtype_name(kv->val.arr.type));
            kiln_jw_key(&w, "count"); kiln_jw_uint(&w, kv->val.arr.n);
        }
        kiln_jw_key(&w, "value"); kiln_jw_value(&w, &kv->val, o->max_items);
        kiln_jw_key(&w, "offset"); kiln_jw_uint(&w, kv->offset);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "tensors");
    kiln_jw_arr(&w);
    for (uint64_t i = 0; i < r->n_sel; i++) {
        const kiln_view_tensor *t = r->sel[i];
        kiln_jw_obj(&w);
        kiln_jw_kv_str(&w, "name", t->name);
        kiln_jw_kv_str(&w, "type", t->type_name);
        kiln_jw_key(&w, "shape");
        kiln_jw_arr(&w);
        for (uint32_t d = 0; d < t->n_dims; d++) kiln_jw_int(&w, t->shape[d]);
        kiln_jw_end_arr(&w);
        kiln_jw_kv_int(&w, "elements", t->nelements);
        kiln_jw_kv_uint(&w, "offset", t->offset);
        kiln_jw_kv_uint(&w, "bytes", t->nbytes);
        kiln_jw_kv_real(&w, "bpw", bpw(t->nbytes, (uint64_t)t->nelements));
        if (r->stats) {
            kiln_jw_key(&w, "stats");
            if (!r->has_stats[i]) {
                kiln_jw_null(&w);
            } else {
                const kiln_stats *s = &r->stats[i];
                kiln_jw_obj(&w);
                kiln_jw_key(&w, "min"); kiln_jw_real(&w, s->min);
                kiln_jw_key(&w, "max"); kiln_jw_real(&w, s->max);
                kiln_jw_key(&w, "mean"); kiln_jw_real(&w, s->mean);
                kiln_jw_key(&w, "std"); kiln_jw_real(&w, s->std);
                kiln_jw_key(&w, "nan"); kiln_jw_uint(&w, s->n_nan);
                kiln_jw_key(&w, "inf"); kiln_jw_uint(&w, s->n_inf);
                kiln_jw_end_obj(&w);
            }
        }
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "types");
    kiln_jw_arr(&w);
    for (int k = 0; k < r->n_types; k++) {
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "type"); kiln_jw_str(&w, r->types[k].type);
        kiln_jw_key(&w, "count"); kiln_jw_uint(&w, r->types[k].count);
        kiln_jw_key(&w, "bytes"); kiln_jw_uint(&w, r->types[k].bytes);
        kiln_jw_key(&w, "share"); kiln_jw_real(&w, r->total_bytes ? (double)r->types[k].bytes / (double)r->total_bytes : 0);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "totals");
    kiln_jw_obj(&w);
    kiln_jw_key(&w, "tensors"); kiln_jw_uint(&w, r->n_sel);
    kiln_jw_key(&w, "elements"); kiln_jw_uint(&w, r->total_elements);
    kiln_jw_key(&w, "bytes"); kiln_jw_uint(&w, r->total_bytes);
    kiln_jw_key(&w, "bpw"); kiln_jw_real(&w, bpw(r->total_bytes, r->total_elements));
    kiln_jw_end_obj(&w);
    kiln_jw_end_obj(&w);
    kiln_jw_finish(&w);
}

void kiln_inspect_write_text(FILE *out, const kiln_view *v, const kiln_inspect_result *r, const kiln_inspect_opts *o) {
    char size[32];
    kiln_human_bytes((double)v->total_size, size, sizeof size);
    uint32_t n_files = v->gguf ? v->gguf->n_shards : v->st->n_files;
    fprintf(out, "%s: %s", v->path, v->gguf ? "GGUF" : "safetensors");
    if (v->gguf) fprintf(out, " v%u", v->gguf->version);
    fprintf(out, ", %u file%s, %s (%llu bytes)\n", n_files, n_files == 1 ? "" : "s", size, (unsigned long long)v->total_size);
    if (v->gguf) fprintf(out, "alignment %llu, ", (unsigned long long)v->gguf->alignment);
    fprintf(out, "%llu tensors, %llu metadata keys\n", (unsigned long long)v->n_tensors,
            (unsigned long long)(v->gguf ? v->gguf->n_kv : 0));
    if (v->gguf && v->gguf->n_kv) fprintf(out, "\nmetadata:\n");
    for (uint64_t i = 0; v->gguf && i < v->gguf->n_kv; i++) {
        const kiln_kv *kv = &v->gguf->kv[i];
        char type[64], val[200];
        kiln_value_type_str(&kv->val, type, sizeof type);
        kiln_value_str(&kv->val, val, sizeof val, o->max_items ? o->max_items : 8);
        fprintf(out, "  %-44s %-18s %s\n", kiln_escn(kv->key.ptr, kv->key.len).s, type, val); /* format.c escaped it */
    }
    fprintf(out, "\ntensors:\n  %-40s %-8s %-22s %12s %12s %7s", "name", "type", "shape", "offset", "bytes", "bpw");
    if (r->stats) fprintf(out, " %11s %11s %11s %11s %5s %5s", "min", "max", "mean", "std", "nan", "inf");
    fputc('\n', out);
    for (uint64_t i = 0; i < r->n_sel; i++) {
        const kiln_view_tensor *t = r->sel[i];
        char shape[64] = "";
        for (uint32_t d = 0; d < t->n_dims; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), d ? " x %lld" : "%lld", (long long)t->shape[d]);
        fprintf(out, "  %-40s %-8s %-22s %12llu %12llu %7.3f", kiln_esc(t->name).s, kiln_esc(t->type_name).s, shape,
                (unsigned long long)t->offset,
                (unsigned long long)t->nbytes, bpw(t->nbytes, (uint64_t)t->nelements));
        if (r->stats && r->has_stats[i]) {
            const kiln_stats *s = &r->stats[i];
            fprintf(out, " %11.4g %11.4g %11.4g %11.4g %5llu %5llu", s->min, s->max, s->mean, s->std,
                    (unsigned long long)s->n_nan, (unsigned long long)s->n_inf);
        } else if (r->stats) {
            fprintf(out, " (kiln cannot dequantize %s)", kiln_esc(t->type_name).s);
        }
        fputc('\n', out);
    }
    fprintf(out, "\nper type:\n  %-8s %8s %14s %7s\n", "type", "count", "bytes", "share");
    for (int k = 0; k < r->n_types; k++)
        fprintf(out, "  %-8s %8llu %14llu %6.1f%%\n", kiln_esc(r->types[k].type).s, (unsigned long long)r->types[k].count,
                (unsigned long long)r->types[k].bytes, r->total_bytes ? 100.0 * (double)r->types[k].bytes / (double)r->total_bytes : 0);
    fprintf(out, "  %-8s %8llu %14llu  %.3f bits per weight\n", "total", (unsigned long long)r->n_sel,
            (unsigned long long)r->total_bytes, bpw(r->total_bytes, r->total_elements));
}
