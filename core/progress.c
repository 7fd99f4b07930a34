/* core/progress.c - see progress.h. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

bool kiln_progress_quiet = false;

double kiln_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void human(char *out, size_t cap, double v, const char *unit) {
    static const char *SUFFIX[] = {"", "K", "M", "G", "T"};
    int i = 0;
    double base = unit[0] == 'B' && !unit[1] ? 1024 : 1000;
    while (v >= base && i < 4) {
        v /= base;
        i++;
    }
    snprintf(out, cap, i ? "%.1f%s%s" : "%.0f%s%s", v, SUFFIX[i], unit);
}

static void draw(kiln_progress *p, bool final) {
    double now = kiln_now(), el = now - p->start;
    double frac = p->total ? (double)p->done / (double)p->total : 0;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    char rate[32], done[32];
    human(rate, sizeof rate, el > 0 ? (double)p->done / el : 0, p->unit);
    human(done, sizeof done, (double)p->done, p->unit);
    double eta = frac > 0 && !final ? el / frac - el : 0;
    fprintf(stderr, "\r%-20.20s [%s] %5.1f%% %s %s/s %s %02d:%02d  ", p->label, bar, frac * 100, done, rate,
            final ? "in" : "ETA", (int)(final ? el : eta) / 60, (int)(final ? el : eta) % 60);
    if (final) fputc('\n', stderr);
    fflush(stderr);
    p->last_draw = now;
}

void kiln_progress_start(kiln_progress *p, const char *label, uint64_t total, const char *unit) {
    p->label = label;
    p->unit = unit ? unit : "";
    p->total = total;
    p->done = 0;
    p->start = kiln_now();
    p->last_draw = 0;
    p->active = !kiln_progress_quiet && isatty(STDERR_FILENO);
}

void kiln_progress_add(kiln_progress *p, uint64_t n) {
    if (!p || !p->active) return;
    __atomic_fetch_add(&p->done, n, __ATOMIC_RELAXED);
    double now = kiln_now();
    if (now - p->last_draw < 0.1) return;
    #pragma omp critical(kiln_progress)
    {
        if (now - p->last_draw >= 0.1) draw(p, false);
    }
}

void kiln_progress_end(kiln_progress *p) {
    if (!p || !p->active) return;
    draw(p, true);
    p->active = false;
}
