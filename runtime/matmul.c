/* runtime/matmul.c - kiln_matmul: converts the activations, takes the
 * kernel the table in kernels.c names for the weight type, the numeric
 * mode, the token count and the ISA level, and spreads the rows over
 * OpenMP threads. The arithmetic lives in the vecdot_*.c kernels (see
 * vecdot.h for the map).
 *
 *   KILN_NUM_GGML, quantized weights: activations -> Q8_0 / Q8_K as ggml's
 *     CPU backend makes them, then ggml's block dot products - the
 *     reference code at the scalar level, above it the panel kernels or,
 *     for a few tokens, the direct ones (identical bits) - in the orders
 *     of llama.cpp's AVX-512 build, which for the weights it repacks
 *     (Q4_K, Q2_K; Q4_0, IQ4_NL, MXFP4 in one order) differ between
 *     4-token groups, the remaining tokens and MoE experts, and for the
 *     32-weight types between one token and llamafile's batches
 *     (kiln_korder); 3-D per-head weights are never repacked
 *     (kiln_matmul_head);
 *   KILN_NUM_GGML, F32 / F16 / BF16: activations rounded to the weight's
 *     precision (products are then exact), then the orders of llama.cpp's
 *     x86 AVX-512 build: tinyBLAS for several tokens, the type's
 *     ggml_vec_dot for one and for experts (kiln_fgemm_ggml);
 *   KILN_NUM_EXACT: every type dequantized to f32, f32 activations, the
 *     same fixed-order accumulation (kiln_fgemm, vecdot_float.c).
 *
 * Every output depends only on its row and its token: not on the SIMD
 * level, the thread count or how many tokens share the call - except
 * float weights and IQ4_NL in KILN_NUM_GGML mode, where (as in ggml) one
 * token and several tokens take different orders, and repacked k-quants
 * (see above). Each product is a job (mm_job), planned before its
 * OpenMP region: kernels chosen, buffers laid out in one piece of the
 * thread's arena (kiln_kernel_arena: no allocation once grown, where a
 * malloc per product used to cost decode; when that fails the product
 * returns -1). A region (par.h: opened only when the work pays for it)
 * runs one job, or the jobs of a kiln_matmul_group: several products of
 * one input, which convert it once and share the region's barriers
 * (decode of the small models paid more for the regions than for the
 * products). */
#include "matmul.h"

#include "kernels.h"
#include "par.h"

#include "../core/cpu.h"
#include "../core/types.h"
#include "../codec/codec.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* A weight matrix as the f32 path's row source. */
typedef struct wsrc {
    const uint8_t *w;
    int64_t row_bytes;
    uint32_t block, block_bytes;
    kiln_dequantize_fn dequantize;
} wsrc;

static void rows_f32(const void *ctx, int64_t r0, int64_t nr, int64_t k0, int64_t nk, float *dst,
                     int64_t ld) {
    const wsrc *s = ctx;
    const uint8_t *p = s->w + r0 * s->row_bytes + k0 / s->block * s->block_bytes;
    for (int64_t i = 0; i < nr; i++, p += s->row_bytes) s->dequantize(p, dst + i * ld, nk);
}

/* KILN_NUM_EXACT: the table's one-token kernel where it has one, else the
 * chain over dequantized rows. */
static int exact_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tokens, float *y) {
    const kiln_codec *c = kiln_codec_get(wtype);
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!c || !c->dequantize_row || !ti) return -1;
    const kiln_kernels *k = kiln_kernels_get(wtype);
    const kiln_fdecode_fn decode = k ? k->isa[kiln_isa_now()].exact_decode : NULL;
    if (n_tokens == 1 && decode) {
        decode(wtype, w, n_in, n_out, x, y);
        return 0;
    }
    wsrc s = {w, (int64_t)kiln_type_row_bytes(wtype, (uint64_t)n_in), ti->block_size, ti->type_size,
              c->dequantize_row};
    return kiln_fgemm(rows_f32, &s, n_in, n_out, x, n_tokens, y);
}

