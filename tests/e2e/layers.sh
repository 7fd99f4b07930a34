# tests/e2e/layers.sh - the library's folders include only downward, in the
# order the Makefile's LIBDIRS gives (scripts/check_layers.sh), and the
# check itself catches an upward include.
. tests/e2e/lib.sh

./scripts/check_layers.sh . > "$T/out" 2>&1
check "every library folder includes only folders below it" test $? -eq 0
[ -s "$T/out" ] && sed 's/^/# /' "$T/out"

# A copy of the tree's Makefile with two folders, one of which reaches up.
mkdir -p "$T/tree/low" "$T/tree/high"
printf 'LIBDIRS := low high\n' > "$T/tree/Makefile"
printf '#include "../high/h.h"\n' > "$T/tree/low/l.c"
printf '#include "../low/l.h"\n' > "$T/tree/high/h.c"
printf '#include "../high/h.h"\n' > "$T/tree/low/cmd_x.c"
./scripts/check_layers.sh "$T/tree" > "$T/out" 2>&1
check "an upward include fails the check" test $? -eq 1
check "the offending file and line are named" grep -q "^low/l.c:1: low includes high" "$T/out"
check "downward includes and cmd_*.c are accepted" test "$(wc -l < "$T/out")" -eq 1
finish
