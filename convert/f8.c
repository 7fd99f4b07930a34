/* convert/f8.c - FP8 E4M3 block-scaled weights (see f8.h). */
#include "f8.h"

#include <math.h>
#include <string.h>

#include "json.h"

int cv_f8_config(json_t *config, bool *fp8, int64_t block[2], kiln_err *err) {
    *fp8 = false;
    block[0] = block[1] = 0;
    json_t *qc = json_object_get(config, "quantization_config");
    if (!json_is_object(qc)) return 0;
    const char *method = cv_json_str(json_object_get(qc, "quant_method"));
    /* MXFP4 experts are read as stored, never dequantized (mxfp4_hf.c) */
    if (!method || !strcmp(method, "mxfp4")) return 0;
    if (strcmp(method, "fp8"))
        return kiln_fail(err, "config.json", "quantization_config.quant_method", -1,
                         "'%s' checkpoints are not supported (only float, fp8 and mxfp4)", method);
    *fp8 = true;
    json_t *bs = json_object_get(qc, "weight_block_size");
    if (!bs || json_is_null(bs)) return 0;
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !cv_json_int(json_array_get(bs, 0), &block[0]) ||
        !cv_json_int(json_array_get(bs, 1), &block[1]) || block[0] <= 0 || block[1] <= 0)
        return kiln_fail(err, "config.json", "quantization_config.weight_block_size", -1,
                         "must be two positive integers");
    return 0;
}

float cv_f8_e4m3_to_f32(uint8_t b) {
    uint32_t sign = b >> 7, exp = (b >> 3) & 15, mant = b & 7;
    float v;
    if (exp == 15 && mant == 7) v = NAN;
    else if (exp == 0) v = ldexpf((float)mant, -9); /* subnormal: mant/8 * 2^-6 */
    else v = ldexpf((float)(8 + mant), (int)exp - 10);
    return sign ? -v : v;
}

static float LUT[256];
static int lut_ready;

static void init_lut(void) {
    if (lut_ready) return;
    for (int i = 0; i < 256; i++) LUT[i] = cv_f8_e4m3_to_f32((uint8_t)i);
    __atomic_store_n(&lut_ready, 1, __ATOMIC_RELEASE);
}

void cv_f8_dequant_rows(const uint8_t *src, float *dst, int64_t r0, int64_t nrows, int64_t cols, const float *scale,
                        int64_t scale_cols, const int64_t block[2], bool per_row) {
    init_lut();
#pragma omp parallel for schedule(static) if (nrows * cols > (1 << 20))
    for (int64_t i = 0; i < nrows; i++) {
        const uint8_t *s = src + i * cols;
        float *d = dst + i * cols;
        int64_t r = r0 + i;
        if (!scale) {
            for (int64_t c = 0; c < cols; c++) d[c] = LUT[s[c]];
        } else if (block[0] > 0) {
            const float *srow = scale + (r / block[0]) * scale_cols;
            for (int64_t c = 0; c < cols; c++) d[c] = LUT[s[c]] * srow[c / block[1]];
        } else {
            float sc = per_row ? scale[r] : scale[0];
            for (int64_t c = 0; c < cols; c++) d[c] = LUT[s[c]] * sc;
        }
    }
}
