# tests/e2e/deepseek2_lite.sh - DeepSeek-V2-Lite (DeepseekV2ForCausalLM,
# GGUF arch deepseek2 read as "lite") end to end against what llama.cpp
# (d32676d7) made of the same tiny checkpoint, tests/fixtures/deepseek2_lite
# (REGEN.md says how): 27 blocks, no q LoRA (attn_q), softmax gating, no
# group limit, no selection bias, 2 shared experts, 32-wide rows.
#
# Checked: convert f32 and bf16 byte-identical to llama.cpp's converter;
# kiln quantize Q8_0, Q4_K_M and (with the fixture's imatrix) Q2_K
# byte-identical to llama-quantize's; logits bit-identical (golden check
# --max-abs 0) for f32, Q8_0, Q4_K_M and Q2_K; perplexity digit for digit
# (llama-perplexity -c 128 -b 128 --chunks 4: flash attention, F16 cache);
# kiln imatrix within 1e-4 of llama-imatrix's, every count (per expert for
# the expert tensors) equal, attn_k_b / attn_v_b in llama-imatrix's layout.
# Then llama.cpp's "lite" rule (the block count: 26 or 27, or 48 with
# 128256 tokens): the same 27 blocks with q LoRA, which llama.cpp converts
# but cannot load, and a 2-block V2 without q LoRA (tests/fixtures/
# deepseek2's ds2-lite-bf16), which llama.cpp cannot load either, are
# refused with one line saying why; so is a file with MTP blocks.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek2_lite
S=ds2-lite
if ! zstd -q -d -c "$FX/DeepSeek-V2-Lite-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
if (cd "$T" && sha256sum -c --quiet) < "$FX/hf-model.sha256" > "$T/err" 2>&1; then
    ok "ds2-lite: the HF models are the ones the checksums were made from"
else
    bad "ds2-lite: the HF models are the ones the checksums were made from" "$(head -c 300 "$T/err")"
fi
D=$T/q # laid out as make_goldens.sh ran llama-quantize (the imatrix path is stored)
mkdir -p "$D/gguf" "$D/imatrix"
F32=$D/gguf/$S-f32.gguf

# same_sha NAME FILE: FILE's sha256 is the one the fixture records for NAME
same_sha() {
    want=$(awk -v n="$1" '$2 == n { print $1 }' "$FX/gguf.sha256")
    got=$(sha256sum "$2" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ]
}

if ! "$KILN" convert "$T/$S" --outtype f32 -o "$F32" 2> "$T/err"; then
    bad "ds2-lite: convert f32" "$(head -c 300 "$T/err")"
    finish
fi
check "ds2-lite: convert f32: byte-identical to llama.cpp's" same_sha "$S-f32.gguf" "$F32"
if "$KILN" convert "$T/$S" --outtype bf16 -o "$T/$S-bf16.gguf" 2> "$T/err"; then
    check "ds2-lite: convert bf16: byte-identical to llama.cpp's" same_sha "$S-bf16.gguf" "$T/$S-bf16.gguf"
else
    bad "ds2-lite: convert bf16" "$(head -c 300 "$T/err")"
fi
zstd -q -d -c "$FX/imatrix/$S.imatrix.gguf.zst" > "$D/imatrix/$S.imatrix.gguf"

# quantize as the factory ran llama-quantize: Q2_K with the imatrix
for q in Q8_0 Q4_K_M Q2_K; do
    imx=""
    [ $q = Q2_K ] && imx="--imatrix imatrix/$S.imatrix.gguf"
    if (cd "$D" && "$KILN" quantize -q $imx "gguf/$S-f32.gguf" "gguf/$S-$q.gguf" "$q") 2> "$T/err"; then
        check "ds2-lite: quantize $q: byte-identical to llama-quantize's" same_sha "$S-$q.gguf" "$D/gguf/$S-$q.gguf"
    else
        bad "ds2-lite: quantize $q" "$(head -c 300 "$T/err")"
    fi
