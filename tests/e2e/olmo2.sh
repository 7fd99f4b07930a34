# tests/e2e/olmo2.sh - OLMo 2 (Olmo2ForCausalLM; GGUF arch olmo2) end to
# end against llama.cpp's own outputs for the same model:
# tests/fixtures/olmo2/ holds a tiny trained OLMo-2-style HF model (no
# pre-norms, post-attention and post-FFN RMS norms, q/k norms over the
# whole projection, NEOX RoPE) and what llama.cpp (d32676d7) made of it
# (REGEN.md says how). The checks are arch_goldens's (convert and Q4_K_M
# byte-identical, IQ2_XXS types, logits bit-identical for f32, Q4_K_M and
# IQ2_XXS, perplexity digits, imatrix within 1e-4), llama-quantize's types
# for more presets, the tokenizer's ids, and checks that the whole-width
# q/k norms and the post-norms are what the logits depend on.
. tests/e2e/lib.sh
. tests/e2e/arch_goldens.inc

FX=tests/fixtures/olmo2
S=olmo2-tiny
if ! zstd -q -d -c "$FX/Olmo2-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
arch_goldens olmo2 "$FX" "$S" "$T/Olmo2-tiny"
D=$T/q-olmo2
F32=$D/gguf/$S-f32.gguf

# the other outtypes of llama.cpp's converter, byte for byte
for t in f16 bf16 q8_0; do
    if "$KILN" convert "$T/Olmo2-tiny" --outtype "$t" -o "$T/$S-$t.gguf" 2> "$T/err"; then
        check "olmo2: convert $t: byte-identical to llama.cpp's" same_sha "$S-$t.gguf" "$T/$S-$t.gguf"
    else
        bad "olmo2: convert $t" "$(head -c 300 "$T/err")"
    fi
done

# more presets, with the fixture's imatrix: kiln's plan gives every tensor
# llama-quantize's type (types.tsv), and kiln quantize writes
# llama-quantize's bytes (gguf.sha256)
for q in Q2_K Q3_K_M Q5_K_M Q6_K Q8_0 IQ3_XXS IQ4_XS; do
    if (cd "$D" && "$KILN" quantize --dry-run --json --imatrix "imatrix/$S.imatrix.gguf" "gguf/$S-f32.gguf" "$q") \
        > "$T/plan.json" 2> "$T/err"; then
        jq -r --arg f "$S-$q.gguf" '.tensors[] | [$f, .name, .to] | @tsv' "$T/plan.json" | sort > "$T/kiln.types"
        grep "^$S-$q.gguf	" "$FX/types.tsv" | sort > "$T/llama.types"
        check "olmo2: preset $q: llama-quantize's type for every tensor ($(wc -l < "$T/llama.types") tensors)" \
            sh -c 'test -s "$1" && cmp -s "$1" "$2"' _ "$T/llama.types" "$T/kiln.types"
    else
        bad "olmo2: preset $q: plan" "$(head -c 300 "$T/err")"
    fi
    if (cd "$D" && "$KILN" quantize -q --imatrix "imatrix/$S.imatrix.gguf" "gguf/$S-f32.gguf" "gguf/$S-$q.gguf" "$q") \
        2> "$T/err"; then
        check "olmo2: preset $q: byte-identical to llama-quantize's" same_sha "$S-$q.gguf" "$D/gguf/$S-$q.gguf"
    else
        bad "olmo2: preset $q: quantize" "$(head -c 300 "$T/err")"
    fi
done

# layer by layer (the order for models larger than memory): the same digits
if need_shared "olmo2: perplexity f32 --layer-major: llama-perplexity's digits"; then
    "$KILN" perplexity "$F32" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 --layer-major \
        > "$T/ppl-lm" 2> "$T/err"
    want=$(grep 'Final estimate' "$FX/ppl/$S-f32.txt" | sed 's/^[0-9.]* I //')
    got=$(grep 'Final estimate' "$T/ppl-lm")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "olmo2: perplexity f32 --layer-major: llama-perplexity's digits"
    else
        bad "olmo2: perplexity f32 --layer-major: llama-perplexity's digits" "want '$want' got '$got'"
    fi
fi

