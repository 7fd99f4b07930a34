/* golden/cmd_golden.c - `kiln golden record` and `kiln golden check`: the
 * CLI over golden_file.h and check.h. Exit status: 0 when every threshold
 * holds, 1 when one fails (each failing figure is named) or on an error,
 * 2 on a usage error. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "check.h"
#include "cmd_probe.h"
#include "golden_file.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln golden record MODEL --prompts FILE -o OUT.golden [options]\n"
    "       kiln golden check MODEL GOLDEN [thresholds] [options]\n"
    "       kiln golden --layers A B -f TEXT [options]\n"
    "\n"
    "record: evaluates every non-empty line of FILE (tokenized like llama.cpp:\n"
    "BOS as the vocabulary says, special-token text kept as text) and stores the\n"
    "ids and the logits at every position, zstd-compressed, with a fingerprint\n"
    "of MODEL (architecture, tensor names and types, a hash of the data).\n"
    "  -p, --prompts FILE       prompts, one per line\n"
    "  -o, --output OUT         the golden file to write\n"
    "      --max-prompts N      only the first N prompts\n"
    "      --f16                store logits as f16 (half the size, ~3 digits)\n"
    "      --force              overwrite OUT\n"
    "\n"
    "check: evaluates MODEL on the ids stored in GOLDEN (a kiln golden file or a\n"
    "KLGT logits file from another engine, such as llama.cpp's references) and\n"
    "compares the logits position by position: max abs, RMSE, cosine, KL\n"
    "divergence (mean and max), top-1 agreement and PPL on the prompts, per\n"
    "prompt and overall.\n"
    "      --max-kld X          fail when the mean KLD (nats) exceeds X\n"
    "      --min-top1 P         fail when top-1 agreement (a fraction) is below P\n"
    "      --max-abs D          fail when any logit differs by more than D\n"
    "      --max-ppl-ratio R    fail when PPL(MODEL) / PPL(GOLDEN) exceeds R\n"
    "  -b, --batch-size N       evaluate each prompt N tokens per call, the cache\n"
    "                           carried (llama.cpp's ubatches; default: one call)\n"
    "      --json               print the whole report as JSON\n"
    "\n"
    "--layers: runs models A and B on TEXT and reports, per layer and tensor\n"
    "output, how far B's hidden states drift from A's (cosine, relative RMS) and\n"
    "the KLD of the final logits; the same as `kiln diff --activations` (see\n"
    "'kiln golden --layers --help').\n"
    "\n"
    "both:\n"
    "  -t, --threads N          threads (default: all cores)\n"
    "      --exact              dequantize weights, f32 products (default: ggml's numbers)\n"
    "  -h, --help               this help\n"
    "\n"
    "exit status: 0 every threshold holds, 1 one fails (named) or an error, 2 usage error\n";

enum { O_MAXP = 256, O_F16, O_FORCE, O_KLD, O_TOP1, O_ABS, O_PPLR, O_JSON, O_EXACT };

typedef struct opts {
    const char *prompts, *out;
    uint64_t max_prompts, threads, n_batch;
    bool f16, force, json, exact;
    kiln_golden_thresholds t;
} opts;

static int threshold(const char *s, double *out, const char *name) {
    if (!kiln_parse_double(s, out) || !(*out >= 0))
        return kiln_cli_usage_error("golden", "%s needs a non-negative number", name);
    return 0;
}

/* Parses options after the subcommand; returns 0, -1 for --help, or the
 * usage exit code. Positional arguments are left in argv[optind..]. */
static int parse(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"prompts", required_argument, 0, 'p'}, {"output", required_argument, 0, 'o'},
        {"max-prompts", required_argument, 0, O_MAXP}, {"f16", no_argument, 0, O_F16},
        {"force", no_argument, 0, O_FORCE},     {"max-kld", required_argument, 0, O_KLD},
        {"min-top1", required_argument, 0, O_TOP1}, {"max-abs", required_argument, 0, O_ABS},
        {"max-ppl-ratio", required_argument, 0, O_PPLR}, {"json", no_argument, 0, O_JSON},
        {"threads", required_argument, 0, 't'}, {"exact", no_argument, 0, O_EXACT},
        {"batch-size", required_argument, 0, 'b'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    *o = (opts){.t = kiln_golden_no_thresholds()};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:o:t:b:h", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'p': o->prompts = optarg; break;
        case 'o': o->out = optarg; break;
        case O_MAXP:
            if (!kiln_parse_u64(optarg, &o->max_prompts) || !o->max_prompts)
                rc = kiln_cli_usage_error("golden", "--max-prompts needs a positive number");
            break;
        case O_F16: o->f16 = true; break;
        case O_FORCE: o->force = true; break;
        case O_KLD: rc = threshold(optarg, &o->t.max_kld, "--max-kld"); break;
        case O_TOP1:
            rc = threshold(optarg, &o->t.min_top1, "--min-top1");
            if (!rc && o->t.min_top1 > 1) rc = kiln_cli_usage_error("golden", "--min-top1 is a fraction (0..1)");
            break;
        case O_ABS: rc = threshold(optarg, &o->t.max_abs, "--max-abs"); break;
        case O_PPLR: rc = threshold(optarg, &o->t.max_ppl_ratio, "--max-ppl-ratio"); break;
        case O_JSON: o->json = true; break;
        case 't':
            if (!kiln_parse_u64(optarg, &o->threads) || !o->threads || o->threads > 1024)
                rc = kiln_cli_usage_error("golden", "--threads needs a positive number");
            break;
        case O_EXACT: o->exact = true; break;
        case 'b':
            if (!kiln_parse_u64(optarg, &o->n_batch) || !o->n_batch || o->n_batch > (1u << 24))
                rc = kiln_cli_usage_error("golden", "-b needs a positive number");
            break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: rc = kiln_cli_usage_error("golden", "unknown option");
        }
        if (rc) return rc;
    }
    if (o->threads) omp_set_num_threads((int)o->threads);
    return 0;
}

