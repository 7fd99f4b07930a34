/* convert/q8_rows.c - rows to Q8_0 a piece at a time (see q8_rows.h). */
#include "q8_rows.h"

#include <math.h>
#include <string.h>

#include "../codec/blocks.h"
#include "../codec/quants.h"
#include "../core/fp16.h"
#include "row_split.h"

/* Index of the first non-finite value of x[0, n), or -1. */
static int64_t first_non_finite(const float *x, int64_t n) {
    uint32_t any = 0;
#pragma omp simd reduction(| : any)
    for (int64_t c = 0; c < n; c++) {
        uint32_t u;
        memcpy(&u, &x[c], 4);
        any |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!any) return -1;
    for (int64_t c = 0; c < n; c++)
        if (!isfinite(x[c])) return c;
    return -1;
}

/* A cv_q8_0_rows call, shared by its slices. */
typedef struct q8_job {
    cv_decode_fn decode;
    const void *ctx;
    uint8_t *dst;
    int64_t cols;
    int64_t first_bad[CV_MAX_SPLIT]; /* per slice: -1 or row * cols + col */
} q8_job;

static void q8_slice(void *arg, int slice, int64_t r0, int64_t r1) {
    q8_job *j = arg;
    const uint64_t row_bytes = (uint64_t)j->cols / KILN_QK * sizeof(kiln_block_q8_0);
    float piece[CV_Q8_PIECE];
    j->first_bad[slice] = -1;
    for (int64_t i = r0; i < r1; i++) {
        uint8_t *out = j->dst + (uint64_t)i * row_bytes;
        for (int64_t c0 = 0; c0 < j->cols; c0 += CV_Q8_PIECE) {
            int64_t c1 = j->cols - c0 > CV_Q8_PIECE ? c0 + CV_Q8_PIECE : j->cols;
            j->decode(j->ctx, i, c0, c1, piece);
            int64_t bad = first_non_finite(piece, c1 - c0);
            if (bad >= 0) { /* Q8_0 refuses it, as kiln_quantize_rows does; rows go in order */
                j->first_bad[slice] = i * j->cols + c0 + bad;
                return;
            }
            kiln_quantize_row_q8_0_ref(piece, out + (uint64_t)c0 / KILN_QK * sizeof(kiln_block_q8_0), c1 - c0);
        }
    }
}

int64_t cv_q8_0_rows(cv_decode_fn decode, const void *ctx, void *dst, int64_t nrows, int64_t cols) {
    q8_job j = {.decode = decode, .ctx = ctx, .dst = dst, .cols = cols};
    int n = cv_split_rows(q8_slice, &j, nrows, nrows * cols <= (1 << 20));
    for (int t = 0; t < n; t++) /* slices are in row order: the first bad one is the first */
        if (j.first_bad[t] >= 0) return j.first_bad[t];
    return -1;
}

void cv_decode_plain(const void *ctx, int64_t row, int64_t c0, int64_t c1, float *dst) {
    const cv_plain_rows *p = ctx;
    uint64_t at = (uint64_t)(row * p->cols + c0);
    const uint8_t *s = p->src;
    if (p->dtype == KILN_ST_BF16) kiln_bf16_to_fp32_row((const uint16_t *)(s + 2 * at), dst, c1 - c0);
    else if (p->dtype == KILN_ST_F16) kiln_fp16_to_fp32_row((const uint16_t *)(s + 2 * at), dst, c1 - c0);
    else memcpy(dst, s + 4 * at, (size_t)(c1 - c0) * 4);
}

int cv_plain_q8_0_rows(const void *src, kiln_st_dtype dtype, void *dst, int64_t first_row, int64_t nrows,
                       int64_t cols, kiln_err *err) {
    if (dtype != KILN_ST_F32 && dtype != KILN_ST_F16 && dtype != KILN_ST_BF16)
        return kiln_fail(err, NULL, "dtype", -1, "cannot quantize %s rows in one step", kiln_st_dtype_name(dtype));
    const cv_plain_rows p = {.src = src, .dtype = dtype, .cols = cols};
    int64_t bad = cv_q8_0_rows(cv_decode_plain, &p, dst, nrows, cols);
    if (bad < 0) return 0;
    float v;
    cv_decode_plain(&p, bad / cols, bad % cols, bad % cols + 1, &v);
    return kiln_fail(err, NULL, NULL, -1, "row %lld column %lld is %s; refusing to quantize",
                     (long long)(first_row + bad / cols), (long long)(bad % cols), isnan(v) ? "NaN" : "infinite");
}
