/* quantize/cmd_quantize.c - `kiln quantize IN OUT PRESET|TYPE`: parses
 * options, loads the imatrix, calls kiln_quantize_model() and prints the
 * plan (--dry-run) or the summary, as text or JSON (kiln.quantize/1). */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/jsonw.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../core/units.h"
#include "../codec/codec.h"
#include "cmd_analyze.h"
#include "budget.h"
#include "quantize_model.h"
#include "recipe.h"
#include "sensitivity_scan.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln quantize IN OUT PRESET|TYPE [options]\n"
    "       kiln quantize --dry-run IN [OUT] PRESET|TYPE [options]\n"
    "       kiln quantize IN OUT --target-bpw B|--target-size SIZE (--sensitivity FILE|-f TEXT)\n"
    "       kiln quantize --list-types [--json]\n"
    "       kiln quantize --analyze IN -f TEXT [options]   sensitivity scan: the KLD each\n"
    "                tensor adds in each type (kiln quantize --analyze --help)\n"
    "\n"
    "Quantizes a model. IN is a GGUF (any shard of a split model reads all of\n"
    "it) or a Hugging Face model (directory, HF cache folder or archive), which\n"
    "is converted and quantized in one pass, as kiln convert + kiln quantize.\n"
    "PRESET is any of llama-quantize's: its name (Q4_K_M, IQ3_M, Q2_K_S, COPY,\n"
    "...; Q3_K, Q4_K and Q5_K are its aliases of the _M mixes) or its ftype\n"
    "number (15), with the per-tensor types llama-quantize chooses;\n"
    "'kiln quantize --list-types' prints every preset and type. Norms and 1-D\n"
    "tensors keep their type; --pure gives every other weight the base type.\n"
    "A type no preset is named after (MXFP4, NVFP4) gives every weight that type.\n"
    "Tensors are written by layer, then name, as llama-quantize writes them.\n"
    "\n"
    "  --imatrix FILE              importance matrix, llama.cpp GGUF or legacy .dat\n"
    "                              (the IQ1/IQ2 presets, IQ3_XXS, IQ3_XS and\n"
    "                              Q2_K_S need one: see --list-types)\n"
    "  --tensor-type REGEX=TYPE    tensors whose name matches REGEX get TYPE\n"
    "                              (repeatable; the first matching one wins)\n"
    "  --recipe FILE               per-tensor-class types from a recipe file, one rule\n"
    "                              a line: CLASS|/REGEX/ [layers=37-42] TYPE, # comments;\n"
    "                              each rule is a --tensor-type rule, after the\n"
    "                              command line's (README: Recipes)\n"
    "  --list-classes              the tensor classes a recipe can name (Markdown)\n"
    "  --output-tensor-type TYPE   type of output.weight\n"
    "  --token-embedding-type TYPE type of token_embd.weight\n"
    "  --pure                      no mix: every quantizable weight gets the base type\n"
    "  --allow-requantize          accept inputs that are already quantized\n"
    "  --no-fallback               fail when a row length does not fit a type's\n"
    "                              blocks instead of falling back to another type\n"
    "  --keep-split                one output shard per input shard\n"
    "  --split-max-size SIZE       split the output into shards of at most SIZE\n"
    "                              (500M, 2G; K/M/G = 1000^n, Ki/Mi/Gi = 1024^n)\n"
    "  --dry-run                   print the plan (tensor, from, to, bytes) and\n"
    "                              totals; write nothing\n"
    "  --json                      print the plan or summary as JSON (kiln.quantize/1)\n"
    "  --list-types                every type and preset: bits per weight, whether\n"
    "                              it needs an imatrix, block layout (Markdown;\n"
    "                              with --json, kiln.quantize-types/1)\n"
    "\n"
    "Size budget: instead of PRESET|TYPE, per-tensor types chosen to minimize the\n"
    "estimated KL divergence for a size (README: Quantizing to a size budget):\n"
    "  --target-bpw B              the whole file (header, metadata, tensors) at most\n"
    "                              B bits per weight of the model: B x weights / 8 bytes\n"
    "  --target-size SIZE          the whole file at most SIZE bytes (plain bytes, or\n"
    "                              as --split-max-size: 3.5G = 3.5 x 1000^3, 3.5Gi)\n"
    "  --sensitivity FILE          the sensitivity file of IN ('kiln quantize --analyze')\n"
    "  -f TEXT                     without --sensitivity: scan IN on this calibration\n"
    "                              text first (with --imatrix when given); with a\n"
    "                              budget, -f is the text, so overwrite with --force\n"
    "  --per-expert                refused: GGUF stores one type per tensor, so all\n"
    "                              experts of a 3-D expert tensor share one\n"
    "\n"
    "  -t, --threads N             threads (default: all cores)\n"
    "  -q, --quiet                 no progress bar and no summary\n"
    "  -f, --force                 overwrite an existing output\n"
    "  -h, --help                  this help\n";