/* What ggml does with a weight matrix, which decides its order: a 2-D
 * weight (ggml_mul_mat; repacked when ggml-cpu repacks the type and
 * shape), a MoE expert (ggml_mul_mat_id; repacked likewise, never
 * tinyBLAS), or one matrix of a 3-D weight multiplied per head
 * (ggml_mul_mat of a 3-D weight: never repacked). */
typedef enum wlayout { W_DENSE, W_EXPERT, W_HEAD } wlayout;

/* How the tokens of a product split between ggml's orders: for weights
 * llama.cpp repacks, tokens [0, n_gemm) take the gemm order and the rest
 * the gemv order (a MoE expert's product: all of them); other weights
 * take `rest` for every token: tinyBLAS's order for 2+ tokens of a dense
 * product where the type has one of its own, else vec_dot's. */
typedef struct korders {
    int64_t n_gemm;
    kiln_korder rest;
} korders;

static korders korders_for(const kiln_kernels *k, int64_t n_out, int64_t n_tokens, wlayout layout) {
    korders ko = {0, KILN_KORDER_VECDOT};
    if (layout == W_EXPERT) return (korders){0, kiln_expert_order(k, n_out)};
    if (layout == W_HEAD || !kiln_qtype_repacked(&k->qt, n_out)) {
        if (n_tokens >= 2 && k->qt.dot_tiny) ko.rest = KILN_KORDER_TINY;
        return ko;
    }
    ko.rest = KILN_KORDER_GEMV;
    /* gemm_group 0: the gemm order is the gemv one (MXFP4, Q4_0, IQ4_NL) */
    if (k->gemm_group) ko.n_gemm = n_tokens - n_tokens % k->gemm_group;
    return ko;
}

/* The reference dot product of a Q8_0 / Q8_1-activation type in `order`. */
static kiln_vec_dot_fn q0_dot(const kiln_qtype *qt, kiln_korder order) {
    return order == KILN_KORDER_GEMV ? qt->dot_gemv : order == KILN_KORDER_TINY ? qt->dot_tiny : qt->dot;
}

/* Rows [r0, r0 + nr) with the reference dot products (the scalar level). */
static void ref_rows(const kiln_qtype *qt, korders ko, const uint8_t *w, int64_t n_in, int64_t r0, int64_t nr,
                     int64_t n_out, const uint8_t *act, int64_t n_tokens, float *y) {
    const int64_t row_bytes = n_in / qt->block * qt->block_bytes;
    const int64_t act_row = n_in / qt->block * qt->act_bytes;
    for (int64_t r = r0; r < r0 + nr; r++)
        for (int64_t t = 0; t < n_tokens; t++) {
            const uint8_t *wr = w + r * row_bytes, *a = act + t * act_row;
            y[t * n_out + r] = qt->act_type == KILN_Q8_K
                                   ? kiln_kdot_ref(n_in, wr, qt, t < ko.n_gemm ? KILN_KORDER_GEMM : ko.rest,
                                                   (const kiln_block_q8_k *)a)
                                   : q0_dot(qt, ko.rest)(n_in, wr, a);
        }
}

/* ---- products as jobs of one region ----------------------------------- */

/* One product in KILN_NUM_GGML mode, everything about it decided before
 * the region opens: the kernels, and where its buffers lie in the one
 * allocation of its group (offsets into the shared part, and into each
 * thread's part). A job reads the converted activations of job `src`
 * (itself, or an earlier job of the group that converts x the same way),
 * and the panel activations of job `psrc` likewise, so that products of
 * one input convert it once. */
typedef struct mm_job {
    const kiln_kernels *k;
    uint32_t type;
    const uint8_t *w;
    int64_t n_out;
    float *y;
    int src, psrc;
    /* F32 / F16 / BF16 weights */
    kiln_fkernel fk;
    bool round; /* x rounded to F16 / BF16, once, into the team's shared part: a copy per thread
                 * (no barrier) measured 13.5 against 21.5 t/s at tg32 on the 1B F16 model */
    bool act16; /* ... and kept in 16 bits for fk.run16 (half the bytes to bring to each block of rows) */
    size_t scratch_bytes; /* the kernel's, per thread */
    /* quantized weights */
    korders ko;
    kiln_qpanel_fn pgemm, prest;
    kiln_qrow_fn direct;
    kiln_qrows_fn rows;
    bool panels;
    int64_t pbytes;
    /* offsets: shared (activations; panel activations u, d, bsums) and
     * in each thread's part (the kernel's scratch, then a rounded x or a
     * weight panel) */
    size_t act_at, u_at, d_at, bs_at, mine_at;
} mm_job;

