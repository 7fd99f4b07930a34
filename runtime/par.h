/* runtime/par.h - the runtime's one threading convention, and the rule
 * for when a piece of work is worth the threads.
 *
 * The convention: OpenMP, one parallel region per product (matmul.c),
 * per group of products of one input (kiln_matmul_group: q, k and v; gate
 * and up) or per attention call (attention.c, attention_flash.c), opened
 * by the dispatcher; the kernels inside it split their rows with orphaned
 * `omp for ... nowait` loops, so the region's end is the product's one
 * barrier. Buffers are taken before the region (kiln_kernel_arena:
 * nothing is allocated once the arena has grown), never inside it.
 * Results never depend on the split: every output element is summed in
 * an order fixed by its row and token (see matmul.c), so a product run
 * by one thread gives the same bits as one run by the team.
 *
 * The rule: waking the team and meeting at the barrier costs about 1-2
 * us with libgomp on a 2-core machine (measured: an empty `omp parallel`
 * 1.0 us, `omp parallel for` with a dynamic schedule 1.6 us). A float
 * product below KILN_PAR_MIN_MACS multiply-adds (a router such as
 * mixtral's 256 x 4, a shared-expert gate) is done in less than that on
 * one core, so it runs on the calling thread alone (`#pragma omp
 * parallel if (...)`, a team of one); everything above takes the team.
 *
 * Measured and left alone (bench_runtime, chrt to keep the other
 * helpers' load off, before/after in turns): running every fixture-sized
 * decode product (64k-262k MACs) on one thread beat the team by 15-30 %
 * when the second core was busy with other work, but lost by 10-25 % when
 * it was free (the last idle `make bench`: llama-f32 tg32 4959 t/s on
 * two threads; one thread never passed 4600), and idle is what the bench
 * measures. A spinning pool of kiln's own (workers on a generation
 * counter, then a futex; an empty handoff 0.35 us) was worse still next
 * to OpenMP's team, whose workers spin for a while after every region:
 * three busy threads on two cores, decode halved on llama-f32 and cut to
 * a tenth on mixtral-Q4_K_M. A pool pays only once it replaces OpenMP in
 * every hot path. Attention keeps its own bound (attention.c). */
#ifndef KILN_PAR_H
#define KILN_PAR_H

#include <stdbool.h>

/* Multiply-adds (n_in * n_out * n_tokens) below which a float product
 * runs on one thread: about 1 us of one core's work (one token against
 * an f32 256 x 256 matrix, 65k MACs, takes 4.6 us), no more than what
 * waking the team costs. */
#define KILN_PAR_MIN_MACS 16384.0

/* True when `macs` multiply-adds of float weights pay for the team. */
static inline bool kiln_par_worth(double macs) {
    return macs >= KILN_PAR_MIN_MACS;
}

/* Values below which an element-wise step of the forward pass (RMS
 * norms, SwiGLU, the residual add, RoPE: ops.c, attention.c) runs on the
 * calling thread: a prompt batch's rows are shared by the team, where the
 * second thread used to spin through them (pp512 of the small models),
 * while a decode step's row, some 0.1-1 us of work, stays on one core. */
#define KILN_PAR_MIN_FLOATS 32768.0

/* True when an element-wise step over n values pays for the team. */
static inline bool kiln_par_worth_floats(double n) {
    return n >= KILN_PAR_MIN_FLOATS;
}

#endif
