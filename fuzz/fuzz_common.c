/* fuzz/fuzz_common.c - the scratch directory, file and splitting helpers
 * of fuzz/fuzz.h. Linked into every harness and into the replay test. */
#include "fuzz.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[256];
static pid_t scratch_owner;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    remove(path); /* best effort: keep removing the rest */
    return 0;
}

/* Removes the scratch directory at exit, only in the process that made it
 * (the replay test forks one child per input). */
static void cleanup_scratch(void) {
    if (scratch[0] && getpid() == scratch_owner) nftw(scratch, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void) {
    if (scratch[0]) return scratch;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/kiln-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    scratch_owner = getpid();
    atexit(cleanup_scratch);
    return scratch;
}

const char *fuzz_path(const char *name) {
    static char bufs[4][512];
    static unsigned slot;
    char *b = bufs[slot++ & 3];
    snprintf(b, sizeof bufs[0], "%s/%s", fuzz_dir(), name);
    return b;
}

void fuzz_put(const char *name, const void *data, size_t n) {
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

void fuzz_unlink(const char *name) { unlink(fuzz_path(name)); }

size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, size_t max) {
    const size_t sep_len = sizeof FUZZ_SEP - 1;
    size_t n = 0;
    while (n + 1 < max) {
        const uint8_t *at = memmem(data, size, FUZZ_SEP, sep_len);
        if (!at) break;
        part[n] = data;
        len[n++] = (size_t)(at - data);
        size -= (size_t)(at - data) + sep_len;
        data = at + sep_len;
    }
    part[n] = data;
    len[n++] = size;
    return n;
}

int fuzz_expect_err(int rc, const kiln_err *err, const char *what) {
    if (rc < 0 && !err->msg[0]) {
        fprintf(stderr, "fuzz: %s failed without an error message\n", what);
        abort();
    }
    return rc;
}