static bool job_quant(const mm_job *j) {
    return j->k->qt.block != 0;
}

/* Fills j's kernels for a product of n_tokens of the layout (round:
 * float activations still to be rounded to an F16 / BF16 weight's
 * precision). Returns false when the table has no kernel for it. */
static bool job_plan(mm_job *j, wlayout layout, bool round, int64_t n_in, int64_t n_tokens) {
    const kiln_isa_kernels *ik = &j->k->isa[kiln_isa_now()];
    if (!job_quant(j)) {
        /* llamafile_sgemm takes prompt batches when tinyBLAS accepts the
         * shape (k whole vectors, m whole 4-row tiles); mul_mat_id never */
        const bool tiny = layout != W_EXPERT && n_tokens >= 2 && n_in % 16 == 0 && j->n_out % 4 == 0;
        j->fk = tiny ? ik->tiny : ik->vec;
        j->round = round && j->type != KILN_F32;
        j->act16 = j->round && j->fk.run16;
        j->scratch_bytes = j->fk.scratch ? kiln_lines((size_t)j->fk.scratch(j->type, n_in) * sizeof(float)) : 0;
        return j->fk.run != NULL;
    }
    j->ko = korders_for(j->k, j->n_out, n_tokens, layout);
    j->pgemm = ik->panel[KILN_KORDER_GEMM];
    j->prest = ik->panel[j->ko.rest];
    j->direct = j->ko.n_gemm == 0 && kiln_takes_direct(j->k, j->ko.rest, n_tokens) ? ik->direct[j->ko.rest] : NULL;
    j->rows = kiln_rows_kernel(j->k, j->ko.rest, n_in);
    j->panels = !j->direct && j->prest && (j->ko.n_gemm == 0 || j->pgemm);
    j->pbytes = j->panels ? kiln_panel_bytes(&j->k->qt, n_in) : 0;
    return true;
}

/* True when jobs a and b convert x to the same bytes: the same
 * vec_dot_type made the same way (Q8_K's 4-token groups of a gemm order
 * are made by kiln_act_q8_k_x4, which differs in a tie's sign). */
static bool same_act(const mm_job *a, const mm_job *b) {
    if (job_quant(a) != job_quant(b)) return false;
    if (!job_quant(a)) return a->type == b->type && a->act16 == b->act16;
    return a->k->qt.act_type == b->k->qt.act_type && a->ko.n_gemm == b->ko.n_gemm;
}

/* Lays the jobs' buffers out: the shared part first (returned in
 * *shared), then per thread *per_thread bytes. */
static void job_layout(mm_job *jobs, int n_jobs, int64_t n_in, int64_t n_tokens, size_t *shared, size_t *per_thread) {
    size_t sh = 0, pt = 0;
    for (int i = 0; i < n_jobs; i++) {
        mm_job *j = &jobs[i];
        j->src = j->psrc = i;
        for (int p = 0; p < i; p++)
            if (same_act(&jobs[p], j)) {
                j->src = p;
                if (j->panels && jobs[p].panels) j->psrc = p;
                break;
            }
        j->mine_at = pt;
        if (!job_quant(j)) {
            pt += j->scratch_bytes;
            if (j->round && j->src == i) {
                j->act_at = sh;
                sh += kiln_lines((size_t)(n_tokens * n_in) * (j->act16 ? sizeof(uint16_t) : sizeof(float)));
            }
            continue;
        }
        const kiln_qtype *qt = &j->k->qt;
        const int64_t nb = n_in / qt->block;
        pt += kiln_lines((size_t)j->pbytes);
        if (j->src == i) {
            j->act_at = sh;
            sh += kiln_lines((size_t)(n_tokens * nb * qt->act_bytes));
        }
        if (j->panels && j->psrc == i) {
            j->u_at = sh;
            j->d_at = j->u_at + kiln_lines((size_t)(n_tokens * n_in));
            j->bs_at = j->d_at + kiln_lines((size_t)(n_tokens * nb) * sizeof(float));
            sh = j->bs_at + (qt->act_type == KILN_Q8_K ? kiln_lines((size_t)(n_tokens * (n_in / 16)) * sizeof(int16_t)) : 0);
        }
    }
    *shared = sh;
    *per_thread = pt;
}

