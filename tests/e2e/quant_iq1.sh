# tests/e2e/quant_iq1.sh - IQ1_S and IQ1_M as plain types against llama.cpp
# on the three fixtures (ground truth in tests/fixtures/quant_iq1/,
# REGEN.md there says how it was made):
#   - `kiln quantize --pure --imatrix` gives every tensor llama-quantize
#     --pure's type (types.tsv) and writes its file byte for byte
#     (SHA256SUMS). IQ1_S keeps token_embd and output at Q8_0, as the
#     llama-quantize run had to (ggml asserts an imatrix for IQ1_S, and
#     llama-imatrix records none for those two);
#   - kiln's logits of those files are llama.cpp's, bit for bit (golden
#     check --max-abs 0) where LOGITS keeps llama.cpp's logits,
#     and kiln perplexity over the whole text gives llama-perplexity's
#     estimate (PPL.tsv);
#   - without an imatrix kiln refuses both types before writing anything,
#     as llama-quantize does.
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_iq1
LOGITS="llama-IQ1_M mixtral-IQ1_M qwen2-IQ1_S" # llama.cpp's logits kept (lib.sh runtime_agrees)

if need_shared "IQ1_S / IQ1_M agree with llama-quantize"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        imx="--imatrix imatrix/$n.imatrix.gguf"
        preset_agrees "$F" "$n" IQ1_S "" --pure $imx --token-embedding-type q8_0 --output-tensor-type q8_0
        preset_agrees "$F" "$n" IQ1_M "" --pure $imx
        for t in IQ1_S IQ1_M; do
            f=$n-$t.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-$t.logits" "$n-$t" $LOGITS)"
        done
        rm -f "$T/$n"/*.gguf
    done
    for t in IQ1_S IQ1_M; do
        (cd "$T/llama" && "$KILN" quantize -q --pure gguf/llama-f32.gguf no.gguf $t) > /dev/null 2> "$T/err"
        rc=$?
        check "$t without an imatrix: refused (exit 1, nothing written)" \
            test $rc -eq 1 -a ! -e "$T/llama/no.gguf" -a ! -e "$T/llama/no.gguf.tmp"
        check "$t without an imatrix: the error names the imatrix" grep -qi "imatrix\|importance" "$T/err"
    done
fi
finish
