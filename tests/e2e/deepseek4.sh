# tests/e2e/deepseek4.sh - DeepSeek-V4-Flash (DeepseekV4ForCausalLM; GGUF
# arch deepseek4) conversion against llama.cpp's converter for the same
# models: tests/fixtures/deepseek4/ holds two tiny checkpoints (REGEN.md
# says how they and the checksums were made): ds4-tiny-fp8 stored as
# DeepSeek-V4-Flash ships (F8_E4M3 projections with F8_E8M0 128x128 block
# scales, FP4 routed experts with E8M0 scales per 32, an I64 hash-routing
# table, hyper-connection tensors, compressors and an indexer, an MTP
# layer) and ds4-tiny-bf16 its BF16 twin. Every outtype llama.cpp was asked
# for must come out byte-identical (the V4 converter writes the same file
# at each), and so must kiln quantize's Q8_0 and Q4_K_M of the FP8 model;
# then the metadata and tensor types, --dry-run (plan and output size), a
# .tar.zst source, broken configs, and the FP8 convert's peak RSS.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek4
if ! zstd -q -d -c "$FX/DeepSeek4-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
if (cd "$T" && sha256sum -c --quiet) < "$FX/hf-model.sha256" > "$T/err" 2>&1; then
    ok "the HF models are the ones the checksums were made from"
else
    bad "the HF models are the ones the checksums were made from" "$(head -c 300 "$T/err")"
fi

# llama.cpp's sha256 of FILE (a name in gguf.sha256)
llama_sha() { grep "  $1\$" "$FX/gguf.sha256" | cut -c1-64; }

# convert MODEL OUTTYPE: kiln's file has llama.cpp's sha256
converts_like_llama() {
    _m=$1 _t=$2 _f=$T/$1-$2.gguf
    if ! "$KILN" convert "$T/$_m" --outtype "$_t" -o "$_f" 2> "$T/err"; then
        bad "convert $_m --outtype $_t" "$(head -c 300 "$T/err")"
        return
    fi
    _want=$(llama_sha "$_m-$_t.gguf")
    _got=$(sha256sum < "$_f" | cut -c1-64)
    if [ -n "$_want" ] && [ "$_want" = "$_got" ]; then
        ok "convert $_m --outtype $_t: byte-identical to llama.cpp's"
    else
        bad "convert $_m --outtype $_t: byte-identical to llama.cpp's" "sha256 $_got, llama.cpp's ${_want:-missing}"
    fi
}
for m in ds4-tiny-fp8 ds4-tiny-bf16; do
    for t in f32 bf16 f16 q8_0; do converts_like_llama $m $t; done
done

# quantize kiln's f32 conversion of the FP8 model as llama-quantize did
# llama.cpp's (its Q8_0 and MXFP4 tensors are requantized, hence
# --allow-requantize in both tools)
for q in Q8_0 Q4_K_M; do
    if "$KILN" quantize -q --allow-requantize "$T/ds4-tiny-fp8-f32.gguf" "$T/q-$q.gguf" $q 2> "$T/err" &&
        [ "$(sha256sum < "$T/q-$q.gguf" | cut -c1-64)" = "$(llama_sha "ds4-tiny-fp8-$q.gguf")" ]; then
        ok "quantize $q: byte-identical to llama-quantize's"
    else
        bad "quantize $q: byte-identical to llama-quantize's" "$(head -c 300 "$T/err")"
    fi
done

# from a .tar.zst of the FP8 model, read in place
(cd "$T" && tar -cf - ds4-tiny-fp8 | zstd -q -c > ds4-tiny-fp8.tar.zst)
if "$KILN" convert "$T/ds4-tiny-fp8.tar.zst" -o "$T/from-archive.gguf" 2> "$T/err" &&
    [ "$(sha256sum < "$T/from-archive.gguf" | cut -c1-64)" = "$(llama_sha ds4-tiny-fp8-f32.gguf)" ]; then
    ok "convert the FP8 model from a .tar.zst: byte-identical to llama.cpp's"
else
    bad "convert the FP8 model from a .tar.zst: byte-identical to llama.cpp's" "$(head -c 300 "$T/err")"
fi

# quantization_config as the real checkpoint has it (no weight_block_size),
# or none at all: llama.cpp's converter takes 128x128 blocks either way
for edit in 'del(.quantization_config.weight_block_size)' 'del(.quantization_config)'; do
    rm -rf "$T/qc" && mkdir "$T/qc" && cp -r "$T/ds4-tiny-fp8" "$T/qc/" # the folder name is general.name
    jq "$edit" "$T/ds4-tiny-fp8/config.json" > "$T/qc/ds4-tiny-fp8/config.json"
    if "$KILN" convert "$T/qc/ds4-tiny-fp8" -o "$T/qc/out.gguf" 2> "$T/err" &&
        [ "$(sha256sum < "$T/qc/out.gguf" | cut -c1-64)" = "$(llama_sha ds4-tiny-fp8-f32.gguf)" ]; then
        ok "FP8 model, config.json with $edit: byte-identical to llama.cpp's (128x128 blocks)"
    else
        bad "FP8 model, config.json with $edit: byte-identical to llama.cpp's" "$(head -c 300 "$T/err")"
    fi
