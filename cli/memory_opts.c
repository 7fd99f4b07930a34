/* cli/memory_opts.c - the options for models larger than memory that
 * `kiln imatrix` and `kiln perplexity` share (see cli.h). */
#include "cli.h"

#include <stdio.h>

#include "../runtime/layer_major.h"

int kiln_cli_memory_opt(kiln_cli_memory *mm, int opt, const char *arg, const char *cmd) {
    switch (opt) {
    case KILN_OPT_MAX_MEMORY:
        if (!kiln_parse_size(arg, &mm->max_memory) || !mm->max_memory) {
            kiln_cli_usage_error(cmd, "--max-memory wants a size such as 800M or 4G, not '%s'", arg);
            return -1;
        }
        mm->layer_major = true;
        return 1;
    case KILN_OPT_LAYER_MAJOR: mm->layer_major = true; return 1;
    case KILN_OPT_SCRATCH_DIR: mm->scratch_dir = arg; return 1;
    default: return 0;
    }
}

void kiln_cli_memory_decide(kiln_cli_memory *mm, uint64_t model_bytes, const char *cmd, bool quiet) {
    if (mm->layer_major) return;
    uint64_t avail = kiln_memory_available();
    if (!avail || model_bytes <= avail) return;
    mm->layer_major = true;
    mm->max_memory = avail;
    if (!quiet)
        fprintf(stderr, "kiln %s: the model's %.2f GB do not fit the %.2f GB of memory available: going layer by "
                "layer (--max-memory)\n", cmd, model_bytes / 1e9, avail / 1e9);
}
