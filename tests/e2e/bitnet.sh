# tests/e2e/bitnet.sh - BitNet b1.58 (BitnetForCausalLM; GGUF arch bitnet)
# end to end against llama.cpp's own outputs for the same model:
# tests/fixtures/bitnet/ holds a tiny BitNet HF model (latent bf16 weights
# trained with ternary straight-through, the two sub-norms, tied
# embeddings) and what llama.cpp (d32676d7) made of it (REGEN.md says how).
#
# arch_goldens checks convert f32 and quantize Q4_K_M, TQ1_0 and TQ2_0
# byte-identical, IQ2_XXS types, logits bit-identical (f32, Q4_K_M, TQ1_0,
# TQ2_0 and llama.cpp's IQ2_XXS file), perplexity digits and imatrix within
# 1e-4. Here besides: the converter's other outtypes byte-identical
# (llama.cpp's default auto = bf16, kiln's default f16, and the ternary
# tq1_0 / tq2_0 with F16 embeddings), quantizing straight from the HF
# folder, tokenization, and the two ternary conversions evaluating to the
# same logits (both store the same values).
. tests/e2e/lib.sh
. tests/e2e/arch_goldens.inc

FX=tests/fixtures/bitnet
if ! zstd -q -d -c "$FX/Bitnet-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
arch_goldens bitnet "$FX" bitnet-tiny "$T/Bitnet-tiny" "TQ1_0 TQ2_0"

# the converter's outtypes: llama.cpp's default (auto) and kiln's (f16)
# without --outtype, and the ternary types
for pair in "auto:bitnet-tiny-convert-bf16.gguf" "default:bitnet-tiny-convert-f16.gguf" \
    "tq1_0:bitnet-tiny-convert-tq1_0.gguf" "tq2_0:bitnet-tiny-convert-tq2_0.gguf"; do
    t=${pair%%:*} want=${pair#*:}
    opt="--outtype $t"
    [ "$t" = default ] && opt=""
    # shellcheck disable=SC2086
    if "$KILN" convert "$T/Bitnet-tiny" $opt -q -o "$T/conv-$t.gguf" 2> "$T/err"; then
        check "bitnet: convert ${opt:-(default f16)}: byte-identical to llama.cpp's converter" same_sha "$want" "$T/conv-$t.gguf"
    else
        bad "bitnet: convert ${opt:-(default f16)}" "$(head -c 300 "$T/err")"
    fi
done
check "bitnet: convert --outtype tq1_0: embeddings F16, matrices TQ1_0, norms F32" sh -c '
    "$1" inspect --json "$2" | jq -e "[.tensors[] | select(.name == \"token_embd.weight\") | .type] == [\"F16\"] and
        ([.tensors[] | select(.name | test(\"(attn_[qkv]|attn_output|ffn_(gate|up|down))[.]weight\")) | .type] | unique) == [\"TQ1_0\"] and
        ([.tensors[] | select(.name | test(\"norm\")) | .type] | unique) == [\"F32\"]" > /dev/null' _ "$KILN" "$T/conv-tq1_0.gguf"

# straight from the HF folder (convert and quantize in one pass): the
# ternarization happens on that path too
if "$KILN" quantize -q "$T/Bitnet-tiny" "$T/hf-TQ2_0.gguf" TQ2_0 2> "$T/err"; then
    check "bitnet: quantize HF_DIR TQ2_0: byte-identical to llama-quantize's of the f32 GGUF" \
        same_sha bitnet-tiny-TQ2_0.gguf "$T/hf-TQ2_0.gguf"
else
    bad "bitnet: quantize HF_DIR TQ2_0" "$(head -c 300 "$T/err")"
fi

# TQ1_0 and TQ2_0 both store the converter's ternary values exactly: the
# same logits, to the bit
echo "The quick brown fox jumps over the lazy dog, and then it runs back home." > "$T/p1.txt"
if "$KILN" golden record "$T/conv-tq1_0.gguf" -p "$T/p1.txt" -o "$T/tq1.golden" > /dev/null 2> "$T/err"; then
    check "bitnet: convert tq1_0 and tq2_0 give the same logits" sh -c \
        '"$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1' _ "$KILN" "$T/conv-tq2_0.gguf" "$T/tq1.golden" "$T/tq-check"
else
    bad "bitnet: golden record on the tq1_0 conversion" "$(head -c 300 "$T/err")"
fi

F32=$T/q-bitnet/gguf/bitnet-tiny-f32.gguf
tsv="$FX/tokens/bitnet-tiny.tsv"
if tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "bitnet: tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "bitnet: tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi
finish
