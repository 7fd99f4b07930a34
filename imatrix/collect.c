/* imatrix/collect.c - the accumulator behind the matmul hook (see
 * collect.h for what is collected and why it is kept in double).
 *
 * The sums of a dense product's input are added by column blocks on the
 * whole team and, on AVX-512, 8 columns per register (add_columns): the
 * runtime calls the hook between products, with the other threads idle,
 * and a 1B model's 512-token chunk brings 200 M squares. Every level and
 * thread count gives the scalar loop's bits (tests/test_imatrix_columns.c). */
#include "collect.h"

#include "../core/cpu.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#endif

void kiln_imx_collector_init(kiln_imx_collector *c, const kiln_gguf *model, bool process_output, bool with_sum) {
    memset(c, 0, sizeof *c);
    c->model = model;
    c->process_output = process_output;
    c->with_sum = with_sum;
    c->n_expert = 1;
}

static void acc_free(kiln_imx_acc *a) {
    free(a->name);
    free(a->sum2);
    free(a->sum);
    free(a->counts);
}

void kiln_imx_collector_free(kiln_imx_collector *c) {
    for (uint64_t i = 0; i < c->n_acc; i++) acc_free(&c->acc[i]);
    free(c->acc);
    c->acc = NULL;
    c->n_acc = c->cap_acc = 0;
}

