# tests/e2e/real_tokenizers.sh - kiln convert on the real tokenizer files of
# Llama 3, Qwen3 and DeepSeek-V3 (tests/fixtures/tokenizers): a tiny model
# around each converts to the very bytes llama.cpp's converter wrote for it
# (models.tsv holds their sha256), pre-tokenizer detected, not pinned, and
# kiln tokenize gives the ids llama.cpp's tokenizer gave on that GGUF for
# every string of ../shared/golden/text/tokenize.txt and prompts.txt
# (NAME/tokens.tsv.zst, made by the factory's tokenize_tsv).
. tests/e2e/lib.sh

FX=tests/fixtures/tokenizers
grep -v '^#' "$FX/models.tsv" | while IFS="$(printf '\t')" read -r tok arch vocab dir pre sha; do
    m="$T/$tok/$dir"
    mkdir -p "$T/$tok"
    "$KILN" testmodel --arch "$arch" --hidden 64 --ffn 128 --layers 1 --vocab "$vocab" --tie-embeddings \
        -o "$m" > /dev/null 2>&1 || { bad "$tok: testmodel" "kiln testmodel failed"; continue; }
    rm -f "$m/tokenizer.model" "$m/tokenizer.json" "$m/tokenizer_config.json" "$m/vocab.json" \
        "$m/merges.txt" "$m/special_tokens_map.json"
    zstd -q -d "$FX/$tok/tokenizer.json.zst" -o "$m/tokenizer.json" &&
        zstd -q -d "$FX/$tok/tokenizer_config.json.zst" -o "$m/tokenizer_config.json" ||
        { bad "$tok: unpack tokenizer" "zstd failed"; continue; }
    "$KILN" convert "$m" --outtype f32 -o "$T/$tok.gguf" 2> "$T/err"
    check "$tok: convert succeeds" test $? -eq 0
    got=$(sha256sum "$T/$tok.gguf" | cut -c1-64)
    check "$tok: GGUF byte-identical to llama.cpp's" test "$got" = "$sha"
    "$KILN" inspect "$T/$tok.gguf" > "$T/i.txt"
    check "$tok: tokenizer.ggml.pre detected as $pre" grep -q "tokenizer.ggml.pre .*\"$pre\"" "$T/i.txt"
    zstd -q -d -f "$FX/$tok/tokens.tsv.zst" -o "$T/$tok.tsv"
    tokens_agree "$T/$tok.gguf" "$T/$tok.tsv"
    check "$tok: kiln tokenize gives llama.cpp's ids ($tokens_checked texts)" test $? -eq 0 -a "$tokens_checked" -gt 150
    rm -rf "$T/$tok" "$T/$tok.gguf" "$T/$tok.tsv"
done > "$T/tap"
cat "$T/tap"
# the loop ran in a subshell: count its results here
_n=$(grep -c '^\(not \)\?ok' "$T/tap")
grep -q '^not ok' "$T/tap" && _failed=1
check "all three tokenizers were checked" test "$(grep -c 'byte-identical' "$T/tap")" -eq 3
finish
