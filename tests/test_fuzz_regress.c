/* tests/test_fuzz_regress.c - replays every input under fuzz/regress/NAME/
 * (findings of `make fuzz`, kept as regressions) and fuzz/corpus/NAME/
 * (the seeds) through the fuzz harness NAME, compiled here with the
 * normal compiler (and under ASan/UBSan by `make check`).
 *
 * Each input runs in a child process, so a crash, a sanitizer report or a
 * harness's abort on a broken error convention (a failure without a
 * message) makes that input's TAP line "not ok" instead of ending the
 * suite. The harness functions are the same ones libFuzzer runs
 * (fuzz/fuzz_*.c, listed in fuzz/harnesses.h). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fuzz/harnesses.h"

static const struct {
    const char *name;
    int (*fn)(const uint8_t *data, size_t size);
} FUZZ_HARNESSES[] = {
#define FUZZ_ENTRY(name) {#name, fuzz_##name},
    FUZZ_HARNESS_LIST(FUZZ_ENTRY)
#undef FUZZ_ENTRY
};

static int n_test;

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

/* Runs harness `fn` on the file in a child. Returns a description of what
 * went wrong, or NULL. */
static const char *replay(int (*fn)(const uint8_t *, size_t), const char *path, char *why, size_t cap) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
        size_t n = 0;
        char *d = read_file(path, &n);
        if (!d) _exit(3);
        fn((const uint8_t *)d, n);
        free(d);
        exit(0); /* atexit handlers: the harness's scratch folder, LeakSanitizer */
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) return "waitpid failed";
    if (WIFSIGNALED(st)) {
        snprintf(why, cap, "killed by signal %d", WTERMSIG(st));
        return why;
    }
    if (WEXITSTATUS(st) == 3) return "cannot read the input";
    if (WEXITSTATUS(st) != 0) {
        snprintf(why, cap, "exit status %d (sanitizer report?)", WEXITSTATUS(st));
        return why;
    }
    return NULL;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays every file of `dir`/NAME in name order; returns the number of
 * failures. A missing folder has no inputs. */
static int replay_dir(const char *dir, const char *name, int (*fn)(const uint8_t *, size_t)) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    DIR *d = opendir(path);
    if (!d) return 0;
    char *files[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < sizeof files / sizeof *files)
        if (e->d_name[0] != '.') files[n++] = strdup(e->d_name);
    closedir(d);
    qsort(files, n, sizeof *files, cmp_name);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        char file[2048], why[128];
        snprintf(file, sizeof file, "%s/%s", path, files[i]);
        const char *bad = files[i] ? replay(fn, file, why, sizeof why) : "out of memory";
        printf("%s %d - %s%s%s\n", bad ? "not ok" : "ok", ++n_test, file, bad ? ": " : "", bad ? bad : "");
        failed += bad != NULL;
        free(files[i]);
    }
    return failed;
}

int main(void) {
    /* the harnesses' own messages (and sanitizer reports) go to stderr */
    int failed = 0, inputs_before;
    size_t n_h = sizeof FUZZ_HARNESSES / sizeof *FUZZ_HARNESSES;
    for (size_t i = 0; i < n_h; i++) {
        inputs_before = n_test;
        failed += replay_dir("fuzz/regress", FUZZ_HARNESSES[i].name, FUZZ_HARNESSES[i].fn);
        failed += replay_dir("fuzz/corpus", FUZZ_HARNESSES[i].name, FUZZ_HARNESSES[i].fn);
        if (n_test == inputs_before)
            printf("not ok %d - fuzz/corpus/%s: no inputs to replay # SKIP\n", ++n_test, FUZZ_HARNESSES[i].name);
    }
    printf("1..%d\n", n_test);
    return failed ? 1 : 0;
}