enum { O_IMATRIX = 256, O_TT, O_OUT_T, O_EMB_T, O_PURE, O_REQ, O_NOFB, O_KEEP, O_SPLIT, O_DRY, O_JSON, O_LIST,
       O_BPW, O_SIZE, O_SENS, O_PER_EXPERT, O_FORCE, O_RECIPE, O_LIST_CLASSES };

static const char *reason(const kiln_quant_tensor *q, const kiln_quant_opts *o, char *buf, size_t cap) {
    const kiln_tensor_plan *p = &q->plan;
    switch (p->why) {
    case KILN_WHY_KEEP: return "kept: not a quantized weight";
    case KILN_WHY_BASE: return "base type";
    case KILN_WHY_RULE: return p->rule;
    case KILN_WHY_OUTPUT_OPT: return "--output-tensor-type";
    case KILN_WHY_EMBD_OPT: return "--token-embedding-type";
    case KILN_WHY_BUDGET:
        snprintf(buf, cap, "%s, est. dKLD %.3e", o->target_size ? "--target-size" : "--target-bpw", q->dkld);
        return buf;
    case KILN_WHY_OVERRIDE:
        snprintf(buf, cap, "--tensor-type %s=%s", o->overrides[p->override_idx].pattern,
                 kiln_type_name(o->overrides[p->override_idx].type));
        return buf;
    }
    return "";
}

static void shape_str(const kiln_quant_tensor *q, char *out, size_t cap) {
    size_t n = 0;
    for (uint32_t d = 0; d < q->n_dims && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, d ? " x %lld" : "%lld", (long long)q->ne[d]);
}

/* Tensor count and bytes per output type, in first-seen order. */
typedef struct type_total {
    uint32_t type;
    uint64_t count, bytes;
} type_total;

static uint32_t type_totals(const kiln_quant_report *r, type_total *t) {
    uint32_t n = 0;
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        uint32_t k = 0, ty = r->tensors[i].plan.to;
        while (k < n && t[k].type != ty) k++;
        if (k == n) t[n++] = (type_total){ty, 0, 0};
        t[k].count++;
        t[k].bytes += r->tensors[i].bytes_out;
    }
    return n;
}

static void print_plan(const kiln_quant_report *r, const kiln_quant_opts *o) {
    char shape[96], why[600], bi[32], bo[32];
    printf("%-36s %-20s %-7s %-7s %10s %10s  %s\n", "tensor", "shape", "from", "to", "bytes in", "bytes out",
           "why");
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        shape_str(q, shape, sizeof shape);
        snprintf(bi, sizeof bi, "%llu", (unsigned long long)q->bytes_in);
        snprintf(bo, sizeof bo, "%llu", (unsigned long long)q->bytes_out);
        printf("%-36s %-20s %-7s %-7s %10s %10s  %s%s%s\n", kiln_esc(q->name).s, shape, kiln_type_name(q->plan.from),
               kiln_type_name(q->plan.to), bi, bo, reason(q, o, why, sizeof why),
               q->plan.fallback ? "; fell back from " : "", q->plan.fallback ? kiln_type_name(q->plan.wanted) : "");
    }
}

