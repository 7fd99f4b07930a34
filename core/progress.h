/* core/progress.h - a progress bar with rate and ETA for long work.
 *
 * Drawn on stderr only when stderr is a terminal and kiln_progress_quiet
 * is not set; otherwise every call is a cheap no-op, so library code can
 * report progress unconditionally. Redraws are rate-limited (10 per
 * second). kiln_progress_add() is safe to call from OpenMP threads. */
#ifndef KILN_PROGRESS_H
#define KILN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_progress {
    const char *label;
    const char *unit;      /* "B" formats as bytes, anything else as count */
    uint64_t total, done;
    double start, last_draw;
    bool active;
} kiln_progress;

/* Set by --quiet: no progress output at all. */
extern bool kiln_progress_quiet;

void kiln_progress_start(kiln_progress *p, const char *label, uint64_t total, const char *unit);
void kiln_progress_add(kiln_progress *p, uint64_t n);
/* Draws the final state and ends the line. */
void kiln_progress_end(kiln_progress *p);

/* Wall-clock seconds from a monotonic clock. */
double kiln_now(void);

#endif
