/* fuzz/fuzz.h - what kiln's fuzz harnesses share.
 *
 * Each harness fuzz/fuzz_NAME.c defines one function
 *
 *     int fuzz_NAME(const uint8_t *data, size_t size);
 *
 * that feeds `data` to a parser of untrusted input through the library's
 * real entry points and checks the error convention: a call that fails
 * must have said why (a non-empty kiln_err). A broken invariant aborts, so
 * libFuzzer and the replay test (tests/test_fuzz_regress.c) both see it.
 * KILN_FUZZ_ENTRY(fuzz_NAME) turns the function into libFuzzer's
 * LLVMFuzzerTestOneInput when built for `make fuzz` (-DKILN_LIBFUZZER);
 * the replay test links the same functions through fuzz/harnesses.h.
 *
 * Parsers that only read from a path get the input written to a scratch
 * directory (under /dev/shm when there is one), made once per process. */
#ifndef KILN_FUZZ_H
#define KILN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

/* The separator between the files of a multi-file input ("a\n@@KF@@\nb"). */
#define FUZZ_SEP "\n@@KF@@\n"

/* The per-process scratch directory. Aborts when it cannot be made. */
const char *fuzz_dir(void);

/* The path of `name` in the scratch directory (a static buffer per call
 * slot: up to 4 paths live at once). */
const char *fuzz_path(const char *name);

/* Writes `n` bytes to `name` in the scratch directory; aborts on error. */
void fuzz_put(const char *name, const void *data, size_t n);

/* Removes `name` from the scratch directory (absent is fine). */
void fuzz_unlink(const char *name);

/* Splits data at FUZZ_SEP into at most `max` parts; the last part keeps
 * any further separators. Returns the number of parts (at least 1). */
size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, size_t max);

/* Aborts when `rc` reports failure (< 0) but `err` holds no message: the
 * error convention of core/error.h is broken. Returns rc. */
int fuzz_expect_err(int rc, const kiln_err *err, const char *what);

#ifdef KILN_LIBFUZZER
#define KILN_FUZZ_ENTRY(fn)                                                 \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);           \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {          \
        fn(data, size);                                                     \
        return 0;                                                           \
    }
#else
#define KILN_FUZZ_ENTRY(fn)
#endif

#endif