static void print_summary(const kiln_quant_report *r, const kiln_quant_opts *o, const char *out) {
    char a[32], b[32];
    kiln_human_bytes((double)r->bytes_in, a, sizeof a);
    kiln_human_bytes((double)r->bytes_out, b, sizeof b);
    if (o->dry_run)
        printf("\ndry run: %s as %s (general.file_type %u); nothing written\n", r->input, o->target.name, r->ftype);
    else
        printf("quantized %s -> %s as %s (general.file_type %u) in %.2f s\n", r->input,
               r->n_outputs ? r->outputs[0] : out, o->target.name, r->ftype, r->seconds);
    for (uint32_t i = 1; i < r->n_outputs; i++) printf("  also %s\n", r->outputs[i]);
    printf("  %llu tensors (%llu quantized, %llu kept); %s -> %s; %.2f -> %.2f bits per weight\n",
           (unsigned long long)r->n_tensors, (unsigned long long)r->n_quantized,
           (unsigned long long)(r->n_tensors - r->n_quantized), a, b, kiln_quant_bpw(r, r->bytes_in),
           kiln_quant_bpw(r, r->bytes_out));
    type_total *tt = calloc(r->n_tensors + 1, sizeof *tt);
    if (tt) {
        uint32_t n = type_totals(r, tt);
        printf("  types:");
        for (uint32_t k = 0; k < n; k++)
            printf(" %s x%llu%s", kiln_type_name(tt[k].type), (unsigned long long)tt[k].count, k + 1 < n ? "," : "");
        printf("\n");
        free(tt);
    }
    if (o->sensitivity)
        printf("  budget: %llu bytes (%.4f bpw); file %llu bytes (%.4f bpw); estimated KLD %.6g (%s %.6g)\n",
               (unsigned long long)r->budget_bytes, kiln_quant_bpw(r, r->budget_bytes),
               (unsigned long long)r->file_bytes, kiln_quant_bpw(r, r->file_bytes), r->estimated_kld,
               r->budget_exact ? "optimal for the estimates; bound" : "best found; bound", r->kld_lower_bound);
    if (o->imatrix)
        printf("  imatrix: %s (%llu entries, %u chunks)\n", o->imatrix_path, (unsigned long long)r->imatrix_entries,
               o->imatrix->chunk_count);
    for (uint32_t k = 0; k < o->n_overrides; k++) {
        const kiln_type_override *ov = &o->overrides[k];
        if (ov->hits) printf("  override %s=%s: %llu tensors\n", ov->pattern, kiln_type_name(ov->type),
                             (unsigned long long)ov->hits);
        else printf("  override %s=%s: matched nothing\n", ov->pattern, kiln_type_name(ov->type));
    }
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        if (q->plan.fallback)
            printf("  fallback %s: %s -> %s (row length %lld is not a multiple of %u)\n", kiln_esc(q->name).s,
                   kiln_type_name(q->plan.wanted), kiln_type_name(q->plan.to), (long long)q->ne[0],
                   kiln_type_get(q->plan.wanted)->block_size);
    }
}