done

# metadata: V4's keys, sqrt-softplus gating (llama.cpp's value 4), the
# file type MXFP4_MOE whatever the outtype, the chat template's slot
if "$KILN" inspect "$T/ds4-tiny-fp8-f32.gguf" --json > "$T/v4.json" 2>&1; then
    check "V4 keys: hyper-connections, compress ratios, indexer, grouped output, sqrtsoftplus" jq_true "$T/v4.json" '
        meta["general.architecture"] == "deepseek4" and meta["general.file_type"] == 38 and
        meta["deepseek4.expert_gating_func"] == 4 and meta["deepseek4.attention.head_count_kv"] == 1 and
        meta["deepseek4.attention.key_length"] == 128 and meta["deepseek4.rope.dimension_count"] == 64 and
        meta["deepseek4.attention.q_lora_rank"] == 64 and meta["deepseek4.attention.sliding_window"] == 128 and
        meta["deepseek4.swiglu_clamp_exp"] == [10, 10, 10] and meta["deepseek4.swiglu_clamp_shexp"] == [10, 10, 10] and
        meta["deepseek4.attention.indexer.head_count"] == 2 and meta["deepseek4.attention.indexer.key_length"] == 128 and
        meta["deepseek4.attention.output_group_count"] == 2 and meta["deepseek4.attention.output_lora_rank"] == 64 and
        meta["deepseek4.attention.compress_ratios"] == [4, 128, 0, 0] and
        meta["deepseek4.attention.compress_rope_freq_base"] == 160000 and
        meta["deepseek4.hyper_connection.count"] == 4 and meta["deepseek4.hyper_connection.sinkhorn_iterations"] == 20 and
        meta["deepseek4.hash_layer_count"] == 1 and meta["deepseek4.embedding_length_out"] == 512 and
        meta["deepseek4.expert_weights_scale"] == 1.5 and meta["deepseek4.expert_weights_norm"] == true and
        (meta["tokenizer.chat_template"] | startswith("{% for m in messages %}")) and
        .metadata[1].key == "tokenizer.chat_template" and meta["tokenizer.ggml.pre"] == "deepseek-v3"'
    check "V4 tensors: FP8 -> Q8_0, FP4 experts -> MXFP4, hash table I32, BF16 kept, no MTP or scales" jq_true "$T/v4.json" '
        ([.tensors[] | select(.name == "blk.0.ffn_gate_tid2eid.weight") | [.type, .shape]] == [["I32", [2, 640]]]) and
        ([.tensors[] | select(.name == "blk.1.ffn_down_exps.weight") | [.type, .shape]] == [["MXFP4", [64, 128, 4]]]) and
        ([.tensors[] | select(.name == "blk.0.attn_q_b.weight") | .type] == ["Q8_0"]) and
        ([.tensors[] | select(.name == "blk.0.attn_compressor_kv.weight") | [.type, .shape]] == [["BF16", [128, 256]]]) and
        ([.tensors[] | select(.name == "blk.1.attn_compressor_kv.weight") | .shape] == [[128, 128]]) and
        ([.tensors[] | select(.name == "blk.0.hc_attn_fn.weight") | [.type, .shape]] == [["F32", [512, 24]]]) and
        ([.tensors[] | select(.name == "blk.2.exp_probs_b.bias") | .type] == ["F32"]) and
        ([.tensors[] | select(.name | test("compressor|indexer") and test("^blk\\.2\\."))] | length == 0) and
        ([.tensors[] | select(.name | test("^blk\\.3\\.|nextn|scale$|mtp"))] | length == 0) and
        (.tensors[0].name == "blk.0.ffn_gate_tid2eid.weight")'
else
    bad "inspect the V4 conversion" "$(head -c 300 "$T/v4.json")"
fi

# --dry-run: the plan, nothing written, and the output size is the file's
if "$KILN" convert "$T/ds4-tiny-fp8" --dry-run > "$T/dry.txt" 2> "$T/err" && [ ! -e "$T/ds4-tiny-fp8.gguf" ] &&
    grep -q "DeepseekV4ForCausalLM) -> deepseek4" "$T/dry.txt" &&
    grep -Eq "^blk\.0\.ffn_gate_exps\.weight +MXFP4 +128 x 64 x 4 +I8 +layers\.0\.ffn\.experts\.0\.w1\.weight" "$T/dry.txt" &&
    grep -Eq "^blk\.0\.attn_kv\.weight +Q8_0 +128 x 128 +F8_E4M3 +layers\.0\.attn\.wkv\.weight" "$T/dry.txt" &&
    ! grep -q "mtp\." "$T/dry.txt"; then
    ok "--dry-run prints the plan (MXFP4 experts from FP4, Q8_0 from FP8, MTP dropped)"
