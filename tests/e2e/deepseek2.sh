# tests/e2e/deepseek2.sh - DeepSeek-V3 / V2 (DeepseekV3ForCausalLM,
# DeepseekV2ForCausalLM; GGUF arch deepseek2) conversion against
# llama.cpp's converter for the same models: tests/fixtures/deepseek2/
# holds three tiny checkpoints (REGEN.md says how they and the checksums
# were made): ds3-tiny-fp8 stored as DeepSeek-V3 ships (F8_E4M3 weights
# with 128x128 weight_scale_inv blocks, an MTP layer), ds3-tiny-bf16 its
# BF16 twin, and ds2-lite-bf16 (V2-Lite: no q LoRA, softmax gating). Every
# outtype llama.cpp was asked for must come out byte-identical, and so must
# kiln quantize's Q8_0, Q4_K_M, Q2_K and IQ2_XXS of the FP8 model; then the
# metadata, --dry-run (plan and output size), a config.json with head_dim, a
# mismatched config, and the FP8 convert's peak RSS.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek2
if ! zstd -q -d -c "$FX/DeepSeek-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
if (cd "$T" && sha256sum -c --quiet) < "$FX/hf-model.sha256" > "$T/err" 2>&1; then
    ok "the HF models are the ones the checksums were made from"
else
    bad "the HF models are the ones the checksums were made from" "$(head -c 300 "$T/err")"
fi

# convert MODEL OUTTYPE: kiln's file has llama.cpp's sha256
converts_like_llama() {
    _m=$1 _t=$2 _f=$T/$1-$2.gguf
    if ! "$KILN" convert "$T/$_m" --outtype "$_t" -o "$_f" 2> "$T/err"; then
        bad "convert $_m --outtype $_t" "$(head -c 300 "$T/err")"
        return
    fi
    _want=$(grep "  $_m-$_t.gguf\$" "$FX/gguf.sha256" | cut -c1-64)
    _got=$(sha256sum < "$_f" | cut -c1-64)
    if [ -n "$_want" ] && [ "$_want" = "$_got" ]; then
        ok "convert $_m --outtype $_t: byte-identical to llama.cpp's"
    else
        bad "convert $_m --outtype $_t: byte-identical to llama.cpp's" "sha256 $_got, llama.cpp's ${_want:-missing}"
    fi
}
for t in f32 bf16 f16 q8_0; do converts_like_llama ds3-tiny-fp8 $t; done
for t in f32 bf16 q8_0; do converts_like_llama ds3-tiny-bf16 $t; done
for t in f32 bf16 f16; do converts_like_llama ds2-lite-bf16 $t; done

