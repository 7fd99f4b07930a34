# tests/e2e/deepseek2_runtime.sh - kiln's runtime for DeepSeek V3 (GGUF
# arch deepseek2: MLA attention in llama.cpp's absorbed form, YaRN, a dense
# lead block, grouped sigmoid MoE with selection bias, routed scaling and a
# shared expert; runtime/deepseek2.c) against what llama.cpp (d32676d7)
# computed for the same tiny FP8 checkpoint, tests/fixtures/deepseek2
# (REGEN.md says how its files were made; tests/e2e/deepseek2.sh checks the
# conversion itself).
#
# Checked: the FP8 model converted by kiln to f32 and quantized by kiln to
# Q8_0, Q4_K_M, and with the fixture's imatrix to Q2_K and IQ2_XXS, each
# byte-identical to llama.cpp's file; logits bit-identical (golden check
# --max-abs 0) and perplexity digit for digit (llama-perplexity -c 128 -b
# 128 --chunks 4) for all five files; --exact logits of the BF16 twin
# within 2e-3 of a float64 forward pass; kiln imatrix within 1e-4 (relative,
# per tensor and expert) of llama-imatrix's, counts equal, the per-head
# attn_k_b / attn_v_b stored as llama-imatrix stores them (one matrix of
# n_head x columns, one count).
#
# The quantized files' short rows fall back to Q5_0 (Q4_K_M), Q4_0 (Q2_K)
# and IQ4_NL (IQ2_XXS), which llama.cpp multiplies three ways (traced with
# a cb_eval driver, tests/fixtures/deepseek2_q0/REGEN.md): repacked
# gemv/gemm for the 2-D Q4_0 / IQ4_NL weights and experts, llamafile's
# tinyBLAS for the per-head k_b / v_b and every Q5_0 product of 2+ tokens,
# vec_dot for the Q5_0 experts; these logits check all three.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek2
S=ds3-tiny-fp8
if ! zstd -q -d -c "$FX/DeepSeek-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
D=$T/q # laid out as make_goldens.sh ran llama-quantize (paths are stored)
mkdir -p "$D/gguf" "$D/imatrix"
F32=$D/gguf/$S-f32.gguf

# same_sha NAME FILE: FILE's sha256 is the one the fixture records for NAME
same_sha() {
    want=$(awk -v n="$1" '$2 == n { print $1 }' "$FX/gguf.sha256")
    got=$(sha256sum "$2" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ]
}

if ! "$KILN" convert "$T/$S" --outtype f32 -o "$F32" 2> "$T/err"; then
    bad "deepseek2: convert f32" "$(head -c 300 "$T/err")"
    finish
fi
check "deepseek2: convert f32 from FP8: byte-identical to llama.cpp's" same_sha "$S-f32.gguf" "$F32"
zstd -q -d -c "$FX/imatrix/$S.imatrix.gguf.zst" > "$D/imatrix/$S.imatrix.gguf"

# quantize: Q8_0 and Q4_K_M plain, Q2_K and IQ2_XXS with the imatrix, as
# the factory ran llama-quantize
for q in Q8_0 Q4_K_M Q2_K IQ2_XXS; do
    imx=""
    case $q in Q2_K | IQ2_XXS) imx="--imatrix imatrix/$S.imatrix.gguf" ;; esac
    if (cd "$D" && "$KILN" quantize -q $imx "gguf/$S-f32.gguf" "gguf/$S-$q.gguf" "$q") 2> "$T/err"; then
        check "deepseek2: quantize $q: byte-identical to llama-quantize's" same_sha "$S-$q.gguf" "$D/gguf/$S-$q.gguf"
    else
        bad "deepseek2: quantize $q" "$(head -c 300 "$T/err")"
    fi
done

# logits: ggml numbers (the default), every logit equal
for q in f32 Q8_0 Q4_K_M Q2_K IQ2_XXS; do
    if zstd -q -d -c "$FX/logits/$S-$q.logits.zst" > "$T/$q.logits" 2> "$T/err"; then
        check "deepseek2: logits $q: bit-identical to llama.cpp's" \
            sh -c '"$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1' _ "$KILN" "$D/gguf/$S-$q.gguf" \
            "$T/$q.logits" "$T/check-$q"
    else
        bad "deepseek2: logits $q: unpack" "$(head -c 300 "$T/err")"
    fi
done
# the MLA attention is what the logits depend on: the same f32 file with
# one head's k_b (absorbed into the queries) changed must not pass
cp "$F32" "$T/kb.gguf"
off=$("$KILN" inspect --json "$T/kb.gguf" |
    jq -r '.tensors[] | select(.name == "blk.2.attn_k_b.weight") | .offset // empty')
