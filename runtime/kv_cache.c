/* runtime/kv_cache.c - allocating the f32 key/value cache (layout in
 * kv_cache.h). */
#include "kv_cache.h"

#include <immintrin.h>
#include <stdlib.h>

#include "../core/cpu.h"
#include "../core/fp16.h"

__attribute__((target("avx512f"))) static void round_avx512(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(x[i]));
}

__attribute__((target("avx2,f16c"))) static void round_f16c(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) y[i] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(x[i]));
}

void kiln_f16_round(const float *x, float *y, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) round_avx512(x, y, n);
    else if (lvl >= KILN_SIMD_AVX2) round_f16c(x, y, n);
    else
        for (int64_t i = 0; i < n; i++) y[i] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(x[i]));
}

int kiln_kv_init(kiln_kv_cache *c, int64_t n_layer, int64_t n_ctx, int64_t row, kiln_err *err) {
    *c = (kiln_kv_cache){.n_layer = n_layer, .n_ctx = n_ctx, .row = row};
    const double bytes = (double)n_layer * (double)n_ctx * (double)row * sizeof(float);
    if (n_layer <= 0 || n_ctx <= 0 || row <= 0 || bytes > (double)SIZE_MAX / 2)
        return kiln_fail(err, NULL, "n_ctx", -1, "a KV cache of %lld positions is impossible",
                         (long long)n_ctx);
    /* malloc, not calloc: no position is read before it is written */
    c->k = malloc((size_t)bytes);
    c->v = malloc((size_t)bytes);
    if (!c->k || !c->v) {
        kiln_kv_free(c);
        return kiln_fail(err, NULL, "n_ctx", -1, "out of memory for a KV cache of %.0f MB",
                         2 * bytes / 1e6);
    }
    return 0;
}

void kiln_kv_free(kiln_kv_cache *c) {
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}