done

# logits: ggml numbers (the default), every logit equal. The f32 file's
# 32-wide experts take ggml_vec_dot_f32's leftover order (rounded
# products, not fused), which tests/test_vecdot_f32.c checks on its own.
# Q8_0 and Q2_K are checked by their perplexity digits below (their logits
# files are left out to keep the fixtures small).
for q in f32 Q4_K_M; do
    if zstd -q -d -c "$FX/logits/$S-$q.logits.zst" > "$T/$q.logits" 2> "$T/err"; then
        check "ds2-lite: logits $q: bit-identical to llama.cpp's" \
            sh -c '"$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1' _ "$KILN" "$D/gguf/$S-$q.gguf" \
            "$T/$q.logits" "$T/check-$q"
    else
        bad "ds2-lite: logits $q: unpack" "$(head -c 300 "$T/err")"
    fi
done
# the plain attn_q is what the logits depend on in this form: the f32
# file with one of its weights changed must not pass
cp "$F32" "$T/q.gguf"
off=$("$KILN" inspect --json "$T/q.gguf" |
    jq -r '.tensors[] | select(.name == "blk.5.attn_q.weight") | .offset // empty')
if [ -n "$off" ]; then
    flip_bits "$T/q.gguf" $((off + 3)) 64
    check "ds2-lite: logits depend on attn_q (one flipped bit fails --max-abs 0)" \
        sh -c '! "$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ \
        "$KILN" "$T/q.gguf" "$T/f32.logits" "$T/q-check"
else
    bad "ds2-lite: attn_q offset" "inspect --json gave no offset"
fi

# perplexity over the first 4 chunks of ../shared's ppl.txt, as
# llama-perplexity -c 128 -b 128 --chunks 4 printed it
for q in f32 Q8_0 Q4_K_M Q2_K; do
    need_shared "ds2-lite: perplexity $q: llama-perplexity's digits" || continue
    "$KILN" perplexity "$D/gguf/$S-$q.gguf" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 \
        > "$T/ppl-$q" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "$FX/ppl/$S-$q.txt" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-$q")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "ds2-lite: perplexity $q: llama-perplexity's digits ($(echo "$got" | tail -1))"
    else
        bad "ds2-lite: perplexity $q: llama-perplexity's digits" "want '$want' got '$got' $(head -c 200 "$T/err")"
    fi
done

# imatrix as llama-imatrix -c 128 --chunks 64 collected it
if need_shared "ds2-lite: imatrix within 1e-4 of llama-imatrix's"; then
    if "$KILN" imatrix "$F32" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 --chunks 64 -q \
        -o "$T/lite.imatrix.gguf" > /dev/null 2> "$T/err"; then
        check "ds2-lite: imatrix within 1e-4 of llama-imatrix's (attn_q, experts, shared experts, MLA)" \
            sh -c '"$1" diff "$2" "$3" --max-rel 1e-4 > "$4" 2>&1' _ \
            "$KILN" "$T/lite.imatrix.gguf" "$D/imatrix/$S.imatrix.gguf" "$T/imx-diff"
        # every count equal, the experts' one per expert ([1, 4])
        n_counts=$(grep -c '\.counts ' "$T/imx-diff")
        check "ds2-lite: imatrix counts equal to llama-imatrix's, per expert for the experts ($n_counts tensors)" \
            sh -c '[ "$1" -gt 0 ] && ! awk '\''$1 ~ /\.counts$/ && $2 != 0 { bad = 1 } END { exit !bad }'\'' "$2" &&
                   "$3" inspect --json "$4" | jq -e "[.tensors[] | select(.name == \"blk.1.ffn_up_exps.weight.counts\") | .shape] == [[1, 4]]" > /dev/null' _ \
            "$n_counts" "$T/imx-diff" "$KILN" "$T/lite.imatrix.gguf"
        check "ds2-lite: imatrix attn_k_b / attn_v_b in llama-imatrix's layout (n_head x columns, one count)" \
            sh -c '[ "$("$1" inspect --json "$2" | jq -c "[.tensors[] | select(.name | test(\"attn_[kv]_b\")) | .shape]")" = \
                     "$("$1" inspect --json "$3" | jq -c "[.tensors[] | select(.name | test(\"attn_[kv]_b\")) | .shape]")" ]' _ \
            "$KILN" "$T/lite.imatrix.gguf" "$D/imatrix/$S.imatrix.gguf"
    else
        bad "ds2-lite: imatrix" "$(head -c 300 "$T/err")"
    fi
