# tests/e2e/lib.sh - sourced by every end-to-end case. Cases print TAP lines
# ("ok N - name", "not ok N - name", "not ok N # SKIP name") that
# tests/run.sh counts, zstd-programs style: run a command, check its exit
# code, stdout and stderr.
#
#   $KILN     the binary under test
#   shared    path of ../shared or empty (need_shared skips or, under
#             CI=true, fails when it is absent)
#   T         a scratch directory, removed at exit
KILN=${KILN:-build/kiln}
T=$(mktemp -d /tmp/kiln-e2e-XXXXXX)
trap 'rm -rf "$T"' EXIT
_n=0 _failed=0
shared=${KILN_SHARED:-../shared}
[ -f "$shared/golden/README.md" ] || shared=""

ok()   { _n=$((_n + 1)); echo "ok $_n - $1"; }
bad()  { _n=$((_n + 1)); _failed=1; echo "not ok $_n - $1"; [ -n "${2:-}" ] && echo "# $2"; }
skipt() { _n=$((_n + 1)); echo "not ok $_n # SKIP $1"; }

# check NAME CONDITION...: runs the condition (a command), ok when it succeeds
check() { name=$1; shift; if "$@"; then ok "$name"; else bad "$name" "failed: $*"; fi; }

# need_shared NAME: returns 1 (after reporting a skip, or a failure in CI)
need_shared() {
    [ -n "$shared" ] && return 0
    if [ "${CI:-}" = true ]; then bad "$1" "../shared missing (required in CI)"; else skipt "$1"; fi
    return 1
}

# expect_fail NAME PATTERN CMD...: the command must exit non-zero, print one
# stderr line matching PATTERN, and not crash (exit code < 128).
expect_fail() {
    name=$1 pat=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"; rc=$?
    if [ "$rc" -eq 0 ]; then bad "$name" "exit 0, expected failure"; return; fi
    if [ "$rc" -ge 128 ]; then bad "$name" "crashed with $rc: $(head -c 300 "$T/err")"; return; fi
    if ! grep -Eq -- "$pat" "$T/err"; then bad "$name" "stderr lacks /$pat/: $(head -c 300 "$T/err")"; return; fi
    ok "$name"
}

finish() { echo "1..$_n"; exit $_failed; }
