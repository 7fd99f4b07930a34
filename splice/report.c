/* splice/report.c - a splice plan as a table for people and as JSON
 * (schema "kiln.splice/1"). Both render the same plan, so --dry-run and
 * --json can never disagree with each other or with what is written.
 * Only changed tensors are listed; the totals cover the whole model. */
#include "splice.h"

#include "../core/escape.h"
#include "../core/jsonw.h"
#include "../core/types.h"

#include <inttypes.h>
#include <string.h>

static double bpw(uint64_t bytes, uint64_t weights) { return weights ? 8.0 * (double)bytes / (double)weights : 0; }

/* "0,3,5-7" from the expert flags. */
static void ids_str(const kiln_splice_plan *p, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (uint64_t e = 0; e < p->n_expert && n < cap; e++) {
        if (!p->expert_sel[e] || (e > 0 && p->expert_sel[e - 1])) continue;
        uint64_t end = e;
        while (end + 1 < p->n_expert && p->expert_sel[end + 1]) end++;
        if (end == e) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, n ? "," : "", e);
        else n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64 "-%" PRIu64, n ? "," : "", e, end);
    }
}

static const char *donor_type(const kiln_splice_item *it) { return it->donor ? kiln_type_name(it->donor->type) : "-"; }

void kiln_splice_print_plan(FILE *out, const kiln_splice_plan *p) {
    const kiln_splice_opts *o = &p->opts;
    fprintf(out, "splice plan: %s%s%s -> %s\n", o->base, o->donor ? " + " : "", o->donor ? o->donor : "",
            o->output ? o->output : "(no output)");
    fprintf(out, "selection: %s\n", kiln_esc(p->selection).s);
    if (p->expert_sel) {
        char ids[4096];
        ids_str(p, ids, sizeof ids);
        fprintf(out, "experts: %s of %" PRIu64 "\n", ids, p->n_expert);
    }
    fprintf(out, "\n%-40s %-10s %-8s %-8s %-8s %14s %14s\n", "tensor", "action", "base", "donor", "output",
            "bytes before", "bytes after");
    for (uint64_t i = 0; i < p->n_items; i++) {
        const kiln_splice_item *it = &p->items[i];
        if (it->action == KILN_SPLICE_FROM_BASE) continue;
        fprintf(out, "%-40s %-10s %-8s %-8s %-8s %14" PRIu64 " %14" PRIu64 "\n", kiln_esc(it->name).s,
                kiln_splice_action_name(it->action), kiln_type_name(it->base->type), donor_type(it),
                kiln_type_name(it->type), it->bytes_before, it->bytes_after);
    }
    int64_t delta = (int64_t)p->bytes_after - (int64_t)p->bytes_before;
    double b0 = bpw(p->bytes_before, p->weights_before), b1 = bpw(p->bytes_after, p->weights_after);
    fprintf(out, "\n%" PRIu64 " of %" PRIu64 " tensors change\n", p->n_changed, p->n_items);
    fprintf(out, "tensor data: %" PRIu64 " -> %" PRIu64 " bytes (%+" PRId64 ", %+.2f%%)\n", p->bytes_before,
            p->bytes_after, delta, p->bytes_before ? 100.0 * (double)delta / (double)p->bytes_before : 0.0);
    fprintf(out, "bits per weight: %.4f -> %.4f (%+.4f)\n", b0, b1, b1 - b0);
    if (o->keep_experts)
        fprintf(out, "%s.expert_count: %" PRIu64 " -> %" PRIu64 ", expert_used_count: %" PRIu64 " -> %" PRIu64 "\n",
                kiln_esc(p->arch).s, p->n_expert, p->n_expert_sel, p->expert_used, p->expert_used_after);
}

