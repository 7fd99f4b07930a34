# tests/e2e/quant_legacy.sh - the legacy presets Q4_0, Q4_1, Q5_0 and Q5_1
# against llama.cpp on the three fixtures (ground truth in
# tests/fixtures/quant_legacy/, REGEN.md there says how it was made):
#   - per preset, with and without the imatrix: kiln's plan gives every
#     tensor llama-quantize's type (types.tsv), and kiln quantize of
#     ../shared's f32 GGUF writes llama-quantize's file byte for byte
#     (SHA256SUMS: bytes, metadata, imatrix keys);
#   - Q4_1 / Q5_1: kiln's logits of those files are llama.cpp's, bit for
#     bit (golden check --max-abs 0), and kiln perplexity over the whole
#     text gives llama-perplexity's estimate (PPL.tsv; ~4 s per file).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_legacy
LOGITS="llama-Q4_1 qwen2-Q5_1" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "legacy presets agree with llama-quantize"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for q in Q4_0 Q4_1 Q5_0 Q5_1; do
            for imx in "" -imx; do preset_agrees "$F" "$n" "$q" "$imx"; done
        done
        for q in Q4_1 Q5_1; do
            f=$n-$q.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-$q.logits" "$n-$q" $LOGITS)"
        done
        rm -f "$T/$n"/*.gguf
    done
fi
finish
