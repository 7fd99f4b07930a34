/* convert/row_split.c - rows split across threads (see row_split.h). */
#include "row_split.h"

#include <omp.h>
#include <pthread.h>

typedef struct slice {
    cv_rows_fn fn;
    void *ctx;
    int index;
    int64_t r0, r1;
    pthread_t thread;
    bool started;
} slice;

static void *slice_main(void *arg) {
    slice *s = arg;
    s->fn(s->ctx, s->index, s->r0, s->r1);
    return NULL;
}

int cv_split_rows(cv_rows_fn fn, void *ctx, int64_t nrows, bool small) {
    int n = small ? 1 : omp_get_max_threads();
    if (n > CV_MAX_SPLIT) n = CV_MAX_SPLIT;
    if (n > nrows) n = nrows > 0 ? (int)nrows : 1;
    slice s[CV_MAX_SPLIT];
    for (int t = 0; t < n; t++) {
        s[t] = (slice){.fn = fn, .ctx = ctx, .index = t, .r0 = nrows * t / n, .r1 = nrows * (t + 1) / n};
        if (t > 0) s[t].started = pthread_create(&s[t].thread, NULL, slice_main, &s[t]) == 0;
    }
    slice_main(&s[0]);
    for (int t = 1; t < n; t++) {
        if (s[t].started) pthread_join(s[t].thread, NULL);
        else slice_main(&s[t]);
    }
    return n;
}
