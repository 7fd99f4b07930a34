/* runtime/kernels.h - which product kernel runs, as data: one row per
 * weight type (its block format and the ggml order it reproduces) with
 * one entry per ISA level (the kernels). kiln_matmul (matmul.c) reads it
 * and nothing else decides; runtime/kernels.c holds the table, to be
 * read top to bottom.
 *
 * Glossary of the runtime's names (file and function prefixes):
 *   vecdot_*   a file of product kernels (ggml's name for a row dot
 *              product); kiln_vec_dot_<type> the reference one per type
 *   act_*      activations converted to ggml's vec_dot_type (act_quant.c)
 *   korder     which of ggml's k-quant float orders a product takes:
 *              vec_dot, or the gemv / gemm kernels of repacked weights
 *              (vecdot_korder.c; kiln_kdot_ref)
 *   kbits      k-quant levels decoded in AVX2 registers (vecdot_kbits.h)
 *   panel      16 weight rows interleaved, one SIMD lane per row
 *              (vecdot_panel.c: kiln_pblk32 / kiln_pblk256 blocks, kiln_pact
 *              the matching activations)
 *   qgemm      the panel kernels, many tokens (vecdot_qgemm.c)
 *   kdirect    "k-quants direct": a few tokens straight from the GGUF
 *              blocks, no panels (vecdot_kdirect.c; the legacy types too)
 *   kvnni      the same for Q4_K, Q5_K, Q2_K, Q3_K, Q6_K, IQ2_XXS with
 *              AVX-512 VNNI
 *              (vecdot_kvnni.c); kstep their shared float steps
 *              (vecdot_kstep.h)
 *   krows      one token against 4 rows at once (decode of Q4_K, Q2_K,
 *              Q6_K, Q3_K with VNNI; vecdot_krows.c)
 *   fgemm      f32 products: the fixed fmaf chain (KILN_NUM_EXACT) and
 *              ggml's F32 / F16 / BF16 orders (vecdot_float.c)
 *   fdecode    one token against float weights read in place
 *              (vecdot_fdecode.c)
 *   frows      ggml_vec_dot_f32 / _f16 / _bf16 for several rows against
 *              one token (vecdot_frows.c)
 *   tiny       llamafile's tinyBLAS order (ggml's prompt batches)
 * Elsewhere in kiln: klgt (golden/) the KLGT logits file of llama.cpp's
 * references; lgf (golden/logits_file) kiln's own compressed logits file;
 * stw (core/safetensors_write) the safetensors writer; jw (core/jsonw) the
 * JSON writer; imx an importance matrix (imatrix); tm (testmodel/) the
 * synthetic model writer. */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include "vecdot.h"

/* The levels the table tells apart. kiln_simd() caps them (KILN_SIMD). */
typedef enum kiln_isa {
    KILN_ISA_SCALAR = 0, /* the reference code, any CPU */
    KILN_ISA_AVX2,       /* AVX2 + FMA + F16C */
    KILN_ISA_AVX512,     /* AVX-512 F, BW, VL, DQ without VNNI */
    KILN_ISA_VNNI,       /* AVX-512 with VNNI */
    KILN_ISA_COUNT
} kiln_isa;

/* The level to run now: kiln_simd(), and VNNI when the CPU has it. */
kiln_isa kiln_isa_now(void);

/* A quantized weight row against tokens [t0, t0 + nt) (nt <= 4) of the
 * converted activations `act` (Q8_0 / Q8_K rows of nb blocks): y[(t0 + k)
 * * ldy] for k < nt (vecdot_kdirect.c). */
typedef void (*kiln_qrow_fn)(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                             int nt, float *y, int64_t ldy);

/* KILN_QROWS consecutive weight rows (row k at w + k * row_bytes, nb
 * blocks each) against one token's converted activations `act`: y[k] for
 * k < KILN_QROWS (vecdot_krows.c). */
#define KILN_QROWS 4
/* Four rows read at once are four streams from memory, slower than one
 * past a few pages for the types whose kernels keep up with one stream
 * (kiln_direct_rows4), hence a default span for them. */
