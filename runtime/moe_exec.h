/* runtime/moe_exec.h - the routed experts of one MoE layer in one OpenMP
 * region (moe_exec.c), the way llama.cpp's mul_mat_id runs every expert
 * of a matrix in one op: moe.c routes the tokens, then hands the experts
 * here when the layer fits the region's kernels, else runs them one
 * product at a time. Private to the runtime, as forward_impl.h. */
#ifndef KILN_MOE_EXEC_H
#define KILN_MOE_EXEC_H

#include "forward_impl.h"

/* True when kiln_moe_exec can run layer L's experts: KILN_NUM_GGML mode,
 * no hook (the imatrix and output hooks see the experts one product at a
 * time), SwiGLU experts without biases (not gpt-oss), and for each of up,
 * gate and down kernels of the table that run inside a caller's region
 * (float weights: the vec_dot kernels; quantized ones: the direct
 * kernels or the panels, which every level above scalar has). */
bool kiln_moe_exec_fits(const kiln_ctx *c, const kiln_layer *L);

/* out (n rows of n_embd) = for each token the sum over its slots, in slot
 * order, of w * down(silu(gate x) * up x), with the routing in c->sel and
 * c->sel_w: the same bits as moe.c's per-expert products, in one OpenMP
 * region with three barriers (after up and gate, after the SwiGLU, after
 * down) however many experts the tokens chose. Call only when
 * kiln_moe_exec_fits. Buffers come from the thread's kernel arena.
 * Returns 0, or -1 with err set when they could not be had. */
int kiln_moe_exec(kiln_ctx *c, const kiln_layer *L, const float *x, int64_t n, float *out, kiln_err *err);

#endif