static void json_report(const kiln_quant_report *r, const kiln_quant_opts *o) {
    static kiln_jsonw w;
    char why[600];
    kiln_jw_init(&w, stdout, true);
    kiln_jw_obj(&w);
    kiln_jw_key(&w, "schema"), kiln_jw_str(&w, "kiln.quantize/1");
    kiln_jw_key(&w, "input"), kiln_jw_str(&w, r->input ? r->input : "");
    kiln_jw_key(&w, "outputs"), kiln_jw_arr(&w);
    for (uint32_t i = 0; i < r->n_outputs; i++) kiln_jw_str(&w, r->outputs[i]);
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "target"), kiln_jw_str(&w, o->target.name);
    kiln_jw_key(&w, "preset"), kiln_jw_bool(&w, o->target.preset != NULL);
    kiln_jw_key(&w, "file_type"), kiln_jw_uint(&w, r->ftype);
    kiln_jw_key(&w, "dry_run"), kiln_jw_bool(&w, o->dry_run);
    kiln_jw_key(&w, "imatrix");
    if (o->imatrix) {
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "file"), kiln_jw_str(&w, o->imatrix_path);
        kiln_jw_key(&w, "entries"), kiln_jw_uint(&w, r->imatrix_entries);
        kiln_jw_key(&w, "chunks"), kiln_jw_uint(&w, o->imatrix->chunk_count);
        kiln_jw_end_obj(&w);
    } else {
        kiln_jw_null(&w);
    }
    kiln_jw_key(&w, "tensors"), kiln_jw_arr(&w);
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "name"), kiln_jw_str(&w, q->name);
        kiln_jw_key(&w, "shape"), kiln_jw_arr(&w);
        for (uint32_t d = 0; d < q->n_dims; d++) kiln_jw_int(&w, q->ne[d]);
        kiln_jw_end_arr(&w);
        kiln_jw_key(&w, "from"), kiln_jw_str(&w, kiln_type_name(q->plan.from));
        kiln_jw_key(&w, "to"), kiln_jw_str(&w, kiln_type_name(q->plan.to));
        kiln_jw_key(&w, "wanted"), kiln_jw_str(&w, kiln_type_name(q->plan.wanted));
        kiln_jw_key(&w, "fallback"), kiln_jw_bool(&w, q->plan.fallback);
        kiln_jw_key(&w, "reason"), kiln_jw_str(&w, reason(q, o, why, sizeof why));
        kiln_jw_key(&w, "override");
        if (q->plan.why == KILN_WHY_OVERRIDE) kiln_jw_str(&w, o->overrides[q->plan.override_idx].pattern);
        else kiln_jw_null(&w);
        kiln_jw_key(&w, "imatrix"), kiln_jw_bool(&w, q->imatrix);
        kiln_jw_key(&w, "bytes_in"), kiln_jw_uint(&w, q->bytes_in);
        kiln_jw_key(&w, "bytes_out"), kiln_jw_uint(&w, q->bytes_out);
        if (o->sensitivity) kiln_jw_key(&w, "dkld"), kiln_jw_real(&w, q->dkld);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "totals"), kiln_jw_obj(&w);
    kiln_jw_key(&w, "tensors"), kiln_jw_uint(&w, r->n_tensors);
    kiln_jw_key(&w, "quantized"), kiln_jw_uint(&w, r->n_quantized);
    kiln_jw_key(&w, "elements"), kiln_jw_uint(&w, r->n_elements);
    kiln_jw_key(&w, "bytes_in"), kiln_jw_uint(&w, r->bytes_in);
    kiln_jw_key(&w, "bytes_out"), kiln_jw_uint(&w, r->bytes_out);
    kiln_jw_key(&w, "bpw_in"), kiln_jw_real(&w, kiln_quant_bpw(r, r->bytes_in));
    kiln_jw_key(&w, "bpw_out"), kiln_jw_real(&w, kiln_quant_bpw(r, r->bytes_out));
    kiln_jw_end_obj(&w);
    kiln_jw_key(&w, "budget");
    if (o->sensitivity) {
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "sensitivity"), kiln_jw_str(&w, o->sensitivity_path);
        kiln_jw_key(&w, "budget_bytes"), kiln_jw_uint(&w, r->budget_bytes);
        kiln_jw_key(&w, "file_bytes"), kiln_jw_uint(&w, r->file_bytes);
        kiln_jw_key(&w, "file_bpw"), kiln_jw_real(&w, kiln_quant_bpw(r, r->file_bytes));
        kiln_jw_key(&w, "estimated_kld"), kiln_jw_real(&w, r->estimated_kld);
        kiln_jw_key(&w, "kld_lower_bound"), kiln_jw_real(&w, r->kld_lower_bound);
        kiln_jw_key(&w, "optimal"), kiln_jw_bool(&w, r->budget_exact);
        kiln_jw_end_obj(&w);
    } else {
        kiln_jw_null(&w);
    }
    kiln_jw_key(&w, "types"), kiln_jw_arr(&w);
    type_total *tt = calloc(r->n_tensors + 1, sizeof *tt);
    for (uint32_t k = 0, n = tt ? type_totals(r, tt) : 0; k < n; k++) {
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "type"), kiln_jw_str(&w, kiln_type_name(tt[k].type));
        kiln_jw_key(&w, "count"), kiln_jw_uint(&w, tt[k].count);
        kiln_jw_key(&w, "bytes"), kiln_jw_uint(&w, tt[k].bytes);
        kiln_jw_end_obj(&w);
    }
    free(tt);
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "overrides"), kiln_jw_arr(&w);
    for (uint32_t k = 0; k < o->n_overrides; k++) {
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "pattern"), kiln_jw_str(&w, o->overrides[k].pattern);
        kiln_jw_key(&w, "type"), kiln_jw_str(&w, kiln_type_name(o->overrides[k].type));
        kiln_jw_key(&w, "matched"), kiln_jw_uint(&w, o->overrides[k].hits);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "fallbacks"), kiln_jw_arr(&w);
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        if (!q->plan.fallback) continue;
        kiln_jw_obj(&w);
        kiln_jw_key(&w, "tensor"), kiln_jw_str(&w, q->name);
        kiln_jw_key(&w, "wanted"), kiln_jw_str(&w, kiln_type_name(q->plan.wanted));
        kiln_jw_key(&w, "used"), kiln_jw_str(&w, kiln_type_name(q->plan.to));
        kiln_jw_key(&w, "row_length"), kiln_jw_int(&w, q->ne[0]);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "warnings"), kiln_jw_arr(&w);
    for (uint32_t i = 0; i < r->n_warnings; i++) kiln_jw_str(&w, r->warnings[i]);
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "seconds"), kiln_jw_real(&w, r->seconds);
    kiln_jw_end_obj(&w);
    kiln_jw_finish(&w);
}

