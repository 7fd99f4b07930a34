/* runtime/kernels.c - the kernel table: for each weight type, the ggml
 * order its products reproduce, its block format, and per ISA level the
 * kernel of each kind of product. kiln_matmul (matmul.c) picks:
 *
 *   KILN_NUM_GGML, quantized weights (activations -> Q8_0 / Q8_K first):
 *     tokens take korder GEMM in groups of gemm_group when the type is
 *     repacked (kiln_qtype_repacked; never a 3-D per-head weight), else
 *     GEMV; other types TINY for 2+ tokens of a dense product when the
 *     type has a tinyBLAS order of its own (qt.dot_tiny), else VECDOT;
 *     up to direct_tokens tokens, none in GEMM,
 *     or an order without panels:                 direct[korder]
 *       (one token, four rows within rows_span
 *        (default 8 KiB) at a time:              rows[korder] if set)
 *     otherwise:                                  panel[korder]
 *     a NULL kernel (the scalar level):           the reference rows;
 *   KILN_NUM_GGML, F32 / F16 / BF16 (activations rounded to the weight's
 *     precision): tiny for 2+ tokens when n_in % 16 == 0 and
 *     n_out % 4 == 0 (never for experts), vec otherwise;
 *   KILN_NUM_EXACT: exact_decode for one token if there is one, else
 *     kiln_fgemm's chain (every type, dequantized).
 *
 * Every kernel of a row gives the same bits (tests/test_matmul.c,
 * test_kdirect.c); the levels differ only in speed. AVX-512 CPUs without
 * VNNI run the AVX2 quantized kernels. The kernels' own tiles: the
 * suffix _tN of a panel kernel is its tokens per pass (16 rows each);
 * the direct kernels take 4 tokens per pass over a row; vecdot_float.c
 * documents its tiles (tinyBLAS 4 x 6 on AVX-512, 4 rows x 3 tokens on
 * AVX2). */
#include "kernels.h"

#include "../core/cpu.h"
#include "../core/types.h"

#include <stdlib.h>

#ifdef __x86_64__
#define X86(f) f
#else
#define X86(f) NULL
#endif

