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
    # Rows are INDEX ADD PARSE IDS TEXT, TEXT a JSON string; a fifth of the
    # strings (INDEX % 5 == 0), all flag combinations. awk puts the possibly
    # empty IDS last, so that `read` splits the line the same way.
    awk -F '\t' 'NR > 1 && $1 % 5 == 0 { gsub(/ /, ",", $4); print NR - 2 "\t" $2 "\t" $3 "\t" $5 "\t" $4 }' \
        "$shared/golden/tokens/$fx.tsv" > "$T/rows"
    while IFS="$(printf '\t')" read -r k add parse text ids; do
        printf '%s' "$text" | jq -j . > "$T/in$k" || { echo "# row $k: bad JSON text"; : > "$T/in$k"; ids="(unreadable)"; }
        printf '%s\t%s\t%s\t%s\n' "$T/in$k" "$add" "$parse" "$ids"
    done < "$T/rows" > "$T/cases"
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