#define KILN_ROWS_SPAN 8192
/* Bytes ahead of the loads that a one-token kernel streaming its rows
 * from memory prefetches, into L2 (vecdot_frows.c's F16 / BF16 rows,
 * vecdot_kvnni.c's one-row k-quant kernels): the hardware prefetcher
 * alone keeps fewer lines in flight than the memory can serve. Measured
 * in turns: the 1B F16 model's tg32 22.0 -> 24.9 t/s where the memory was
 * fast, within 3 % where it was slow (2 KiB ahead slower, 4 KiB no better
 * than none, 16 and 32 KiB below 8); the 1B Q4_K_M model's tg32 57.1 (2
 * KiB into L1) -> 59.1 t/s. */
#define KILN_STREAM_AHEAD 8192
typedef void (*kiln_qrows_fn)(const kiln_qtype *qt, const uint8_t *w, int64_t row_bytes, int64_t nb,
                              const void *act, float *y);

/* Every row of a quantized matrix against every token through `fn`
 * (vecdot_kdirect.c): y[t * n_out + r]. An orphaned `omp for ... nowait`:
 * the rows are shared by the threads of the caller's OpenMP region, which
 * meets at a barrier (or the region's end) before y is read. */
void kiln_direct_rows(kiln_qrow_fn fn, const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_out,
                      const void *act, int64_t n_tokens, float *y);

/* kiln_direct_rows, with one token's rows taken KILN_QROWS at a time by
 * `rows` where it is not NULL (the rest by `fn`): the same outputs. */
void kiln_direct_rows4(kiln_qrows_fn rows, kiln_qrow_fn fn, const kiln_qtype *qt, const void *w, int64_t n_in,
                       int64_t n_out, const void *act, int64_t n_tokens, float *y);

/* A panel (16 rows, n_rows of them real) against tokens [t0, t0 + n):
 * y[t * ldy + r] (vecdot_qgemm.c). */
typedef void (*kiln_qpanel_fn)(const void *panel, const kiln_pact *act, int64_t t0, int64_t n, float *y,
                               int64_t ldy, int n_rows);

/* F32 / F16 / BF16 weights (`type`, rows of row_bytes at w) in
 * KILN_NUM_GGML mode, activations x already in the weight's precision:
 * y[t * n_out + r] for every row and token. Runs inside the caller's
 * OpenMP region (an orphaned `omp for ... nowait`: the region must end
 * after it, its end being the one barrier); `scratch` is this thread's
 * buffer of kiln_fkernel.scratch(n) floats, 64-byte aligned
 * (vecdot_float.c). */
typedef void (*kiln_fggml_fn)(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                              int64_t n_out, int64_t n_tokens, float *y, float *scratch);

/* kiln_fggml_fn for F16 / BF16 weights whose activations come as their
 * 16-bit values (the rounding to the weight's type kept in its own
 * format: half the bytes of floats). */
typedef void (*kiln_fggml16_fn)(uint32_t type, const uint8_t *w, int64_t row_bytes, const uint16_t *x, int64_t n,
                                int64_t n_out, int64_t n_tokens, float *y, float *scratch);

typedef struct kiln_fkernel {
    kiln_fggml_fn run;
    int64_t (*scratch)(uint32_t type, int64_t n); /* floats per thread; NULL: none */
    kiln_fggml16_fn run16; /* F16 / BF16 weights: run with 16-bit activations, same bits; NULL: none */
} kiln_fkernel;

/* One token against F32 / F16 / BF16 weights read in place, the exact
 * mode's chain (vecdot_fdecode.c); OpenMP inside. */
typedef void (*kiln_fdecode_fn)(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x,
                                float *y);

/* The kernels of one weight type at one ISA level. A NULL entry means
 * the reference code (matmul.c's rows of qt->dot / kiln_kdot_ref) for
 * quantized weights, and kiln_fgemm's chain for exact_decode. */
typedef struct kiln_isa_kernels {
    /* KILN_NUM_GGML, quantized weights */
    kiln_qrow_fn direct[KILN_KORDER_COUNT]; /* [korder] but GEMM: up to direct_tokens tokens,
                                             * or every product of an order without panels */
    kiln_qrows_fn rows[KILN_KORDER_COUNT];  /* [korder]: one token's direct products, KILN_QROWS
                                             * rows per call (NULL: direct alone) */
    kiln_qpanel_fn panel[KILN_KORDER_COUNT]; /* [korder]: every other product */
    /* KILN_NUM_GGML, float weights */
    kiln_fkernel vec;          /* ggml_vec_dot_<type>: one token, experts, shapes tinyBLAS declines */
    kiln_fkernel tiny;         /* tinyBLAS: 2+ tokens */
    /* KILN_NUM_EXACT, float weights, one token */
    kiln_fdecode_fn exact_decode;
} kiln_isa_kernels;

