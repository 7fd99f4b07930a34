/* testmodel/testmodel_weights.c - the synthetic models' weights: a pure
 * function of (seed, tensor name, element index), streamed to safetensors
 * in chunks so memory stays flat whatever the model size.
 *
 * Every value comes from a counter-based stream keyed by (seed, tensor
 * name, block of 64Ki elements), so generation can be chunked and parallel
 * and still byte-identical, and the sampler uses only + * / and sqrt,
 * which IEEE makes exact everywhere. */
#include "testmodel_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fp16.h"
#include "../core/safetensors_write.h"

/* ------------------------------------------------------------------ */
/* values                                                              */

#define TM_BLOCK 65536 /* elements per random stream */

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct rng {
    uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = seed = mix64(seed);
}

static uint64_t rng_next(rng *r) { /* xoshiro256** */
    uint64_t *s = r->s, out = s[1] * 5;
    out = ((out << 7) | (out >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Student-t with 4 degrees of freedom, scaled to unit variance, by Bailey's
 * polar method: T = U sqrt(4 (W^-1/2 - 1) / W) for (U, V) uniform in the
 * unit disc, W = U^2 + V^2. Only sqrt, so exactly reproducible. */
static double student_t4(rng *r) {
    for (;;) {
        double u = 2 * rng_unit(r) - 1, v = 2 * rng_unit(r) - 1, w = u * u + v * v;
        if (w > 0 && w < 1) return u * sqrt(4.0 * (1.0 / sqrt(w) - 1.0) / w) * 0.70710678118654752;
    }
}

typedef struct gen {
    uint64_t seed;
    double base, sigma;
    int64_t cols;
    uint8_t in_axis;
    float *chan; /* per input channel multiplier, or NULL */
} gen;

static uint64_t tensor_seed(const kiln_tm_config *c, const char *name) {
    return mix64(kiln_tm_fnv1a(name) ^ mix64(c->seed));
}

/* The model's outlier channels: the same few residual-stream dimensions in
 * every matrix that has outliers, as in trained transformers. */
#define TM_N_OUTLIER 4

static int outlier_channels(const kiln_tm_config *c, uint32_t *ch) {
    int n = c->hidden >= 4 * TM_N_OUTLIER ? TM_N_OUTLIER : 1;
    rng r;
    rng_seed(&r, mix64(c->seed) ^ 0x6f75746c69657273ull);
    for (int i = 0; i < n; i++) {
        uint32_t x;
        bool dup;
        do {
            x = (uint32_t)(rng_next(&r) % c->hidden);
            dup = false;
            for (int j = 0; j < i; j++) dup |= ch[j] == x;
        } while (dup);
        ch[i] = x;
    }
    return n;
}

/* Sets up the generator of tensor t; g->chan is malloc'd when the tensor
 * has outlier channels. Returns -1 only when out of memory. */
static int gen_init(const kiln_tm_config *c, const kiln_tm_tensor *t, gen *g) {
    memset(g, 0, sizeof *g);
    g->seed = tensor_seed(c, t->name);
    g->cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
    g->in_axis = t->in_axis;
    int64_t fan_in = t->n_dims == 2 ? t->shape[t->in_axis] : t->shape[0];
    switch (t->kind) {
    case KILN_TM_NORM: g->base = 1.0, g->sigma = 0.02; break;
    case KILN_TM_BIAS: g->sigma = 0.02; break;
    case KILN_TM_POS: g->sigma = 0.02; break;
    default: g->sigma = 1.0 / sqrt((double)fan_in);
    }
    /* about half of the eligible matrices, chosen by the tensor's own seed */
    if (!t->outliers || t->n_dims != 2 || !((g->seed >> 17) & 1)) return 0;
    if (!(g->chan = malloc((size_t)fan_in * sizeof *g->chan))) return -1;
    for (int64_t i = 0; i < fan_in; i++) g->chan[i] = 1.0f;
    uint32_t ch[TM_N_OUTLIER];
    int n = outlier_channels(c, ch);
    rng r;
    rng_seed(&r, g->seed ^ 0x5ca1e5ull);
    for (int i = 0; i < n; i++)
        if (ch[i] < fan_in) g->chan[ch[i]] = (float)(10.0 + 40.0 * rng_unit(&r));
    return 0;
}

/* Elements [from, to) of block `b`, into dst[0 .. to-from). The stream of a
 * block always starts at its first element, so a partial block costs the
 * skipped draws. */
static void gen_block(const gen *g, uint64_t b, uint64_t from, uint64_t to, float *dst) {
    rng r;
    rng_seed(&r, g->seed + (b + 1) * 0xd1b54a32d192ed03ull);
    uint64_t e0 = b * TM_BLOCK;
    for (uint64_t j = 0; j < to; j++) {
        double v = student_t4(&r) * g->sigma;
        if (j < from) continue;
        if (g->chan) {
            uint64_t e = e0 + j;
            v *= g->chan[g->in_axis ? e % (uint64_t)g->cols : e / (uint64_t)g->cols];
        }
        dst[j - from] = (float)(g->base + v);
    }
}

static void gen_range(const gen *g, uint64_t start, uint64_t n, float *dst) {
    if (!n) return;
    int64_t b0 = (int64_t)(start / TM_BLOCK), b1 = (int64_t)((start + n - 1) / TM_BLOCK);
#pragma omp parallel for schedule(static) if (b1 > b0)
    for (int64_t b = b0; b <= b1; b++) {
        uint64_t lo = (uint64_t)b * TM_BLOCK, hi = lo + TM_BLOCK;
        uint64_t from = start > lo ? start - lo : 0, to = start + n < hi ? start + n - lo : TM_BLOCK;
        gen_block(g, (uint64_t)b, from, to, dst + (lo + from - start));
    }
}

int kiln_tm_values(const kiln_tm_config *c, const kiln_tm_tensor *t, uint64_t start, uint64_t n, float *dst,
                   kiln_err *err) {
    gen g;
    if (gen_init(c, t, &g)) return kiln_fail(err, NULL, t->name, -1, "out of memory");
    gen_range(&g, start, n, dst);
    free(g.chan);
    return 0;
}

static uint64_t nelements(const kiln_tm_tensor *t) {
    return (uint64_t)t->shape[0] * (t->n_dims == 2 ? (uint64_t)t->shape[1] : 1);
}

/* ------------------------------------------------------------------ */
/* safetensors                                                         */

#define TM_BATCH (16 * TM_BLOCK) /* elements generated per write */

int kiln_tm_write_weights(const kiln_tm_config *c, const char *dir, const kiln_tm_tensor *t, size_t n,
                          const kiln_tm_opts *o, kiln_tm_summary *sum, kiln_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kiln_stw_opts wo = {.shard_size = c->shard_size};
    kiln_stw *w = kiln_stw_create(path, &wo, err);
    if (!w) return -1;
    float *f32 = malloc(TM_BATCH * sizeof *f32);
    uint16_t *h16 = malloc(TM_BATCH * sizeof *h16);
    gen g = {0};
    uint64_t total = 0, done = 0;
    if (!f32 || !h16) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        goto fail;
    }
    /* save_pretrained's metadata, which some loaders insist on */
    if (kiln_stw_metadata(w, "format", "pt", err)) goto fail;
    for (size_t i = 0; i < n; i++) {
        if (kiln_stw_declare(w, t[i].name, c->dtype, t[i].n_dims, t[i].shape, err) < 0) goto fail;
        uint64_t nb = kiln_stw_nbytes(w, (int64_t)i);
        total += nb;
        if (nb > sum->largest_tensor_bytes) sum->largest_tensor_bytes = nb;
        sum->n_params += nelements(&t[i]);
    }
    if (kiln_stw_begin(w, err)) goto fail;
    sum->n_files = kiln_stw_n_files(w);
    sum->n_tensors = n;
    sum->tensor_bytes = total;
    int64_t idx;
    int r;
    uint32_t esize = c->dtype == KILN_ST_F32 ? 4 : 2;
    while ((r = kiln_stw_next(w, &idx, err)) == 1) {
        const kiln_tm_tensor *tt = &t[idx];
        if (gen_init(c, tt, &g)) {
            kiln_fail(err, path, tt->name, -1, "out of memory");
            goto fail;
        }
        uint64_t nel = nelements(tt);
        for (uint64_t s = 0; s < nel; s += TM_BATCH) {
            uint64_t k = nel - s < TM_BATCH ? nel - s : TM_BATCH;
            gen_range(&g, s, k, f32);
            const void *src = f32;
            if (c->dtype == KILN_ST_BF16) kiln_fp32_to_bf16_row(f32, h16, (int64_t)k), src = h16;
            else if (c->dtype == KILN_ST_F16) kiln_fp32_to_fp16_row(f32, h16, (int64_t)k), src = h16;
            if (kiln_stw_write(w, src, k * esize, err)) goto fail;
            done += k * esize;
            if (o && o->progress) o->progress(o->progress_ud, done, total);
        }
        free(g.chan);
        g.chan = NULL;
    }
    if (r < 0) goto fail;
    free(f32);
    free(h16);
    return kiln_stw_finish(w, err);
fail:
    free(g.chan);
    free(f32);
    free(h16);
    kiln_stw_abort(w);
    return -1;
}

