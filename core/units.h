/* core/units.h - sizes written for people. Shared by every printer
 * (inspect's header line, quantize's summary), so one size reads the same
 * everywhere. */
#ifndef KILN_UNITS_H
#define KILN_UNITS_H

#include <stddef.h>

/* "11.6 MB"-style size (powers of 1000, matching ls -h --si). */
void kiln_human_bytes(double bytes, char *out, size_t cap);

#endif
