#!/bin/sh
# bench/bench_runtime.sh - `make bench`: kiln's prompt processing (pp512)
# and decode (tg32) speed against llama.cpp's llama-bench on the same GGUF
# and thread count, in turns: bench_runtime (the C program, measuring as
# llama-bench does: a warm-up, then the mean of KILN_BENCH_RUNTIME_R runs),
# then `llama-bench -p 512 -n 32 -r R`, KILN_BENCH_REPS rounds; each side's
# best round is printed. Ratio = llama.cpp time / kiln time (kiln t/s /
# llama.cpp t/s; > 1 means kiln is faster).
#
# Models: each fixture's f32 and Q4_K_M GGUF (../shared/golden/gguf), and
# the synthetic llama-1B in F16, Q8_0 and Q4_K_M (`kiln testmodel --size
# 1b`, kiln convert, kiln quantize; /tmp/kiln-bench-1b, made once) and in
# Q2_K and IQ2_XXS (kiln quantize --imatrix with bench_1b_imatrix's file,
# as llama-quantize wants one for IQ2_XXS; made once there too).
#
# Decoding a model that does not fit in cache streams its weights from
# memory, so for the 1B model each round also measures the memory's
# ceiling (`bench_runtime -s read`: a plain read of the bytes one token
# reads, by the same threads) and a second line gives each tool's tg32 in
# GB/s and as a share of that ceiling: the best rounds, since the
# bandwidth of a VM moves from one minute to the next.
#
#   LLAMA_CPP=DIR            llama.cpp folder: side-by-side ratios
#   KILN_BENCH_QUICK=1       one round of R=1, no 1B model
#   KILN_BENCH_1B=0|1        leave out / force the 1B model
#   KILN_BENCH_REPS=N        rounds per model (default 3; quick 1)
#   KILN_BENCH_RUNTIME_R=N   runs per round, as llama-bench -r (default 3 for
#                            the 1B model, 20 for the fixtures, whose runs
#                            last milliseconds; quick 1)
#   KILN_BENCH_THREADS=N     threads for both tools (default 2)
. "$(dirname "$0")/timed.sh"
BENCH="$BUILD/bench/bench_runtime"
[ -x "$BENCH" ] || { echo "runtime: skipped ($BENCH missing)"; exit 0; }
if bench_quick; then R=${KILN_BENCH_RUNTIME_R:-1}; R_SMALL=$R; else R=${KILN_BENCH_RUNTIME_R:-3}; R_SMALL=${KILN_BENCH_RUNTIME_R:-20}; fi
bench_tmpdir runtime
HAVE_LLAMA=
llama_has llama-bench && HAVE_LLAMA=1
[ -n "$LLAMA_CPP" ] && [ -z "$HAVE_LLAMA" ] && echo "  (LLAMA_CPP=$LLAMA_CPP has no build/bin/llama-bench)"
status=0

# pp512 and tg32 t/s of one llama-bench CSV (columns found by name).
llama_pp_tg() {
    awk -F, '{ gsub(/"/, "") } # no field of interest holds a comma
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["n_prompt"] > 0 { pp = $col["avg_ts"] }
        $col["n_gen"] > 0 { tg = $col["avg_ts"] }
        END { if (pp == "" || tg == "") exit 1; print pp, tg }' "$1"
}

# The 1B model quantized to TYPE with the 1B imatrix: its path, made once.
bench_1b_imatrix_quant() {
    _q="$BENCH_1B_DIR/synth-1b-$1-imat.gguf"
    if [ ! -f "$_q" ]; then
        _f16=$(bench_1b F16) && _im=$(bench_1b_imatrix) || return 1
        "$KILN" quantize -q -f -t "$THREADS" --imatrix "$_im" "$_f16" "$_q" "$1" >> "$BENCH_1B_DIR/make.log" 2>&1 ||
            { echo "  1B $1: kiln quantize failed (see $BENCH_1B_DIR/make.log)" >&2; return 1; }
    fi
    echo "$_q"
}