else
    bad "--dry-run prints the plan" "$(head -c 300 "$T/err") $(head -3 "$T/dry.txt")"
fi
for m in ds4-tiny-fp8 ds4-tiny-bf16; do
    want=$("$KILN" convert "$T/$m" --dry-run 2> "$T/err" | sed -n 's/.*; output size \([0-9]*\) bytes.*/\1/p')
    got=$(stat -c %s "$T/$m-f32.gguf" 2> /dev/null)
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "--dry-run's output size is the file's ($m: $got bytes)"
    else
        bad "--dry-run's output size is the file's ($m)" "dry-run ${want:-?}, file ${got:-?}; $(head -c 200 "$T/err")"
    fi
done

# a checkpoint without a chat template (as DeepSeek-V4-Flash ships): llama.cpp
# writes its own template there, kiln none (not an empty string), and
# --dry-run's size still is the file's
rm -rf "$T/notmpl" && cp -r "$T/ds4-tiny-bf16" "$T/notmpl"
jq 'del(.chat_template)' "$T/ds4-tiny-bf16/tokenizer_config.json" > "$T/notmpl/tokenizer_config.json"
rm -f "$T/notmpl"/chat_template.*
if "$KILN" convert "$T/notmpl" -o "$T/notmpl.gguf" 2> "$T/err" &&
    want=$("$KILN" convert "$T/notmpl" --dry-run 2>> "$T/err" | sed -n 's/.*; output size \([0-9]*\) bytes.*/\1/p') &&
    [ "$want" = "$(stat -c %s "$T/notmpl.gguf")" ] &&
    "$KILN" inspect --json "$T/notmpl.gguf" > "$T/notmpl.json" 2>> "$T/err" &&
    jq -e '[.metadata[].key] | index("tokenizer.chat_template") == null' "$T/notmpl.json" > /dev/null; then
    ok "no chat template in the checkpoint: no tokenizer.chat_template key, dry-run size is the file's"
else
    bad "no chat template in the checkpoint: no tokenizer.chat_template key" "$(head -c 300 "$T/err")"
fi

# broken configs: one line naming the key, non-zero exit
broken() { # NAME JQ-EDIT PATTERN
    rm -rf "$T/bad" && cp -r "$T/ds4-tiny-bf16" "$T/bad"
    jq "$2" "$T/ds4-tiny-bf16/config.json" > "$T/bad/config.json"
    expect_fail "$1" "$3" "$KILN" convert "$T/bad" -o "$T/bad.gguf"
    [ "$(wc -l < "$T/err")" -eq 1 ] || bad "$1: one line" "$(head -c 300 "$T/err")"
}
broken "hc_mult missing: refused, naming the key" 'del(.hc_mult)' '^kiln: config\.json: hc_mult.*missing'
broken "o_groups disagreeing with wo_a: refused" '.o_groups = 4' 'o_groups \* o_lora_rank.*disagrees with tensor layers\.0\.attn\.wo_a'
broken "compress_ratios disagreeing with the compressor: refused" '.compress_ratios = [128, 4, 0, 0]' \
    'compress_ratios.*implies shape \[(128, 128|4, 256)\] for tensor layers\.[01]\.attn\.compressor\.ape'
broken "compress_ratios shorter than the layers: refused" '.compress_ratios = [4]' \
    'compress_ratios.*one per layer \(layer 1\)'
broken "num_hash_layers past the hash tables: refused" '.num_hash_layers = 2' \
    'num_hash_layers.*layer 1 is hash-routed, but layers\.1\.ffn\.gate\.tid2eid is missing'
rm -rf "$T/bad" && cp -r "$T/ds4-tiny-bf16" "$T/bad" && printf '{"architectures": ["DeepseekV4ForCausalLM"], ' > "$T/bad/config.json"
expect_fail "a truncated config.json: refused" '^kiln: .*config\.json' "$KILN" convert "$T/bad" -o "$T/bad.gguf"
# an expert missing from the checkpoint names it
rm -rf "$T/bad" && cp -r "$T/ds4-tiny-bf16" "$T/bad"
jq '.weight_map |= with_entries(select(.key | test("layers\\.1\\.ffn\\.experts\\.3\\.w2") | not))' \
    "$T/ds4-tiny-bf16/model.safetensors.index.json" > "$T/bad/model.safetensors.index.json"
expect_fail "a checkpoint whose index misses an expert: refused" 'layers\.1\.ffn\.experts\.3\.w2' \
    "$KILN" convert "$T/bad" -o "$T/bad.gguf"

# peak RSS of the FP8 convert: inline dequantization and repacking
peak_rss_below "FP8 convert" 65536 "$KILN" convert "$T/ds4-tiny-fp8" -o "$T/rss.gguf"

finish
