#!/bin/sh
# bench/run.sh BUILD - `make bench`: runs every benchmark, bench/bench_*.sh
# scripts and the bench/bench_*.c programs that have no script of their
# own (a program with a script is driven by it).
#
# With LLAMA_CPP=DIR (a llama.cpp folder with build/bin, as
# ../shared/factory/build_llama_cpp.sh makes it) each benchmark with a
# llama.cpp counterpart runs llama.cpp's tool on the same input, with the
# same thread count, in the same run, in turns with kiln's (kiln, llama.cpp,
# kiln, ...), and prints both figures and the ratio llama.cpp time / kiln
# time (> 1: kiln is faster); llama.cpp's tools run with
# DIR/build/bin/noamx.so preloaded (bench/timed.sh llama_run). Without
# LLAMA_CPP, kiln's figures alone and a line saying the ratio needs it. No
# figure measured elsewhere enters a ratio; convert and splice compare with
# cp (the physical limit), inspect and the per-type quantize table have no
# llama.cpp counterpart.
#
# Knobs (environment, read by bench/timed.sh and every script):
#   LLAMA_CPP=DIR          llama.cpp folder: side-by-side ratios
#   KILN_BENCH_QUICK=1     smoke run: one round, small inputs, no 1B model
#   KILN_BENCH_1B=0|1      leave out / force the synthetic llama-1B cases
#                          (made once in KILN_BENCH_1B_DIR, default
#                          /tmp/kiln-bench-1b: about 5 GB with its quants)
#   KILN_BENCH_REPS=N      rounds per case (default 3; quick 1)
#   KILN_BENCH_DS2_FULL=1  also convert a full-shape DeepSeek-V3 FP8 checkpoint
#                          (bench/bench_deepseek_convert.sh: ~43 GB of disk,
#                          deleted afterwards; off by default)
#   KILN_BENCH_THREADS=N   threads for kiln and llama.cpp alike (default 2)
#   KILN_BENCH_1B_CHUNKS=N, KILN_BENCH_RUNTIME_R=N, ... per script: see the
#                          header of each bench/bench_*.sh
# e.g. `LLAMA_CPP=/root/llama.cpp make bench`,
#      `KILN_BENCH_QUICK=1 LLAMA_CPP=/root/llama.cpp make bench`.
# Benchmarks never run in `make test`.
BUILD=${1:-build}
case "${LLAMA_CPP:-}" in "" | /*) ;; *) LLAMA_CPP="$PWD/$LLAMA_CPP" ;; esac
cd "$(dirname "$0")/.." || exit 2
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export KILN="$BUILD/kiln" KILN_BUILD="$BUILD"
export KILN_SHARED=${KILN_SHARED:-../shared}
[ -n "${LLAMA_CPP:-}" ] && export LLAMA_CPP
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
