#!/bin/sh
# bench/bench_budget.sh - `make bench`: issue 15's proof table. For the
# llama, mixtral and qwen2 fixtures, a fresh sensitivity scan of the f32
# model on text/calib.groups_merged.txt (`kiln quantize --analyze`, timed),
# then for Q2_K, IQ2_XXS, Q3_K_M and Q4_K_M: the preset file, and a
# `--target-bpw` file at the preset file's own bits per weight; both with
# the fixture's imatrix, both judged by `kiln perplexity --kl-divergence`
# against the f32 model on all of text/ppl.txt (-c 128), which the scan
# never sees. Prints model, preset, both sizes, both mean KLDs, the ratio
# (kiln / preset: the goal is <= 0.8 with kiln's file no larger) and both
# top-1 agreements. The procedure is tests/e2e/budget_proof.inc, which
# tests/e2e/budget.sh runs as a gate on fewer chunks.
#
# With LLAMA_CPP=DIR, llama.cpp's llama-perplexity also loads every budget
# file (4 chunks) and the table says whether it did.
#
#   KILN_BENCH_QUICK=1        llama only, Q2_K and Q4_K_M, 32 KLD chunks
#   KILN_BENCH_BUDGET_CHUNKS=N  KLD chunks of 128 tokens (default: all, 146)
. "$(dirname "$0")/timed.sh"
. "$(dirname "$0")/../tests/e2e/budget_proof.inc"
bench_tmpdir budget
G="$SHARED/golden"
[ -f "$G/gguf/llama-f32.gguf" ] || { echo "  skipped: $G/gguf missing"; exit 0; }
if bench_quick; then
    MODELS="llama" BUDGET_PRESETS="Q2_K Q4_K_M" CHUNKS=${KILN_BENCH_BUDGET_CHUNKS:-32}
else
    MODELS="llama mixtral qwen2" CHUNKS=${KILN_BENCH_BUDGET_CHUNKS:-1000}
fi
status=0
echo "size budget vs llama.cpp presets: mean KLD vs f32 on text/ppl.txt (-c 128, up to $CHUNKS chunks)"
echo "  scan: $BUDGET_SCAN_ARGS on calib.groups_merged.txt, with the fixture's imatrix"
budget_header | sed 's/^/  /'
for fx in $MODELS; do
    t0=$(date +%s.%N)
    budget_scan "$KILN" "$G" "$fx" "$BENCH_TMP/$fx.sens" > "$BENCH_TMP/scan.log" 2>&1
    scan_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ ! -s "$BENCH_TMP/$fx.sens" ]; then
        _fail_log "$fx" "the sensitivity scan" "$BENCH_TMP/scan.log"
        status=1
        continue
    fi
    budget_base "$KILN" "$G" "$fx" "$BENCH_TMP/$fx.kld" "$CHUNKS" || { echo "  $fx: KLD base failed"; status=1; continue; }
    for p in $BUDGET_PRESETS; do
        if ! budget_compare "$KILN" "$G" "$fx" "$p" "$BENCH_TMP/$fx.sens" "$BENCH_TMP/$fx.kld" "$BENCH_TMP"; then
            echo "  $fx $p: $BP_ERR"
            status=1
            continue
        fi
        verdict=ok
        [ "$BP_KSIZE" -le "$BP_PSIZE" ] && awk -v r="$BP_RATIO" 'BEGIN { exit !(r <= 0.8) }' || verdict=MISSED
        loads=
        if llama_has llama-perplexity; then
            # judged by the exit status: llama.cpp logs from a thread of its
            # own, and on a busy machine its last lines ("Final estimate")
            # are sometimes lost at exit although the run succeeded
            if llama_run llama-perplexity -m "$BENCH_TMP/$fx-$p-budget.gguf" -f "$G/text/ppl.txt" -c 128 \
                --chunks 4 -t "$THREADS" > "$BENCH_TMP/lp.log" 2>&1
            then loads="  llama.cpp loads it"
            else loads="  llama.cpp FAILED to load it: $(tail -n 1 "$BENCH_TMP/lp.log")"; status=1
            fi
        fi
        echo "  $(budget_row "$fx" "$p")  $verdict$loads"
        [ "$verdict" = ok ] || status=1
        rm -f "$BENCH_TMP/$fx-$p.gguf" "$BENCH_TMP/$fx-$p-budget.gguf"
    done
    echo "  ($fx: sensitivity scan $scan_s s)"
    rm -f "$BENCH_TMP/$fx.kld"
done
exit $status
