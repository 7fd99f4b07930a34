# tests/e2e/quant_q12.sh - Q1_0 and Q2_0 as plain types (--pure) against
# llama.cpp on the three fixtures (ground truth in tests/fixtures/quant_q12/,
# REGEN.md there says how it was made):
#   - kiln's plan gives every tensor llama-quantize --pure's type
#     (types.tsv) and kiln quantize of ../shared's f32 GGUF writes
#     llama-quantize's file byte for byte (SHA256SUMS). Every row length of
#     these fixtures is a multiple of 128, so no tensor takes a fallback
#     (Q2_0's would be Q4_0; Q1_0 has none: llama-quantize refuses);
#   - where LOGITS keeps them: kiln's logits are llama.cpp's, bit for bit
#     (golden check --max-abs 0), through runtime/vecdot_q12.c's kernels
#     at this CPU's level;
#   - every file: kiln perplexity over the whole text gives
#     llama-perplexity's estimate (PPL.tsv).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_q12
LOGITS="mixtral-Q1_0 qwen2-Q2_0" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "Q1_0 and Q2_0 agree with llama.cpp"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for t in Q1_0 Q2_0; do
            preset_agrees "$F" "$n" "$t" "" --pure
            f=$n-$t.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-$t.logits" "$n-$t" $LOGITS)"
            rm -f "$T/$n/$f"
        done
    done
fi
finish
