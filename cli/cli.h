/* cli/cli.h - what the thin command layers share: their entry points,
 * error printing and a few option parsers. Only the kiln binary links
 * these; the library never prints or exits. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"

#define KILN_VERSION "0.1.0"

/* Each subcommand: argv[0] is the command name. Returns the exit code. */
int kiln_cmd_inspect(int argc, char **argv);
int kiln_cmd_diff(int argc, char **argv);
int kiln_cmd_testmodel(int argc, char **argv);
int kiln_cmd_tokenize(int argc, char **argv);
int kiln_cmd_splice(int argc, char **argv);
int kiln_cmd_convert(int argc, char **argv);
int kiln_cmd_quantize(int argc, char **argv);
int kiln_cmd_imatrix(int argc, char **argv);
int kiln_cmd_perplexity(int argc, char **argv);
int kiln_cmd_golden(int argc, char **argv);
int kiln_cmd_generate(int argc, char **argv);
/* @cmd-prototypes */

/* Prints "kiln: <message>" to stderr and returns KILN_EXIT_FAIL. */
int kiln_cli_fail(const kiln_err *err);

/* Prints "kiln CMD: <fmt>" plus a hint to run --help; returns KILN_EXIT_USAGE. */
int kiln_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses sizes like "500M", "2G", "4096" (K/M/G are powers of 1000 as in
 * gguf-split; Ki/Mi/Gi powers of 1024). Returns false on bad input. */
bool kiln_parse_size(const char *s, uint64_t *out);

/* Parses a non-negative integer / a double; false on trailing junk. */
bool kiln_parse_u64(const char *s, uint64_t *out);
bool kiln_parse_double(const char *s, double *out);

/* --max-memory SIZE, --layer-major and --scratch-dir DIR: how `kiln
 * imatrix` and `kiln perplexity` run a model larger than memory (all
 * chunks through one layer before the next: runtime/layer_major.h). */
typedef struct kiln_cli_memory {
    bool layer_major;
    uint64_t max_memory;     /* 0: no cap */
    const char *scratch_dir; /* NULL: $TMPDIR or /tmp */
} kiln_cli_memory;

enum { KILN_OPT_MAX_MEMORY = 0x4d00, KILN_OPT_LAYER_MAJOR, KILN_OPT_SCRATCH_DIR };
#define KILN_CLI_MEMORY_OPTIONS                                                                      \
    {"max-memory", required_argument, 0, KILN_OPT_MAX_MEMORY},                                       \
        {"layer-major", no_argument, 0, KILN_OPT_LAYER_MAJOR},                                       \
        {"scratch-dir", required_argument, 0, KILN_OPT_SCRATCH_DIR}
#define KILN_CLI_MEMORY_HELP                                                                          \
    "      --max-memory SIZE  keep at most about SIZE resident (800M, 4G, 8Gi): the\n"                \
    "                         chunks go through the model layer by layer, all of\n"                   \
    "                         them through layer L before layer L+1, so each weight\n"                \
    "                         is read once; activations spill to a scratch file\n"                    \
    "                         when they do not fit. Chosen by itself (capped at the\n"                \
    "                         memory available) when the model is larger than that.\n"                \
    "                         The same numbers, bit for bit\n"                                         \
    "      --layer-major      that order, without a cap\n"                                            \
    "      --scratch-dir DIR  where activations spill (default $TMPDIR, else /tmp)\n"

/* Takes getopt's value opt: 1 when it was one of these options, 0 when
 * not, -1 after a usage error (the caller returns KILN_EXIT_USAGE). */
int kiln_cli_memory_opt(kiln_cli_memory *mm, int opt, const char *arg, const char *cmd);

/* With neither option given, goes layer by layer, capped at the memory
 * available, when model_bytes would not fit in it (saying so on stderr
 * unless quiet). */
void kiln_cli_memory_decide(kiln_cli_memory *mm, uint64_t model_bytes, const char *cmd, bool quiet);

/* -c/--ctx-size N, -b/--batch-size N, --chunks N and -t/--threads N:
 * how `kiln perplexity` and `kiln diff --activations` cut the text into
 * chunks and how many threads evaluate them. The caller sets the
 * defaults; 0 is "not given". */
typedef struct kiln_cli_eval {
    uint64_t n_ctx, n_batch, n_chunks, threads;
    bool ctx_given;
} kiln_cli_eval;

enum { KILN_OPT_CHUNKS = 0x4e00 };
#define KILN_CLI_EVAL_OPTIONS                                                                        \
    {"ctx-size", required_argument, 0, 'c'}, {"batch-size", required_argument, 0, 'b'},             \
        {"chunks", required_argument, 0, KILN_OPT_CHUNKS}, {"threads", required_argument, 0, 't'}
#define KILN_CLI_EVAL_SHORT "c:b:t:"

/* Takes getopt's value opt as kiln_cli_memory_opt does: 1 when it was one
 * of these options, 0 when not, -1 after a usage error. */
int kiln_cli_eval_opt(kiln_cli_eval *e, int opt, const char *arg, const char *cmd);

#endif