typedef struct kiln_kernels {
    const char *ggml_order;    /* the llama.cpp (x86 AVX-512 build) code whose sums it reproduces */
    kiln_qtype qt;             /* quantized formats: the block format (qt.block == 0: a float type) */
    int direct_tokens;         /* the direct kernels take products of at most this many tokens */
    int gemm_group;            /* repacked types: tokens [0, n - n % gemm_group) take the gemm order */
    int64_t rows_span;         /* the rows kernels take a one-token product when KILN_QROWS rows
                                * span at most this many bytes (0: KILN_ROWS_SPAN) */
    kiln_isa_kernels isa[KILN_ISA_COUNT];
} kiln_kernels;

/* The row of a weight type, or NULL when kiln has no GGML-mode kernel
 * for it (KILN_NUM_EXACT still multiplies every type kiln can
 * dequantize). */
const kiln_kernels *kiln_kernels_get(uint32_t type);

/* The four-row kernel of k (ISA level now, float order `order`) for
 * n_in-wide rows, or NULL when four such rows are longer than the table's
 * rows_span: four rows are four streams from memory, worth it while they
 * lie within a few pages. */
kiln_qrows_fn kiln_rows_kernel(const kiln_kernels *k, kiln_korder order, int64_t n_in);

/* The float order of a MoE expert's product of n_out rows, as ggml's
 * mul_mat_id takes it: no gemm order and never tinyBLAS, the gemv order
 * for the types llama.cpp repacks, else vec_dot (matmul.c, moe_exec.c). */
kiln_korder kiln_expert_order(const kiln_kernels *k, int64_t n_out);

/* Whether a quantized product of n_tokens in `order` (no gemm part) takes
 * the direct kernel of the ISA level now: up to k->direct_tokens tokens,
 * and any count when the order has no panels. Otherwise the panels, or
 * with neither kernel the reference rows. */
bool kiln_takes_direct(const kiln_kernels *k, kiln_korder order, int64_t n_tokens);

/* ---- the kernel buffers ----------------------------------------------- */

/* 64-byte aligned memory for the kernels' buffers (free() releases it),
 * or NULL. Called only outside OpenMP regions, once per product. */
void *kiln_kernel_alloc(size_t n);

/* Tests only: the next `n` calls of kiln_kernel_alloc succeed and the
 * one after fails (then it succeeds again); n < 0 (the default) never
 * fails. This is how tests reach the out-of-memory paths. */
void kiln_kernel_alloc_fail_after(int n);

/* The calling thread's arena: at least n bytes, 64-byte aligned, kept
 * for the thread's next products (grown through kiln_kernel_alloc when
 * too small, so the test hook reaches it), or NULL. Not to be freed; the
 * next call may move it. Called outside OpenMP regions, as
 * kiln_kernel_alloc. */
void *kiln_kernel_arena(size_t n);

/* n bytes rounded up to whole 64-byte lines, so that buffers carved one
 * after another out of one arena stay aligned. */
static inline size_t kiln_lines(size_t n) {
    return (n + 63) / 64 * 64;
}

/* ---- the kernels the table names -------------------------------------- */

