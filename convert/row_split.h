/* convert/row_split.h - a loop over rows split across threads started for
 * the call and joined, for convert's per-chunk conversions.
 *
 * Not an OpenMP parallel for: between two chunks (while the previous one
 * is written and the next one read) an OpenMP worker spins in its team's
 * barrier, which cost a third of convert's CPU time on a 2-core machine;
 * a thread start is tens of microseconds against the milliseconds of a
 * chunk. The thread count is omp_get_max_threads(), so OMP_NUM_THREADS
 * and kiln's -t still set it. */
#ifndef KILN_CONVERT_ROW_SPLIT_H
#define KILN_CONVERT_ROW_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#define CV_MAX_SPLIT 64

/* Does rows [r0, r1), the slice-th of the split (slices are in row order). */
typedef void (*cv_rows_fn)(void *ctx, int slice, int64_t r0, int64_t r1);

/* Runs fn over rows [0, nrows) in at most CV_MAX_SPLIT slices, one per
 * thread (one slice, on the caller's thread, when `small`), and returns
 * when every slice is done. A thread that cannot be started has its slice
 * done on the caller's thread. Returns the number of slices (>= 1). */
int cv_split_rows(cv_rows_fn fn, void *ctx, int64_t nrows, bool small);

#endif
