/* convert/mxfp4_hf.c - HF MXFP4 blocks to ggml's (see mxfp4_hf.h). */
#include "mxfp4_hf.h"

#include <string.h>

#include "json.h"

bool cv_mxfp4_checkpoint(json_t *config) {
    json_t *qc = cv_json_get(config, "quantization_config");
    const char *m = json_is_object(qc) ? cv_json_str(cv_json_get(qc, "quant_method")) : NULL;
    return m && !strcmp(m, "mxfp4");
}

/* The E2M1 code of element k of an HF block. */
static inline uint8_t hf_code(const uint8_t hf[16], int k) { return (uint8_t)((hf[k >> 1] >> ((k & 1) * 4)) & 15); }

void cv_mxfp4_repack_block(const uint8_t hf[16], uint8_t e8m0, uint8_t dst[17]) {
    dst[0] = e8m0;
    for (int j = 0; j < 16; j++) dst[1 + j] = (uint8_t)(hf_code(hf, j) | hf_code(hf, j + 16) << 4);
}

void cv_mxfp4_repack_rows(const uint8_t *blocks, const uint8_t *scales, int64_t nb, int64_t r0, int64_t n,
                          int stride, int parity, uint8_t *dst) {
    for (int64_t q = r0; q < r0 + n; q++) {
        int64_t src = q * stride + parity;
        for (int64_t b = 0; b < nb; b++)
            cv_mxfp4_repack_block(blocks + (uint64_t)(src * nb + b) * 16, scales[src * nb + b],
                                  dst + (uint64_t)((q - r0) * nb + b) * 17);
    }
}

void cv_deinterleave(const uint8_t *src, uint8_t *dst, int64_t n_out, uint64_t unit_bytes, int parity) {
    for (int64_t u = 0; u < n_out; u++)
        memcpy(dst + (uint64_t)u * unit_bytes, src + (uint64_t)(2 * u + parity) * unit_bytes, unit_bytes);
}
