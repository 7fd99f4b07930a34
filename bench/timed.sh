# bench/timed.sh - sourced by the benchmark scripts: the timing and the
# side-by-side helpers every script shares, so none keeps its own copy.
#
#   timed CMD...       runs CMD once and prints "SECONDS MAXRSS_KIB" (wall
#                      time from date's nanoseconds, peak RSS of the child
#                      and what it waited for, from GNU time, Debian package
#                      `time`); it fails when CMD fails. With
#                      TIMED_LOG=FILE, CMD's output goes to FILE.
#   least A B          the smaller number.
#   llama_has TOOL     true when LLAMA_CPP=DIR holds DIR/build/bin/TOOL.
#   llama_run [timed] TOOL ARGS...
#                      runs (times) llama.cpp's TOOL with
#                      DIR/build/bin/noamx.so preloaded when present
#                      (../shared/factory/README.md "AMX": AMX faults on
#                      these VMs; without the shim the quantized paths die); output left to the caller.
#                      The one place that knows how to start llama.cpp.
#   bench_tmpdir NAME  makes $BENCH_TMP (removed at exit).
#   bench_quick        true under KILN_BENCH_QUICK=1.
#   bench_1b_wanted    true when the 1B model is to be measured: not in
#                      quick mode unless KILN_BENCH_1B=1; never with
#                      KILN_BENCH_1B=0.
#   versus LABEL WORK UNIT KILN_CMD [LLAMA_TOOL LLAMA_ARGS]
#                      runs the shell command KILN_CMD and llama.cpp's
#                      `LLAMA_TOOL LLAMA_ARGS` in turns (kiln, llama.cpp,
#                      kiln, ...) $BENCH_REPS times, and prints both best
#                      wall times, WORK/time in UNIT/s when WORK > 0 and the
#                      ratio llama.cpp time / kiln time (> 1: kiln faster).
#                      Without LLAMA_CPP (or LLAMA_TOOL empty) kiln alone.
#                      The last outputs stay in $BENCH_TMP/kiln.log and
#                      $BENCH_TMP/llama.log.
#   llama_note         the closing line when LLAMA_CPP was not given.
#   bench_1b TYPE      path of the synthetic llama-1B (`kiln testmodel
#                      --size 1b`, kiln convert to F16, kiln quantize to
#                      TYPE), made once in $KILN_BENCH_1B_DIR (default
#                      /tmp/kiln-bench-1b) and kept; prints nothing and
#                      fails (having said why on stderr) when it cannot.
#   bench_1b_imatrix   an imatrix of the 1B F16 (kiln imatrix, -c 512, 2
#                      chunks of calib.groups_merged.txt), made once there.
#
# Knobs (environment): LLAMA_CPP, KILN_BENCH_QUICK, KILN_BENCH_1B,
# KILN_BENCH_REPS (rounds of each side, default 3, quick 1),
# KILN_BENCH_1B_DIR, KILN_BENCH_THREADS (default 2, both tools).
BUILD=${KILN_BUILD:-build}
KILN=${KILN:-$BUILD/kiln}
SHARED=${KILN_SHARED:-../shared}
THREADS=${KILN_BENCH_THREADS:-2}
LLAMA_BIN=${LLAMA_CPP:+$LLAMA_CPP/build/bin}
if [ -n "${KILN_BENCH_QUICK:-}" ] && [ "$KILN_BENCH_QUICK" != 0 ]; then
    BENCH_REPS=${KILN_BENCH_REPS:-1}
else
    BENCH_REPS=${KILN_BENCH_REPS:-3}
fi
BENCH_1B_DIR=${KILN_BENCH_1B_DIR:-/tmp/kiln-bench-1b}

timed() {
    _tf=$(mktemp) || return 1
    _t0=$(date +%s.%N)
    if [ -n "${TIMED_LOG:-}" ]; then
        /usr/bin/time -f %M -o "$_tf" "$@" > "$TIMED_LOG" 2>&1
    else
        /usr/bin/time -f %M -o "$_tf" "$@"
    fi
    _rc=$?
    _t1=$(date +%s.%N)
    # GNU time writes "Command exited with non-zero status N" first on failure
    _rss=$(tail -n 1 "$_tf")
    rm -f "$_tf"
    awk -v a="$_t0" -v b="$_t1" -v r="$_rss" 'BEGIN { printf "%.6f %d\n", b - a, r }'
    return $_rc
}

least() {
    awk -v a="$1" -v b="$2" 'BEGIN { print (b < a) ? b : a }'
}

bench_quick() {
    [ -n "${KILN_BENCH_QUICK:-}" ] && [ "$KILN_BENCH_QUICK" != 0 ]
}

bench_1b_wanted() {
    case "${KILN_BENCH_1B:-}" in
    0) return 1 ;;
    1) return 0 ;;
    esac
    ! bench_quick
}

llama_has() {
    [ -n "$LLAMA_BIN" ] && [ -x "$LLAMA_BIN/$1" ]
}

