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

#endif
