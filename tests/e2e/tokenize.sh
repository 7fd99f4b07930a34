# tests/e2e/tokenize.sh - kiln tokenize from the command line against the
# ids llama.cpp gave in ../shared/golden/tokens/FIXTURE.tsv (all four
# add_special x parse_special combinations, through the CLI flags).
. tests/e2e/lib.sh

check "tokenize --help exits 0" sh -c '"$KILN" tokenize --help | grep -q "usage: kiln tokenize"'
expect_fail "tokenize needs a model" "MODEL|expects" "$KILN" tokenize -p hi
expect_fail "tokenize of a missing model exits 1" "nofile.gguf" "$KILN" tokenize /nofile.gguf -p hi

for fx in llama qwen2; do
    need_shared "tokenize CLI matches llama.cpp ($fx)" || continue
    # Each golden string goes through a file so every byte reaches kiln as is.
    python3 - "$shared/golden/tokens/$fx.tsv" "$T" <<'PY' > "$T/cases"
import json, sys, os
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
for k, (idx, add, parse, ids, text) in enumerate(rows):
    if int(idx) % 5: continue               # a fifth of the strings, all flag combinations
    path = os.path.join(sys.argv[2], "in%d" % k)
    open(path, "wb").write(json.loads(text).encode("utf-8", "surrogatepass"))
    print(path, add, parse, ids.replace(" ", ","), sep="\t")
PY
    fails=0 n=0
    while IFS="$(printf '\t')" read -r path add parse want; do
        flags=""
        [ "$add" = 0 ] && flags="$flags --no-bos"
        [ "$parse" = 0 ] && flags="$flags --no-parse-special"
        # shellcheck disable=SC2086
        got=$("$KILN" tokenize "$shared/golden/gguf/$fx-f32.gguf" -f "$path" --ids $flags | tr ' ' ',')
        n=$((n + 1))
        [ "$got" = "$want" ] || { fails=$((fails + 1)); echo "# $path add=$add parse=$parse: got [$got] want [$want]"; }
    done < "$T/cases"
    [ "$fails" -eq 0 ] && [ "$n" -gt 20 ] && ok "tokenize CLI matches llama.cpp ($fx, $n cases)" || bad "tokenize CLI matches llama.cpp ($fx)" "$fails of $n differ"
done
finish
