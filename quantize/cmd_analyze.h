/* quantize/cmd_analyze.h - `kiln quantize --analyze`, the sensitivity scan's
 * command line (cmd_analyze.c), which kiln_cmd_quantize hands over to. */
#ifndef KILN_CMD_ANALYZE_H
#define KILN_CMD_ANALYZE_H

#include <stdbool.h>

/* True when argv asks for the scan (--analyze anywhere before "--"). */
bool kiln_quantize_wants_analyze(int argc, char **argv);

/* `kiln quantize --analyze IN -f TEXT ...`; returns the exit code. */
int kiln_cmd_quantize_analyze(int argc, char **argv);

#endif