# quantize kiln's f32 conversion of the FP8 model as llama-quantize did
# llama.cpp's (every row here is short of 256: the per-tensor fallbacks);
# the imatrix path is the one llama-quantize recorded
case $KILN in /*) kiln_abs=$KILN ;; *) kiln_abs=$PWD/$KILN ;; esac # run from inside $T
mkdir -p "$T/imatrix"
zstd -q -d -c "$FX/imatrix/ds3-tiny-fp8.imatrix.gguf.zst" > "$T/imatrix/ds3-tiny-fp8.imatrix.gguf"
for q in Q8_0 Q4_K_M Q2_K IQ2_XXS; do
    case $q in Q2_K|IQ2_XXS) imx="--imatrix imatrix/ds3-tiny-fp8.imatrix.gguf" ;; *) imx= ;; esac
    if (cd "$T" && "$kiln_abs" quantize -q $imx ds3-tiny-fp8-f32.gguf q-$q.gguf $q) 2> "$T/err" &&
        [ "$(sha256sum < "$T/q-$q.gguf" | cut -c1-64)" = "$(grep "  ds3-tiny-fp8-$q.gguf\$" "$FX/gguf.sha256" | cut -c1-64)" ]; then
        ok "quantize $q: byte-identical to llama-quantize's"
    else
        bad "quantize $q: byte-identical to llama-quantize's" "$(head -c 300 "$T/err")"
    fi
done

# from a .tar.zst of the FP8 model, read in place (scales and kv_b read out
# of stream order)
(cd "$T" && tar -cf - ds3-tiny-fp8 | zstd -q -c > ds3-tiny-fp8.tar.zst)
if "$KILN" convert "$T/ds3-tiny-fp8.tar.zst" --outtype bf16 -o "$T/from-archive.gguf" 2> "$T/err" &&
    [ "$(sha256sum < "$T/from-archive.gguf" | cut -c1-64)" = "$(grep '  ds3-tiny-fp8-bf16.gguf$' "$FX/gguf.sha256" | cut -c1-64)" ]; then
    ok "convert the FP8 model from a .tar.zst: byte-identical to llama.cpp's"
else
    bad "convert the FP8 model from a .tar.zst: byte-identical to llama.cpp's" "$(head -c 300 "$T/err")"
fi

# metadata: MLA sizes, dense lead, experts, gating, YaRN, tokenizer
if "$KILN" inspect "$T/ds3-tiny-fp8-f32.gguf" --json > "$T/v3.json" 2>&1; then
    check "V3 keys: MQA over the latent, MLA sizes, sigmoid groups, YaRN log multiplier" jq_true "$T/v3.json" '
        meta["general.architecture"] == "deepseek2" and meta["deepseek2.attention.head_count_kv"] == 1 and
        meta["deepseek2.leading_dense_block_count"] == 1 and meta["deepseek2.attention.q_lora_rank"] == 96 and
        meta["deepseek2.attention.kv_lora_rank"] == 64 and meta["deepseek2.attention.key_length"] == 80 and
        meta["deepseek2.attention.value_length"] == 64 and meta["deepseek2.attention.key_length_mla"] == 48 and
        meta["deepseek2.attention.value_length_mla"] == 32 and meta["deepseek2.expert_count"] == 4 and
        meta["deepseek2.expert_shared_count"] == 1 and meta["deepseek2.expert_group_count"] == 2 and
        meta["deepseek2.expert_group_used_count"] == 1 and meta["deepseek2.expert_gating_func"] == 2 and
        meta["deepseek2.expert_weights_scale"] == 2.5 and meta["deepseek2.expert_weights_norm"] == true and
        meta["deepseek2.rope.dimension_count"] == 16 and meta["deepseek2.rope.scaling.type"] == "yarn" and
        (meta["deepseek2.rope.scaling.yarn_log_multiplier"] - 0.1 | fabs) < 1e-7 and
        meta["tokenizer.ggml.pre"] == "deepseek-v3"'
    check "V3 tensors: k_b/v_b per head, exp_probs_b, no MTP block, no FP8 scales" jq_true "$T/v3.json" '
        ([.tensors[] | select(.name == "blk.1.attn_k_b.weight") | .shape] == [[32, 64, 4]]) and
        ([.tensors[] | select(.name == "blk.1.attn_v_b.weight") | .shape] == [[64, 32, 4]]) and
        ([.tensors[] | select(.name == "blk.2.exp_probs_b.bias") | .type] == ["F32"]) and
        ([.tensors[] | select(.name | test("^blk\\.3\\.|scale_inv|kv_b"))] | length == 0) and
        ([.tensors[] | select(.name | test("^blk\\.0\\..*_exps"))] | length == 0)'
else
    bad "inspect the V3 conversion" "$(head -c 300 "$T/v3.json")"
fi
if "$KILN" inspect "$T/ds2-lite-bf16-f32.gguf" --json > "$T/v2.json" 2>&1; then
    check "V2-Lite keys: plain attn_q, softmax gating, no q_lora_rank, no weights norm" jq_true "$T/v2.json" '
        meta["deepseek2.expert_gating_func"] == 1 and (meta | has("deepseek2.attention.q_lora_rank") | not) and
        (meta | has("deepseek2.expert_weights_norm") | not) and meta["deepseek2.expert_shared_count"] == 2 and
        ([.tensors[] | select(.name == "blk.1.attn_q.weight") | .shape] == [[128, 192]])'
else
    bad "inspect the V2-Lite conversion" "$(head -c 300 "$T/v2.json")"
fi

# --dry-run: the plan, nothing written
if "$KILN" convert "$T/ds3-tiny-fp8" --dry-run > "$T/dry.txt" 2> "$T/err" && [ ! -e "$T/ds3-tiny-fp8.gguf" ] &&
    grep -q "DeepseekV3ForCausalLM) -> deepseek2" "$T/dry.txt" &&
    grep -Eq "^blk\.1\.attn_k_b\.weight +F16 +32 x 64 x 4 +F8_E4M3 +model\.layers\.1\.self_attn\.kv_b_proj\.weight" \
        "$T/dry.txt" && ! grep -q "layers\.3\." "$T/dry.txt"; then
    ok "--dry-run prints the plan (k_b from kv_b_proj, FP8 source, MTP dropped)"
else
    bad "--dry-run prints the plan" "$(head -c 300 "$T/err") $(head -3 "$T/dry.txt")"
fi

# a config.json as newer transformers save it, with head_dim (=
# qk_rope_head_dim): llama.cpp's common keys write key_length/value_length
# from it and DeepSeek's overwrite them in place; the folder keeps its name
# (general.name); --dry-run's output size counts those keys once
mkdir -p "$T/hd/ds3-tiny-bf16"
cp "$T/ds3-tiny-bf16"/* "$T/hd/ds3-tiny-bf16/"
jq '.head_dim = 16' "$T/ds3-tiny-bf16/config.json" > "$T/hd/ds3-tiny-bf16/config.json"
if "$KILN" convert "$T/hd/ds3-tiny-bf16" --outtype bf16 -o "$T/hd.gguf" 2> "$T/err" &&
    [ "$(sha256sum < "$T/hd.gguf" | cut -c1-64)" = \
        "$(grep '  ds3-tiny-bf16+head_dim16-bf16.gguf$' "$FX/gguf.sha256" | cut -c1-64)" ]; then
    ok "convert with head_dim in config.json: byte-identical to llama.cpp's"
else
    bad "convert with head_dim in config.json: byte-identical to llama.cpp's" "$(head -c 300 "$T/err")"
fi
for m in hd/ds3-tiny-bf16 ds3-tiny-fp8 ds2-lite-bf16; do
    want=$("$KILN" convert "$T/$m" --outtype bf16 --dry-run 2> "$T/err" | sed -n 's/.*; output size \([0-9]*\) bytes.*/\1/p')
    "$KILN" convert "$T/$m" --outtype bf16 -o "$T/size.gguf" --force 2>> "$T/err"
    got=$(stat -c %s "$T/size.gguf" 2> /dev/null)
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "--dry-run's output size is the file's ($m: $got bytes)"
    else
        bad "--dry-run's output size is the file's ($m)" "dry-run ${want:-?}, file ${got:-?}; $(head -c 200 "$T/err")"
    fi
done

# a config that disagrees with kv_b_proj's shape names the key
cp -r "$T/ds3-tiny-bf16" "$T/badcfg"
jq '.v_head_dim = 16' "$T/ds3-tiny-bf16/config.json" > "$T/badcfg/config.json"
expect_fail "v_head_dim disagreeing with kv_b_proj: refused, naming the key" \
    "v_head_dim.*disagrees with tensor model\.layers\.0\.self_attn\.(kv_b_proj|o_proj)" \
    "$KILN" convert "$T/badcfg" -o "$T/bad.gguf"

# peak RSS of the FP8 convert: inline dequantization, no BF16 copy; the
# largest tensor here is tiny, so the bound is the process's constant
peak_rss_below "FP8 convert" 65536 "$KILN" convert "$T/ds3-tiny-fp8" --outtype bf16 -o "$T/rss.gguf"

finish