static uint64_t lower_bound(const kiln_imx_collector *c, const char *name) {
    uint64_t lo = 0, hi = c->n_acc;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (strcmp(c->acc[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

kiln_imx_acc *kiln_imx_collector_find(const kiln_imx_collector *c, const char *name) {
    uint64_t i = lower_bound(c, name);
    return i < c->n_acc && !strcmp(c->acc[i].name, name) ? &c->acc[i] : NULL;
}

/* A legacy .dat entry holds all experts' values as one matrix; give it
 * the expert layout, every expert starting with the one count it had. */
static int reshape(kiln_imx_acc *a, int64_t n, int64_t n_mat, kiln_err *err) {
    int64_t *counts = malloc((size_t)n_mat * sizeof *counts);
    if (!counts) return kiln_fail(err, NULL, a->name, -1, "out of memory");
    for (int64_t m = 0; m < n_mat; m++) counts[m] = a->counts[0];
    free(a->counts);
    a->counts = counts;
    a->n = n;
    a->n_mat = n_mat;
    return 0;
}

/* True when all n_mat counts are equal. */
static bool counts_agree(const int64_t *counts, int64_t n_mat) {
    for (int64_t m = 1; m < n_mat; m++)
        if (counts[m] != counts[0]) return false;
    return true;
}

kiln_imx_acc *kiln_imx_collector_get(kiln_imx_collector *c, const char *name, int64_t n, int64_t n_mat,
                                     kiln_err *err) {
    uint64_t at = lower_bound(c, name);
    if (at < c->n_acc && !strcmp(c->acc[at].name, name)) {
        kiln_imx_acc *a = &c->acc[at];
        if (a->n == n && a->n_mat == n_mat) return a;
        if (a->n_mat == 1 && n_mat > 1 && a->n == n * n_mat) return reshape(a, n, n_mat, err) < 0 ? NULL : a;
        /* a dense 3-D weight (deepseek2's per-head attn_k_b) kept per
         * matrix, as kiln did before it took llama-imatrix's one matrix of
         * n_mat x n columns: joins it when the counts agree, as
         * llama-imatrix merges such files (one count per dense tensor) */
        if (n_mat == 1 && a->n_mat > 1 && a->n * a->n_mat == n && counts_agree(a->counts, a->n_mat)) {
            a->n = n;
            a->n_mat = 1;
            return a;
        }
        kiln_fail(err, NULL, name, -1, "statistics of %lld x %lld values do not fit %lld columns x %lld matrices",
                  (long long)a->n, (long long)a->n_mat, (long long)n, (long long)n_mat);
        return NULL;
    }
    if (n <= 0 || n_mat <= 0) {
        kiln_fail(err, NULL, name, -1, "bad shape %lld x %lld", (long long)n, (long long)n_mat);
        return NULL;
    }
    if (c->n_acc == c->cap_acc) {
        uint64_t cap = c->cap_acc ? c->cap_acc * 2 : 64;
        kiln_imx_acc *grown = realloc(c->acc, cap * sizeof *grown);
        if (!grown) {
            kiln_fail(err, NULL, name, -1, "out of memory");
            return NULL;
        }
        c->acc = grown;
        c->cap_acc = cap;
    }
    size_t nv = (size_t)(n * n_mat);
    kiln_imx_acc a = {
        .name = strdup(name),
        .n = n,
        .n_mat = n_mat,
        .sum2 = calloc(nv, sizeof(double)),
        .sum = c->with_sum ? calloc(nv, sizeof(double)) : NULL,
        .counts = calloc((size_t)n_mat, sizeof(int64_t)),
    };
    if (!a.name || !a.sum2 || !a.counts || (c->with_sum && !a.sum)) {
        acc_free(&a);
        kiln_fail(err, NULL, name, -1, "out of memory");
        return NULL;
    }
    memmove(&c->acc[at + 1], &c->acc[at], (c->n_acc - at) * sizeof a);
    c->acc[at] = a;
    c->n_acc++;
    return &c->acc[at];
}

/* llama-imatrix's choice: block weights always, the output projection on
 * request, nothing else (embeddings are not products; tied output
 * embeddings are left out as llama.cpp leaves them). And one kiln adds:
 * deepseek4's output_hc_fn, a product over the residual streams like the
 * blocks' hc_*_fn that llama-imatrix skips only for its name, so that a
 * preset quantizing it with an imatrix finds one. */
static bool wanted(const kiln_imx_collector *c, const char *name) {
    return !strncmp(name, "blk.", 4) || (c->process_output && !strcmp(name, "output.weight")) ||
           !strcmp(name, "output_hc_fn.weight");
}

static int64_t experts_of(const kiln_imx_collector *c, const char *name) {
    const kiln_tensor *t = c->model ? kiln_gguf_find_tensor(c->model, name) : NULL;
    return t ? (t->n_dims >= 3 ? t->ne[2] : 1) : c->n_expert;
}

/* Names the first non-finite input of a call whose sums went bad. */
static void report_non_finite(kiln_imx_collector *c, const char *name, int expert, const float *x, int64_t nt,
                              int64_t n_in, int64_t col) {
    char what[600];
    if (expert >= 0) snprintf(what, sizeof what, "%s (expert %d)", name, expert);
    else snprintf(what, sizeof what, "%s", name);
    for (int64_t i = 0; i < nt * n_in; i++)
        if (!isfinite(x[i])) {
            /* printf spells a NaN "-nan" or "nan" by its sign bit, which
             * means nothing here: say nan, inf or -inf. */
            const char *v = isnan(x[i]) ? "nan" : x[i] > 0 ? "inf" : "-inf";
            kiln_fail(&c->err, NULL, NULL, -1, "chunk %lld: tensor %s: activation %s at token %lld, column %lld",
                      (long long)c->chunk + 1, what, v, (long long)(i / n_in), (long long)(i % n_in));
            return;
        }
    kiln_fail(&c->err, NULL, NULL, -1, "chunk %lld: tensor %s: sum of squared activations overflowed in column %lld",
              (long long)c->chunk + 1, what, (long long)col);
}

/* Columns [j0, j1) of the sums, token after token: the definition. */
static void add_columns_scalar(double *s2, double *s1, const float *x, int64_t nt, int64_t n_in, int64_t j0,
                               int64_t j1) {
    for (int64_t t = 0; t < nt; t++) {
        const float *row = x + t * n_in;
        for (int64_t j = j0; j < j1; j++) s2[j] += (double)row[j] * row[j];
        if (s1)
            for (int64_t j = j0; j < j1; j++) s1[j] += row[j];
    }
}

#ifdef __x86_64__
/* The same sums, 8 columns per register: a block's sums stay in
 * registers while every token passes, instead of a load and a store of
 * each sum per token. The float square is exact in double (48 bits of
 * 53), so fma(x, x, s) rounds once, as s + x * x does: every column gets
 * the scalar bits. */
AVX512 static void add_columns_avx512(double *s2, double *s1, const float *x, int64_t nt, int64_t n_in, int64_t j0,
                                      int64_t j1) {
    int64_t j = j0;
    for (; j + 32 <= j1; j += 32) {
        __m512d q[4], l[4];
        for (int b = 0; b < 4; b++) {
            q[b] = _mm512_loadu_pd(s2 + j + 8 * b);
            l[b] = s1 ? _mm512_loadu_pd(s1 + j + 8 * b) : _mm512_setzero_pd();
        }
        for (int64_t t = 0; t < nt; t++) {
            const float *row = x + t * n_in + j;
            for (int b = 0; b < 4; b++) {
                const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(row + 8 * b));
                q[b] = _mm512_fmadd_pd(v, v, q[b]);
                l[b] = _mm512_add_pd(l[b], v);
            }
        }
        for (int b = 0; b < 4; b++) {
            _mm512_storeu_pd(s2 + j + 8 * b, q[b]);
            if (s1) _mm512_storeu_pd(s1 + j + 8 * b, l[b]);
        }
    }
    add_columns_scalar(s2, s1, x, nt, n_in, j, j1);
}
#endif

/* Columns per block of the team's split: eight of add_columns_avx512's
 * 32-column steps. Calls under 64 Ki values stay on one thread, so that
 * a small product does not pay for a team. */
#define COL_BLOCK 256

/* s2[j] += x[t][j]^2 (and s1[j] += x[t][j]) for every column j < n_in,
 * tokens t = 0, 1, ..., nt - 1 in order. */
static void add_columns(double *s2, double *s1, const float *x, int64_t nt, int64_t n_in) {
#ifdef __x86_64__
    const bool simd = kiln_simd() >= KILN_SIMD_AVX512;
#endif
    const int64_t nb = (n_in + COL_BLOCK - 1) / COL_BLOCK;
    /* each column's sum is its own chain over the tokens, in token order,
     * whichever thread takes its block: the split changes no bit */
#pragma omp parallel for schedule(static) if (nb > 1 && nt * n_in >= 65536 && !omp_in_parallel())
    for (int64_t b = 0; b < nb; b++) {
        const int64_t j0 = b * COL_BLOCK, j1 = n_in - j0 < COL_BLOCK ? n_in : j0 + COL_BLOCK;
#ifdef __x86_64__
        if (simd) {
            add_columns_avx512(s2, s1, x, nt, n_in, j0, j1);
            continue;
        }
#endif
        add_columns_scalar(s2, s1, x, nt, n_in, j0, j1);
    }
}

static void accumulate(kiln_imx_collector *c, const char *name, int expert, const float *x, int64_t nt,
                       int64_t n_in) {
    int64_t n_mat = expert >= 0 ? experts_of(c, name) : 1;
    if (expert >= n_mat) {
        c->failed = true;
        kiln_fail(&c->err, NULL, name, -1, "expert %d of a weight with %lld experts", expert, (long long)n_mat);
        return;
    }
    kiln_imx_acc *a = kiln_imx_collector_get(c, name, n_in, n_mat, &c->err);
    if (!a) {
        c->failed = true;
        return;
    }
    int64_t m = expert >= 0 ? expert : 0;
    double *s2 = a->sum2 + m * n_in, *s1 = a->sum ? a->sum + m * n_in : NULL;
    add_columns(s2, s1, x, nt, n_in);
    a->counts[m] += nt;
    for (int64_t j = 0; j < n_in; j++)
        if (!isfinite(s2[j]) || (s1 && !isfinite(s1[j]))) {
            c->failed = true;
            report_non_finite(c, name, expert, x, nt, n_in, j);
            return;
        }
}

void kiln_imx_hook(void *user, const char *tensor_name, int expert, const float *x, int64_t n_tokens,
                   int64_t n_in) {
    kiln_imx_collector *c = user;
    if (n_tokens <= 0 || !wanted(c, tensor_name)) return;
    /* The runtime may call from several threads (one per expert); the
     * sums are shared. A call from serial code splits its columns over
     * the team (add_columns). */
#pragma omp critical(kiln_imx_hook)
    {
        if (!c->failed) accumulate(c, tensor_name, expert, x, n_tokens, n_in);
    }
}

int kiln_imx_collector_add_imatrix(kiln_imx_collector *c, const kiln_imatrix *im, kiln_err *err) {
    for (uint64_t i = 0; i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        kiln_imx_acc *a = kiln_imx_collector_find(c, e->name);
        int64_t n = e->n, n_mat = e->n_mat;
        /* An old single-matrix entry joins the expert layout already here;
         * a per-matrix entry of a dense 3-D weight joins its one matrix
         * (kiln_imx_collector_get) when its counts agree. */
        if (a && a->n_mat > 1 && n_mat == 1 && n == a->n * a->n_mat) {
            n = a->n;
            n_mat = a->n_mat;
        }
        bool agree = true;
        for (int64_t m = 1; m < e->n_mat; m++) agree = agree && e->counts[m] == e->counts[0];
        if (a && a->n_mat == 1 && n_mat > 1 && n * n_mat == a->n && agree) {
            n = a->n;
            n_mat = 1;
        }
        if (!(a = kiln_imx_collector_get(c, e->name, n, n_mat, err))) return -1;
        size_t nv = (size_t)(n * n_mat);
        for (size_t k = 0; k < nv; k++) a->sum2[k] += e->in_sum2[k];
        if (a->sum && e->in_sum)
            for (size_t k = 0; k < nv; k++) a->sum[k] += e->in_sum[k];
        for (int64_t m = 0; m < n_mat; m++) a->counts[m] += llroundf(e->counts[e->n_mat == 1 ? 0 : m]);
    }
    return 0;
}

kiln_imatrix *kiln_imx_collector_export(const kiln_imx_collector *c, uint32_t chunk_count, uint32_t chunk_size,
                                        const char *const *datasets, uint64_t n_datasets, kiln_err *err) {
    kiln_imatrix *im = kiln_imatrix_new();
    if (!im) {
        kiln_fail(err, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    im->chunk_count = chunk_count;
    im->chunk_size = chunk_size;
    for (uint64_t i = 0; i < n_datasets; i++)
        if (kiln_imatrix_add_dataset(im, datasets[i], err) < 0) goto fail;
    for (uint64_t i = 0; i < c->n_acc; i++) {
        const kiln_imx_acc *a = &c->acc[i];
        kiln_imatrix_entry *e = kiln_imatrix_add(im, a->name, a->n, a->n_mat, a->sum != NULL, err);
        if (!e) goto fail;
        for (int64_t k = 0; k < a->n * a->n_mat; k++) {
            e->in_sum2[k] = (float)a->sum2[k];
            if (a->sum) e->in_sum[k] = (float)a->sum[k];
        }
        for (int64_t m = 0; m < a->n_mat; m++) e->counts[m] = (float)a->counts[m];
    }
    return im;
fail:
    kiln_imatrix_free(im);
    return NULL;
}