/* Step 1, inside the region: the activations of job i (its own) in its
 * vec_dot_type, the tokens shared by the team (orphaned, no barrier: the
 * caller meets at one after every job's). */
static void job_convert(const mm_job *j, uint8_t *buf, const float *x, int64_t n_in,
                        int64_t n_tokens) {
    if (!job_quant(j)) {
        if (j->act16) {
#pragma omp for schedule(dynamic, 8) nowait
            for (int64_t t = 0; t < n_tokens; t++)
                kiln_act_bits16(j->type, x + t * n_in, (uint16_t *)(buf + j->act_at) + t * n_in, n_in);
        } else if (j->round) {
#pragma omp for schedule(dynamic, 8) nowait
            for (int64_t t = 0; t < n_tokens; t++)
                kiln_act_round(j->type, x + t * n_in, (float *)(buf + j->act_at) + t * n_in, n_in);
        }
        return;
    }
    const kiln_qtype *qt = &j->k->qt;
    const int64_t act_row = n_in / qt->block * qt->act_bytes;
    uint8_t *act = buf + j->act_at;
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *xt = x + t * n_in;
        uint8_t *at = act + t * act_row;
        if (t < j->ko.n_gemm) kiln_act_q8_k_x4(xt, (kiln_block_q8_k *)at, n_in);
        else kiln_act_row(qt, xt, at, n_in);
    }
}

/* Step 2: the panel activations of job i (its own), from its converted
 * activations; orphaned, no barrier. */
static void job_pack(const mm_job *j, const mm_job *src, uint8_t *buf, int64_t n_in, int64_t n_tokens) {
    const kiln_qtype *qt = &j->k->qt;
    const int64_t nb = n_in / qt->block, act_row = nb * qt->act_bytes;
    const bool kq = qt->act_type == KILN_Q8_K;
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < n_tokens; t++)
        kiln_pact_pack(qt, buf + src->act_at + t * act_row, n_in, buf + j->u_at + t * n_in,
                       (float *)(buf + j->d_at) + t * nb, kq ? (int16_t *)(buf + j->bs_at) + t * (n_in / 16) : NULL);
}

/* Step 3: the products of job j, its rows shared by the team. */
static void job_run(const mm_job *j, const mm_job *jobs, uint8_t *buf, uint8_t *mine, const float *x, int64_t n_in,
                    int64_t n_tokens) {
    if (!job_quant(j)) {
        const uint8_t *xa = j->round ? buf + jobs[j->src].act_at : (const uint8_t *)x;
        const int64_t row_bytes = (int64_t)kiln_type_row_bytes(j->type, (uint64_t)n_in);
        float *scratch = j->scratch_bytes ? (float *)(mine + j->mine_at) : NULL;
        if (j->act16) j->fk.run16(j->type, j->w, row_bytes, (const uint16_t *)xa, n_in, j->n_out, n_tokens, j->y, scratch);
        else j->fk.run(j->type, j->w, row_bytes, (const float *)xa, n_in, j->n_out, n_tokens, j->y, scratch);
        return;
    }
    const kiln_qtype *qt = &j->k->qt;
    const uint8_t *act = buf + jobs[j->src].act_at;
    const int64_t n_out = j->n_out;
    float *y = j->y;
    if (j->direct) {
        kiln_direct_rows4(j->rows, j->direct, qt, j->w, n_in, n_out, act, n_tokens, y);
    } else if (j->panels) {
        const mm_job *p = &jobs[j->psrc];
        const kiln_pact A = {buf + p->u_at, (const float *)(buf + p->d_at),
                             qt->act_type == KILN_Q8_K ? (const int16_t *)(buf + p->bs_at) : NULL, n_in,
                             n_in / qt->block};
        void *panel = mine + j->mine_at;
#pragma omp for schedule(static) nowait
        for (int64_t r0 = 0; r0 < n_out; r0 += KILN_PANEL) {
            const int nr = n_out - r0 < KILN_PANEL ? (int)(n_out - r0) : KILN_PANEL;
            kiln_panel_pack(qt, j->w, n_in, n_out, r0, panel);
            if (j->ko.n_gemm) j->pgemm(panel, &A, 0, j->ko.n_gemm, y + r0, n_out, nr);
            j->prest(panel, &A, j->ko.n_gemm, n_tokens - j->ko.n_gemm, y + r0, n_out, nr);
        }
    } else {
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < n_out; r++) ref_rows(qt, j->ko, j->w, n_in, r, 1, n_out, act, n_tokens, y);
    }
}

