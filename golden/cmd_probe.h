/* golden/cmd_probe.h - the one CLI of the layer probes (probe.h), which two
 * commands expose: `kiln diff --activations` and `kiln golden --layers`. */
#ifndef KILN_CMD_PROBE_H
#define KILN_CMD_PROBE_H

/* Runs the probe command line in argv (argv[0] the command name; the
 * option that chose it, --activations or --layers, may appear anywhere
 * and is accepted as a no-op). cmd names the command in messages. Returns
 * the exit code. */
int kiln_probe_cli(const char *cmd, int argc, char **argv);

#endif