#define LEGACY(T, t, comb_)                                                                    \
    {T, KILN_Q8_0, KILN_QK, sizeof(kiln_block_##t), sizeof(kiln_block_q8_0), kiln_vec_dot_##t, \
     kiln_unpack_##t, comb_, 0}
/* Q4_1 and Q5_1 take Q8_1 activations and have only the reference rows:
 * no unpacking, no panels (comb names the closest order, never read). */
#define LEGACY_Q8_1(T, t)                                                                      \
    {T, KILN_Q8_1, KILN_QK, sizeof(kiln_block_##t), sizeof(kiln_block_q8_1), kiln_vec_dot_##t, \
     NULL, KILN_COMB_LANES8, 0}
#define KQUANT(T, t, comb_, gemm_chunks_)                                                        \
    {T, KILN_Q8_K, KILN_QK_K, sizeof(kiln_block_##t), sizeof(kiln_block_q8_k), NULL,             \
     kiln_unpack_##t, comb_, gemm_chunks_}

/* A quantized type's levels: nothing at the scalar level (the reference
 * rows), the AVX2 kernels also on AVX-512 without VNNI. */
#define QUANT_ISA(direct_, gemv_direct, avx2, avx2_gemv, avx2_gemm, vnni, vnni_gemv, vnni_gemm) \
    {                                                                                            \
        [KILN_ISA_AVX2] = {.direct = {X86(direct_), X86(gemv_direct)},                           \
                           .panel = {X86(avx2), X86(avx2_gemv), X86(avx2_gemm)}},                \
        [KILN_ISA_AVX512] = {.direct = {X86(direct_), X86(gemv_direct)},                         \
                             .panel = {X86(avx2), X86(avx2_gemv), X86(avx2_gemm)}},              \
        [KILN_ISA_VNNI] = {.direct = {X86(direct_), X86(gemv_direct)},                           \
                           .panel = {X86(vnni), X86(vnni_gemv), X86(vnni_gemm)}},                \
    }

/* QUANT_ISA whose VNNI level decodes with kernels of its own
 * (vecdot_kvnni.c: the blocks into 512-bit registers, vpdpwssd), and
 * (QUANT_ISA_VROWS) takes one token's rows four at a time
 * (vecdot_krows.c: vrows in the vec_dot order, vgemv_rows in the gemv). */
#define QUANT_ISA_VROWS(direct_, gemv_direct, vdirect, vgemv_direct, vrows, vgemv_rows, avx2, avx2_gemv, \
                        avx2_gemm, vnni, vnni_gemv, vnni_gemm)                                              \
    {                                                                                                        \
        [KILN_ISA_AVX2] = {.direct = {X86(direct_), X86(gemv_direct)},                                       \
                           .panel = {X86(avx2), X86(avx2_gemv), X86(avx2_gemm)}},                            \
        [KILN_ISA_AVX512] = {.direct = {X86(direct_), X86(gemv_direct)},                                     \
                             .panel = {X86(avx2), X86(avx2_gemv), X86(avx2_gemm)}},                          \
        [KILN_ISA_VNNI] = {.direct = {X86(vdirect), X86(vgemv_direct)},                                      \
                           .rows = {X86(vrows), X86(vgemv_rows)},                                            \
                           .panel = {X86(vnni), X86(vnni_gemv), X86(vnni_gemm)}},                            \
    }
#define QUANT_ISA_VDIRECT(direct_, gemv_direct, vdirect, vgemv_direct, avx2, avx2_gemv, avx2_gemm, vnni, \
                          vnni_gemv, vnni_gemm)                                                              \
    QUANT_ISA_VROWS(direct_, gemv_direct, vdirect, vgemv_direct, NULL, NULL, avx2, avx2_gemv, avx2_gemm, vnni,  \
                    vnni_gemv, vnni_gemm)

/* A type whose direct kernels take every product (no panels), with an
 * AVX-512 kernel of its own (also on VNNI CPUs). */
#define DIRECT_ISA(avx2, avx512)                                           \
    {                                                                      \
        [KILN_ISA_AVX2] = {.direct = {X86(avx2), NULL}},                   \
        [KILN_ISA_AVX512] = {.direct = {X86(avx512), NULL}},               \
        [KILN_ISA_VNNI] = {.direct = {X86(avx512), NULL}},                 \
    }

/* Q4_0, Q5_0 and IQ4_NL (vecdot_legacy.c and vecdot_q0direct.c): the
 * vec_dot order's kernels as given (IQ4_NL's pairs have no panels), the
 * repacked order's (Q4_0, IQ4_NL), and tinyBLAS's eight lanes. */
#define Q0_ISA(vec_direct, vec_avx2, vec_vnni, gemv_direct, gemv_avx2, gemv_vnni)                    \
    {                                                                                                \
        [KILN_ISA_AVX2] = {.direct = {[KILN_KORDER_VECDOT] = X86(vec_direct),                        \
                                      [KILN_KORDER_GEMV] = X86(gemv_direct),                         \
                                      [KILN_KORDER_TINY] = X86(kiln_kdirect_q0_lanes8)},             \
                           .panel = {[KILN_KORDER_VECDOT] = X86(vec_avx2),                           \
                                     [KILN_KORDER_GEMV] = X86(gemv_avx2),                            \
                                     [KILN_KORDER_TINY] = X86(kiln_qgemm_avx2_lanes8_t1)}},          \
        [KILN_ISA_AVX512] = {.direct = {[KILN_KORDER_VECDOT] = X86(vec_direct),                      \
                                        [KILN_KORDER_GEMV] = X86(gemv_direct),                       \
                                        [KILN_KORDER_TINY] = X86(kiln_kdirect_q0_lanes8)},           \
                             .panel = {[KILN_KORDER_VECDOT] = X86(vec_avx2),                         \
                                       [KILN_KORDER_GEMV] = X86(gemv_avx2),                          \
                                       [KILN_KORDER_TINY] = X86(kiln_qgemm_avx2_lanes8_t1)}},        \
        [KILN_ISA_VNNI] = {.direct = {[KILN_KORDER_VECDOT] = X86(vec_direct),                        \
                                      [KILN_KORDER_GEMV] = X86(gemv_direct),                         \
                                      [KILN_KORDER_TINY] = X86(kiln_kdirect_q0_lanes8)},             \
                           .panel = {[KILN_KORDER_VECDOT] = X86(vec_vnni),                           \
                                     [KILN_KORDER_GEMV] = X86(gemv_vnni),                            \
                                     [KILN_KORDER_TINY] = X86(kiln_qgemm_vnni_lanes8_t2)}},          \
    }

/* The float types share their kernels (the type is an argument); from
 * AVX-512 up, tinyBLAS's F16 / BF16 products take the activations in 16
 * bits (run16). */
#define FLOAT_ISA                                                                                       \
    {                                                                                                   \
        [KILN_ISA_SCALAR] = {.vec = {kiln_fggml_vec_ref, kiln_fggml_ref_scratch},                       \
                             .tiny = {kiln_fggml_tiny_ref, kiln_fggml_ref_scratch}},                    \
        [KILN_ISA_AVX2] = {.vec = {X86(kiln_fggml_vec_avx2), NULL},                                     \
                           .tiny = {X86(kiln_fggml_tiny_avx2), X86(kiln_fggml_tiny_avx2_scratch)}},     \
        [KILN_ISA_AVX512] = {.vec = {X86(kiln_fggml_vec_avx512), NULL},                                 \
                             .tiny = {X86(kiln_fggml_tiny_avx512), X86(kiln_fggml_tiny_avx512_scratch), \
                                      X86(kiln_fggml_tiny16_avx512)},                                   \
                             .exact_decode = X86(kiln_fdecode_avx512)},                                 \
        [KILN_ISA_VNNI] = {.vec = {X86(kiln_fggml_vec_avx512), NULL},                                   \
                           .tiny = {X86(kiln_fggml_tiny_avx512), X86(kiln_fggml_tiny_avx512_scratch),   \
                                    X86(kiln_fggml_tiny16_avx512)},                                     \
                           .exact_decode = X86(kiln_fdecode_avx512)},                                   \
    }

static const kiln_kernels KERNELS[KILN_TYPE_COUNT] = {
    /* ---- float weights: ggml_vec_dot_<type>, tinyBLAS for batches ---- */
    [KILN_F32] = {
        .ggml_order = "ggml_vec_dot_f32 (4 x 16 lanes over 64, leftovers fused); 2+ tokens: tinyBLAS "
                      "(llamafile_sgemm, 16 lanes, _mm512_reduce_add_ps)",
        .isa = FLOAT_ISA,
    },
    [KILN_F16] = {
        .ggml_order = "ggml_vec_dot_f16 (as _f32, leftovers in double); 2+ tokens: tinyBLAS",
        .isa = FLOAT_ISA,
    },
    [KILN_BF16] = {
        .ggml_order = "ggml_vec_dot_bf16 (AVX-512F without AVX512_BF16: 2 x 16 lanes over 32, each reduced "
                      "into a double); 2+ tokens: tinyBLAS",
        .isa = FLOAT_ISA,
    },

    /* ---- 32-weight blocks against Q8_0 activations ---- */
    [KILN_Q8_0] = {
        .ggml_order = "ggml_vec_dot_q8_0_q8_0 (x86: 8 lanes of 4-weight sums, fmaf per block, hsum_float_8)",
        .qt = LEGACY(KILN_Q8_0, q8_0, KILN_COMB_LANES8),
        .direct_tokens = 8,
        /* QUANT_ISA's levels, but decode reads the blocks in place, with a
         * VNNI kernel of its own (vecdot_q8direct.c) */
        .isa = {
            [KILN_ISA_AVX2] = {.direct = {X86(kiln_q8direct_avx2), NULL},
                               .panel = {X86(kiln_qgemm_avx2_lanes8_t1), NULL, NULL}},
            [KILN_ISA_AVX512] = {.direct = {X86(kiln_q8direct_avx2), NULL},
                                 .panel = {X86(kiln_qgemm_avx2_lanes8_t1), NULL, NULL}},
            [KILN_ISA_VNNI] = {.direct = {X86(kiln_q8direct_vnni), NULL},
                               .panel = {X86(kiln_qgemm_vnni_lanes8_t2), NULL, NULL}},
        },
    },
    /* Q4_0, Q5_0, IQ4_NL: ggml_vec_dot (AVX2) for one token and for
     * experts, llamafile's tinyBLAS_Q0_AVX for 2+ tokens (every Q8_0-
     * activation type: Q8_0's eight lanes), except the Q4_0 / IQ4_NL
     * matrices ggml-cpu repacks - 2-D weights and experts (not 3-D
     * per-head weights, kiln_matmul_head) of n_out % 8 == 0 - whose gemv
     * and gemm take one fma per block (gemm_chunks 1, no gemm group) */
    [KILN_Q4_0] = {
        .ggml_order = "ggml_vec_dot_q4_0_q8_0 (AVX2) and tinyBLAS_Q0_AVX: 8 lanes of 4-weight sums, fmaf per "
                      "block, hsum_float_8; repacked: ggml_gemv/gemm_q4_0_8x8_q8_0 (acc = fmaf(block sum, "
                      "dx * dy, acc))",
        .qt = {.type = KILN_Q4_0, .act_type = KILN_Q8_0, .block = KILN_QK, .block_bytes = sizeof(kiln_block_q4_0),
               .act_bytes = sizeof(kiln_block_q8_0), .dot = kiln_vec_dot_q4_0, .unpack = kiln_unpack_q4_0,
               .comb = KILN_COMB_LANES8, .gemm_chunks = 1, .dot_gemv = kiln_vec_dot_q4_0_gemv},
        .direct_tokens = 8,
        .isa = Q0_ISA(kiln_kdirect_q0_lanes8, kiln_qgemm_avx2_lanes8_t1, kiln_qgemm_vnni_lanes8_t2,
                      kiln_kdirect_q0_fma, kiln_qgemm_avx2_fma_t4, kiln_qgemm_vnni_fma_t4),
    },
    [KILN_Q5_0] = {
        .ggml_order = "ggml_vec_dot_q5_0_q8_0 (AVX2) and tinyBLAS_Q0_AVX: as Q4_0 (never repacked)",
        .qt = LEGACY(KILN_Q5_0, q5_0, KILN_COMB_LANES8),
        .direct_tokens = 8,
        .isa = Q0_ISA(kiln_kdirect_q0_lanes8, kiln_qgemm_avx2_lanes8_t1, kiln_qgemm_vnni_lanes8_t2, NULL, NULL, NULL),
    },
    [KILN_IQ4_NL] = {
        .ggml_order = "ggml_vec_dot_iq4_nl_q8_0 (AVX2: blocks in pairs into two 8-lane accumulators, added, "
                      "hsum_float_8, an odd last block after); tinyBLAS_Q0_AVX: as Q4_0; repacked: "
                      "ggml_gemv/gemm_iq4_nl_8x8_q8_0 (as Q4_0's)",
        .qt = {.type = KILN_IQ4_NL, .act_type = KILN_Q8_0, .block = KILN_QK,
               .block_bytes = sizeof(kiln_block_iq4_nl), .act_bytes = sizeof(kiln_block_q8_0),
               .dot = kiln_vec_dot_iq4_nl, .unpack = kiln_unpack_iq4_nl, .comb = KILN_COMB_LANES8,
               .gemm_chunks = 1, .dot_gemv = kiln_vec_dot_iq4_nl_gemv, .dot_tiny = kiln_vec_dot_iq4_nl_tiny},
        .direct_tokens = 8,
        .isa = Q0_ISA(kiln_kdirect_iq4_nl_pairs, NULL, NULL,
                      kiln_kdirect_q0_fma, kiln_qgemm_avx2_fma_t4, kiln_qgemm_vnni_fma_t4),
    },

    /* ---- 32-weight blocks with a minimum against Q8_1 activations ---- */
    /* the reference rows at every level (no kernel entries); the rows' dot
     * products use AVX2 themselves where kiln_simd() allows, same bits */
    [KILN_Q4_1] = {
        .ggml_order = "ggml_vec_dot_q4_1_q8_1 (x86 AVX2: 8 lanes of 4-weight sums, fmaf per block, "
                      "hsum_float_8, plus the sum of m * s)",
        .qt = LEGACY_Q8_1(KILN_Q4_1, q4_1),
    },
    [KILN_Q5_1] = {
        .ggml_order = "ggml_vec_dot_q5_1_q8_1 (x86 AVX2: as Q4_1)",
        .qt = LEGACY_Q8_1(KILN_Q5_1, q5_1),
    },

    /* ---- 256-weight super-blocks against Q8_K activations ---- */
    /* llama.cpp repacks Q2_K (gemm: one fma per 128 weights) and Q4_K (per
     * 64) matrices of n_out % 8 == 0 on this CPU; see kiln_korder */
    [KILN_Q2_K] = {
        .ggml_order = "ggml_vec_dot_q2_K_q8_K (AVX2); repacked: ggml_gemm_q2_K_8x8_q8_K for 4-token groups, "
                      "ggml_gemv_q2_K_8x8_q8_K for the rest and for experts",
        .qt = KQUANT(KILN_Q2_K, q2_k, KILN_COMB_K_Q2, 4),
        .direct_tokens = 8,
        .gemm_group = 4,
        .isa = QUANT_ISA_VROWS(kiln_kdirect_q2_k, kiln_kdirect_q2_k_gemv, kiln_kvnni_q2_k, kiln_kvnni_q2_k_gemv,
                               NULL, kiln_krows_q2_k_gemv,
                               kiln_qgemm_avx2_q2_k_t1, kiln_qgemm_avx2_rep_c8_t1, kiln_qgemm_avx2_rep_c4_t1,
                               kiln_qgemm_vnni_q2_k_t2, kiln_qgemm_vnni_rep_c8_t2, kiln_qgemm_vnni_rep_c4_t2),
    },
    [KILN_Q3_K] = {
        .ggml_order = "ggml_vec_dot_q3_K_q8_K (AVX2)",
        .qt = KQUANT(KILN_Q3_K, q3_k, KILN_COMB_K, 0),
        .direct_tokens = 8,
        /* the four-row kernel at any length: the one-row kernel reads 9 GB/s,
         * under what four streams get (n_in 8192, one thread, ns per
         * super-block: 12.2 -> 9.2; vecdot_krows.c) */
        .rows_span = INT64_MAX,
        .isa = QUANT_ISA_VROWS(kiln_kdirect_q3_k, NULL, kiln_kvnni_q3_k, NULL, kiln_krows_q3_k, NULL,
                               kiln_qgemm_avx2_k_t1, NULL, NULL,
                               kiln_qgemm_vnni_k_t2, NULL, NULL),
    },
    [KILN_Q4_K] = {
        .ggml_order = "ggml_vec_dot_q4_K_q8_K (AVX2); repacked: ggml_gemm_q4_K_8x8_q8_K for 4-token groups, "
                      "ggml_gemv_q4_K_8x8_q8_K for the rest and for experts",
        .qt = KQUANT(KILN_Q4_K, q4_k, KILN_COMB_K_Q4, 2),
        .direct_tokens = 8,
        .gemm_group = 4,
        .isa = QUANT_ISA_VROWS(kiln_kdirect_q4_k, kiln_kdirect_q4_k_gemv, kiln_kvnni_q4_k, kiln_kvnni_q4_k_gemv,
                               NULL, kiln_krows_q4_k_gemv,
                               kiln_qgemm_avx2_q4_k_t1, kiln_qgemm_avx2_rep_c8_t1, kiln_qgemm_avx2_rep_c2_t1,
                               kiln_qgemm_vnni_q4_k_t2, kiln_qgemm_vnni_rep_c8_t2, kiln_qgemm_vnni_rep_c2_t2),
    },
    [KILN_Q5_K] = {
        .ggml_order = "ggml_vec_dot_q5_K_q8_K (AVX2)",
        .qt = KQUANT(KILN_Q5_K, q5_k, KILN_COMB_K_Q5, 0),
        .direct_tokens = 8,
        .isa = QUANT_ISA_VDIRECT(kiln_kdirect_q5_k, NULL, kiln_kvnni_q5_k, NULL,
                                 kiln_qgemm_avx2_q5_k_t1, NULL, NULL,
                                 kiln_qgemm_vnni_q5_k_t2, NULL, NULL),
    },
    [KILN_Q6_K] = {
        .ggml_order = "ggml_vec_dot_q6_K_q8_K (AVX2)",
        .qt = KQUANT(KILN_Q6_K, q6_k, KILN_COMB_K_Q6, 0),
        .direct_tokens = 8,
        .isa = QUANT_ISA_VROWS(kiln_kdirect_q6_k, NULL, kiln_kvnni_q6_k, NULL, kiln_krows_q6_k, NULL,
                               kiln_qgemm_avx2_q6_k_t1, NULL, NULL,
                               kiln_qgemm_vnni_q6_k_t2, NULL, NULL),
    },
    [KILN_IQ2_XXS] = {
        .ggml_order = "ggml_vec_dot_iq2_xxs_q8_K (AVX2)",
        .qt = KQUANT(KILN_IQ2_XXS, iq2_xxs, KILN_COMB_IQ2, 0),
        .direct_tokens = 8,
        .isa = QUANT_ISA_VDIRECT(kiln_kdirect_iq2, NULL, kiln_kvnni_iq2_xxs, NULL,
                                 kiln_qgemm_avx2_iq2_t1, NULL, NULL,
                                 kiln_qgemm_vnni_iq2_t2, NULL, NULL),
    },
    /* IQ2_XS and IQ2_S: IQ2_XXS's order (unpacked to signed grid levels, a
     * scale per 16 weights instead of 32); llama.cpp repacks neither */
    [KILN_IQ2_XS] = {
        .ggml_order = "ggml_vec_dot_iq2_xs_q8_K (AVX2)",
        .qt = KQUANT(KILN_IQ2_XS, iq2_xs, KILN_COMB_IQ2, 0),
        .direct_tokens = 8,
        .isa = QUANT_ISA(kiln_kdirect_iq2, NULL,
                         kiln_qgemm_avx2_iq2_t1, NULL, NULL,
                         kiln_qgemm_vnni_iq2_t2, NULL, NULL),
    },
    [KILN_IQ2_S] = {
        .ggml_order = "ggml_vec_dot_iq2_s_q8_K (AVX2)",
        .qt = KQUANT(KILN_IQ2_S, iq2_s, KILN_COMB_IQ2, 0),
        .direct_tokens = 8,
        .isa = QUANT_ISA(kiln_kdirect_iq2, NULL,
                         kiln_qgemm_avx2_iq2_t1, NULL, NULL,
                         kiln_qgemm_vnni_iq2_t2, NULL, NULL),
    },
    /* llama.cpp does not repack IQ4_XS (ggml-cpu/repack.cpp has no IQ4_XS
     * layout). No panels (their vpmaddubsw of q + 128 by levels up to 127
     * would saturate): the direct kernel takes every product from AVX2 up,
     * with ggml's own sign trick for the byte products */
    [KILN_IQ4_XS] = {
        .ggml_order = "ggml_vec_dot_iq4_xs_q8_K (AVX2: 8 lanes of 4-weight sums times the 6-bit scales, "
                      "fmaf per super-block, hsum_float_8)",
        .qt = KQUANT(KILN_IQ4_XS, iq4_xs, KILN_COMB_IQ4, 0),
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_iq4_xs, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    },
    /* llama.cpp repacks neither IQ3 type and llamafile's sgemm takes
     * neither: vec_dot for every product. No panels (levels up to 62 need
     * the lifted byte products the direct kernel takes); the direct kernel
     * takes every product from AVX2 up (vecdot_iq3.c unpacks the blocks) */
    [KILN_IQ3_XXS] = {
        .ggml_order = "ggml_vec_dot_iq3_xxs_q8_K (AVX2: 8 lanes of 4-weight sums times 2 ls + 1, "
                      "fmaf per super-block, 0.25 * hsum_float_8)",
        .qt = KQUANT(KILN_IQ3_XXS, iq3_xxs, KILN_COMB_IQ3, 0),
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_iq3_xxs, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    },
    [KILN_IQ3_S] = {
        .ggml_order = "ggml_vec_dot_iq3_s_q8_K (AVX2: 8 lanes of 4-weight sums times 2 ls + 1, "
                      "fmaf per super-block, hsum_float_8)",
        .qt = KQUANT(KILN_IQ3_S, iq3_s, KILN_COMB_IQ3S, 0),
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_iq3_s, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    },
    /* IQ1_S / IQ1_M: not repacked, no llamafile path; their own reference
     * (qt.dot, which kiln_kdot_ref hands them to) and direct kernel for
     * every product from AVX2 up (vecdot_iq1.c) */
    [KILN_IQ1_S] = {
        .ggml_order = "ggml_vec_dot_iq1_s_q8_K (AVX2: 8 lanes of grid sums times 2s+1, fmaf per super-block, "
                      "hsum_float_8; the shifts as one fmaf'd sum, / 8)",
        .qt = {KILN_IQ1_S, KILN_Q8_K, KILN_QK_K, sizeof(kiln_block_iq1_s), sizeof(kiln_block_q8_k),
               kiln_vec_dot_iq1_s, NULL, KILN_COMB_DOT, 0},
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_iq1_s, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    },
    [KILN_IQ1_M] = {
        .ggml_order = "ggml_vec_dot_iq1_m_q8_K (AVX2: 8 lanes of grid sums and 8 of shift signs, times the "
                      "scales, fmaf per super-block, hsum_float_8 of each, the second / 8)",
        .qt = {KILN_IQ1_M, KILN_Q8_K, KILN_QK_K, sizeof(kiln_block_iq1_m), sizeof(kiln_block_q8_k),
               kiln_vec_dot_iq1_m, NULL, KILN_COMB_DOT, 0},
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_iq1_m, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    },
    /* TQ1_0 / TQ2_0 are the Q6_K order with levels 0..2, unit scales and
     * mins (vecdot_tq.c): Q6_K's panels; llama.cpp does not repack them */
    [KILN_TQ1_0] = {
        .ggml_order = "ggml_vec_dot_tq1_0_q8_K (AVX2: 8 lanes of 4-trit sums minus the bsums, fmaf per "
                      "super-block, hsum_float_8)",
        .qt = KQUANT(KILN_TQ1_0, tq1_0, KILN_COMB_K_Q6, 0),
        .direct_tokens = 0,
        .isa = QUANT_ISA(NULL, NULL,
                         kiln_qgemm_avx2_q6_k_t1, NULL, NULL,
                         kiln_qgemm_vnni_q6_k_t2, NULL, NULL),
    },
    [KILN_TQ2_0] = {
        .ggml_order = "ggml_vec_dot_tq2_0_q8_K (AVX2: as TQ1_0)",
        .qt = KQUANT(KILN_TQ2_0, tq2_0, KILN_COMB_K_Q6, 0),
        .direct_tokens = 0,
        .isa = QUANT_ISA(NULL, NULL,
                         kiln_qgemm_avx2_q6_k_t1, NULL, NULL,
                         kiln_qgemm_vnni_q6_k_t2, NULL, NULL),
    },

    /* ---- MXFP4 against Q8_0: llama.cpp repacks matrices of n_out % 8 == 0
     * (mxfp4_8x8_q8_0), whose gemv and gemm take one fma per block; the
     * direct kernels take every product (no panels) ---- */
    [KILN_MXFP4] = {
        .ggml_order = "ggml_vec_dot_mxfp4_q8_0 (AVX2: blocks in pairs into two 8-lane accumulators, "
                      "hsum_float_8, odd block after); repacked: ggml_gemv/gemm_mxfp4_8x8_q8_0 "
                      "(acc = fmaf(block sum, e * d, acc))",
        .qt = {.type = KILN_MXFP4, .act_type = KILN_Q8_0, .block = KILN_QK,
               .block_bytes = sizeof(kiln_block_mxfp4), .act_bytes = sizeof(kiln_block_q8_0),
               .dot = kiln_vec_dot_mxfp4, .unpack = kiln_unpack_mxfp4,
               .comb = KILN_COMB_LANES8, /* never read: no panels */
               .gemm_chunks = 1, .dot_gemv = kiln_vec_dot_mxfp4_gemv},
        .direct_tokens = INT32_MAX,
        .isa = QUANT_ISA(kiln_kdirect_mxfp4, kiln_kdirect_mxfp4_gemv, NULL, NULL, NULL, NULL, NULL, NULL),
    },

    /* ---- Q1_0 / Q2_0 against Q8_0: a weight block spans 4 / 2 Q8_0
     * blocks (act_bytes); not repacked, no llamafile path: vec_dot for
     * every product, the direct kernels from AVX2 up (vecdot_q12.c) ---- */
    [KILN_Q1_0] = {
        .ggml_order = "ggml_vec_dot_q1_0_q8_0 (AVX2: 8 lanes of 4-weight signed sums per Q8_0 block, "
                      "mul then fmaf over the 4, fmaf by d per weight block, hsum_float_8)",
        .qt = {.type = KILN_Q1_0, .act_type = KILN_Q8_0, .block = 128, .block_bytes = sizeof(kiln_block_q1_0),
               .act_bytes = 4 * sizeof(kiln_block_q8_0), .dot = kiln_vec_dot_q1_0,
               .comb = KILN_COMB_LANES8 /* never read: no panels */},
        .direct_tokens = INT32_MAX,
        .isa = DIRECT_ISA(kiln_kdirect_q1_0_avx2, kiln_kdirect_q1_0_avx512),
    },
    [KILN_Q2_0] = {
        .ggml_order = "ggml_vec_dot_q2_0_q8_0 (x86 takes the generic C: per weight block sumi += dy * sum "
                      "for its 2 Q8_0 blocks, sumf += d * sumi, no fma)",
        .qt = {.type = KILN_Q2_0, .act_type = KILN_Q8_0, .block = 64, .block_bytes = sizeof(kiln_block_q2_0),
               .act_bytes = 2 * sizeof(kiln_block_q8_0), .dot = kiln_vec_dot_q2_0,
               .comb = KILN_COMB_DOT /* never read: no panels */},
        .direct_tokens = INT32_MAX,
        .isa = DIRECT_ISA(kiln_kdirect_q2_0_avx2, kiln_kdirect_q2_0_avx512),
    },
};

const kiln_kernels *kiln_kernels_get(uint32_t type) {
    return type < KILN_TYPE_COUNT && KERNELS[type].ggml_order ? &KERNELS[type] : NULL;
}

kiln_qrows_fn kiln_rows_kernel(const kiln_kernels *k, kiln_korder order, int64_t n_in) {
    /* one thread, out of cache, ns per super-block, one-row -> four-row
     * kernel: n_in 2048 Q4_K 8.6 -> 6.4, Q6_K 9.4 -> 8.3; n_in 3072 Q6_K
     * 12.3 -> 12.8; n_in 8192 Q6_K 8.5 -> 12.6: longer rows keep the
     * one-row kernels, unless the type's row says otherwise (Q3_K) */
    const int64_t span = k->rows_span ? k->rows_span : KILN_ROWS_SPAN;
    const int64_t row_bytes = n_in / k->qt.block * k->qt.block_bytes;
    return KILN_QROWS * row_bytes <= span ? k->isa[kiln_isa_now()].rows[order] : NULL;
}

kiln_korder kiln_expert_order(const kiln_kernels *k, int64_t n_out) {
    return kiln_qtype_repacked(&k->qt, n_out) ? KILN_KORDER_GEMV : KILN_KORDER_VECDOT;
}

bool kiln_takes_direct(const kiln_kernels *k, kiln_korder order, int64_t n_tokens) {
    const kiln_isa_kernels *ik = &k->isa[kiln_isa_now()];
    return ik->direct[order] && (n_tokens <= k->direct_tokens || !ik->panel[order]);
}

const kiln_qtype *kiln_qtype_get(uint32_t type) {
    const kiln_kernels *k = kiln_kernels_get(type);
    return k && k->qt.block ? &k->qt : NULL;
}
