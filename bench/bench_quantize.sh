#!/bin/sh
# bench/bench_quantize.sh - `make bench`: whole-model `kiln quantize`
# against llama.cpp's llama-quantize on the same input, same preset, same
# imatrix file and the same thread count, in turns (see bench/timed.sh).
#
# Inputs: each fixture's f32 GGUF (../shared/golden/gguf/*-f32.gguf, with
# ../shared/golden/imatrix/NAME.imatrix.gguf for Q2_K and IQ2_XXS) and the
# synthetic llama-1B in F16 (`kiln testmodel --size 1b` + `kiln convert`,
# imatrix from `kiln imatrix` on calib.groups_merged.txt; both kept in
# /tmp/kiln-bench-1b). Every llama-quantize preset kiln has (issue 14's
# ratio per type); those that use an importance matrix get the same file on
# both sides. Figures are process wall times, best of KILN_BENCH_REPS
# rounds (the 1B model: one round per preset, KILN_BENCH_1B_REPS); kiln's
# include the fsync of its output (llama-quantize does not sync).
#
# Before that, bench_quantize (the C program) prints kiln's per-type
# throughput on one 11008 x 4096 tensor; llama.cpp's build has no tool that
# times one tensor, so that table has no ratio. Skipped in quick mode.
#
#   LLAMA_CPP=DIR          llama.cpp folder: side-by-side ratios
#   KILN_BENCH_QUICK=1     one round, no per-type table, no 1B model
#   KILN_BENCH_1B=0|1      leave out / force the 1B model
#   KILN_BENCH_REPS=N      rounds per case (default 3; quick 1)
#   KILN_BENCH_THREADS=N   threads for both tools (default 2)
#   KILN_BENCH_PRESETS="..."  presets measured (default: all of them; quick:
#                          "Q8_0 Q4_K_M Q2_K IQ2_XXS")
#   KILN_BENCH_1B_REPS=N   rounds per preset on the 1B model (default 1)
. "$(dirname "$0")/timed.sh"
bench_tmpdir quantize
if ! bench_quick; then
    "$BUILD/bench/bench_quantize" || exit 1
    echo
fi
ALL="Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S Q3_K_L Q3_K_M Q3_K_S Q2_K Q2_K_S Q5_1 Q5_0 Q4_1 Q4_0 \
IQ4_XS IQ4_NL IQ3_M IQ3_S IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 TQ1_0 Q2_0 Q1_0 MXFP4_MOE"
if bench_quick; then PRESETS=${KILN_BENCH_PRESETS:-Q8_0 Q4_K_M Q2_K IQ2_XXS}; else PRESETS=${KILN_BENCH_PRESETS:-$ALL}; fi
status=0

# one_model LABEL IN IMATRIX
one_model() {
    for p in $PRESETS; do
        im=
        case $p in Q2_K* | IQ*) im=$3 ;; esac
        kim=${im:+--imatrix $im}
        versus "$1 -> $p" 0 "" "'$KILN' quantize -q -f -t $THREADS $kim '$2' '$BENCH_TMP/k.gguf' $p" \
            llama-quantize ${im:+--imatrix "$im"} "$2" "$BENCH_TMP/l.gguf" "$p" "$THREADS" || status=1
        rm -f "$BENCH_TMP/k.gguf" "$BENCH_TMP/l.gguf"
    done
}

echo "whole-model quantize, -t $THREADS, wall time, best of $BENCH_REPS (ratio = llama.cpp s / kiln s):"
for name in llama mixtral qwen2; do
    in="$SHARED/golden/gguf/$name-f32.gguf"
    [ -f "$in" ] || { echo "  $name: skipped ($in missing)"; continue; }
    one_model "$name-f32" "$in" "$SHARED/golden/imatrix/$name.imatrix.gguf"
done
if bench_1b_wanted; then
    if f16=$(bench_1b F16) && im=$(bench_1b_imatrix); then
        _reps=$BENCH_REPS
        BENCH_REPS=${KILN_BENCH_1B_REPS:-1}
        one_model "1B F16" "$f16" "$im"
        BENCH_REPS=$_reps
    fi
else
    echo "  1B model: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"
fi
llama_note
exit $status
