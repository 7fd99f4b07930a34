/* cli/eval_opts.c - -c, -b, --chunks and -t as the commands that evaluate
 * a model over a text share them (`kiln perplexity`, `kiln diff
 * --activations` / `kiln golden --layers`; see cli.h): one set of limits
 * and one wording of their errors. */
#include "cli.h"

int kiln_cli_eval_opt(kiln_cli_eval *e, int opt, const char *arg, const char *cmd) {
    switch (opt) {
    case 'c':
        if (!kiln_parse_u64(arg, &e->n_ctx) || e->n_ctx < 4 || e->n_ctx > (1u << 24)) {
            kiln_cli_usage_error(cmd, "-c needs a context of at least 4 tokens, not '%s'", arg);
            return -1;
        }
        e->ctx_given = true;
        return 1;
    case 'b':
        if (!kiln_parse_u64(arg, &e->n_batch) || !e->n_batch || e->n_batch > (1u << 24)) {
            kiln_cli_usage_error(cmd, "-b needs a positive number, not '%s'", arg);
            return -1;
        }
        return 1;
    case KILN_OPT_CHUNKS:
        if (!kiln_parse_u64(arg, &e->n_chunks) || !e->n_chunks || e->n_chunks > (1u << 30)) {
            kiln_cli_usage_error(cmd, "--chunks needs a positive number, not '%s'", arg);
            return -1;
        }
        return 1;
    case 't':
        if (!kiln_parse_u64(arg, &e->threads) || !e->threads || e->threads > 1024) {
            kiln_cli_usage_error(cmd, "--threads needs a positive number, not '%s'", arg);
            return -1;
        }
        return 1;
    default: return 0;
    }
}
