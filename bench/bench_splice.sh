#!/bin/sh
# bench/bench_splice.sh - `make bench`: kiln splice throughput against cp
# of a file of the output's size, and splice's peak RSS.
#
# The model is llama.cpp's Mixtral fixture grown by bench_splice (a
# generator linking libkiln.a): LAYERS blocks of EXPERTS experts with
# expert matrices ROWS times taller, as IQ2_XXS (base) and Q4_K_M (donor);
# the splice is the per-layer boosted quant (experts of the first and last
# layer from the donor). Inputs are read once first, so every run reads
# from the page cache: the figures compare the copy work, not the disk.
#
# Both sides are timed with their durability cost: kiln's core writer
# fsyncs its output before renaming it into place, so cp is reported
# plain and as cp + sync FILE. The ratio the target (>= 0.8) applies to is
# against plain cp; each figure is the best of REPS runs, taken in turns.
#
#   KILN_BENCH_SPLICE="LAYERS EXPERTS ROWS REPS" (default "16 64 10 5":
#   a 520 MB base, a 1.2 GB donor, a 610 MB output; KILN_BENCH_QUICK=1:
#   "4 16 4 1"). llama.cpp has no splice tool: the ratio is to cp.
. "$(dirname "$0")/timed.sh"
GEN=$BUILD/bench/bench_splice
shared=$SHARED
if bench_quick; then set -- ${KILN_BENCH_SPLICE:-4 16 4 1}; else set -- ${KILN_BENCH_SPLICE:-16 64 10 5}; fi
LAYERS=$1 EXPERTS=$2 ROWS=$3 REPS=$4
fix="$shared/golden/gguf"
if [ ! -f "$fix/mixtral-IQ2_XXS.gguf" ] || [ ! -x "$GEN" ] || [ ! -x "$KILN" ]; then
    echo "splice: skipped (needs $fix/mixtral-*.gguf, $GEN and $KILN)"
    exit 0
fi
bench_tmpdir splice
D=$BENCH_TMP

"$GEN" gen "$fix/mixtral-IQ2_XXS.gguf" "$D/base.gguf" "$LAYERS" "$EXPERTS" "$ROWS" &&
"$GEN" gen "$fix/mixtral-Q4_K_M.gguf" "$D/donor.gguf" "$LAYERS" "$EXPERTS" "$ROWS" || exit 1
cat "$D/base.gguf" "$D/donor.gguf" > /dev/null
last=$((LAYERS - 1))

best_s=1e9 best_c=1e9 best_cs=1e9 rss=0
i=0
while [ $i -lt "$REPS" ]; do
    i=$((i + 1))
    rm -f "$D/out.gguf" "$D/cp.gguf" "$D/cps.gguf"
    sync
    r=$(timed "$KILN" splice "$D/base.gguf" "$D/donor.gguf" --layers "0,$last" --experts -o "$D/out.gguf" -q) || exit 1
    set -- $r
    s=$1; [ "$2" -gt "$rss" ] && rss=$2
    sync
    r=$(timed cp "$D/out.gguf" "$D/cp.gguf") || exit 1
    c=${r% *}
    sync
    r=$(timed sh -c 'cp "$1" "$2" && sync "$2"' sh "$D/out.gguf" "$D/cps.gguf") || exit 1
    cs=${r% *}
    best_s=$(least "$best_s" "$s")
    best_c=$(least "$best_c" "$c")
    best_cs=$(least "$best_cs" "$cs")
done
size=$(wc -c < "$D/out.gguf")
awk -v n="$size" -v s="$best_s" -v c="$best_c" -v cs="$best_cs" -v rss="$rss" -v base="$(wc -c < "$D/base.gguf")" -v donor="$(wc -c < "$D/donor.gguf")" 'BEGIN {
    mb = n / 1e6
    printf "splice: %.0f MB/s, cp: %.0f MB/s, ratio %.2f, peak RSS %.1f MiB\n", mb / s, mb / c, c / s, rss / 1024
    printf "  (cp + sync: %.0f MB/s, ratio %.2f; output %.0f MB, base %.0f MB, donor %.0f MB; best of runs)\n", mb / cs, cs / s, mb, base / 1e6, donor / 1e6
}'
