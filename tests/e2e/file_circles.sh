# tests/e2e/file_circles.sh - inside every library folder the files call
# each other one way only (scripts/check_file_circles.sh, over the built
# objects of every LIBDIRS folder), and the check itself catches two files
# that call each other, a longer circle, and a missing object.
. tests/e2e/lib.sh

# tests/run.sh exports KILN_BUILD; run by hand, the build is $KILN's folder.
build=${KILN_BUILD:-$(dirname "$KILN")}
if [ -d "$build/obj" ]; then
    ./scripts/check_file_circles.sh "$build/obj" . > "$T/out" 2>&1
    check "no two library files of one folder call each other" test $? -eq 0
    [ -s "$T/out" ] && sed 's/^/# /' "$T/out"
else
    skipt "no two library files of one folder call each other ($build/obj not built)"
fi

# A tree of three folders: `pair` has a.c and b.c calling each other,
# `ring` x.c -> y.c -> z.c -> x.c, `line` p.c -> q.c one way, plus a cmd_*.c
# that p.c calls back (the CLI layer, not checked) and a stale object.
cc=${CC:-cc}
if ! command -v "$cc" > /dev/null 2>&1; then
    skipt "the check's own cases (no C compiler)"
    finish
fi
tree="$T/tree"
mkdir -p "$tree/pair" "$tree/ring" "$tree/line"
printf 'LIBDIRS := pair ring line\n' > "$tree/Makefile"
src() { printf '%s\n' "$2" > "$tree/$1"; }
src pair/a.c 'int b(void); int a(void) { return b(); }'
src pair/b.c 'int a(void); int b(void) { return 1; } int b2(void) { return a(); }'
src ring/x.c 'int y(void); int x(void) { return y(); }'
src ring/y.c 'int z(void); int y(void) { return z(); }'
src ring/z.c 'int x(void); int z(void) { return x(); }'
src line/p.c 'int q(void); int cmd_back(void); int p(void) { return q() + cmd_back(); }'
src line/q.c 'int q(void) { return 2; }'
src line/cmd_p.c 'int p(void); int cmd_back(void) { return 3; } int cmd_p(void) { return p(); }'
built=0
for f in pair/a pair/b ring/x ring/y ring/z line/p line/q line/cmd_p; do
    mkdir -p "$tree/obj/${f%/*}"
    "$cc" -c -o "$tree/obj/$f.o" "$tree/$f.c" 2> "$T/cc.err" || built=1
done
# an object whose source is gone (a renamed file) calls into p.c and back
printf 'int p(void); int q(void) { return p(); }\n' > "$T/stale.c"
"$cc" -c -o "$tree/obj/line/old.o" "$T/stale.c" 2>> "$T/cc.err" || built=1
check "the check's test objects compile" test "$built" -eq 0

./scripts/check_file_circles.sh "$tree/obj" "$tree" > "$T/out" 2>&1
check "files that call each other fail the check" test $? -eq 1
check "the pair and the symbols each side uses are named" \
    grep -qx "pair: a.c <-> b.c: a.c uses b; b.c uses a" "$T/out"
check "a circle through three files is named" grep -qx "ring: circle x.c -> y.c -> z.c -> x.c" "$T/out"
check "one-way calls, cmd_*.c and stale objects are accepted" test "$(wc -l < "$T/out")" -eq 2
[ "$(wc -l < "$T/out")" -eq 2 ] || sed 's/^/# /' "$T/out"

rm "$tree/obj/line/q.o"
./scripts/check_file_circles.sh "$tree/obj" "$tree" > "$T/out" 2>&1
check "a library file without its object is an error, not a pass" test $? -eq 2
check "the missing object is named" grep -q "obj/line/q.o: missing" "$T/out"
finish