/* The jobs' products of x in one OpenMP region: conversions, a barrier,
 * panel activations (and a barrier) when a job has panels, then every
 * job's rows; the region's end is the last barrier. Float products too
 * small to pay for the team (par.h) run on the calling thread alone, as
 * does a group of them. Buffers come from the calling thread's arena.
 * Returns 0, or -1 when the buffers could not be had. */
static int run_jobs(mm_job *jobs, int n_jobs, int64_t n_in, const float *x, int64_t n_tokens) {
    size_t shared, per_thread;
    job_layout(jobs, n_jobs, n_in, n_tokens, &shared, &per_thread);
    bool any_quant = false, any_shared_conv = false, any_pack = false;
    double float_macs = 0;
    for (int i = 0; i < n_jobs; i++) {
        const mm_job *j = &jobs[i];
        any_quant |= job_quant(j);
        any_shared_conv |= j->src == i && (job_quant(j) || j->round);
        any_pack |= j->panels && j->psrc == i;
        if (!job_quant(j)) float_macs += (double)n_in * (double)j->n_out * (double)n_tokens;
    }
    const size_t total = shared + (size_t)omp_get_max_threads() * per_thread;
    /* no allocation once the arena has grown to the model's largest
     * group */
    uint8_t *buf = NULL;
    if (total && !(buf = kiln_kernel_arena(total))) return -1;
#pragma omp parallel if (any_quant || kiln_par_worth(float_macs))
    {
        uint8_t *mine = per_thread ? buf + shared + (size_t)omp_get_thread_num() * per_thread : NULL;
        for (int i = 0; i < n_jobs; i++)
            if (jobs[i].src == i) job_convert(&jobs[i], buf, x, n_in, n_tokens);
        if (any_shared_conv) {
#pragma omp barrier
        }
        if (any_pack) {
            for (int i = 0; i < n_jobs; i++)
                if (jobs[i].panels && jobs[i].psrc == i) job_pack(&jobs[i], &jobs[jobs[i].src], buf, n_in, n_tokens);
#pragma omp barrier
        }
        for (int i = 0; i < n_jobs; i++) job_run(&jobs[i], jobs, buf, mine, x, n_in, n_tokens);
    }
    return 0;
}

/* F32 / F16 / BF16 weights in KILN_NUM_GGML mode, one product: the
 * activations rounded to the weight's precision (round: F16 / BF16;
 * ggml's vec_dot_type), then the table's vec or tiny kernel (run_jobs). */
static int float_ggml(const kiln_kernels *k, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                      const float *x, int64_t n_tokens, float *y, bool round, wlayout layout) {
    mm_job j = {.k = k, .type = type, .w = w, .n_out = n_out, .y = y};
    if (!job_plan(&j, layout, round, n_in, n_tokens)) return -1;
    return run_jobs(&j, 1, n_in, x, n_tokens);
}

int kiln_fgemm_ggml(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                    float *y, bool vec_only) {
    const kiln_kernels *k = kiln_kernels_get(type);
    if (!k || k->qt.block) return -1;
    return float_ggml(k, type, w, n_in, n_out, x, n_tokens, y, false, vec_only ? W_EXPERT : W_DENSE);
}

