# tests/e2e/tokenize_batch.sh - kiln tokenize --batch: every text of
# ../shared/golden/tokens/FIXTURE.tsv (all of them, all four add_special x
# parse_special combinations) in one process per combination, each output
# line equal to llama.cpp's ids; plain-line input and the error cases.
. tests/e2e/lib.sh

for fx in llama qwen2 mixtral; do
    need_shared "tokenize --batch matches llama.cpp ($fx)" || continue
    tsv="$shared/golden/tokens/$fx.tsv"
    tokens_agree "$shared/golden/gguf/$fx-f32.gguf" "$tsv"
    rc=$?
    [ "$rc" -eq 0 ] && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ] &&
        ok "tokenize --batch matches llama.cpp ($fx, $tokens_checked texts)" ||
        bad "tokenize --batch matches llama.cpp ($fx)" "$tokens_checked texts compared"
done

if need_shared "tokenize --batch, plain lines and --json"; then
    m="$shared/golden/gguf/qwen2-f32.gguf"
    printf 'Hello world\n\nsecond line' > "$T/lines.txt"
    "$KILN" tokenize "$m" --batch "$T/lines.txt" > "$T/out"
    check "one output line per input line" test "$(wc -l < "$T/out")" -eq 3
    check "each line equals a single -p run" test "$(sed -n 1p "$T/out")" = "$("$KILN" tokenize "$m" -p 'Hello world' --ids)"
    check "an empty line gives an empty id list (no BOS in qwen2)" test -z "$(sed -n 2p "$T/out")"
    check "a last line without newline is read" test "$(sed -n 3p "$T/out")" = "$("$KILN" tokenize "$m" -p 'second line' --ids)"
    printf '{"text": "Hello world"}\n"second line"\n' | "$KILN" tokenize "$m" --batch - --jsonl --json > "$T/out"
    check "--jsonl reads objects and strings; --json prints arrays" \
        test "$(sed -n 1p "$T/out")" = "[$("$KILN" tokenize "$m" -p 'Hello world' --ids | tr ' ' ',')]"
    printf '"ok"\n{"txt": 1}\n' > "$T/bad.jsonl"
    expect_fail "a JSONL line without text names file and line" "bad.jsonl: line 2" "$KILN" tokenize "$m" --batch "$T/bad.jsonl" --jsonl
    expect_fail "--jsonl without --batch is a usage error" "needs --batch" "$KILN" tokenize "$m" -p hi --jsonl
    expect_fail "-p and --batch together are a usage error" "one of -p, -f or --batch" "$KILN" tokenize "$m" -p hi --batch "$T/lines.txt"
fi
finish
