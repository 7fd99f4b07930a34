# tests/e2e/quant_iq4xs.sh - the IQ4_XS preset against llama.cpp on the
# three fixtures (ground truth in tests/fixtures/quant_iq4xs/, REGEN.md
# there says how it was made):
#   - with and without the imatrix: kiln's plan gives every tensor
#     llama-quantize's type (types.tsv), and kiln quantize of ../shared's
#     f32 GGUF writes llama-quantize's file byte for byte (SHA256SUMS:
#     bytes, metadata, imatrix keys);
#   - the imatrix file: kiln's logits are llama.cpp's, bit for bit (golden
#     check --max-abs 0), and kiln perplexity over the whole text gives
#     llama-perplexity's estimate (PPL.tsv).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_iq4xs
LOGITS="mixtral" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "IQ4_XS agrees with llama-quantize"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for imx in "" -imx; do preset_agrees "$F" "$n" IQ4_XS "$imx"; done
        f=$n-IQ4_XS-imx.gguf
        runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-IQ4_XS-imx.logits" "$n" $LOGITS)"
        rm -f "$T/$n"/*.gguf
    done
fi
finish
