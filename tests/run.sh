#!/bin/sh
# tests/run.sh BUILD - runs every cmocka suite (build/tests/test_*) and every
# end-to-end case (tests/e2e/*.sh), all of which speak TAP, and ends with one
# line: "N passed, N failed, N skipped". Exit status 1 when anything failed
# or a suite crashed.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 2
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
export KILN="$BUILD/kiln" KILN_BUILD="$BUILD"
export CMOCKA_MESSAGE_OUTPUT=TAP
pass=0 fail=0 skip=0 crashed=""
log="$BUILD/test.log"
: > "$log"

run_one() { # name, command...
    name=$1; shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out" >> "$log"
    p=$(printf '%s\n' "$out" | grep -c '^ok ')
    s=$(printf '%s\n' "$out" | grep -c '^not ok .*# SKIP')
    f=$(printf '%s\n' "$out" | grep '^not ok ' | grep -vc '# SKIP')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; crashed="$crashed $name(rc=$rc)"
    fi
    pass=$((pass + p)); skip=$((skip + s)); fail=$((fail + f))
    status=ok; [ "$f" -gt 0 ] && status=FAIL
    printf '%-32s %4d passed %3d failed %3d skipped  %s\n' "$name" "$p" "$f" "$s" "$status"
    if [ "$f" -gt 0 ]; then
        printf '%s\n' "$out" | grep -B2 -A6 '^not ok ' | grep -v '# SKIP' | head -40 | sed 's/^/    /'
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    run_one "$(basename "$t")" "$t"
done
for t in tests/e2e/*.sh; do
    [ -f "$t" ] || continue
    case "$t" in */lib.sh) continue ;; esac
    run_one "e2e/$(basename "$t" .sh)" sh "$t"
done

[ -n "$crashed" ] && echo "crashed or exited non-zero:$crashed (full output in $log)"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