tsv="$FX/tokens/$S.tsv"
if [ -f "$F32" ] && tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "olmo2: tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "olmo2: tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi

"$KILN" inspect "$F32" --json > "$T/o.json" 2>&1
check "olmo2: arch, pre-tokenizer, whole-width q/k norms, no pre-norms" jq_true "$T/o.json" '
    meta["general.architecture"] == "olmo2" and meta["tokenizer.ggml.pre"] == "llama-bpe" and
    ([.tensors[] | select(.name == "blk.0.attn_q_norm.weight") | .shape[0]] == [256]) and
    ([.tensors[] | select(.name == "blk.0.attn_k_norm.weight") | .shape[0]] == [128]) and
    ([.tensors[] | select(.name | test("attn_norm|ffn_norm"))] | length == 0) and
    ([.tensors[] | select(.name | test("post_attention_norm|post_ffw_norm"))] | length == 4)'

# each norm matters: with its first weight zeroed, the logits differ from
# llama.cpp's (a norm is F32, so the first 4 bytes of its data are w[0]).
# attn_k_norm's w[0] lies in KV head 0 only, so a per-head reading of the
# 128-wide weight would also use it; its w[64] (KV head 1) tells a
# whole-width norm from a per-head one.
tensor_data_offset() {
    jq -r --arg n "$2" '(.data_offset // 0) as $d | .tensors[] | select(.name == $n) | ($d + .offset)' "$1"
}
for nw in blk.0.attn_q_norm.weight:0 blk.0.attn_k_norm.weight:64 blk.1.post_attention_norm.weight:0 \
    blk.1.post_ffw_norm.weight:0; do
    name=${nw%:*} idx=${nw#*:}
    off=$(tensor_data_offset "$T/o.json" "$name")
    cp "$F32" "$T/one.gguf"
    if [ -n "$off" ] && le32 0 | write_at "$T/one.gguf" $((off + 4 * idx)) &&
        ! "$KILN" golden check "$T/one.gguf" "$T/olmo2-f32.logits" --max-abs 0 > "$T/c1" 2>&1 &&
        grep -q "FAIL: max_abs" "$T/c1"; then
        ok "olmo2: $name[$idx] is applied: 0 instead changes the logits"
    else
        bad "olmo2: $name[$idx] is applied: 0 instead changes the logits" "offset '$off' $(tail -2 "$T/c1")"
    fi
done

# OLMo 3's sliding window (same HF class family) is refused, not ignored
sed 's/"use_cache"/"sliding_window": 4096, "use_cache"/' "$T/Olmo2-tiny/config.json" > "$T/cfg"
mkdir -p "$T/swa" && cp "$T/Olmo2-tiny/"* "$T/swa/" && cp "$T/cfg" "$T/swa/config.json"
if ! "$KILN" convert "$T/swa" --outtype f32 -o "$T/swa.gguf" 2> "$T/err" && grep -q "sliding_window" "$T/err" &&
    [ ! -e "$T/swa.gguf" ]; then
    ok "olmo2: convert refuses a sliding_window config (OLMo 3)"
else
    bad "olmo2: convert refuses a sliding_window config (OLMo 3)" "$(head -c 300 "$T/err")"
fi

# ... and so is a GGUF of arch olmo2 with one (OLMo 3 as llama.cpp converts
# it): a metadata-only file is enough, the hyper-parameters are read first
gstr() { le64 ${#1}; printf '%s' "$1"; }
u32kv() { gstr "$1"; le32 4 "$2"; } # 4: UINT32
{
    printf GGUF; le32 3; le64 0 8
    gstr general.architecture; le32 8; gstr olmo2 # 8: STRING
    u32kv olmo2.context_length 4096; u32kv olmo2.embedding_length 256; u32kv olmo2.block_count 2
    u32kv olmo2.feed_forward_length 256; u32kv olmo2.attention.head_count 4
    gstr olmo2.attention.layer_norm_rms_epsilon; le32 6 897988541 # 6: FLOAT32, 1e-6
    u32kv olmo2.attention.sliding_window 4096
} > "$T/swa-meta.gguf"
expect_fail "olmo2: the runtime refuses a sliding window (OLMo 3)" "sliding-window attention" \
    "$KILN" generate "$T/swa-meta.gguf" -p hi -n 1

finish
