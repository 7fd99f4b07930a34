#!/bin/sh
# scripts/check_layers.sh [ROOT] - fails when a library folder includes a
# folder above it. The order is the Makefile's LIBDIRS (bottom first), the
# one place it is written: a library file in LIBDIRS[i] may include headers
# of LIBDIRS[0..i] only. The cmd_*.c files are the CLI layer on top of every
# folder, and cli/ is that layer's own folder, so neither is checked.
# Prints one line per offending include ("file:line: folder includes above
# itself: ...") and exits 1 when there is any.
ROOT=${1:-.}
order=$(sed -n 's/^LIBDIRS *:= *//p' "$ROOT/Makefile")
[ -n "$order" ] || { echo "check_layers: no LIBDIRS in $ROOT/Makefile" >&2; exit 2; }
bad=0
rank() { i=0; for d in $order; do [ "$d" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
for dir in $order; do
    mine=$(rank "$dir")
    for f in "$ROOT/$dir"/*.c "$ROOT/$dir"/*.h; do
        [ -f "$f" ] || continue
        case "$f" in */cmd_*.c) continue ;; esac
        # every `#include "../X/...`: X must rank at or below this folder
        grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\.\./' "$f" | while IFS= read -r line; do
            target=$(printf '%s\n' "$line" | sed 's/.*"\.\.\/\([^/"]*\)\/.*/\1/')
            theirs=$(rank "$target")
            if [ "$theirs" -lt 0 ] || [ "$theirs" -gt "$mine" ]; then
                echo "${f#"$ROOT"/}:${line%%:*}: $dir includes $target, which is not below it (Makefile LIBDIRS: $order)"
            fi
        done
    done
done > "${TMPDIR:-/tmp}/kiln-layers.$$"
[ -s "${TMPDIR:-/tmp}/kiln-layers.$$" ] && { cat "${TMPDIR:-/tmp}/kiln-layers.$$"; bad=1; }
rm -f "${TMPDIR:-/tmp}/kiln-layers.$$"
exit $bad