# `llama_run timed TOOL ARGS...` times it. env, not a variable assignment,
# so that timed's /usr/bin/time can run it.
llama_run() {
    _pre=
    [ "$1" = timed ] && { _pre=timed; shift; }
    _tool=$1
    shift
    if [ -f "$LLAMA_BIN/noamx.so" ]; then
        $_pre env LD_PRELOAD="$LLAMA_BIN/noamx.so" "$LLAMA_BIN/$_tool" "$@"
    else
        $_pre "$LLAMA_BIN/$_tool" "$@"
    fi
}

bench_tmpdir() {
    BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-$1-XXXXXX") || exit 1
    trap 'rm -rf "$BENCH_TMP"' EXIT INT TERM
}

# The ratio line needs a llama.cpp build: say so once, and why.
llama_note() {
    if [ -z "$LLAMA_CPP" ]; then
        echo "  (ratios to llama.cpp need LLAMA_CPP=DIR of a llama.cpp build, e.g. LLAMA_CPP=/root/llama.cpp make bench)"
    elif [ ! -d "$LLAMA_BIN" ]; then
        echo "  (LLAMA_CPP=$LLAMA_CPP has no build/bin: no ratios)"
    fi
}

_fail_log() {
    echo "  $1: $2 failed; last lines of its output:"
    tail -n 5 "$3" | sed 's/^/    /'
}

versus() {
    _label=$1 _work=$2 _unit=$3 _kcmd=$4
    shift 4
    _ltool=${1:-}
    [ $# -gt 0 ] && shift
    if [ -n "$_ltool" ] && ! llama_has "$_ltool"; then
        [ -n "$LLAMA_CPP" ] && echo "  (LLAMA_CPP=$LLAMA_CPP has no build/bin/$_ltool)"
        _ltool=
    fi
    _bk=1e9 _bl=1e9 _i=0
    while [ $_i -lt "$BENCH_REPS" ]; do
        _i=$((_i + 1))
        _r=$(TIMED_LOG="$BENCH_TMP/kiln.log" timed sh -c "$_kcmd") ||
            { _fail_log "$_label" kiln "$BENCH_TMP/kiln.log"; return 1; }
        _bk=$(least "$_bk" "${_r% *}")
        [ -n "$_ltool" ] || continue
        _r=$(TIMED_LOG="$BENCH_TMP/llama.log" llama_run timed "$_ltool" "$@") ||
            { _fail_log "$_label" "llama.cpp $_ltool" "$BENCH_TMP/llama.log"; return 1; }
        _bl=$(least "$_bl" "${_r% *}")
    done
    awk -v label="$_label" -v w="$_work" -v u="$_unit" -v k="$_bk" -v l="$_bl" -v have="${_ltool:+1}" 'BEGIN {
        line = sprintf("  %-28s kiln %8.3f s", label, k)
        if (w > 0) line = line sprintf(" (%9.1f %s/s)", w / k, u)
        if (have) {
            line = line sprintf("   llama.cpp %8.3f s", l)
            if (w > 0) line = line sprintf(" (%9.1f %s/s)", w / l, u)
            line = line sprintf("   ratio %5.2f", l / k)
        }
        print line
    }'
}

# kiln's writer renames its output into place when complete, so a killed
# run leaves no half-written model for the next one to trust.
bench_1b() {
    _f16="$BENCH_1B_DIR/synth-1b-F16.gguf"
    mkdir -p "$BENCH_1B_DIR" || return 1
    if [ ! -f "$_f16" ]; then
        echo "  making the 1B model in $BENCH_1B_DIR (one time; about 2.2 GB, minutes)" >&2
        rm -rf "$BENCH_1B_DIR/hf"
        "$KILN" testmodel --arch llama --size 1b --dtype f16 -o "$BENCH_1B_DIR/hf" > "$BENCH_1B_DIR/make.log" 2>&1 &&
            "$KILN" convert "$BENCH_1B_DIR/hf" --outtype f16 -o "$_f16" -q --force >> "$BENCH_1B_DIR/make.log" 2>&1 &&
            rm -rf "$BENCH_1B_DIR/hf" ||
            { echo "  1B model: could not make it (see $BENCH_1B_DIR/make.log)" >&2; return 1; }
    fi
    [ "$1" = F16 ] && { echo "$_f16"; return 0; }
    _q="$BENCH_1B_DIR/synth-1b-$1.gguf"
    if [ ! -f "$_q" ]; then
        "$KILN" quantize -q -f -t "$THREADS" "$_f16" "$_q" "$1" >> "$BENCH_1B_DIR/make.log" 2>&1 ||
            { echo "  1B $1: kiln quantize failed (see $BENCH_1B_DIR/make.log)" >&2; return 1; }
    fi
    echo "$_q"
}

bench_1b_imatrix() {
    _im="$BENCH_1B_DIR/synth-1b.imatrix.gguf"
    if [ ! -f "$_im" ]; then
        _f16=$(bench_1b F16) || return 1
        echo "  making the 1B imatrix in $BENCH_1B_DIR (one time)" >&2
        "$KILN" imatrix "$_f16" -f "$SHARED/golden/text/calib.groups_merged.txt" -c 512 --chunks 2 --no-ppl \
            -t "$THREADS" -q --force -o "$_im" >> "$BENCH_1B_DIR/make.log" 2>&1 ||
            { echo "  1B imatrix: kiln imatrix failed (see $BENCH_1B_DIR/make.log)" >&2; return 1; }
    fi
    echo "$_im"
}
