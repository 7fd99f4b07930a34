#!/bin/sh
# scripts/check_file_circles.sh [OBJ [ROOT]] - fails when the library files
# of one folder call each other in a circle.
#
# Within a folder, file A "calls" file B when A's object references a
# global symbol that B's object defines (nm: U in A, defined in B). The
# files of a folder must form a one-way graph: helpers both sides need live
# in a leaf file, and a lower file that must reach a higher one is handed a
# sink of callbacks instead of naming it. Every pair of files that call
# each other is reported, and longer circles as a depth-first search meets
# them (any circle at all fails the check; fixing what is listed may
# uncover another):
#
#   DIR: a.c <-> b.c: a.c uses SYM ...; b.c uses SYM ...   (two files)
#   DIR: circle a.c -> b.c -> c.c -> a.c                      (longer)
#
# OBJ is the build's object tree (default build/obj; the Makefile puts
# DIR/X.c's object at OBJ/DIR/X.o). The folders are the Makefile's LIBDIRS,
# as scripts/check_layers.sh reads them; cmd_*.c (the CLI layer) is not
# checked, and an object without its X.c beside it (a stale one) is
# ignored. Exits 0 when there is no circle, 1 when there is one, 2 when
# the Makefile or a library file's object is missing (build first) or
# unreadable.
OBJ=${1:-build/obj}
ROOT=${2:-.}
order=$(sed -n 's/^LIBDIRS *:= *//p' "$ROOT/Makefile")
[ -n "$order" ] || { echo "check_file_circles: no LIBDIRS in $ROOT/Makefile" >&2; exit 2; }
bad=0
for dir in $order; do
    # one "DEF file sym" / "USE file sym" line per global symbol
    syms=$(
        for src in "$ROOT/$dir"/*.c; do
            [ -f "$src" ] || continue
            base=${src##*/}
            case "$base" in cmd_*.c) continue ;; esac
            o="$OBJ/$dir/${base%.c}.o"
            if [ ! -f "$o" ]; then
                echo "check_file_circles: $o: missing (build first)" >&2
                echo "MISSING"
                continue
            fi
            if ! table=$(nm -P "$o"); then
                echo "check_file_circles: $o: nm failed" >&2
                echo "MISSING"
                continue
            fi
            printf '%s\n' "$table" | awk -v f="$base" '
                $2 == "U" { print "USE", f, $1; next }
                $2 ~ /^[A-TV-Z]$/ { print "DEF", f, $1 }'
        done
    )
    case "$syms" in *MISSING*) exit 2 ;; esac
    printf '%s\n' "$syms" | awk -v dir="$dir" '
        !($2 in seen) { seen[$2] = 1; file[++nf] = $2 }   # in name order
        $1 == "DEF" { owner[$3] = $2; next }
        $1 == "USE" { use_f[++n] = $2; use_s[n] = $3 }
        END {
            for (i = 1; i <= n; i++) {
                a = use_f[i]; b = owner[use_s[i]]
                if (b == "" || b == a) continue
                if (!((a, b) in via)) { out[a] = out[a] " " b; via[a, b] = "" }
                via[a, b] = via[a, b] " " use_s[i]
            }
            bad = 0
            for (i = 1; i <= nf; i++)
                for (j = i + 1; j <= nf; j++) {
                    a = file[i]; b = file[j]
                    if (!((a, b) in via) || !((b, a) in via)) continue
                    printf "%s: %s <-> %s: %s uses%s; %s uses%s\n", dir, a, b, a, via[a, b], b, via[b, a]
                    bad = 1
                }
            # longer circles: depth-first search, a back edge closes one
            for (i = 1; i <= nf; i++) if (!color[file[i]]) bad = visit(file[i], 0) || bad
            exit bad
        }
        function visit(f, depth,    k, m, nb, g, i, path, found) {
            color[f] = 1; stack[depth] = f
            nb = split(out[f], m, " ")
            for (k = 1; k <= nb; k++) {
                g = m[k]
                if (color[g] == 1) {
                    for (i = depth; i >= 0 && stack[i] != g; i--) ;
                    if (depth - i + 1 > 2) {   # two-file circles are named above
                        path = ""
                        for (; i <= depth; i++) path = path stack[i] " -> "
                        printf "%s: circle %s%s\n", dir, path, g
                        found = 1
                    }
                } else if (!color[g]) {
                    found = visit(g, depth + 1) || found
                }
            }
            color[f] = 2
            return found
        }' || bad=1
done
exit $bad
