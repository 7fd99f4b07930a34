/* quantize/cmd_analyze.c - `kiln quantize --analyze IN -f TEXT`: parses the
 * scan's options, runs kiln_sensitivity_scan() (sensitivity_scan.h),
 * writes the sensitivity file and prints a summary, or JSON
 * (kiln.sensitivity-scan/1). */
#include "cmd_analyze.h"

#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/jsonw.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "sensitivity_scan.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
    "usage: kiln quantize --analyze IN -f TEXT [options]\n"
    "\n"
    "Sensitivity scan: for each weight of IN (a float GGUF) that a quantization\n"
    "chooses a type for (token_embd, output and every quantized weight; the\n"
    "experts of a 3-D tensor together) and each candidate type, the bytes the\n"
    "tensor takes and the KL divergence it adds to the final logits on TEXT\n"
    "when it alone is quantized to that type. Some types per tensor are\n"
    "measured (the model re-run from that tensor's layer), the others placed\n"
    "on the measured curve of KLD against the tensor's output error. The file\n"
    "(kiln-sensitivity/1) feeds kiln quantize --target-bpw.\n"
    "\n"
    "  -f, --file TEXT       calibration text (plain, .zst, .jsonl, archive);\n"
    "                        keep the text you evaluate on out of it\n"
    "  --imatrix FILE        quantize with this importance matrix, as kiln\n"
    "                        quantize --imatrix does (IQ2/IQ3_XXS need one)\n"
    "  --types T,T,...       candidate types (default: Q2_K, IQ2_XXS, IQ2_XS,\n"
    "                        IQ2_S, Q3_K, IQ3_XXS, IQ3_S, Q4_K, IQ4_XS, Q5_K,\n"
    "                        Q6_K, Q8_0; without an imatrix the IQ types that\n"
    "                        need one are left out); a type a row does not fit\n"
    "                        is skipped for that tensor\n"
    "  -c, --ctx-size N      tokens per chunk (default 512; smaller on large models)\n"
    "  --chunks N            chunks to use (default: up to 4, as the cost allows)\n"
    "  --measure K|all       types measured per tensor (default: as many as a\n"
    "                        fixed compute budget allows, all on small models)\n"
    "  -o, --output FILE     sensitivity file (default: IN's name with .gguf\n"
    "                        replaced by .sensitivity.tsv, in this folder)\n"
    "  --json                print a summary as JSON (kiln.sensitivity-scan/1)\n"
    "  -t, --threads N       threads (default: all cores)\n"
    "  -q, --quiet           no progress bar and no summary\n"
    "      --force           overwrite an existing output\n"
    "  -h, --help            this help\n";

enum { O_ANALYZE = 256, O_IMATRIX, O_TYPES, O_CHUNKS, O_MEASURE, O_JSON, O_FORCE };

bool kiln_quantize_wants_analyze(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--analyze") || !strncmp(argv[i], "--analyze=", 10)) return true;
    return false;
}

typedef struct cli {
    kiln_scan_params p;
    kiln_type types[KILN_TYPE_COUNT];
    const char *in, *out;
    char out_buf[4096];
    bool json, quiet, force;
} cli;

static int parse_types(cli *c, const char *list) {
    char *copy = strdup(list), *save = NULL;
    if (!copy) return kiln_cli_usage_error("quantize", "out of memory");
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        int t = kiln_type_from_name(tok);
        if (t < 0) rc = kiln_cli_usage_error("quantize", "--types: unknown type '%s'", tok);
        else if (c->p.n_types == KILN_TYPE_COUNT) rc = kiln_cli_usage_error("quantize", "--types: too many types");
        else c->types[c->p.n_types++] = (kiln_type)t;
    }
    free(copy);
    if (rc == 0 && !c->p.n_types) rc = kiln_cli_usage_error("quantize", "--types needs at least one type");
    return rc;
}

/* IN's base name with .gguf replaced by .sensitivity.tsv. */
static void default_output(cli *c) {
    const char *b = strrchr(c->in, '/');
    b = b ? b + 1 : c->in;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    snprintf(c->out_buf, sizeof c->out_buf, "%.*s.sensitivity.tsv", (int)n, b);
    c->out = c->out_buf;
}

