# tests/e2e/quant_iq2.sh - IQ2_XS and IQ2_S whole files against llama.cpp on
# the three fixtures (ground truth in tests/fixtures/quant_iq2/, REGEN.md
# there says how it was made). Each file is llama-quantize --pure with the
# imatrix, run with the same arguments through kiln:
#   NAME-IQ2_XS-pure-imx.gguf  IQ2_XS --output-tensor-type q8_0
#                              --token-embedding-type q8_0 (output and
#                              token_embd have no imatrix entry, and ggml
#                              refuses IQ2_XS without one)
#   NAME-IQ2_S-pure-imx.gguf   IQ2_M (llama.cpp's IQ2_M is IQ2_S based; its
#                              IQ2_S is IQ2_XS based): every tensor IQ2_S,
#                              output and token_embd without the imatrix
# For each: kiln's plan gives every tensor llama-quantize's type
# (types.tsv), kiln quantize writes llama-quantize's file byte for byte
# (SHA256SUMS), kiln's logits are llama.cpp's bit for bit (golden check
# --max-abs 0) and kiln perplexity over the whole text gives
# llama-perplexity's estimate (PPL.tsv).
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_iq2
LOGITS="llama-IQ2_XS mixtral-IQ2_S" # llama.cpp's logits kept (lib.sh runtime_agrees)

# pure_agrees N FILE TARGET [ARG...]: lib.sh's file_agrees for
# `--pure --imatrix imatrix/N.imatrix.gguf ARG... TARGET`.
pure_agrees() {
    _pn=$1 _pf=$2 _pq=$3
    shift 3
    file_agrees "$F" "$_pn" "$_pf" "$_pq" --pure --imatrix "imatrix/$_pn.imatrix.gguf" "$@"
}

if need_shared "IQ2_XS and IQ2_S agree with llama.cpp"; then
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        pure_agrees "$n" "$n-IQ2_XS-pure-imx.gguf" IQ2_XS --output-tensor-type q8_0 --token-embedding-type q8_0
        pure_agrees "$n" "$n-IQ2_S-pure-imx.gguf" IQ2_M
        for q in IQ2_XS IQ2_S; do
            f=$n-$q-pure-imx.gguf
            runtime_agrees "$F" "$n" "$f" "$(kept_logits "$F/logits/$n-$q-pure-imx.logits.zst" "$n-$q" $LOGITS)"
        done
        rm -f "$T/$n"/*.gguf
    done
fi
finish