/* vecdot_kdirect.c (AVX2): one per block combination and order. */
void kiln_kdirect_q3_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_q6_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_q2_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_q4_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_q5_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_iq2(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_iq4_xs(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_iq3_xxs(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_iq3_s(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
/* vecdot_iq1.c (AVX2) */
void kiln_kdirect_iq1_s(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_iq1_m(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_q2_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                            int64_t);
void kiln_kdirect_q4_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                            int64_t);
/* vecdot_q0direct.c: Q4_0, Q5_0, IQ4_NL in ggml's x86 orders (AVX2). */
void kiln_kdirect_q0_lanes8(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                            int64_t);
void kiln_kdirect_iq4_nl_pairs(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                               int64_t);
void kiln_kdirect_q0_fma(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                         int64_t);
/* vecdot_kvnni.c: Q4_K, Q2_K (vec_dot and gemv), Q6_K, Q3_K, Q5_K,
 * IQ2_XXS decoded into 512-bit registers (AVX-512 VNNI). */
void kiln_kvnni_q4_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q4_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q2_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q2_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q6_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q3_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_q5_k(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kvnni_iq2_xxs(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
/* IQ2_XXS's two decodes: _bw with scalar grid look-ups (AVX-512 BW, VNNI),
 * _vbmi from registers (VBMI and BITALG too); kiln_kvnni_iq2_xxs, the
 * table's entry, runs the second where the CPU has it. */
void kiln_kvnni_iq2_xxs_bw(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                           int64_t);
void kiln_kvnni_iq2_xxs_vbmi(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                             int64_t);
/* vecdot_krows.c: one token against KILN_QROWS rows (AVX-512 VNNI). */
void kiln_krows_q4_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, int64_t, const void *, float *);
void kiln_krows_q2_k_gemv(const kiln_qtype *, const uint8_t *, int64_t, int64_t, const void *, float *);
void kiln_krows_q6_k(const kiln_qtype *, const uint8_t *, int64_t, int64_t, const void *, float *);
void kiln_krows_q3_k(const kiln_qtype *, const uint8_t *, int64_t, int64_t, const void *, float *);
/* vecdot_q8direct.c: Q8_0 read straight from its blocks (AVX2, VNNI). */
void kiln_q8direct_avx2(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_q8direct_vnni(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
/* vecdot_mxfp4.c (AVX2): MXFP4 in the vec_dot and the gemv order. */
void kiln_kdirect_mxfp4(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *, int64_t);
void kiln_kdirect_mxfp4_gemv(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                             int64_t);
/* vecdot_q12.c: Q1_0 and Q2_0, AVX2 and AVX-512 (BW, DQ). */
void kiln_kdirect_q1_0_avx2(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                            int64_t);
void kiln_kdirect_q1_0_avx512(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                              int64_t);
void kiln_kdirect_q2_0_avx2(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                            int64_t);
void kiln_kdirect_q2_0_avx512(const kiln_qtype *, const uint8_t *, int64_t, const void *, int64_t, int, float *,
                              int64_t);

/* vecdot_qgemm.c: <ISA>_<kernel>_<combination>_t<tokens per pass>. The
 * gemm / gemv kernels of repacked types are named by the 32-weight chunks
 * per fma (c2: Q4_K's gemm, c4: Q2_K's, c8: both gemv). */
#define KILN_QPANEL_FN(name) \
    void name(const void *, const kiln_pact *, int64_t, int64_t, float *, int64_t, int)
KILN_QPANEL_FN(kiln_qgemm_vnni_lanes8_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_fma_t4);
KILN_QPANEL_FN(kiln_qgemm_vnni_k_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_q6_k_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_q2_k_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_q4_k_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_q5_k_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_iq2_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_rep_c2_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_rep_c4_t2);
KILN_QPANEL_FN(kiln_qgemm_vnni_rep_c8_t2);
KILN_QPANEL_FN(kiln_qgemm_avx2_lanes8_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_fma_t4);
KILN_QPANEL_FN(kiln_qgemm_avx2_k_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_q6_k_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_q2_k_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_q4_k_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_q5_k_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_iq2_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_rep_c2_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_rep_c4_t1);
KILN_QPANEL_FN(kiln_qgemm_avx2_rep_c8_t1);
#undef KILN_QPANEL_FN

/* vecdot_float.c: ggml's float orders, per level (see kiln_fgemm_ggml). */
void kiln_fggml_vec_ref(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                        float *);
void kiln_fggml_tiny_ref(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                         float *);
int64_t kiln_fggml_ref_scratch(uint32_t type, int64_t n);
void kiln_fggml_vec_avx2(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                         float *);
void kiln_fggml_tiny_avx2(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                          float *);
int64_t kiln_fggml_tiny_avx2_scratch(uint32_t type, int64_t n);
void kiln_fggml_vec_avx512(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                           float *);
void kiln_fggml_tiny_avx512(uint32_t, const uint8_t *, int64_t, const float *, int64_t, int64_t, int64_t, float *,
                            float *);
int64_t kiln_fggml_tiny_avx512_scratch(uint32_t type, int64_t n);
void kiln_fggml_tiny16_avx512(uint32_t, const uint8_t *, int64_t, const uint16_t *, int64_t, int64_t, int64_t,
                              float *, float *);

/* vecdot_frows.c: ggml_vec_dot_<type>'s order, rows [0, n_rows) (row r at
 * w + r * row_bytes) against one token x, y[r]; streamed: the rows come
 * from memory, not cache. No threads of its own. */
void kiln_frows_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n, int64_t n_rows,
                       bool streamed, float *y);

/* vecdot_fdecode.c */
void kiln_fdecode_avx512(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x, float *y);

#endif