fi

# llama.cpp's lite rule. 27 blocks with q LoRA: llama.cpp's converter
# writes the file (kiln's is the same bytes), its loader then wants attn_q
# ("check_tensor_dims: tensor 'blk.0.attn_q.weight' not found"); kiln
# refuses it in one line saying why.
QL=$T/$S-qlora-f32.gguf
if "$KILN" convert "$T/$S-qlora" --outtype f32 -o "$QL" 2> "$T/err"; then
    check "ds2-lite: convert 27 blocks with q LoRA: byte-identical to llama.cpp's" same_sha "$S-qlora-f32.gguf" "$QL"
    expect_fail "ds2-lite: 27 blocks with q LoRA refused as llama.cpp refuses it (lite by block count)" \
        "^kiln: .*blk\.0\.attn_q\.weight: tensor is missing: llama\.cpp reads a deepseek2 of 27 blocks without q LoRA" \
        "$KILN" golden check "$QL" "$T/f32.logits"
    [ "$(wc -l < "$T/err")" -eq 1 ] && ok "ds2-lite: the refusal is one line" || bad "ds2-lite: the refusal is one line" "$(cat "$T/err")"
else
    bad "ds2-lite: convert 27 blocks with q LoRA" "$(head -c 300 "$T/err")"
fi
# 2 blocks without q LoRA: not lite, so llama.cpp requires the key ("key
# not found in model: deepseek2.attention.q_lora_rank")
if zstd -q -d -c tests/fixtures/deepseek2/DeepSeek-tiny.tar.zst | tar -x -C "$T" ds2-lite-bf16 2> "$T/err" &&
    "$KILN" convert "$T/ds2-lite-bf16" --outtype f32 -o "$T/v2-2.gguf" 2>> "$T/err"; then
    expect_fail "ds2-lite: 2 blocks without q LoRA refused as llama.cpp refuses it (not lite)" \
        "^kiln: .*missing key deepseek2\.attention\.q_lora_rank: llama\.cpp reads a deepseek2 without it \(V2-Lite\) only at 26 or 27 blocks.* has 2$" \
        "$KILN" golden check "$T/v2-2.gguf" "$T/f32.logits"
else
    bad "ds2-lite: the 2-block V2 of tests/fixtures/deepseek2" "$(head -c 300 "$T/err")"
fi
# MTP blocks (deepseek2.nextn_predict_layers, which llama.cpp's loader
# leaves out of the trunk) are refused rather than run as blocks: the f32
# file's rope.dimension_count key renamed to it (both names 20 bytes)
cp "$F32" "$T/mtp.gguf"
off=$(grep -abo 'deepseek2\.rope\.dimension_count' "$T/mtp.gguf" | head -1 | cut -d: -f1)
if [ -n "$off" ]; then
    printf 'nextn_predict_layers' | write_at "$T/mtp.gguf" $((off + 10))
    expect_fail "ds2-lite: a deepseek2 with MTP blocks is refused" \
        "^kiln: .*nextn_predict_layers: 16 MTP blocks: kiln runs deepseek2 files without MTP blocks only" \
        "$KILN" golden check "$T/mtp.gguf" "$T/f32.logits"
else
    bad "ds2-lite: rope.dimension_count key" "not found in the f32 file"
fi
finish
