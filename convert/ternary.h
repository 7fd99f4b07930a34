/* convert/ternary.h - BitNet b1.58's convert-time ternarization, as
 * llama.cpp's BitnetModel.weight_quant does it (see ternary.c). */
#ifndef KILN_CONVERT_TERNARY_H
#define KILN_CONVERT_TERNARY_H

#include <stdint.h>

#include "../core/safetensors.h"

/* Replaces the n weights of one whole tensor w (as f32) by
 * round(w / s) clamped to [-1, 1] times s, s = mean |w| (at least 1e-5),
 * each result rounded to F16 when the source `dtype` is F16 (llama.cpp
 * hands every other dtype to it as F32), as torch computes it. Cannot
 * fail. */
void cv_ternarize(float *w, int64_t n, kiln_st_dtype dtype);

#endif