/* ---- --list-types: one table from the type table (core/types.c), the
 * policy's imatrix rule and the preset table, so help and README cannot
 * drift from what the quantizer does ------------------------------------ */

/* Integer tensors and ggml's activation-only formats are no weight type. */
static bool is_weight_type(uint32_t t) {
    return kiln_type_get(t) && t != KILN_I8 && t != KILN_I16 && t != KILN_I32 && t != KILN_I64 &&
           t != KILN_F64 && t != KILN_Q8_1 && t != KILN_Q8_K;
}

/* "yes", "no", or "in Q2_K_S" for a type only one preset's mix refuses
 * without an imatrix. */
static const char *type_needs_imatrix(uint32_t t, char *buf, size_t cap) {
    if (kiln_policy_type_needs_imatrix(t, NULL)) return "yes";
    for (const kiln_preset *const *p = kiln_presets; *p; p++)
        if (kiln_policy_type_needs_imatrix(t, *p)) {
            snprintf(buf, cap, "in %s", (*p)->name);
            return buf;
        }
    return "no";
}

static void list_types_markdown(void) {
    char buf[64];
    printf("| type | bits per weight | needs imatrix | block |\n|---|---|---|---|\n");
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        if (!is_weight_type(t)) continue;
        const kiln_type_info *ti = kiln_type_get(t);
        printf("| %s | %.5g | %s | %u weight%s in %u bytes |\n", ti->name, kiln_type_bpw(t),
               type_needs_imatrix(t, buf, sizeof buf), ti->block_size, ti->block_size > 1 ? "s" : "", ti->type_size);
    }
    printf("\n| preset | ftype | base type | needs imatrix |\n|---|---|---|---|\n");
    for (const kiln_preset *const *p = kiln_presets; *p; p++)
        printf("| %s | %s%u | %s | %s |\n", (*p)->name, (*p)->kind == KILN_PRESET_COPY ? "the input's, or " : "",
               (*p)->ftype, (*p)->kind == KILN_PRESET_COPY ? "(kept)" : kiln_type_name((*p)->base),
               kiln_preset_needs_imatrix(*p) ? "yes" : "no");
    printf("\nAliases:");
    for (size_t i = 0; kiln_preset_aliases[i][0]; i++)
        printf("%s %s = %s", i ? "," : "", kiln_preset_aliases[i][0], kiln_preset_aliases[i][1]);
    printf(".\n");
}

static void list_types_json(void) {
    static kiln_jsonw w;
    char buf[64];
    kiln_jw_init(&w, stdout, true);
    kiln_jw_obj(&w);
    kiln_jw_key(&w, "schema"), kiln_jw_str(&w, "kiln.quantize-types/1");
    kiln_jw_key(&w, "types"), kiln_jw_arr(&w);
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        if (!is_weight_type(t)) continue;
        const kiln_type_info *ti = kiln_type_get(t);
        kiln_jw_obj(&w);
        kiln_jw_kv_str(&w, "name", ti->name);
        kiln_jw_kv_uint(&w, "id", t);
        kiln_jw_kv_real(&w, "bpw", kiln_type_bpw(t));
        kiln_jw_kv_str(&w, "needs_imatrix", type_needs_imatrix(t, buf, sizeof buf));
        kiln_jw_kv_uint(&w, "block_size", ti->block_size);
        kiln_jw_kv_uint(&w, "block_bytes", ti->type_size);
        kiln_jw_key(&w, "kiln_quantizes"), kiln_jw_bool(&w, kiln_can_quantize(t));
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "presets"), kiln_jw_arr(&w);
    for (const kiln_preset *const *p = kiln_presets; *p; p++) {
        kiln_jw_obj(&w);
        kiln_jw_kv_str(&w, "name", (*p)->name);
        kiln_jw_kv_uint(&w, "ftype", (*p)->ftype);
        kiln_jw_key(&w, "base");
        if ((*p)->kind == KILN_PRESET_COPY) kiln_jw_null(&w);
        else kiln_jw_str(&w, kiln_type_name((*p)->base));
        kiln_jw_key(&w, "needs_imatrix"), kiln_jw_bool(&w, kiln_preset_needs_imatrix(*p));
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_key(&w, "aliases"), kiln_jw_obj(&w);
    for (size_t i = 0; kiln_preset_aliases[i][0]; i++) kiln_jw_kv_str(&w, kiln_preset_aliases[i][0], kiln_preset_aliases[i][1]);
    kiln_jw_end_obj(&w);
    kiln_jw_end_obj(&w);
    kiln_jw_finish(&w);
}

