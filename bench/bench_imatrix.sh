#!/bin/sh
# bench/bench_imatrix.sh - `make bench`: `kiln imatrix` against llama.cpp's
# llama-imatrix on the same model, the same calibration text and the same
# settings (running perplexity on, as both do by default), in turns (see
# bench/timed.sh). Figures are process wall times (model loading and
# tokenizing included on both sides), best of KILN_BENCH_REPS rounds, and
# tokens/s over that time.
#
# Cases: each fixture's f32 GGUF (../shared/golden/gguf/*-f32.gguf) with
# the golden run's settings (-c 128 --chunks 64; quick mode 16 chunks), and the synthetic
# llama-1B in F16 (/tmp/kiln-bench-1b, made once) with -c 512 --chunks
# KILN_BENCH_1B_CHUNKS; text ../shared/golden/text/calib.groups_merged.txt.
#
#   LLAMA_CPP=DIR            llama.cpp folder: side-by-side ratios
#   KILN_BENCH_QUICK=1       one round, no 1B model
#   KILN_BENCH_1B=0|1        leave out / force the 1B model
#   KILN_BENCH_1B_CHUNKS=N   chunks of 512 on the 1B model (default 4; quick 1)
#   KILN_BENCH_FIX_CHUNKS=N  chunks of 128 on the fixtures (default 64; quick 16)
#   KILN_BENCH_REPS=N        rounds per case (default 3; quick 1)
#   KILN_BENCH_THREADS=N     threads for both tools (default 2)
. "$(dirname "$0")/timed.sh"
CALIB="$SHARED/golden/text/calib.groups_merged.txt"
[ -f "$CALIB" ] || { echo "imatrix: skipped ($CALIB missing)"; exit 0; }
bench_tmpdir imatrix
if bench_quick; then
    CHUNKS_1B=${KILN_BENCH_1B_CHUNKS:-1} FIX_CHUNKS=${KILN_BENCH_FIX_CHUNKS:-16}
else
    CHUNKS_1B=${KILN_BENCH_1B_CHUNKS:-4} FIX_CHUNKS=${KILN_BENCH_FIX_CHUNKS:-64}
fi
status=0

# one_case LABEL MODEL CTX CHUNKS
one_case() {
    versus "$1" $(($3 * $4)) tok \
        "'$KILN' imatrix '$2' -f '$CALIB' -c $3 --chunks $4 -t $THREADS --force -o '$BENCH_TMP/k.imatrix.gguf'" \
        llama-imatrix -m "$2" -f "$CALIB" -c "$3" --chunks "$4" -t "$THREADS" -o "$BENCH_TMP/l.imatrix.gguf" || status=1
}

echo "imatrix, -t $THREADS, process wall time, best of $BENCH_REPS (ratio = llama.cpp s / kiln s):"
for name in llama mixtral qwen2; do
    m="$SHARED/golden/gguf/$name-f32.gguf"
    [ -f "$m" ] || { echo "  $name: skipped ($m missing)"; continue; }
    one_case "$name-f32 -c 128 x $FIX_CHUNKS" "$m" 128 "$FIX_CHUNKS"
done
if bench_1b_wanted; then
    f16=$(bench_1b F16) && one_case "1B F16 -c 512 x $CHUNKS_1B" "$f16" 512 "$CHUNKS_1B"
else
    echo "  1B model: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"
fi
llama_note
exit $status