/* Returns -1 to go on, or the exit code. */
static int parse(int argc, char **argv, cli *c) {
    static const struct option opts[] = {
        {"analyze", required_argument, 0, O_ANALYZE},
        {"file", required_argument, 0, 'f'},
        {"imatrix", required_argument, 0, O_IMATRIX},
        {"types", required_argument, 0, O_TYPES},
        {"ctx-size", required_argument, 0, 'c'},
        {"chunks", required_argument, 0, O_CHUNKS},
        {"measure", required_argument, 0, O_MEASURE},
        {"output", required_argument, 0, 'o'},
        {"json", no_argument, 0, O_JSON},
        {"threads", required_argument, 0, 't'},
        {"quiet", no_argument, 0, 'q'},
        {"force", no_argument, 0, O_FORCE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    uint64_t v;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "f:c:o:t:qh", opts, NULL)) != -1) {
        switch (ch) {
        case O_ANALYZE:
            if (!strcmp(optarg, "--help") || !strcmp(optarg, "-h")) { /* `--analyze --help` */
                fputs(USAGE, stdout);
                return KILN_EXIT_OK;
            }
            c->in = optarg;
            break;
        case 'f': c->p.text_path = optarg; break;
        case O_IMATRIX: c->p.imatrix_path = optarg; break;
        case O_TYPES:
            if (parse_types(c, optarg)) return KILN_EXIT_USAGE;
            break;
        case 'c':
            if (!kiln_parse_u64(optarg, &v) || v < 4 || v > (1u << 20))
                return kiln_cli_usage_error("quantize", "-c needs a chunk length of at least 4 tokens");
            c->p.n_ctx = (int64_t)v;
            break;
        case O_CHUNKS:
            if (!kiln_parse_u64(optarg, &v) || !v || v > (1u << 30))
                return kiln_cli_usage_error("quantize", "--chunks needs a positive number");
            c->p.n_chunks = (int64_t)v;
            break;
        case O_MEASURE:
            if (!strcmp(optarg, "all")) c->p.measure = -1;
            else if (kiln_parse_u64(optarg, &v) && v && v <= KILN_TYPE_COUNT) c->p.measure = (int64_t)v;
            else return kiln_cli_usage_error("quantize", "--measure needs a number of types or 'all'");
            break;
        case 'o': c->out = optarg; break;
        case O_JSON: c->json = true; break;
        case 't':
            if (!kiln_parse_u64(optarg, &v) || !v || v > 4096)
                return kiln_cli_usage_error("quantize", "--threads needs a positive number");
            c->p.n_threads = (int)v;
            break;
        case 'q': c->quiet = true; break;
        case O_FORCE: c->force = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("quantize", "unknown option for --analyze");
        }
    }
    if (optind < argc) return kiln_cli_usage_error("quantize", "--analyze takes the model as its argument; unexpected '%s'", argv[optind]);
    if (!c->in) return kiln_cli_usage_error("quantize", "--analyze needs a model");
    if (!c->p.text_path) return kiln_cli_usage_error("quantize", "--analyze needs a calibration text (-f TEXT)");
    if (!c->out) default_output(c);
    if (!strcmp(c->out, c->in) || !strcmp(c->out, c->p.text_path) ||
        (c->p.imatrix_path && !strcmp(c->out, c->p.imatrix_path)))
        return kiln_cli_usage_error("quantize", "the output %s is one of the inputs", c->out);
    if (!c->force && access(c->out, F_OK) == 0) {
        kiln_err err = {{0}};
        kiln_fail(&err, c->out, NULL, -1, "exists; use --force to overwrite it");
        return kiln_cli_fail(&err);
    }
    if (c->p.n_types) c->p.types = c->types;
    return -1;
}

static void print_summary(const cli *c, const kiln_sensitivity *s, const kiln_scan_info *in) {
    size_t n_measured = 0;
    for (size_t i = 0; i < s->n_rows; i++) n_measured += in->measured[i];
    printf("kiln quantize --analyze: %s on %s: %lld chunk%s of %lld tokens (%lld positions compared)\n", c->in,
           c->p.text_path, (long long)in->n_chunks, in->n_chunks == 1 ? "" : "s", (long long)in->n_ctx,
           (long long)in->n_scored);
    printf("  %lld tensors x %zu types:", (long long)in->n_tensors_scanned, in->n_types);
    for (size_t k = 0; k < in->n_types; k++) printf(" %s", kiln_type_name(in->types[k]));
    printf("; %lld measured per tensor\n", (long long)in->measure);
    printf("  wrote %s: %zu rows (%zu measured, %zu estimated) in %.1f s (reference %.1f s, quantization and "
           "error %.1f s, measurements %.1f s)\n",
           c->out, s->n_rows, n_measured, s->n_rows - n_measured, in->seconds, in->ref_seconds, in->quant_seconds,
           in->measure_seconds);
    /* the five tensors that suffer most at their cheapest type */
    size_t top[5];
    size_t n_top = 0;
    for (size_t i = 0; i < s->n_rows; i++) {
        if (i > 0 && !strcmp(s->rows[i - 1].tensor, s->rows[i].tensor)) continue;
        size_t cheapest = i;
        for (size_t j = i; j < s->n_rows && !strcmp(s->rows[j].tensor, s->rows[i].tensor); j++)
            if (s->rows[j].bytes < s->rows[cheapest].bytes) cheapest = j;
        size_t k = n_top < 5 ? n_top++ : 5;
        while (k > 0 && s->rows[top[k - 1]].dkld < s->rows[cheapest].dkld) {
            if (k < 5) top[k] = top[k - 1];
            k--;
        }
        if (k < 5) top[k] = cheapest;
    }
    printf("  most sensitive (at their smallest type):");
    for (size_t k = 0; k < n_top; k++)
        printf("%s %s %s %.3g", k ? "," : "", kiln_esc(s->rows[top[k]].tensor).s, kiln_type_name(s->rows[top[k]].type),
               s->rows[top[k]].dkld);
    printf("\n");
}

