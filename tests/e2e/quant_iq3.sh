# tests/e2e/quant_iq3.sh - the plain types IQ3_XXS and IQ3_S (--pure)
# against llama.cpp on the three fixtures (ground truth in
# tests/fixtures/quant_iq3/, REGEN.md there says how it was made):
#   - kiln's plan gives every tensor llama-quantize --pure's type
#     (types.tsv), and kiln quantize --pure of ../shared's f32 GGUF writes
#     llama-quantize --pure's file byte for byte (SHA256SUMS): with the
#     imatrix for both types, and without it for IQ3_S;
#   - without an imatrix kiln refuses IQ3_XXS, as llama-quantize does;
#   - the imatrix files: kiln's logits are llama.cpp's, bit for bit (golden
#     check --max-abs 0; 5 of the 6 files, see REGEN.md), and kiln perplexity over the whole text gives
#     llama-perplexity's estimate (PPL.tsv).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_iq3
LOGITS="llama-IQ3_S mixtral-IQ3_XXS qwen2-IQ3_S" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "IQ3_XXS and IQ3_S agree with llama-quantize --pure"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        preset_agrees "$F" "$n" IQ3_S "" --pure
        for q in IQ3_XXS IQ3_S; do
            preset_agrees "$F" "$n" "$q" -imx --pure
            f=$n-$q-imx.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-$q-imx.logits" "$n-$q" $LOGITS)"
        done
        (cd "$T/$n" && "$KILN" quantize -q --pure gguf/$n-f32.gguf $n-IQ3_XXS.gguf IQ3_XXS) > /dev/null 2> "$T/err"
        rc=$?
        check "$n-IQ3_XXS.gguf without an imatrix: refused as llama-quantize refuses it" \
            test $rc -eq 1 -a ! -e "$T/$n/$n-IQ3_XXS.gguf"
        check "... and the error names the missing importance matrix" grep -q "importance matrix" "$T/err"
        rm -f "$T/$n"/*.gguf
    done
fi
finish
