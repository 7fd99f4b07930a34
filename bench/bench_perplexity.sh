#!/bin/sh
# bench/bench_perplexity.sh - `make bench`: `kiln perplexity` against
# llama.cpp's llama-perplexity on the same model, text and settings, in
# turns (see bench/timed.sh); also prints both final PPLs, which should
# agree. Figures are process wall times (loading and tokenizing included
# on both sides), best of KILN_BENCH_REPS rounds, and scored-chunk tokens/s
# over that time.
#
# Cases: each fixture's F32 GGUF on the whole ../shared/golden/text/ppl.txt
# with -c 128 -b 128 (the golden runs' settings; in quick mode only the
# first KILN_BENCH_FIX_CHUNKS chunks, default 16); the synthetic llama-1B in
# F16 and Q4_K_M (/tmp/kiln-bench-1b, made once by kiln) with -c 512 and
# the first KILN_BENCH_1B_CHUNKS chunks.
#
#   LLAMA_CPP=DIR            llama.cpp folder: side-by-side ratios
#   KILN_BENCH_QUICK=1       one round, no 1B model
#   KILN_BENCH_1B=0|1        leave out / force the 1B model
#   KILN_BENCH_1B_CHUNKS=N   chunks of 512 on the 1B model (default 4; quick 1)
#   KILN_BENCH_FIX_CHUNKS=N  chunks of 128 on the fixtures (default all; quick 16)
#   KILN_BENCH_REPS=N        rounds per case (default 3; quick 1)
#   KILN_BENCH_THREADS=N     threads for both tools (default 2)
. "$(dirname "$0")/timed.sh"
TEXT="$SHARED/golden/text/ppl.txt"
[ -f "$TEXT" ] || { echo "perplexity: skipped ($TEXT missing)"; exit 0; }
bench_tmpdir perplexity
if bench_quick; then
    CHUNKS_1B=${KILN_BENCH_1B_CHUNKS:-1} FIX_CHUNKS=${KILN_BENCH_FIX_CHUNKS:-16}
else
    CHUNKS_1B=${KILN_BENCH_1B_CHUNKS:-4} FIX_CHUNKS=${KILN_BENCH_FIX_CHUNKS:-}
fi
status=0

# The final estimate's PPL in a log of either tool ("Final estimate: PPL = X +/- Y").
final_ppl() {
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1" | tail -n 1
}

# one_case LABEL MODEL CTX TOKENS [--chunks N]: TOKENS is the work figure
# (0 when unknown before the run)
one_case() {
    label=$1 m=$2 ctx=$3 work=$4
    shift 4
    versus "$label" "$work" tok "'$KILN' perplexity '$m' -f '$TEXT' -c $ctx -b $ctx -t $THREADS $*" \
        llama-perplexity -m "$m" -f "$TEXT" -c "$ctx" -b "$ctx" -t "$THREADS" "$@" || { status=1; return; }
    kp=$(final_ppl "$BENCH_TMP/kiln.log")
    if llama_has llama-perplexity; then
        # llama.cpp logs from a thread; a process that exits early can
        # lose the last lines
        lp=$(final_ppl "$BENCH_TMP/llama.log")
        echo "    PPL kiln $kp, llama.cpp ${lp:-? (its final line was lost from its log)}"
    else
        echo "    PPL kiln $kp"
    fi
}

echo "perplexity, -t $THREADS, process wall time, best of $BENCH_REPS (ratio = llama.cpp s / kiln s):"
for name in llama mixtral qwen2; do
    m="$SHARED/golden/gguf/$name-f32.gguf"
    [ -f "$m" ] || { echo "  $name: skipped ($m missing)"; continue; }
    if [ -n "$FIX_CHUNKS" ]; then
        one_case "$name-f32 -c 128 x $FIX_CHUNKS" "$m" 128 $((128 * FIX_CHUNKS)) --chunks "$FIX_CHUNKS"
    else
        one_case "$name-f32 -c 128" "$m" 128 0
    fi
done
if bench_1b_wanted; then
    for t in F16 Q4_K_M; do
        m=$(bench_1b $t) && one_case "1B $t -c 512 x $CHUNKS_1B" "$m" 512 $((512 * CHUNKS_1B)) --chunks "$CHUNKS_1B"
    done
else
    echo "  1B model: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"
fi
llama_note
exit $status
