# tests/e2e/hf_normalize.sh - `kiln tokenize --hf-normalize`: with the real
# Qwen3 tokenizer (an NFC normalizer), kiln gives Hugging Face's ids on
# texts written as they are, in NFD and in NFKD; without the flag it gives
# llama.cpp's, which differ on those texts. The ground truth,
# tests/fixtures/tokenizers/qwen3/hf_ids.jsonl.zst, is transformers.js's
# tokenizer on ../shared/golden/text/tokenize.txt and
# tests/fixtures/tokenizers/hf_normalize_texts.txt (regenerate with
# tests/fixtures/tokenizers/hf_ids.js). Texts holding "</s>" are left out:
# in Qwen3's vocabulary it is a plain token, which HF splits as text and
# llama.cpp's vocabulary loader makes a control token (an end-of-generation
# guess), a difference of special-token parsing, not of normalization.
. tests/e2e/lib.sh

FX=tests/fixtures/tokenizers
m="$T/qwen3tok"
"$KILN" testmodel --arch qwen3 --hidden 64 --ffn 128 --layers 1 --vocab 151936 --tie-embeddings -o "$m" \
    > /dev/null 2>&1
rm -f "$m/tokenizer.json" "$m/tokenizer_config.json" "$m/vocab.json" "$m/merges.txt"
zstd -q -d "$FX/qwen3/tokenizer.json.zst" -o "$m/tokenizer.json"
zstd -q -d "$FX/qwen3/tokenizer_config.json.zst" -o "$m/tokenizer_config.json"
"$KILN" convert "$m" --outtype f32 -o "$T/q.gguf" 2> "$T/err"
check "the Qwen3 tokenizer model converts" test $? -eq 0

zstd -q -d "$FX/qwen3/hf_ids.jsonl.zst" -o "$T/all.jsonl"
grep -v '</s>' "$T/all.jsonl" > "$T/hf.jsonl"
jq -c '{text}' "$T/hf.jsonl" > "$T/in.jsonl"
jq -c '.ids' "$T/hf.jsonl" > "$T/want"
texts=$(wc -l < "$T/want")
"$KILN" tokenize "$T/q.gguf" --batch "$T/in.jsonl" --jsonl --json --no-bos --hf-normalize "$m" > "$T/got"
check "--hf-normalize runs" test $? -eq 0
check "--hf-normalize gives HF's ids on all $texts texts" cmp -s "$T/want" "$T/got"
"$KILN" tokenize "$T/q.gguf" --batch "$T/in.jsonl" --jsonl --json --no-bos --hf-normalize "$m/tokenizer.json" \
    > "$T/got2"
check "--hf-normalize takes the tokenizer.json itself" cmp -s "$T/got" "$T/got2"
"$KILN" tokenize "$T/q.gguf" --batch "$T/in.jsonl" --jsonl --json --no-bos > "$T/raw"
differ=$(paste -d'|' "$T/want" "$T/raw" | awk -F'|' '$1 != $2' | wc -l)
check "without it, llama.cpp's ids: $differ decomposed texts differ from HF's" test "$differ" -ge 10
one=$("$KILN" tokenize "$T/q.gguf" -p "$(printf 'cafe\314\201')" --ids --no-bos --hf-normalize "$m")
check "-p text is normalized too (cafe + U+0301 = café)" \
    test "$one" = "$("$KILN" tokenize "$T/q.gguf" -p "$(printf 'caf\303\251')" --ids --no-bos)"

# refusals: before any work, one line naming the file and the step
printf '{"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"BertNormalizer"}]}}' \
    > "$T/bert.json"
expect_fail "an unsupported step is refused, naming it" \
    "bert.json: normalizer.normalizers\[1\]: unsupported normalizer step 'BertNormalizer'" \
    "$KILN" tokenize "$T/q.gguf" -p x --hf-normalize "$T/bert.json"
printf '{"model":{}}' > "$T/nonorm.json"
expect_fail "a file without a normalizer key is refused" "nonorm.json: normalizer: no \"normalizer\" key" \
    "$KILN" tokenize "$T/q.gguf" -p x --hf-normalize "$T/nonorm.json"
printf 'ok\nbad \377 byte\n' > "$T/bad.txt"
expect_fail "invalid UTF-8 in a batch names the line and byte" "bad.txt: line 2: .*text at offset 4: not valid UTF-8" \
    "$KILN" tokenize "$T/q.gguf" --batch "$T/bad.txt" --hf-normalize "$m"
finish
