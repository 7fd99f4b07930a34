# tests/e2e/convert_verbose.sh - kiln convert --verbose names the config
# keys it ignored: one stderr line per config.json (text_config merged in)
# or tokenizer_config.json key that no lookup of the conversion read,
# escaped; without --verbose nothing is printed. Either way the GGUF is the
# same bytes. The model is kiln testmodel's llama with an unknown key, a
# key holding an escape byte, and the integer too big for int64 that
# Hugging Face writes into tokenizer_config.json (read as a float).
. tests/e2e/lib.sh

m=$T/tiny
if ! "$KILN" testmodel --arch llama -o "$m" > /dev/null 2> "$T/err"; then
    bad "testmodel llama" "$(head -c 300 "$T/err")"
    finish
fi
# the two keys go in right after the opening brace of each file
sed '1s/^{/{"kiln_unknown_key": 7, "esc\\u001bkey": 1,/' "$m/config.json" > "$T/c" && mv "$T/c" "$m/config.json"
sed '1s/^{/{"model_max_length": 1000000000000000019884624838656,/' "$m/tokenizer_config.json" > "$T/c" &&
    mv "$T/c" "$m/tokenizer_config.json"

"$KILN" convert "$m" --outtype f32 -o "$T/quiet.gguf" > "$T/out" 2> "$T/err"
check "convert without --verbose succeeds (model_max_length 1e30 read as a float)" test $? -eq 0
check "without --verbose nothing is printed" test ! -s "$T/err" -a ! -s "$T/out"

"$KILN" convert "$m" --outtype f32 --verbose -o "$T/verbose.gguf" > "$T/out" 2> "$T/v"
check "convert --verbose succeeds" test $? -eq 0
check "--verbose writes the same bytes" cmp -s "$T/quiet.gguf" "$T/verbose.gguf"
check "--verbose prints nothing on stdout" test ! -s "$T/out"
check "every --verbose line has the one form" \
    sh -c '! grep -Ev "^kiln: (config|tokenizer_config)\.json: [^ ]+: not read by kiln convert \(ignored\)$" "$1"' _ "$T/v"
check "--verbose names the unknown config.json key" \
    grep -qx 'kiln: config.json: kiln_unknown_key: not read by kiln convert (ignored)' "$T/v"
check "--verbose names tokenizer_config.json's model_max_length" \
    grep -qx 'kiln: tokenizer_config.json: model_max_length: not read by kiln convert (ignored)' "$T/v"
check "a key's control byte is escaped, never printed raw" \
    sh -c 'grep -qF "kiln: config.json: esc\\x1bkey: not read" "$1" && ! grep -q "$(printf "\033")" "$1"' _ "$T/v"
# keys kiln reads: at open (the block count, the architecture), in the
# metadata (rms_norm_eps, rope_theta), the vocab (vocab_size), and the
# special tokens through tokenizer_config.json's private copy (bos_token)
for key in num_hidden_layers architectures hidden_size rms_norm_eps rope_theta vocab_size; do
    check "a key kiln reads is not listed: config.json $key" sh -c '! grep -q "config.json: $2:" "$1"' _ "$T/v" "$key"
done
check "a key kiln reads is not listed: tokenizer_config.json bos_token" \
    sh -c '! grep -q "tokenizer_config.json: bos_token:" "$1"' _ "$T/v"

# --dry-run --verbose reads the same keys, so lists the same ones
"$KILN" convert "$m" --outtype f32 --dry-run --verbose > /dev/null 2> "$T/dry"
check "--dry-run --verbose lists the same keys" cmp -s "$T/v" "$T/dry"

# a multimodal config: text_config's keys are the model's, read through the
# flattened copy; vision_config is ignored (and said so)
jq '{architectures, text_config: (del(.architectures)), vision_config: {hidden_size: 8}}' "$m/config.json" \
    > "$T/c" && mv "$T/c" "$m/config.json"
"$KILN" convert "$m" --outtype f32 --verbose -o "$T/mm.gguf" > /dev/null 2> "$T/mm"
check "text_config model converts to the same bytes" cmp -s "$T/quiet.gguf" "$T/mm.gguf"
check "text_config model: vision_config and the unknown key are listed, hidden_size is not" \
    sh -c 'grep -q "config.json: vision_config:" "$1" && grep -q "config.json: kiln_unknown_key:" "$1" &&
        ! grep -q "config.json: hidden_size:" "$1" && ! grep -q "config.json: text_config:" "$1"' _ "$T/mm"

finish
