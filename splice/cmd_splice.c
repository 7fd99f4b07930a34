/* splice/cmd_splice.c - `kiln splice`: the CLI over splice.h. Parses the
 * options, prints the plan (--dry-run, --json) and warnings, runs the
 * splice. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/name_regex.h"
#include "../core/progress.h"
#include "splice.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static const char *USAGE =
    "usage: kiln splice BASE DONOR -o OUT SELECTION [options]\n"
    "       kiln splice --keep-experts IDS BASE -o OUT [options]\n"
    "\n"
    "Copies the selected tensors byte for byte from DONOR into BASE, keeping\n"
    "everything else of BASE (metadata, tensor order, alignment). DONOR must\n"
    "have the same architecture, block count and expert count; a spliced\n"
    "tensor keeps the donor's type. Nothing is dequantized unless\n"
    "--requantize asks for it. The output records kiln.splice.donor,\n"
    "kiln.splice.tensors and kiln.splice.selection.\n"
    "\n"
    "selection (kinds intersect; several --tensors are alternatives):\n"
    "  --tensors REGEX    tensors whose name matches (PCRE2); repeatable\n"
    "  --layers A-B,C     tensors of these blocks (blk.N)\n"
    "  --experts          only routed-expert tensors (ffn_*_exps); with --layers\n"
    "                     this is the per-layer boosted quant\n"
    "  --expert-ids IDS   only these experts' slabs of the expert tensors, e.g.\n"
    "                     0,3,5 or 0-7; a byte copy when both files store the\n"
    "                     tensor in one type, refused otherwise unless\n"
    "  --requantize       converts the donor's slabs to the base's type\n"
    "  --imatrix FILE     llama-imatrix GGUF weighting that requantization\n"
    "\n"
    "expert surgery:\n"
    "  --keep-experts IDS keep only these experts (no DONOR): cuts the expert\n"
    "                     tensors and the router, updates expert_count, and\n"
    "                     lowers expert_used_count if it no longer fits\n"
    "\n"
    "output:\n"
    "  -o, --output OUT   output GGUF (never one of the inputs)\n"
    "  --dry-run          print the plan (tensors, types, bytes, bits per\n"
    "                     weight) and write nothing\n"
    "  --json             print the plan as JSON (schema kiln.splice/1)\n"
    "  --force            overwrite an existing OUT\n"
    "  --split-max-size N / --split-max-tensors N\n"
    "                     write shards like llama-gguf-split (N: 500M, 2G, ...)\n"
    "  -t, --threads N    threads for --requantize (default: all cores)\n"
    "  -q, --quiet        no progress bar\n"
    "  -h, --help         this help\n";

enum { OPT_TENSORS = 256, OPT_LAYERS, OPT_EXPERTS, OPT_IDS, OPT_REQUANT, OPT_IMATRIX, OPT_KEEP,
       OPT_DRY, OPT_JSON, OPT_FORCE, OPT_SPLIT_SIZE, OPT_SPLIT_TENSORS };

int kiln_cmd_splice(int argc, char **argv) {
    static const struct option opts[] = {
        {"tensors", required_argument, 0, OPT_TENSORS},  {"layers", required_argument, 0, OPT_LAYERS},
        {"experts", no_argument, 0, OPT_EXPERTS},         {"expert-ids", required_argument, 0, OPT_IDS},
        {"requantize", no_argument, 0, OPT_REQUANT},      {"imatrix", required_argument, 0, OPT_IMATRIX},
        {"keep-experts", required_argument, 0, OPT_KEEP}, {"output", required_argument, 0, 'o'},
        {"dry-run", no_argument, 0, OPT_DRY},             {"json", no_argument, 0, OPT_JSON},
        {"force", no_argument, 0, OPT_FORCE},             {"split-max-size", required_argument, 0, OPT_SPLIT_SIZE},
        {"split-max-tensors", required_argument, 0, OPT_SPLIT_TENSORS},
        {"threads", required_argument, 0, 't'},           {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},                    {0, 0, 0, 0},
    };
    kiln_splice_opts o = {0};
    const char **regex = calloc((size_t)argc + 1, sizeof *regex);
    if (!regex) return kiln_cli_usage_error("splice", "out of memory");
    bool dry = false, as_json = false;
    uint64_t threads = 0;
    int c, rc = -1;
    optind = 1;
    while (rc < 0 && (c = getopt_long(argc, argv, "o:t:qh", opts, NULL)) != -1) {
        switch (c) {
        case OPT_TENSORS: {
            kiln_err bad;
            if (kiln_name_regex_check(optarg, "--tensors", &bad) < 0) rc = kiln_cli_usage_error("splice", "%s", bad.msg);
            else regex[o.n_tensor_regex++] = optarg;
            break;
        }
        case OPT_LAYERS: o.layers = optarg; break;
        case OPT_EXPERTS: o.experts = true; break;
        case OPT_IDS: o.expert_ids = optarg; break;
        case OPT_REQUANT: o.requantize = true; break;
        case OPT_IMATRIX: o.imatrix = optarg; break;
        case OPT_KEEP: o.keep_experts = optarg; break;
        case 'o': o.output = optarg; break;
        case OPT_DRY: dry = true; break;
        case OPT_JSON: as_json = true; break;
        case OPT_FORCE: o.force = true; break;
        case OPT_SPLIT_SIZE:
            if (!kiln_parse_size(optarg, &o.split_max_size) || !o.split_max_size)
                rc = kiln_cli_usage_error("splice", "--split-max-size needs a size like 500M or 2G");
            break;
        case OPT_SPLIT_TENSORS:
            if (!kiln_parse_u64(optarg, &o.split_max_tensors) || !o.split_max_tensors)
                rc = kiln_cli_usage_error("splice", "--split-max-tensors needs a positive number");
            break;
        case 't':
            if (!kiln_parse_u64(optarg, &threads) || !threads)
                rc = kiln_cli_usage_error("splice", "--threads needs a positive number");
            break;
        case 'q': kiln_progress_quiet = true; break;
        case 'h': fputs(USAGE, stdout); rc = KILN_EXIT_OK; break;
        default: rc = kiln_cli_usage_error("splice", "unknown option"); break;
        }
    }
    int n_pos = argc - optind, want = o.keep_experts ? 1 : 2;
    if (rc < 0 && n_pos != want)
        rc = kiln_cli_usage_error("splice", o.keep_experts ? "--keep-experts expects exactly one BASE"
                                                           : "expects BASE and DONOR");
    if (rc < 0 && !o.output && !dry) rc = kiln_cli_usage_error("splice", "needs -o OUT (or --dry-run)");
    if (rc >= 0) {
        free(regex);
        return rc;
    }
    o.base = argv[optind];
    o.donor = o.keep_experts ? NULL : argv[optind + 1];
    o.tensor_regex = regex;
    if (threads) omp_set_num_threads((int)threads);

    kiln_splice_plan plan;
    kiln_err err = {{0}};
    if (kiln_splice_plan_make(&o, &plan, &err) < 0) {
        rc = kiln_cli_fail(&err);
    } else {
        for (uint64_t i = 0; i < plan.n_warnings; i++) fprintf(stderr, "kiln: warning: %s\n", kiln_esc(plan.warnings[i]).s);
        rc = KILN_EXIT_OK;
        if (!dry && kiln_splice_write(&plan, &err) < 0) rc = kiln_cli_fail(&err);
        if (rc == KILN_EXIT_OK) {
            if (as_json) kiln_splice_print_plan_json(stdout, &plan);
            else if (dry) kiln_splice_print_plan(stdout, &plan);
            else if (!kiln_progress_quiet) fprintf(stderr, "kiln: wrote %s: %llu of %llu tensors from %s\n", o.output,
                         (unsigned long long)plan.n_changed, (unsigned long long)plan.n_items,
                         o.donor ? o.donor : "the base, cut to the kept experts");
        }
    }
    kiln_splice_plan_free(&plan);
    free(regex);
    return rc;
}
