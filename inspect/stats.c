/* inspect/stats.c - statistics and comparisons over dequantized tensors.
 *
 * Both walk a tensor in chunks of CHUNK elements (a multiple of every
 * block size), dequantize each chunk into a per-thread buffer and reduce
 * in double precision. Partial results are stored per chunk and combined
 * in order afterwards, which keeps the figures independent of scheduling. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK (64 * 1024)

typedef struct part {
    double min, max, sum, sumsq;
    uint64_t nan, inf, finite;
    int failed;
} part;

int kiln_tensor_stats(const kiln_view_tensor *t, kiln_stats *out, kiln_progress *progress, kiln_err *err) {
    int64_t n = t->nelements, nchunks = (n + CHUNK - 1) / CHUNK;
    part *parts = calloc((size_t)nchunks + 1, sizeof *parts);
    if (!parts) return kiln_fail(err, t->file, t->name, -1, "out of memory");
    double bytes_per_el = n ? (double)t->nbytes / (double)n : 0;
    #pragma omp parallel
    {
        float *buf = malloc(CHUNK * sizeof(float));
        #pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t first = c * CHUNK, len = n - first < CHUNK ? n - first : CHUNK;
            part *p = &parts[c];
            p->min = INFINITY;
            p->max = -INFINITY;
            if (!buf || kiln_view_dequantize(t, first, len, buf, NULL) < 0) {
                p->failed = 1;
                continue;
            }
            for (int64_t i = 0; i < len; i++) {
                float x = buf[i];
                if (isnan(x)) { p->nan++; continue; }
                if (isinf(x)) { p->inf++; continue; }
                p->finite++;
                if (x < p->min) p->min = x;
                if (x > p->max) p->max = x;
                p->sum += x;
                p->sumsq += (double)x * x;
            }
            kiln_progress_add(progress, (uint64_t)(len * bytes_per_el));
        }
        free(buf);
    }
    kiln_stats s = {INFINITY, -INFINITY, 0, 0, 0, 0, 0};
    double sum = 0, sumsq = 0;
    int failed = 0;
    for (int64_t c = 0; c < nchunks; c++) {
        failed |= parts[c].failed;
        if (parts[c].min < s.min) s.min = parts[c].min;
        if (parts[c].max > s.max) s.max = parts[c].max;
        sum += parts[c].sum;
        sumsq += parts[c].sumsq;
        s.n_nan += parts[c].nan;
        s.n_inf += parts[c].inf;
        s.n_finite += parts[c].finite;
    }
    free(parts);
    if (failed) return kiln_view_dequantize(t, 0, 0, NULL, err) < 0 ? -1 : kiln_fail(err, t->file, t->name, -1, "out of memory");
    if (s.n_finite) {
        s.mean = sum / (double)s.n_finite;
        double var = sumsq / (double)s.n_finite - s.mean * s.mean;
        s.std = var > 0 ? sqrt(var) : 0;
    } else {
        s.min = s.max = NAN;
    }
    *out = s;
    return 0;
}

typedef struct cpart {
    double max_abs, d2, a2, b2, ab;
    int failed;
} cpart;

int kiln_tensor_compare(const kiln_view_tensor *a, const kiln_view_tensor *b, kiln_compare *out,
                        kiln_progress *progress, kiln_err *err) {
    if (a->nelements != b->nelements)
        return kiln_fail(err, b->file, b->name, -1, "has %lld elements, the other file's %lld",
                         (long long)b->nelements, (long long)a->nelements);
    int64_t n = a->nelements, nchunks = (n + CHUNK - 1) / CHUNK;
    cpart *parts = calloc((size_t)nchunks + 1, sizeof *parts);
    if (!parts) return kiln_fail(err, a->file, a->name, -1, "out of memory");
    double bytes_per_el = n ? (double)(a->nbytes + b->nbytes) / (double)n : 0;
    #pragma omp parallel
    {
        float *x = malloc(CHUNK * sizeof(float)), *y = malloc(CHUNK * sizeof(float));
        #pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t first = c * CHUNK, len = n - first < CHUNK ? n - first : CHUNK;
            cpart *p = &parts[c];
            if (!x || !y || kiln_view_dequantize(a, first, len, x, NULL) < 0 ||
                kiln_view_dequantize(b, first, len, y, NULL) < 0) {
                p->failed = 1;
                continue;
            }
            for (int64_t i = 0; i < len; i++) {
                double d = (double)x[i] - y[i];
                if (fabs(d) > p->max_abs || isnan(d)) p->max_abs = isnan(d) ? INFINITY : fabs(d);
                p->d2 += d * d;
                p->a2 += (double)x[i] * x[i];
                p->b2 += (double)y[i] * y[i];
                p->ab += (double)x[i] * y[i];
            }
            kiln_progress_add(progress, (uint64_t)(len * bytes_per_el));
        }
        free(x);
        free(y);
    }
    kiln_compare r = {0, 0, 0, 0};
    double d2 = 0, a2 = 0, b2 = 0, ab = 0;
    int failed = 0;
    for (int64_t c = 0; c < nchunks; c++) {
        failed |= parts[c].failed;
        if (parts[c].max_abs > r.max_abs) r.max_abs = parts[c].max_abs;
        d2 += parts[c].d2;
        a2 += parts[c].a2;
        b2 += parts[c].b2;
        ab += parts[c].ab;
    }
    free(parts);
    if (failed) {
        if (kiln_view_dequantize(a, 0, 0, NULL, err) < 0 || kiln_view_dequantize(b, 0, 0, NULL, err) < 0) return -1;
        return kiln_fail(err, a->file, a->name, -1, "out of memory");
    }
    r.rmse = n ? sqrt(d2 / (double)n) : 0;
    r.rel = a2 > 0 ? sqrt(d2 / a2) : sqrt(d2);
    r.cosine = a2 > 0 && b2 > 0 ? ab / sqrt(a2 * b2) : (a2 == b2 ? 1.0 : 0.0);
    *out = r;
    return 0;
}
