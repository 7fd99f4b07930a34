# tests/e2e/granite.sh - Granite (GraniteForCausalLM, dense; GGUF arch
# granite) end to end against llama.cpp's own outputs for the same model:
# tests/fixtures/granite/ holds a tiny trained Granite-3-style HF model
# (Llama's layout plus four multipliers: embedding 12, attention 1/64,
# residual 0.22, logits_scaling 8) and what llama.cpp (d32676d7) made of
# it (REGEN.md says how). The checks are arch_goldens's (convert and
# Q4_K_M byte-identical, IQ2_XXS types, logits bit-identical, perplexity
# digits, imatrix within 1e-4), plus the multipliers' keys and a check
# that each multiplier matters.
. tests/e2e/lib.sh
. tests/e2e/arch_goldens.inc

FX=tests/fixtures/granite
if ! zstd -q -d -c "$FX/Granite-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
arch_goldens granite "$FX" granite-tiny "$T/Granite-tiny"

F32=$T/q-granite/gguf/granite-tiny-f32.gguf
tsv="$FX/tokens/granite-tiny.tsv"
if tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi
"$KILN" inspect "$F32" --json > "$T/g.json" 2>&1
check "the four multipliers as granite.* keys" jq_true "$T/g.json" 'meta["granite.embedding_scale"] == 12 and
    meta["granite.attention.scale"] == 0.015625 and meta["granite.logit_scale"] == 8 and
    meta["granite.residual_scale"] - 0.22 < 1e-6 and meta["granite.residual_scale"] - 0.22 > -1e-6'

# each multiplier matters: with its key set to 1 the logits differ from
# llama.cpp's (a GGUF float key's value is the 4 bytes after its type)
for key in granite.embedding_scale granite.residual_scale granite.attention.scale granite.logit_scale; do
    off=$(grep -boa "$key" "$F32" | head -1 | cut -d: -f1)
    cp "$F32" "$T/one.gguf"
    if [ -n "$off" ]; then
        le32 1065353216 | write_at "$T/one.gguf" $((off + ${#key} + 4))
        if "$KILN" inspect "$T/one.gguf" --json | jq -e --arg k "$key" '.metadata[] | select(.key == $k) | .value == 1' > /dev/null &&
            ! "$KILN" golden check "$T/one.gguf" "$T/granite-f32.logits" --max-abs 0 > "$T/c1" 2>&1 &&
            grep -q "FAIL: max_abs" "$T/c1"; then
            ok "$key is applied: 1 instead changes the logits"
        else
            bad "$key is applied: 1 instead changes the logits" "$(tail -2 "$T/c1")"
        fi
    else
        bad "$key is applied" "key not found in the file"
    fi
done

finish