static int cmd_record(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? KILN_EXIT_OK : rc;
    if (optind != argc - 1) return kiln_cli_usage_error("golden", "record expects exactly one MODEL");
    if (!o.prompts || !o.out) return kiln_cli_usage_error("golden", "record needs --prompts FILE and -o OUT");
    if (o.n_batch) return kiln_cli_usage_error("golden", "-b belongs to golden check");
    if (o.json || !isnan(o.t.max_kld) || !isnan(o.t.min_top1) || !isnan(o.t.max_abs) || !isnan(o.t.max_ppl_ratio))
        return kiln_cli_usage_error("golden", "thresholds and --json belong to golden check");
    kiln_err err = {{0}};
    char **lines;
    size_t n;
    if (kiln_golden_read_prompts(o.prompts, o.max_prompts, &lines, &n, &err)) return kiln_cli_fail(&err);
    kiln_model *m = kiln_model_load(argv[optind], &err);
    kiln_golden_record_params p = {.f16 = o.f16, .force = o.force, .mode = o.exact ? KILN_NUM_EXACT : KILN_NUM_GGML};
    if (!m || kiln_golden_record(m, lines, n, o.out, &p, &err)) rc = kiln_cli_fail(&err);
    else printf("recorded %zu prompts of %s into %s (%s logits)\n", n, argv[optind], o.out, o.f16 ? "f16" : "f32");
    if (m) kiln_model_free(m);
    kiln_golden_free_prompts(lines, n);
    return rc;
}

static json_t *num(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *thr(double v) {
    return isnan(v) ? json_null() : json_real(v);
}

/* The figures of one prompt or of all of them. */
static json_t *figures(const kiln_cmp_summary *s) {
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "n_positions",
                     (json_int_t)s->count, "max_abs", num(s->max_abs), "rmse", num(s->rmse), "cosine_min",
                     num(s->cosine_min), "kld_mean", num(s->kld.val), "kld_max", num(s->kld_max), "kld_median",
                     num(s->kld_median), "kld_p99", num(s->kld_p99), "top1_agreement", num(s->same_top.val), "ppl",
                     num(s->ppl.val), "ppl_ref", num(s->ppl_ref.val), "ppl_ratio", num(s->ppl_ratio.val));
}

static int print_json(const char *model, const char *path, const kiln_golden *g, const kiln_golden_report *rep,
                      const kiln_golden_thresholds *t) {
    json_t *j = figures(&rep->all);
    json_t *prompts = json_array(), *failed = json_array();
    const json_t *texts = g->meta ? json_object_get(g->meta, "prompts") : NULL;
    for (uint32_t i = 0; j && prompts && i < rep->n_prompts; i++) {
        json_t *p = figures(&rep->prompts[i]);
        if (p && json_is_string(json_array_get(texts, i)))
            json_object_set(p, "text", json_array_get(texts, i));
        if (!p || json_array_append_new(prompts, p)) {
            json_decref(j);
            j = NULL;
        }
    }
    for (int i = 0; failed && i < rep->n_failed; i++) json_array_append_new(failed, json_string(rep->failed[i]));
    const json_t *ref_model = kiln_golden_model(g);
    json_t *extra = json_pack("{s:s, s:s, s:{s:s, s:s, s:O}, s:O, s:s, s:I, s:o, s:b, s:o, s:{s:o, s:o, s:o, s:o}, s:o,"
                              " s:o, s:o}",
                              "schema", "kiln.golden.check/1", "model", model, "reference", "path", path, "format", g->format, "model",
                              ref_model ? ref_model : json_null(), "fingerprint", rep->model, "relation",
                              kiln_fp_relation_name(rep->relation), "n_prompts", (json_int_t)rep->n_prompts,
                              "kld_p90", num(rep->all.kld_p90), "passed", rep->passed, "failed", failed,
                              "thresholds", "max_kld", thr(t->max_kld), "min_top1", thr(t->min_top1), "max_abs",
                              thr(t->max_abs), "max_ppl_ratio", thr(t->max_ppl_ratio), "prompts", prompts,
                              "same_top1", num(rep->all.same_top.val), "seconds", num(rep->seconds));
    if (!j || !extra || json_object_update(j, extra)) {
        json_decref(j);
        json_decref(extra);
        fprintf(stderr, "kiln: out of memory\n");
        return KILN_EXIT_FAIL;
    }
    json_decref(extra);
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    putchar('\n');
    json_decref(j);
    return rep->passed ? KILN_EXIT_OK : KILN_EXIT_FAIL;
}

