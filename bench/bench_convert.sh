#!/bin/sh
# bench/bench_convert.sh - `make bench`: kiln convert throughput against a
# plain cp of the same safetensors (the physical limit of reading and
# writing those bytes), and convert's peak RSS against the model size.
#
# Models: `kiln testmodel --size 1b` (1.1 B params) as bf16 and as f32
# safetensors, kept in /tmp/kiln-bench-convert for the next run. Cases:
# bf16 -> bf16 (--outtype bf16) and f32 -> f16. Inputs are read once
# first, so both sides read from the page cache; kiln's output is fsynced
# before its rename, so cp is reported plain and as cp + sync. Target:
# >= 0.9x cp + sync (issue 16). Each figure is the best of REPS runs. The ratio is to
# cp, the physical limit, so LLAMA_CPP plays no part: llama.cpp's Python
# converter (convert_hf_to_gguf.py, which needs torch and transformers)
# is not run.
#
#   KILN_BENCH_CONVERT_REPS (default KILN_BENCH_REPS: 3; quick mode 1)
#   KILN_BENCH_QUICK=1 skips this benchmark (the models are 2.2 and 4.4
#   GB) unless KILN_BENCH_1B=1; KILN_BENCH_1B=0 skips it too.
. "$(dirname "$0")/timed.sh"
REPS=${KILN_BENCH_CONVERT_REPS:-$BENCH_REPS}
bench_1b_wanted || { echo "convert: skipped (1B models: KILN_BENCH_QUICK or KILN_BENCH_1B=0)"; exit 0; }
M=/tmp/kiln-bench-convert
mkdir -p "$M" || exit 1
for dt in bf16 f32; do
    [ -f "$M/$dt/config.json" ] && continue
    echo "  making the 1B $dt model in $M/$dt (one time)"
    "$KILN" testmodel --arch llama --size 1b --dtype "$dt" -o "$M/$dt" > "$M/make-$dt.log" 2>&1 || { echo "convert: skipped (testmodel failed, see $M/make-$dt.log)"; exit 0; }
done
bench_tmpdir convert
D=$BENCH_TMP

# cp of every shard of model dir $1 into dir $2
COPY='for f in "$1"/*.safetensors; do cp "$f" "$2/cp.$(basename "$f")"; done'

# run_case SRC_DTYPE OUTTYPE
run_case() {
    what="$1 -> $2" outtype=$2 src="$M/$1"
    in=$(cat "$src"/*.safetensors | wc -c) # also brings them into the page cache
    best_k=1e9 best_c=1e9 best_cs=1e9 rss=0 i=0
    while [ $i -lt "$REPS" ]; do
        i=$((i + 1))
        rm -f "$D/out.gguf" "$D"/cp.* ; sync
        r=$(timed "$KILN" convert "$src" --outtype "$outtype" -o "$D/out.gguf" -q) || return 1
        k=${r% *}; [ "${r#* }" -gt "$rss" ] && rss=${r#* }
        sync
        r=$(timed sh -c "$COPY" sh "$src" "$D") || return 1
        c=${r% *}
        rm -f "$D"/cp.*; sync
        r=$(timed sh -c "$COPY; sync" sh "$src" "$D") || return 1
        cs=${r% *}
        best_k=$(least "$best_k" "$k")
        best_c=$(least "$best_c" "$c")
        best_cs=$(least "$best_cs" "$cs")
    done
    awk -v n="$in" -v k="$best_k" -v c="$best_c" -v cs="$best_cs" -v rss="$rss" -v what="$what" 'BEGIN {
        mb = n / 1e6
        printf "convert %-12s %5.0f MB in: %6.0f MB/s, cp %6.0f MB/s, ratio %.2f; cp + sync %6.0f MB/s, ratio %.2f (target >= 0.9); peak RSS %.0f MiB\n",
               what, mb, mb / k, mb / c, c / k, mb / cs, cs / k, rss / 1024
    }'
}
run_case bf16 bf16 || exit 1
run_case f32 f16 || exit 1
