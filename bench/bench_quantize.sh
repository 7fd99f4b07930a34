#!/bin/sh
# bench/bench_quantize.sh - `make bench`: whole-model `kiln quantize`
# against llama.cpp's llama-quantize on the same input, same preset, same
# imatrix file and the same thread count, in turns (see bench/timed.sh).
#
# Inputs: each fixture's f32 GGUF (../shared/golden/gguf/*-f32.gguf, with
# ../shared/golden/imatrix/NAME.imatrix.gguf for Q2_K and IQ2_XXS) and the
# synthetic llama-1B in F16 (`kiln testmodel --size 1b` + `kiln convert`,
# imatrix from `kiln imatrix` on calib.groups_merged.txt; both kept in
# /tmp/kiln-bench-1b). Presets Q8_0, Q4_K_M, Q2_K, IQ2_XXS. Figures are
# process wall times, best of KILN_BENCH_REPS rounds; kiln's include the
# fsync of its output (llama-quantize does not sync).
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
#   KILN_BENCH_PRESETS="..."  presets measured (default "Q8_0 Q4_K_M Q2_K IQ2_XXS")
. "$(dirname "$0")/timed.sh"
bench_tmpdir quantize
if ! bench_quick; then
    "$BUILD/bench/bench_quantize" || exit 1
    echo
fi
PRESETS=${KILN_BENCH_PRESETS:-Q8_0 Q4_K_M Q2_K IQ2_XXS}
status=0

# one_model LABEL IN IMATRIX
one_model() {
    for p in $PRESETS; do
        im=
        case $p in Q2_K | IQ2_XXS) im=$3 ;; esac
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
        one_model "1B F16" "$f16" "$im"
    fi
else
    echo "  1B model: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"
fi
llama_note
exit $status