/* The recipe classes (quantize/recipe.c's table), as the README shows them. */
static void list_classes(void) {
    printf("| class | GGUF tensors (regex) | what |\n|---|---|---|\n");
    for (const kiln_recipe_class *k = kiln_recipe_classes; k->name; k++) {
        printf("| `%s` | `", k->name);
        for (const char *r = k->regex; *r; r++) /* a bare | would end the table cell */
            fputs(*r == '|' ? "\\|" : (char[2]){*r, 0}, stdout);
        printf("` | %s |\n", k->what);
    }
}

static int parse_type_opt(const char *opt, const char *s, int *out) {
    int t = kiln_type_from_name(s);
    if (t < 0 || t == KILN_Q8_K || !kiln_can_quantize((uint32_t)t))
        return kiln_cli_usage_error("quantize", "%s: kiln cannot quantize to type '%s'", opt, s);
    *out = t;
    return 0;
}

typedef struct cli {
    kiln_quant_opts o;
    bool json, quiet, list_types;
    const char *imatrix_file;
    const char *recipe;       /* --recipe: its rules follow the --tensor-type ones */
    uint64_t threads;
    bool budget;              /* --target-bpw or --target-size (then -f is the text) */
    const char *sens_file;    /* --sensitivity */
    const char *text;         /* -f with a budget: scan on this text */
    kiln_sensitivity sens;    /* read or scanned */
} cli;

/* With a budget, -f names the calibration text (as with --analyze); known
 * before getopt runs, since it decides whether -f takes an argument. */
static bool wants_budget(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strncmp(argv[i], "--target-bpw", 12) || !strncmp(argv[i], "--target-size", 13)) return true;
    return false;
}

/* Usage errors of a budget run, and the COPY target it plans from. */
static int check_budget_opts(cli *c) {
    const char *cmd = "quantize";
    if (c->o.target_bpw > 0 && c->o.target_size)
        return kiln_cli_usage_error(cmd, "give --target-bpw or --target-size, not both");
    if (!c->budget) {
        if (c->sens_file) return kiln_cli_usage_error(cmd, "--sensitivity needs --target-bpw or --target-size");
        return -1;
    }
    if (!c->sens_file && !c->text)
        return kiln_cli_usage_error(cmd, "a size budget needs --sensitivity FILE or -f TEXT to scan the model on");
    if (c->sens_file && c->text)
        return kiln_cli_usage_error(cmd, "give --sensitivity FILE or -f TEXT, not both");
    if (c->o.n_overrides || c->o.output_type >= 0 || c->o.token_embd_type >= 0 || c->o.pure)
        return kiln_cli_usage_error(cmd, "a size budget chooses every type: --tensor-type, --recipe, "
                                         "--output-tensor-type, --token-embedding-type and --pure do not combine "
                                         "with it");
    if (c->o.keep_split || c->o.split_max_size)
        return kiln_cli_usage_error(cmd, "a size budget is for one file: --keep-split and --split-max-size do not "
                                         "combine with it");
    kiln_err err = {{0}};
    if (kiln_quant_target_parse("COPY", &c->o.target, &err) < 0) return kiln_cli_usage_error(cmd, "%s", err.msg);
    c->o.target.name = c->o.target_size ? "--target-size" : "--target-bpw"; /* what the summary says it did */
    return -1;
}

