#!/bin/sh
# fuzz/run.sh BUILD SECONDS NAME... - runs each libFuzzer harness
# BUILD/fuzz/fuzz_NAME for SECONDS from its seed corpus fuzz/corpus/NAME/
# (new inputs go to BUILD/fuzz/corpus/NAME/, the committed seeds are never
# written), one harness at a time, and prints per harness the executions,
# executions per second, coverage and what it found. Findings are saved in
# BUILD/fuzz/artifacts/NAME/ and the log in BUILD/fuzz/NAME.log. Exit
# status 1 when any harness found something.
BUILD=$1 SECONDS_EACH=$2; shift 2
cd "$(dirname "$0")/.." || exit 2
found=0
printf '%-12s %10s %8s %6s %7s  %s\n' harness execs exec/s cov ft result
for name in "$@"; do
    bin=$BUILD/fuzz/fuzz_$name work=$BUILD/fuzz/corpus/$name art=$BUILD/fuzz/artifacts/$name
    log=$BUILD/fuzz/$name.log
    mkdir -p "$work" "$art"
    "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" "$work" "fuzz/corpus/$name" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    arts=$(ls "$art" 2>/dev/null | wc -l)
    if [ "$rc" -ne 0 ] || [ "$arts" -gt 0 ]; then
        found=1
        what=$(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|runtime error: .*\|ERROR: libFuzzer: [a-z-]*' "$log")
        result="FOUND ($arts input(s) in $art): ${what:-exit $rc}"
    else
        result="nothing found"
    fi
    printf '%-12s %10s %8s %6s %7s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
[ "$found" -eq 0 ]