static void jw_item(kiln_jsonw *j, const kiln_splice_item *it) {
    kiln_jw_obj(j);
    kiln_jw_kv_str(j, "name", it->name);
    kiln_jw_kv_str(j, "action", kiln_splice_action_name(it->action));
    kiln_jw_kv_str(j, "base_type", kiln_type_name(it->base->type));
    kiln_jw_key(j, "donor_type");
    if (it->donor) kiln_jw_str(j, kiln_type_name(it->donor->type));
    else kiln_jw_null(j);
    kiln_jw_kv_str(j, "type", kiln_type_name(it->type));
    kiln_jw_key(j, "shape");
    kiln_jw_arr(j);
    for (uint32_t d = 0; d < it->n_dims; d++) kiln_jw_int(j, it->ne[d]);
    kiln_jw_end_arr(j);
    kiln_jw_kv_uint(j, "bytes_before", it->bytes_before);
    kiln_jw_kv_uint(j, "bytes_after", it->bytes_after);
    kiln_jw_key(j, "imatrix");
    kiln_jw_bool(j, it->imx != NULL);
    kiln_jw_end_obj(j);
}

static void jw_str_or_null(kiln_jsonw *j, const char *key, const char *v) {
    kiln_jw_key(j, key);
    if (v && *v) kiln_jw_str(j, v);
    else kiln_jw_null(j);
}

void kiln_splice_print_plan_json(FILE *out, const kiln_splice_plan *p) {
    const kiln_splice_opts *o = &p->opts;
    static kiln_jsonw j;
    kiln_jw_init(&j, out, true);
    kiln_jw_obj(&j);
    jw_str_or_null(&j, "schema", "kiln.splice/1");
    jw_str_or_null(&j, "base", o->base);
    jw_str_or_null(&j, "donor", o->donor);
    jw_str_or_null(&j, "output", o->output);
    jw_str_or_null(&j, "donor_id", p->donor_id);
    jw_str_or_null(&j, "selection", p->selection);
    kiln_jw_key(&j, "experts");
    if (p->expert_sel) {
        kiln_jw_arr(&j);
        for (uint64_t e = 0; e < p->n_expert; e++)
            if (p->expert_sel[e]) kiln_jw_uint(&j, e);
        kiln_jw_end_arr(&j);
    } else {
        kiln_jw_null(&j);
    }
    kiln_jw_key(&j, "expert_count");
    kiln_jw_obj(&j);
    kiln_jw_kv_uint(&j, "before", p->n_expert);
    kiln_jw_kv_uint(&j, "after", o->keep_experts ? p->n_expert_sel : p->n_expert);
    kiln_jw_kv_uint(&j, "used_before", p->expert_used);
    kiln_jw_kv_uint(&j, "used_after", o->keep_experts ? p->expert_used_after : p->expert_used);
    kiln_jw_end_obj(&j);
    kiln_jw_key(&j, "tensors");
    kiln_jw_arr(&j);
    for (uint64_t i = 0; i < p->n_items; i++)
        if (p->items[i].action != KILN_SPLICE_FROM_BASE) jw_item(&j, &p->items[i]);
    kiln_jw_end_arr(&j);
    kiln_jw_key(&j, "totals");
    kiln_jw_obj(&j);
    kiln_jw_kv_uint(&j, "tensors", p->n_items);
    kiln_jw_kv_uint(&j, "tensors_changed", p->n_changed);
    kiln_jw_kv_uint(&j, "bytes_before", p->bytes_before);
    kiln_jw_kv_uint(&j, "bytes_after", p->bytes_after);
    kiln_jw_kv_int(&j, "delta_bytes", (int64_t)p->bytes_after - (int64_t)p->bytes_before);
    double b0 = bpw(p->bytes_before, p->weights_before), b1 = bpw(p->bytes_after, p->weights_after);
    kiln_jw_kv_real(&j, "bpw_before", b0);
    kiln_jw_kv_real(&j, "bpw_after", b1);
    kiln_jw_kv_real(&j, "delta_bpw", b1 - b0);
    kiln_jw_end_obj(&j);
    kiln_jw_key(&j, "warnings");
    kiln_jw_arr(&j);
    for (uint64_t i = 0; i < p->n_warnings; i++) kiln_jw_str(&j, p->warnings[i]);
    kiln_jw_end_arr(&j);
    kiln_jw_end_obj(&j);
    kiln_jw_finish(&j);
}