static void print_json(const cli *c, const kiln_sensitivity *s, const kiln_scan_info *in) {
    static kiln_jsonw w;
    kiln_jw_init(&w, stdout, true);
    kiln_jw_obj(&w);
    kiln_jw_kv_str(&w, "schema", "kiln.sensitivity-scan/1");
    kiln_jw_kv_str(&w, "model", c->in);
    kiln_jw_kv_str(&w, "output", c->out);
    kiln_jw_kv_str(&w, "text", c->p.text_path);
    kiln_jw_key(&w, "imatrix");
    if (c->p.imatrix_path) kiln_jw_str(&w, c->p.imatrix_path);
    else kiln_jw_null(&w);
    kiln_jw_kv_str(&w, "arch", s->arch);
    kiln_jw_kv_str(&w, "layout_xxh64", s->layout_xxh64);
    kiln_jw_kv_int(&w, "n_ctx", in->n_ctx);
    kiln_jw_kv_int(&w, "n_chunks", in->n_chunks);
    kiln_jw_kv_int(&w, "n_tokens", s->n_tokens);
    kiln_jw_kv_int(&w, "n_scored", in->n_scored);
    kiln_jw_key(&w, "types"), kiln_jw_arr(&w);
    for (size_t k = 0; k < in->n_types; k++) kiln_jw_str(&w, kiln_type_name(in->types[k]));
    kiln_jw_end_arr(&w);
    kiln_jw_kv_int(&w, "measure", in->measure);
    kiln_jw_kv_int(&w, "tensors", in->n_tensors_scanned);
    kiln_jw_kv_int(&w, "measurements", in->n_measurements);
    kiln_jw_key(&w, "seconds"), kiln_jw_obj(&w);
    kiln_jw_kv_real(&w, "total", in->seconds);
    kiln_jw_kv_real(&w, "reference", in->ref_seconds);
    kiln_jw_kv_real(&w, "quantize", in->quant_seconds);
    kiln_jw_kv_real(&w, "measure", in->measure_seconds);
    kiln_jw_end_obj(&w);
    kiln_jw_key(&w, "rows"), kiln_jw_arr(&w);
    for (size_t i = 0; i < s->n_rows; i++) {
        kiln_jw_obj(&w);
        kiln_jw_kv_str(&w, "tensor", s->rows[i].tensor);
        kiln_jw_kv_str(&w, "type", kiln_type_name(s->rows[i].type));
        kiln_jw_kv_uint(&w, "bytes", s->rows[i].bytes);
        kiln_jw_kv_real(&w, "dkld", s->rows[i].dkld);
        kiln_jw_key(&w, "measured"), kiln_jw_bool(&w, in->measured[i]);
        kiln_jw_kv_real(&w, "error_energy", in->energy[i]);
        kiln_jw_end_obj(&w);
    }
    kiln_jw_end_arr(&w);
    kiln_jw_end_obj(&w);
    kiln_jw_finish(&w);
}

int kiln_cmd_quantize_analyze(int argc, char **argv) {
    cli c;
    memset(&c, 0, sizeof c);
    int rc = parse(argc, argv, &c);
    if (rc >= 0) return rc;
    kiln_scan_info info;
    kiln_sensitivity s;
    kiln_err err = {{0}};
    if (c.quiet || c.json) kiln_progress_quiet = true;
    c.p.progress = !c.quiet && !c.json;
    c.p.info = &info;
    rc = KILN_EXIT_OK;
    if (kiln_sensitivity_scan(c.in, &c.p, &s, &err) < 0 || kiln_sensitivity_write(c.out, &s, &err) < 0)
        rc = kiln_cli_fail(&err);
    else if (c.json)
        print_json(&c, &s, &info);
    else if (!c.quiet)
        print_summary(&c, &s, &info);
    kiln_sensitivity_free(&s);
    kiln_scan_info_free(&info);
    return rc;
}