static void print_row(const char *label, uint64_t n, const kiln_cmp_summary *s) {
    printf("%-8s %6llu  %9.3g  %9.3g  %9.6f  %10.3g  %10.3g  %7.4f  %9.4f  %9.4f\n", label, (unsigned long long)n,
           s->max_abs, s->rmse, s->cosine_min, s->kld.val, s->kld_max, s->same_top.val, s->ppl.val, s->ppl_ref.val);
}

static int print_text(const char *model, const char *path, const kiln_golden *g, const kiln_golden_report *rep,
                      const kiln_golden_thresholds *t) {
    const json_t *rm = kiln_golden_model(g);
    printf("golden check: %s against %s (%s, %u prompts)\n", model, path,
           strcmp(g->format, "klgt") ? "kiln golden file" : "KLGT logits", rep->n_prompts);
    if (rm)
        printf("reference model: %s (%s); this model is %s\n", kiln_esc(json_string_value(json_object_get(rm, "file"))).s,
               kiln_esc(json_string_value(json_object_get(rm, "arch"))).s, kiln_fp_relation_name(rep->relation));
    printf("%-8s %6s  %9s  %9s  %9s  %10s  %10s  %7s  %9s  %9s\n", "prompt", "tokens", "max_abs", "rmse", "cos_min",
           "kld_mean", "kld_max", "top1", "ppl", "ppl_ref");
    for (uint32_t i = 0; i < rep->n_prompts; i++) {
        char label[16];
        snprintf(label, sizeof label, "%u", i + 1);
        print_row(label, rep->n_tokens[i], &rep->prompts[i]);
    }
    print_row("all", rep->all.count, &rep->all);
    printf("KLD median %.3g, p90 %.3g, p99 %.3g; PPL ratio %.5f\n", rep->all.kld_median, rep->all.kld_p90,
           rep->all.kld_p99, rep->all.ppl_ratio.val);
    bool any = !isnan(t->max_kld) || !isnan(t->min_top1) || !isnan(t->max_abs) || !isnan(t->max_ppl_ratio);
    if (rep->passed) printf(any ? "PASS: every threshold holds\n" : "no thresholds given\n");
    for (int i = 0; i < rep->n_failed; i++) printf("FAIL: %s\n", kiln_esc(rep->failed[i]).s);
    return rep->passed ? KILN_EXIT_OK : KILN_EXIT_FAIL;
}

static int cmd_check(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? KILN_EXIT_OK : rc;
    if (optind != argc - 2) return kiln_cli_usage_error("golden", "check expects MODEL and GOLDEN");
    if (o.prompts || o.out || o.f16 || o.force || o.max_prompts)
        return kiln_cli_usage_error("golden", "--prompts, -o, --f16, --force and --max-prompts belong to golden record");
    const char *model = argv[optind], *path = argv[optind + 1];
    kiln_err err = {{0}};
    kiln_golden g;
    if (kiln_golden_load(path, &g, &err)) return kiln_cli_fail(&err);
    kiln_model *m = kiln_model_load(model, &err);
    kiln_golden_report rep;
    if (!m || kiln_golden_check(m, &g, &o.t, o.exact ? KILN_NUM_EXACT : KILN_NUM_GGML, (int64_t)o.n_batch, &rep,
                                &err)) {
        rc = kiln_cli_fail(&err);
    } else {
        rc = o.json ? print_json(model, path, &g, &rep, &o.t) : print_text(model, path, &g, &rep, &o.t);
        kiln_golden_report_free(&rep);
    }
    if (m) kiln_model_free(m);
    kiln_golden_free(&g);
    return rc;
}

int kiln_cmd_golden(int argc, char **argv) {
    if (argc < 2) return kiln_cli_usage_error("golden", "expects a subcommand: record or check");
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--layers")) return kiln_probe_cli("golden", argc, argv);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, stdout);
        return KILN_EXIT_OK;
    }
    if (!strcmp(argv[1], "record")) return cmd_record(argc - 1, argv + 1);
    if (!strcmp(argv[1], "check")) return cmd_check(argc - 1, argv + 1);
    return kiln_cli_usage_error("golden", "unknown subcommand '%s' (record or check)", argv[1]);
}