if [ -n "$off" ]; then
    flip_bits "$T/kb.gguf" $((off + 3)) 64
    check "deepseek2: logits depend on attn_k_b (one flipped bit fails --max-abs 0)" \
        sh -c '! "$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ \
        "$KILN" "$T/kb.gguf" "$T/f32.logits" "$T/kb-check"
else
    bad "deepseek2: attn_k_b offset" "inspect --json gave no offset"
fi

# --exact (dequantized weights, f32 products) against a float64 forward
# pass of the BF16 twin's f32 conversion (tests/fixtures/deepseek2_f64:
# numpy, from llama.cpp's definition of the model), within 2e-3
B32=$T/ds3-tiny-bf16-f32.gguf
if "$KILN" convert "$T/ds3-tiny-bf16" --outtype f32 -o "$B32" 2> "$T/err" &&
    zstd -q -d -c tests/fixtures/deepseek2_f64/ds3-tiny-bf16-f32.f64ref.logits.zst > "$T/f64ref.logits" 2>> "$T/err"; then
    check "deepseek2: convert f32 from BF16: byte-identical to llama.cpp's" same_sha ds3-tiny-bf16-f32.gguf "$B32"
    check "deepseek2: --exact logits within 2e-3 of a float64 reference" \
        sh -c '"$1" golden check "$2" "$3" --exact --max-abs 2e-3 > "$4" 2>&1' _ "$KILN" "$B32" "$T/f64ref.logits" \
        "$T/check-f64"
    # and the reference is sharp enough to tell the FP8 model from its BF16 twin
    check "deepseek2: the float64 reference rejects the FP8 model (its weights differ in bf16 rounding)" \
        sh -c '! "$1" golden check "$2" "$3" --exact --max-abs 2e-3 > "$4" 2>&1' _ "$KILN" "$F32" "$T/f64ref.logits" \
        "$T/check-f64-fp8"
else
    bad "deepseek2: convert BF16 / unpack the float64 reference" "$(head -c 300 "$T/err")"
fi

# perplexity over the first 4 chunks of ../shared's ppl.txt, as
# llama-perplexity -c 128 -b 128 --chunks 4 printed it (flash attention,
# F16 cache: the other path through attn_v_b)
for q in f32 Q8_0 Q4_K_M Q2_K IQ2_XXS; do
    need_shared "deepseek2: perplexity $q: llama-perplexity's digits" || continue
    "$KILN" perplexity "$D/gguf/$S-$q.gguf" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 \
        > "$T/ppl-$q" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "$FX/ppl/$S-$q.txt" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-$q")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "deepseek2: perplexity $q: llama-perplexity's digits ($(echo "$got" | tail -1))"
    else
        bad "deepseek2: perplexity $q: llama-perplexity's digits" "want '$want' got '$got' $(head -c 200 "$T/err")"
    fi
done

# imatrix as llama-imatrix -c 128 --chunks 64 collected it: every tensor,
# the per-head attn_k_b / attn_v_b as one n_head x columns matrix
if need_shared "deepseek2: imatrix within 1e-4 of llama-imatrix's"; then
    if "$KILN" imatrix "$F32" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 --chunks 64 -q \
        -o "$T/ds2.imatrix.gguf" > /dev/null 2> "$T/err"; then
        check "deepseek2: imatrix within 1e-4 of llama-imatrix's (experts, shared experts, MLA projections)" \
            sh -c '"$1" diff "$2" "$3" --max-rel 1e-4 > "$4" 2>&1' _ \
            "$KILN" "$T/ds2.imatrix.gguf" "$D/imatrix/$S.imatrix.gguf" "$T/imx-diff"
        # the layout itself: llama-imatrix's shapes (attn_k_b 4 heads x 32
        # columns in one row, one count), not one row per head
        check "deepseek2: imatrix attn_k_b / attn_v_b in llama-imatrix's layout (n_head x columns, one count)" \
            sh -c '[ "$("$1" inspect --json "$2" | jq -c "[.tensors[] | select(.name | test(\"attn_[kv]_b\")) | .shape]")" = \
                     "$("$1" inspect --json "$3" | jq -c "[.tensors[] | select(.name | test(\"attn_[kv]_b\")) | .shape]")" ]' _ \
            "$KILN" "$T/ds2.imatrix.gguf" "$D/imatrix/$S.imatrix.gguf"
    else
        bad "deepseek2: imatrix" "$(head -c 300 "$T/err")"
    fi
fi
finish
