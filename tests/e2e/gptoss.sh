# tests/e2e/gptoss.sh - gpt-oss (GptOssForCausalLM; GGUF arch gpt-oss) end
# to end against llama.cpp's own outputs for the same model:
# tests/fixtures/gptoss/ holds a tiny trained gpt-oss HF model stored as
# the real checkpoint is (experts as MXFP4 _blocks + _scales, attention
# sinks, biases everywhere, YaRN, sliding window on even layers, o200k's
# pre-tokenizer) and what llama.cpp (d32676d7) made of it (REGEN.md says
# how). The checks are arch_goldens's (convert f32 and quantize Q4_K_M and
# MXFP4_MOE byte-identical, IQ2_XXS types, logits bit-identical,
# perplexity digits, imatrix within 1e-4; llama-quantize needed
# --allow-requantize for Q4_K_M and IQ2_XXS, whose experts come from
# MXFP4, and so does kiln), plus: bf16 straight from the archive and q8_0
# byte-identical (the experts stay MXFP4 at every outtype), MXFP4_MOE and
# Q4_K_M quantized straight from the HF folder byte-identical, the keys, the
# tokenizer's ids, and checks that the sinks and the sliding window are
# applied.
. tests/e2e/lib.sh
. tests/e2e/arch_goldens.inc

FX=tests/fixtures/gptoss
S=gptoss-tiny
if ! zstd -q -d -c "$FX/GptOss-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
QUANT_FLAGS=--allow-requantize
arch_goldens gptoss "$FX" $S "$T/GptOss-tiny" MXFP4_MOE
F32=$T/q-gptoss/gguf/$S-f32.gguf

# the other outtypes: bf16 read from the archive in place (the MXFP4 pairs
# read, not mapped), q8_0 from the folder
if "$KILN" convert "$FX/GptOss-tiny.tar.zst" --outtype bf16 -o "$T/$S-bf16.gguf" 2> "$T/err" &&
    "$KILN" convert "$T/GptOss-tiny" --outtype q8_0 -o "$T/$S-q8_0.gguf" 2>> "$T/err"; then
    check "convert bf16 from the archive: byte-identical to llama.cpp's" same_sha $S-bf16.gguf "$T/$S-bf16.gguf"
    check "convert q8_0: byte-identical to llama.cpp's" same_sha $S-q8_0.gguf "$T/$S-q8_0.gguf"
else
    bad "convert bf16 and q8_0" "$(head -c 300 "$T/err")"
fi

# quantize straight from the HF folder (its experts read through the
# MXFP4 repack, dequantized where Q4_K_M requantizes them)
for q in MXFP4_MOE Q4_K_M; do
    if "$KILN" quantize -q --allow-requantize "$T/GptOss-tiny" "$T/hf-$q.gguf" $q 2> "$T/err"; then
        check "quantize $q from the HF folder: byte-identical to llama-quantize's" same_sha $S-$q.gguf "$T/hf-$q.gguf"
    else
        bad "quantize $q from the HF folder" "$(head -c 300 "$T/err")"
    fi
done

"$KILN" inspect "$F32" --json > "$T/g.json" 2>&1
check "experts MXFP4 as stored, file type MOSTLY_MXFP4_MOE, gpt-oss keys" jq_true "$T/g.json" '
    ([.tensors[] | select(.name | test("_exps.weight$")) | .type] | length == 6 and all(. == "MXFP4")) and
    meta["general.file_type"] == 38 and meta["gpt-oss.attention.sliding_window"] == 32 and
    meta["gpt-oss.expert_feed_forward_length"] == 256 and meta["gpt-oss.rope.scaling.type"] == "yarn" and
    meta["tokenizer.ggml.pre"] == "gpt-4o"'

tsv="$FX/tokens/$S.tsv"
if tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi

# as llama-quantize, requantizing the MXFP4 experts needs the flag
expect_fail "quantize Q4_K_M without --allow-requantize: refused" "already quantized" \
    "$KILN" quantize -q "$F32" "$T/refused.gguf" Q4_K_M

# the sinks and the window are applied: with layer 0's sinks set to -1e30
# (no sink) or the window widened to 4096 (no sliding), the logits differ
# from llama.cpp's
cp "$F32" "$T/nosink.gguf"
off=$(jq -r '.tensors[] | select(.name == "blk.0.attn_sinks.weight") | .offset' "$T/g.json")
le32 4048155338 4048155338 4048155338 4048155338 | write_at "$T/nosink.gguf" "$off" # -1e30f
cp "$F32" "$T/nowindow.gguf"
key=gpt-oss.attention.sliding_window # its value: after the key's length, the key and the type
koff=$(jq -r --arg k $key '.metadata[] | select(.key == $k) | .offset' "$T/g.json")
le32 4096 | write_at "$T/nowindow.gguf" $((koff + 8 + ${#key} + 4))
for f in nosink nowindow; do
    if ! "$KILN" golden check "$T/$f.gguf" "$T/gptoss-f32.logits" --max-abs 0 > "$T/c-$f" 2>&1 &&
        grep -q "FAIL: max_abs" "$T/c-$f"; then
        ok "$f: the logits change"
    else
        bad "$f: the logits change" "$(tail -2 "$T/c-$f")"
    fi
done

finish