/* One product in KILN_NUM_GGML mode, as a job of one. */
static int ggml_matmul(const kiln_kernels *k, uint32_t wtype, const void *w, int64_t n_in, int64_t n_out,
                       const float *x, int64_t n_tokens, float *y, wlayout layout) {
    mm_job j = {.k = k, .type = wtype, .w = w, .n_out = n_out, .y = y};
    if (!job_plan(&j, layout, true, n_in, n_tokens)) return -1;
    return run_jobs(&j, 1, n_in, x, n_tokens);
}

/* A product's shape and type checks: -1 for a bad shape, 1 when there
 * is nothing to compute (y zeroed when n_in == 0), else 0. */
static int shape_check(uint32_t wtype, int64_t n_in, int64_t n_out, int64_t n_tokens, float *y) {
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!ti || n_in < 0 || n_in % ti->block_size) return -1;
    if (n_out <= 0 || n_tokens <= 0) return 1;
    if (n_in == 0) {
        memset(y, 0, (size_t)(n_out * n_tokens) * sizeof(float));
        return 1;
    }
    return 0;
}

static int matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                  float *y, kiln_numeric_mode mode, wlayout layout) {
    const int s = shape_check(wtype, n_in, n_out, n_tokens, y);
    if (s) return s < 0 ? -1 : 0;
    if (mode != KILN_NUM_GGML) return exact_matmul(wtype, w, n_in, n_out, x, n_tokens, y);
    const kiln_kernels *k = kiln_kernels_get(wtype);
    if (!k) return -1;
    return ggml_matmul(k, wtype, w, n_in, n_out, x, n_tokens, y, layout);
}

int kiln_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_DENSE);
}

int kiln_matmul_expert(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                       int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_EXPERT);
}

int kiln_matmul_head(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                     int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_HEAD);
}

int kiln_matmul_group(const kiln_mm *mm, int n_mm, int64_t n_in, const float *x, int64_t n_tokens,
                      kiln_numeric_mode mode, int *bad) {
    mm_job jobs[KILN_MM_GROUP_MAX];
    int n_jobs = 0;
    *bad = -1;
    if (n_mm < 0 || n_mm > KILN_MM_GROUP_MAX) return -1;
    for (int i = 0; i < n_mm; i++) {
        const int s = shape_check(mm[i].wtype, n_in, mm[i].n_out, n_tokens, mm[i].y);
        if (s < 0) return *bad = i, -1;
        if (s) continue;
        if (mode != KILN_NUM_GGML) {
            if (exact_matmul(mm[i].wtype, mm[i].w, n_in, mm[i].n_out, x, n_tokens, mm[i].y) < 0) return *bad = i, -1;
            continue;
        }
        const kiln_kernels *k = kiln_kernels_get(mm[i].wtype);
        mm_job *j = &jobs[n_jobs];
        *j = (mm_job){.k = k, .type = mm[i].wtype, .w = mm[i].w, .n_out = mm[i].n_out, .y = mm[i].y};
        if (!k || !job_plan(j, W_DENSE, true, n_in, n_tokens)) return *bad = i, -1;
        n_jobs++;
    }
    return n_jobs ? run_jobs(jobs, n_jobs, n_in, x, n_tokens) : 0;
}

/* The direct kernels' dispatcher (declared in vecdot.h): it reads the
 * table, so it lives with the other dispatchers, above the kernels. */
bool kiln_kdirect(const kiln_qtype *qt, kiln_korder order, const void *w, int64_t n_in, int64_t n_out,
                  const void *act, int64_t n_tokens, float *y) {
    const kiln_kernels *k = kiln_kernels_get(qt->type);
    const kiln_isa_kernels *ik = k ? &k->isa[kiln_isa_now()] : NULL;
    const kiln_qrow_fn fn = ik && order != KILN_KORDER_GEMM ? ik->direct[order] : NULL;
    if (!fn) return false;
#pragma omp parallel
    kiln_direct_rows4(kiln_rows_kernel(k, order, n_in), fn, qt, w, n_in, n_out, act, n_tokens, y);
    return true;
}
