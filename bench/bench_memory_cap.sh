#!/bin/sh
# bench/bench_memory_cap.sh - `make bench`: a model larger than memory.
# The synthetic llama-1B in F16 (2.2 GB) is run through `kiln imatrix`
# inside a 1 GiB cgroup (v1 memory controller, as on these machines; needs
# root), where kiln finds the model too big for the room and goes layer by
# layer (runtime/layer_major.h). Printed: the uncapped run's time, the
# capped one's, their throughput ratio (target >= 0.5), whether the two
# imatrix files are byte-identical (they must be), the cgroup's peak
# usage, and what llama-imatrix does under the same cap (time, or how it
# failed; stopped after 20x kiln's capped time). The page cache is dropped
# before each capped run, so the model really comes from disk.
#
#   KILN_BENCH_CAP=SIZE      the cgroup limit (default 1G = 1 GiB)
#   KILN_BENCH_1B_CHUNKS=N   chunks of 512 (default 4; quick: skipped)
. "$(dirname "$0")/timed.sh"
CALIB="$SHARED/golden/text/calib.groups_merged.txt"
CAP=${KILN_BENCH_CAP:-1073741824}
CG_ROOT=/sys/fs/cgroup/memory
bench_1b_wanted || { echo "memory cap: skipped (KILN_BENCH_QUICK or KILN_BENCH_1B=0)"; exit 0; }
[ -w "$CG_ROOT" ] || { echo "memory cap: skipped (no writable cgroup v1 memory controller at $CG_ROOT)"; exit 0; }
[ -f "$CALIB" ] || { echo "memory cap: skipped ($CALIB missing)"; exit 0; }
bench_tmpdir memcap
f16=$(bench_1b F16) || exit 1
CHUNKS=${KILN_BENCH_1B_CHUNKS:-4}

since() { awk -v t0="$1" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.3f", t1 - t0 }'; }

# capped OUT_TIME CMD...: runs CMD in a fresh cgroup of CAP bytes after
# dropping the page cache; writes "seconds peak_bytes" to OUT_TIME.
capped() {
    _out=$1
    shift
    _cg="$CG_ROOT/kiln-bench-$$"
    mkdir "$_cg" && echo "$CAP" > "$_cg/memory.limit_in_bytes" || return 1
    sync
    echo 1 > /proc/sys/vm/drop_caches
    _t0=$(date +%s.%N)
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$_cg" "$@"
    _rc=$?
    echo "$(since "$_t0") $(cat "$_cg/memory.max_usage_in_bytes")" > "$_out"
    rmdir "$_cg"
    return $_rc
}

args="-f $CALIB -c 512 --chunks $CHUNKS -t $THREADS --force"
echo "imatrix of the 1B F16 ($(du -h "$f16" | cut -f1)), -c 512 x $CHUNKS, -t $THREADS, in a $((CAP / 1048576)) MiB memory cgroup:"
t0=$(date +%s.%N)
"$KILN" imatrix "$f16" $args -q -o "$BENCH_TMP/free.gguf" || { echo "  kiln uncapped: failed"; exit 1; }
free_s=$(since "$t0")
capped "$BENCH_TMP/cap.t" "$KILN" imatrix "$f16" $args -o "$BENCH_TMP/cap.gguf" 2> "$BENCH_TMP/cap.log" ||
    { echo "  kiln capped: failed:"; tail -n 3 "$BENCH_TMP/cap.log" | sed 's/^/    /'; exit 1; }
read -r cap_s cap_peak < "$BENCH_TMP/cap.t"
same=no
cmp -s "$BENCH_TMP/free.gguf" "$BENCH_TMP/cap.gguf" && same=yes
awk -v f="$free_s" -v c="$cap_s" -v p="$cap_peak" -v same="$same" 'BEGIN {
    printf "  kiln uncapped %8.1f s; capped %8.1f s (peak %d MiB): throughput %.2fx uncapped (target >= 0.5); output identical: %s\n",
        f, c, p / 1048576, f / c, same }'
grep -q "going layer by layer" "$BENCH_TMP/cap.log" && echo "  (kiln chose the layer-major order by itself)"
status=0
[ "$same" = yes ] || status=1
if llama_has llama-imatrix; then
    limit=$(awk -v c="$cap_s" 'BEGIN { printf "%d", c * 20 + 60 }')
    capped "$BENCH_TMP/l.t" timeout "$limit" env LD_PRELOAD="$LLAMA_BIN/noamx.so" "$LLAMA_BIN/llama-imatrix" \
        -m "$f16" $(echo "$args" | sed 's/ --force//') -o "$BENCH_TMP/l.gguf" > "$BENCH_TMP/l.log" 2>&1
    lrc=$?
    read -r l_s l_peak < "$BENCH_TMP/l.t"
    case $lrc in
    0) awk -v s="$l_s" -v p="$l_peak" -v c="$cap_s" 'BEGIN {
           printf "  llama-imatrix capped %8.1f s (peak %d MiB); ratio llama.cpp s / kiln s %.2f\n", s, p / 1048576, s / c }' ;;
    124) echo "  llama-imatrix capped: stopped after ${limit} s (20x kiln's time), unfinished" ;;
    *) echo "  llama-imatrix capped: exit $lrc after ${l_s} s: $(tail -n 1 "$BENCH_TMP/l.log")" ;;
    esac
else
    llama_note
fi
exit $status
