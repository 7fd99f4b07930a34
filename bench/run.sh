#!/bin/sh
# bench/run.sh BUILD - `make bench`: runs every benchmark and prints its
# figures, with ratios against llama.cpp's numbers from
# ../shared/golden/README.md (quoted in each benchmark) or against the
# physical limit (cp, memory bandwidth). Benchmarks never run in `make test`.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 2
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export KILN="$BUILD/kiln" KILN_BUILD="$BUILD"
export KILN_SHARED=${KILN_SHARED:-../shared}
status=0
for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] || continue
    case "$b" in *.d) continue ;; esac
    # A benchmark with a driver script is run by the script (below).
    [ -f "bench/$(basename "$b").sh" ] && continue
    echo "== $(basename "$b")"
    "$b" || status=1
done
for b in bench/bench_*.sh; do
    [ -f "$b" ] || continue
    echo "== $(basename "$b" .sh)"
    sh "$b" || status=1
done
exit $status
