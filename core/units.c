/* core/units.c - see units.h. */
#include "units.h"

#include <stdio.h>

void kiln_human_bytes(double bytes, char *out, size_t cap) {
    static const char *UNITS[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1000 && u < 4) {
        bytes /= 1000;
        u++;
    }
    snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", bytes, UNITS[u]);
}