/* Returns -1 to go on, or the exit code. */
static int parse(int argc, char **argv, cli *c) {
    static const struct option opts[] = {
        {"imatrix", required_argument, 0, O_IMATRIX},
        {"tensor-type", required_argument, 0, O_TT},
        {"output-tensor-type", required_argument, 0, O_OUT_T},
        {"token-embedding-type", required_argument, 0, O_EMB_T},
        {"pure", no_argument, 0, O_PURE},
        {"allow-requantize", no_argument, 0, O_REQ},
        {"no-fallback", no_argument, 0, O_NOFB},
        {"keep-split", no_argument, 0, O_KEEP},
        {"split-max-size", required_argument, 0, O_SPLIT},
        {"dry-run", no_argument, 0, O_DRY},
        {"json", no_argument, 0, O_JSON},
        {"list-types", no_argument, 0, O_LIST},
        {"recipe", required_argument, 0, O_RECIPE},
        {"list-classes", no_argument, 0, O_LIST_CLASSES},
        {"target-bpw", required_argument, 0, O_BPW},
        {"target-size", required_argument, 0, O_SIZE},
        {"sensitivity", required_argument, 0, O_SENS},
        {"per-expert", no_argument, 0, O_PER_EXPERT},
        {"threads", required_argument, 0, 't'},
        {"quiet", no_argument, 0, 'q'},
        {"force", no_argument, 0, O_FORCE}, /* not 'f': with a budget, -f is the text */
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    kiln_err err = {{0}};
    int ch;
    optind = 1;
    c->budget = wants_budget(argc, argv);
    while ((ch = getopt_long(argc, argv, c->budget ? "t:qf:h" : "t:qfh", opts, NULL)) != -1) {
        switch (ch) {
        case O_IMATRIX: c->imatrix_file = optarg; break;
        case O_TT: {
            kiln_type_override *grown = realloc(c->o.overrides, (c->o.n_overrides + 1) * sizeof *grown);
            if (!grown) return kiln_cli_usage_error("quantize", "out of memory");
            c->o.overrides = grown;
            if (kiln_override_parse(optarg, &c->o.overrides[c->o.n_overrides], &err) < 0)
                return kiln_cli_usage_error("quantize", "%s", err.msg);
            c->o.n_overrides++;
            break;
        }
        case O_OUT_T:
            if (parse_type_opt("--output-tensor-type", optarg, &c->o.output_type)) return KILN_EXIT_USAGE;
            break;
        case O_EMB_T:
            if (parse_type_opt("--token-embedding-type", optarg, &c->o.token_embd_type)) return KILN_EXIT_USAGE;
            break;
        case O_PURE: c->o.pure = true; break;
        case O_REQ: c->o.allow_requantize = true; break;
        case O_NOFB: c->o.no_fallback = true; break;
        case O_KEEP: c->o.keep_split = true; break;
        case O_SPLIT:
            if (!kiln_parse_size(optarg, &c->o.split_max_size) || !c->o.split_max_size)
                return kiln_cli_usage_error("quantize", "--split-max-size needs a size like 500M or 2G");
            break;
        case O_DRY: c->o.dry_run = true; break;
        case O_JSON: c->json = true; break;
        case O_LIST: c->list_types = true; break;
        case O_RECIPE: c->recipe = optarg; break;
        case O_LIST_CLASSES: list_classes(); return KILN_EXIT_OK;
        case O_BPW: {
            char *end;
            c->o.target_bpw = strtod(optarg, &end);
            if (end == optarg || *end || !(c->o.target_bpw > 0 && c->o.target_bpw <= 64))
                return kiln_cli_usage_error("quantize", "--target-bpw needs bits per weight, e.g. 3.5");
            break;
        }
        case O_SIZE:
            if (!kiln_parse_size(optarg, &c->o.target_size) || !c->o.target_size)
                return kiln_cli_usage_error("quantize", "--target-size needs bytes, or a size like 700M or 3.5Gi");
            break;
        case O_SENS: c->sens_file = optarg; break;
        case O_PER_EXPERT:
            return kiln_cli_usage_error("quantize", "--per-expert: a GGUF tensor has one type and llama.cpp "
                                                    "loads a 3-D expert tensor as one, so all its experts share "
                                                    "a type");
        case 't':
            if (!kiln_parse_u64(optarg, &c->threads) || !c->threads)
                return kiln_cli_usage_error("quantize", "--threads needs a positive number");
            break;
        case 'q': c->quiet = true; break;
        case 'f':
            if (c->budget) c->text = optarg;
            else c->o.force = true;
            break;
        case O_FORCE: c->o.force = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("quantize", "unknown option");
        }
    }
    if (c->o.keep_split && c->o.split_max_size)
        return kiln_cli_usage_error("quantize", "--keep-split and --split-max-size cannot be combined");
    if (c->recipe && kiln_recipe_load(c->recipe, &c->o.overrides, &c->o.n_overrides, &err) < 0)
        return kiln_cli_fail(&err);
    int budget_rc = check_budget_opts(c);
    if (budget_rc >= 0) return budget_rc;
    if (c->list_types) {
        if (optind < argc) return kiln_cli_usage_error("quantize", "--list-types takes no arguments");
        c->json ? list_types_json() : list_types_markdown();
        return KILN_EXIT_OK;
    }
    return -1;
}

/* The positional arguments: IN OUT TARGET, or IN TARGET with --dry-run. */
static int positionals(int argc, char **argv, cli *c, const char **in, const char **out) {
    int npos = argc - optind;
    const char *target;
    if (c->budget) {
        if (npos == 2) *in = argv[optind], *out = argv[optind + 1];
        else if (npos == 1 && c->o.dry_run) *in = argv[optind], *out = NULL;
        else return kiln_cli_usage_error("quantize", c->o.dry_run ? "expects IN [OUT] with a size budget"
                                                                   : "expects IN OUT with a size budget");
        return -1;
    }
    if (npos == 3) *in = argv[optind], *out = argv[optind + 1], target = argv[optind + 2];
    else if (npos == 2 && c->o.dry_run) *in = argv[optind], *out = NULL, target = argv[optind + 1];
    else
        return kiln_cli_usage_error("quantize", c->o.dry_run ? "expects IN [OUT] PRESET|TYPE" : "expects IN OUT PRESET|TYPE");
    kiln_err err = {{0}};
    if (kiln_quant_target_parse(target, &c->o.target, &err) < 0) return kiln_cli_usage_error("quantize", "%s", err.msg);
    return -1;
}

/* Runs the quantizer and prints what it did; returns the exit code. */
static int run(const cli *c, const char *in, const char *out) {
    if (c->threads) omp_set_num_threads((int)c->threads);
    if (c->quiet || c->json) kiln_progress_quiet = true;
    kiln_quant_report r;
    kiln_err err = {{0}};
    int rc = kiln_quantize_model(in, out, &c->o, &r, &err) < 0 ? kiln_cli_fail(&err) : KILN_EXIT_OK;
    if (rc == KILN_EXIT_OK) {
        for (uint32_t i = 0; !c->json && i < r.n_warnings; i++)
            fprintf(stderr, "kiln quantize: warning: %s\n", kiln_esc(r.warnings[i]).s);
        if (c->json) {
            json_report(&r, &c->o);
        } else if (!c->quiet) {
            if (c->o.dry_run) print_plan(&r, &c->o);
            print_summary(&r, &c->o, out);
        }
    }
    kiln_quant_report_free(&r);
    return rc;
}

/* The rows of a budget run: read from --sensitivity, or scanned from IN on
 * -f TEXT. Returns -1 to go on, or the exit code. */
static int load_sensitivity(cli *c, const char *in) {
    kiln_err err = {{0}};
    if (c->sens_file) {
        if (kiln_sensitivity_read(c->sens_file, &c->sens, &err) < 0) return kiln_cli_fail(&err);
        c->o.sensitivity_path = c->sens_file;
    } else {
        kiln_scan_params p = {.text_path = c->text, .imatrix_path = c->imatrix_file, .n_threads = (int)c->threads,
                              .progress = !c->quiet && !c->json};
        if (kiln_sensitivity_scan(in, &p, &c->sens, &err) < 0) return kiln_cli_fail(&err);
        c->o.sensitivity_path = "(scan)";
    }
    const char *im = c->imatrix_file ? strrchr(c->imatrix_file, '/') : NULL;
    im = im ? im + 1 : c->imatrix_file ? c->imatrix_file : "-";
    if (strcmp(im, c->sens.imatrix) && !c->quiet && !c->json)
        fprintf(stderr, "kiln quantize: warning: %s was scanned with imatrix %s, this run quantizes with %s: the "
                        "estimates may not hold\n", c->o.sensitivity_path, kiln_esc(c->sens.imatrix).s, kiln_esc(im).s);
    c->o.sensitivity = &c->sens;
    return -1;
}

int kiln_cmd_quantize(int argc, char **argv) {
    if (kiln_quantize_wants_analyze(argc, argv)) return kiln_cmd_quantize_analyze(argc, argv);
    cli c = {.o = {.output_type = -1, .token_embd_type = -1}};
    const char *in = NULL, *out = NULL;
    kiln_imatrix *im = NULL;
    int rc = parse(argc, argv, &c);
    if (rc < 0) rc = positionals(argc, argv, &c, &in, &out);
    if (rc < 0 && c.imatrix_file) {
        kiln_err err = {{0}};
        if (!(im = kiln_imatrix_read(c.imatrix_file, &err))) rc = kiln_cli_fail(&err);
        c.o.imatrix = im;
        c.o.imatrix_path = c.imatrix_file;
    }
    if (rc < 0 && c.budget) rc = load_sensitivity(&c, in);
    if (rc < 0) rc = run(&c, in, out);
    kiln_sensitivity_free(&c.sens);
    kiln_imatrix_free(im);
    for (uint32_t i = 0; i < c.o.n_overrides; i++) kiln_override_free(&c.o.overrides[i]);
    free(c.o.overrides);
    return rc;
}
