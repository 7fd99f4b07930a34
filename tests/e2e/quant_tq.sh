# tests/e2e/quant_tq.sh - TQ1_0, TQ2_0 and MXFP4 as plain types (--pure)
# against llama.cpp on the three fixtures (ground truth in
# tests/fixtures/quant_tq/, REGEN.md there says how it was made):
#   - kiln's plan gives every tensor llama-quantize --pure's type
#     (types.tsv; MXFP4 is llama-quantize's MXFP4_MOE --pure) and kiln
#     quantize of ../shared's f32 GGUF writes llama-quantize's file byte
#     for byte (SHA256SUMS);
#   - where LOGITS keeps them: kiln's logits are llama.cpp's, bit for bit
#     (golden check --max-abs 0; TQ1_0 and TQ2_0 against the one TQ file,
#     MXFP4 in the repacked gemv / gemm order llama.cpp multiplies it in);
#   - every file: kiln perplexity over the whole text gives
#     llama-perplexity's estimate (PPL.tsv).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_tq
LOGITS="qwen2-TQ1_0 qwen2-TQ2_0 mixtral-MXFP4" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "TQ1_0, TQ2_0 and MXFP4 agree with llama.cpp"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for t in TQ1_0 TQ2_0 MXFP4; do
            preset_agrees "$F" "$n" "$t" "" --pure
            f=$n-$t.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-${t%[12]_0}.logits" "$n-$t" $LOGITS)"
            rm -f "$T/$n/$f"
        done
    done
fi
finish
