/* tests/quant_golden.h - loads llama.cpp's quantization vectors from
 * ../shared/golden/quant/ (see its README section 7) for the codec suites.
 *
 * Each source tensor SRC has SRC.f32 (rows x cols floats), SRC.imatrix.f32
 * (cols weights) and, per type, SRC.TYPE[.imx].q (llama.cpp's blocks) and
 * SRC.TYPE[.imx].deq.f32 (llama.cpp's dequantization of them). */
#ifndef KILN_TESTS_QUANT_GOLDEN_H
#define KILN_TESTS_QUANT_GOLDEN_H

#include "shared.h"

#include <math.h>
#include <stdarg.h>

typedef struct golden_src {
    const char *name;
    int64_t rows, cols;
} golden_src;

static const golden_src GOLDEN_SRCS[] = {
    {"blk.0.attn_q.weight", 128, 256},
    {"blk.1.ffn_down.weight", 64, 512},
    {"blk.2.ffn_up.weight", 128, 256},
};
#define N_GOLDEN_SRCS 3

/* Reads the whole file ../shared/golden/quant/NAME, NAME given printf-style,
 * into a malloc'd buffer; sets *len unless len is NULL. Fails the test when
 * the file is missing. */
__attribute__((format(printf, 2, 3))) static inline void *golden_load(size_t *len, const char *fmt, ...) {
    char rel[512], path[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/golden/quant/%s", kiln_shared(), rel);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

/* llama.cpp's rmse and imatrix-weighted rmse for (src, type, imx) from
 * quant/index.tsv. Returns 0 when found. */
static inline int golden_index_rmse(const char *src, const char *type, int imx, double *rmse,
                                    double *wrmse) {
    char path[8192], line[1024];
    snprintf(path, sizeof path, "%s/golden/quant/index.tsv", kiln_shared());
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        char s[256], t[64], im[16];
        long rows, cols;
        double r, w;
        if (sscanf(line, "%255s %ld %ld %63s %15s %*s %*s %lf %lf", s, &rows, &cols, t, im, &r, &w) != 7)
            continue;
        if (strcmp(s, src) || strcmp(t, type)) continue;
        int is_imx = strcmp(im, "none") != 0 && strcmp(im, "0") != 0 && strcmp(im, "no") != 0;
        if (is_imx != imx) continue;
        *rmse = r;
        *wrmse = w;
        found = 0;
        break;
    }
    fclose(f);
    return found;
}

/* Root mean square error, and imatrix-weighted rmse (w broadcast over rows,
 * w may be NULL for the plain one), computed in double as index.tsv is. */
static inline double golden_rmse(const float *a, const float *b, int64_t rows, int64_t cols,
                                 const float *w) {
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double d = (double)a[r * cols + c] - b[r * cols + c];
            double wt = w ? w[c] : 1.0;
            num += wt * d * d;
            den += wt;
        }
    return sqrt(num / den);
}

#endif