# one_model LABEL PATH [RUNS]
# one_model LABEL GGUF [RUNS] [read]: "read" adds the memory-ceiling line
one_model() {
    runs=${3:-$R}
    best_kp=0 best_kt=0 best_lp=0 best_lt=0 best_rd=0 bytes=0 i=0
    while [ $i -lt "$BENCH_REPS" ]; do
        i=$((i + 1))
        if [ "$4" = read ]; then
            rd=$("$BENCH" -t "$THREADS" -r 3 -s read "$2" 2> "$BENCH_TMP/kiln.log") ||
                { echo "  $1: bench_runtime -s read failed: $(tail -n 1 "$BENCH_TMP/kiln.log")"; status=1; return; }
            best_rd=$(echo "$rd" | awk -v a="$best_rd" '{ print ($2 > a) ? $2 : a }')
            bytes=$(echo "$rd" | awk '{ print $3 }')
        fi
        kr=$("$BENCH" -t "$THREADS" -r "$runs" "$2" 2> "$BENCH_TMP/kiln.log") ||
            { echo "  $1: bench_runtime failed: $(tail -n 1 "$BENCH_TMP/kiln.log")"; status=1; return; }
        # kr: "pp512 MEAN SD tg32 MEAN SD"
        best_kp=$(echo "$kr" | awk -v a="$best_kp" '{ print ($2 > a) ? $2 : a }')
        best_kt=$(echo "$kr" | awk -v a="$best_kt" '{ print ($5 > a) ? $5 : a }')
        [ -n "$HAVE_LLAMA" ] || continue
        llama_run llama-bench -m "$2" -p 512 -n 32 -t "$THREADS" -r "$runs" -o csv > "$BENCH_TMP/llama.csv" 2> "$BENCH_TMP/llama.log" &&
            lpt=$(llama_pp_tg "$BENCH_TMP/llama.csv") ||
            { echo "  $1: llama-bench failed: $(tail -n 1 "$BENCH_TMP/llama.log")"; status=1; return; }
        best_lp=$(awk -v a="$best_lp" -v b="${lpt% *}" 'BEGIN { print (b > a) ? b : a }')
        best_lt=$(awk -v a="$best_lt" -v b="${lpt#* }" 'BEGIN { print (b > a) ? b : a }')
    done
    awk -v label="$1" -v kp="$best_kp" -v kt="$best_kt" -v lp="$best_lp" -v lt="$best_lt" -v have="$HAVE_LLAMA" 'BEGIN {
        printf "  %-16s pp512 kiln %8.2f t/s", label, kp
        if (have) printf ", llama.cpp %8.2f, ratio %5.2f", lp, kp / lp
        printf "   tg32 kiln %7.2f t/s", kt
        if (have) printf ", llama.cpp %7.2f, ratio %5.2f", lt, kt / lt
        printf "\n"
    }'
    [ "$4" = read ] || return 0
    awk -v kt="$best_kt" -v lt="$best_lt" -v rd="$best_rd" -v b="$bytes" -v have="$HAVE_LLAMA" 'BEGIN {
        printf "  %-16s tg32 reads %.0f MB a token; memory ceiling %.1f GB/s; kiln %.1f GB/s (%.0f %%)", "", b / 1e6, rd, kt * b / 1e9, 100 * kt * b / 1e9 / rd
        if (have) printf ", llama.cpp %.1f GB/s (%.0f %%)", lt * b / 1e9, 100 * lt * b / 1e9 / rd
        printf "\n"
    }'
}

echo "pp512 / tg32, -t $THREADS, best of $BENCH_REPS rounds of $R_SMALL runs (fixtures) or $R (1B) (ratio = kiln t/s / llama.cpp t/s):"
for name in llama mixtral qwen2; do
    for t in f32 Q4_K_M; do
        m="$SHARED/golden/gguf/$name-$t.gguf"
        [ -f "$m" ] && one_model "$name-$t" "$m" "$R_SMALL"
    done
done
if bench_1b_wanted; then
    for t in F16 Q8_0 Q4_K_M; do
        m=$(bench_1b $t) && one_model "1B $t" "$m" "$R" read
    done
    for t in Q2_K IQ2_XXS; do
        m=$(bench_1b_imatrix_quant $t) && one_model "1B $t" "$m" "$R" read
    done
else
    echo "  1B model: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"
fi
llama_note
exit $status
