/* inspect/cmd_diff.c - `kiln diff A B`: the CLI over diff.c. Exit status
 * 0 unless a gate (--tolerance and friends) is set and fails, then 1. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/name_regex.h"
#include "../core/progress.h"
#include "../golden/cmd_probe.h"
#include "diff.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln diff A B [options]\n"
    "\n"
    "Compares two models (GGUF, split GGUF, safetensors, HF directories):\n"
    "metadata keys added, removed and changed; tensors added, removed, or\n"
    "changed in type or shape.\n"
    "\n"
    "  --values           also compare every tensor present in both, after\n"
    "                     dequantization: max abs difference, RMSE, relative\n"
    "                     error ||a-b||/||a|| and cosine similarity\n"
    "  --tolerance X      gate: fail when a tensor's max abs difference > X\n"
    "  --max-rmse X       gate: fail when a tensor's RMSE > X\n"
    "  --max-rel X        gate: fail when a tensor's relative error > X\n"
    "  --min-cosine X     gate: fail when a tensor's cosine < X\n"
    "                     (any gate implies --values; with a gate, tensors\n"
    "                     missing on one side or of another shape also fail)\n"
    "  --tensors REGEX    only tensors whose name matches (PCRE2)\n"
    "  --json             print the report as JSON (schema kiln.diff/1)\n"
    "  -t, --threads N    threads (default: all cores)\n"
    "  -q, --quiet        no progress bar\n"
    "\n"
    "  --activations A B -f TEXT   instead: run both models on TEXT and report how\n"
    "                     far B's hidden states drift from A's, per layer and\n"
    "                     tensor output (see 'kiln diff --activations --help')\n"
    "\n"
    "exit status: 0 no gate failed, 1 a gate failed or an error, 2 usage\n";

static void print_list(const char *title, json_t *arr) {
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) printf("%s %s\n", title, kiln_esc(json_string_value(e)).s);
}

static void print_text(json_t *r) {
    json_t *md = json_object_get(r, "metadata"), *t = json_object_get(r, "tensors");
    size_t i;
    json_t *e;
    print_list("+ key", json_object_get(md, "added"));
    print_list("- key", json_object_get(md, "removed"));
    json_array_foreach(json_object_get(md, "changed"), i, e) {
        printf("~ key %s: %.120s -> %.120s\n", kiln_esc(json_string_value(json_object_get(e, "key"))).s,
               kiln_esc(json_string_value(json_object_get(e, "a"))).s,
               kiln_esc(json_string_value(json_object_get(e, "b"))).s);
    }
    print_list("+ tensor", json_object_get(t, "added"));
    print_list("- tensor", json_object_get(t, "removed"));
    json_array_foreach(json_object_get(t, "changed"), i, e) {
        char *sa = json_dumps(json_object_get(e, "shape_a"), JSON_COMPACT);
        char *sb = json_dumps(json_object_get(e, "shape_b"), JSON_COMPACT);
        printf("~ tensor %s: %s %s -> %s %s\n", kiln_esc(json_string_value(json_object_get(e, "name"))).s,
               kiln_esc(json_string_value(json_object_get(e, "type_a"))).s, sa ? sa : "?",
               kiln_esc(json_string_value(json_object_get(e, "type_b"))).s, sb ? sb : "?");
        free(sa);
        free(sb);
    }
    json_t *vals = json_object_get(r, "values");
    if (json_array_size(vals)) {
        printf("\n  %-40s %12s %12s %12s %10s\n", "tensor", "max_abs", "rmse", "rel", "cosine");
        json_array_foreach(vals, i, e)
            printf("  %-40s %12.5g %12.5g %12.5g %10.7f\n", kiln_esc(json_string_value(json_object_get(e, "name"))).s,
                   json_real_value(json_object_get(e, "max_abs")), json_real_value(json_object_get(e, "rmse")),
                   json_real_value(json_object_get(e, "rel")), json_real_value(json_object_get(e, "cosine")));
    }
    json_array_foreach(json_object_get(r, "failures"), i, e)
        printf("FAIL %s: %s over the limit\n", kiln_esc(json_string_value(json_object_get(e, "name"))).s,
               json_string_value(json_object_get(e, "metric")));
    if (json_is_true(json_object_get(r, "gated")))
        printf("%s\n", json_is_true(json_object_get(r, "passed")) ? "diff: all gates passed" : "diff: FAILED");
}

int kiln_cmd_diff(int argc, char **argv) {
    static const struct option opts[] = {
        {"values", no_argument, 0, 'v'},        {"tolerance", required_argument, 0, 'a'},
        {"max-rmse", required_argument, 0, 'r'}, {"max-rel", required_argument, 0, 'e'},
        {"min-cosine", required_argument, 0, 'c'}, {"tensors", required_argument, 0, 'T'},
        {"json", no_argument, 0, 'j'},          {"threads", required_argument, 0, 't'},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--activations")) return kiln_probe_cli("diff", argc, argv);
    kiln_diff_opts o = {.max_abs = -1, .max_rmse = -1, .max_rel = -1, .min_cosine = -2};
    bool as_json = false;
    uint64_t threads = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:qh", opts, NULL)) != -1) {
        double *gate = NULL;
        switch (c) {
        case 'v': o.values = true; break;
        case 'a': gate = &o.max_abs; break;
        case 'r': gate = &o.max_rmse; break;
        case 'e': gate = &o.max_rel; break;
        case 'c': gate = &o.min_cosine; break;
        case 'T': {
            kiln_err bad;
            if (kiln_name_regex_check(optarg, "--tensors", &bad) < 0) return kiln_cli_usage_error("diff", "%s", bad.msg);
            o.tensor_regex = optarg;
            break;
        }
        case 'j': as_json = true; break;
        case 't': if (!kiln_parse_u64(optarg, &threads) || !threads) return kiln_cli_usage_error("diff", "--threads needs a positive number"); break;
        case 'q': kiln_progress_quiet = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("diff", "unknown option");
        }
        if (gate) {
            if (!kiln_parse_double(optarg, gate) || (gate != &o.min_cosine && *gate < 0))
                return kiln_cli_usage_error("diff", "a gate needs a non-negative number");
            o.values = true;
        }
    }
    if (optind != argc - 2) return kiln_cli_usage_error("diff", "expects two models, A and B");
    if (threads) omp_set_num_threads((int)threads);
    kiln_view a, b;
    kiln_err err = {{0}};
    if (kiln_view_open(&a, argv[optind], &err) < 0) return kiln_cli_fail(&err);
    if (kiln_view_open(&b, argv[optind + 1], &err) < 0) {
        kiln_view_close(&a);
        return kiln_cli_fail(&err);
    }
    json_t *r = kiln_diff_report(&a, &b, &o, &err);
    int rc;
    if (!r) {
        rc = kiln_cli_fail(&err);
    } else {
        if (as_json) {
            json_dumpf(r, stdout, JSON_INDENT(2));
            printf("\n");
        } else {
            print_text(r);
        }
        rc = json_is_true(json_object_get(r, "passed")) ? KILN_EXIT_OK : KILN_EXIT_FAIL;
        json_decref(r);
    }
    kiln_view_close(&a);
    kiln_view_close(&b);
    return rc;
}
