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

if need_shared "IQ4_XS agrees with llama-quantize"; then
    g=$(cd "$shared/golden" && pwd)
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for imx in "" -imx; do preset_agrees "$F" "$n" IQ4_XS "$imx"; done
        f=$n-IQ4_XS-imx.gguf
        "$KILN" golden check -t 2 "$T/$n/$f" "$F/logits/$n-IQ4_XS-imx.logits" --max-abs 0 > "$T/out" 2>&1
        check "$f: logits bit-identical to llama.cpp's" test $? -eq 0
        want=$(grep "^$f	" "$F/PPL.tsv" | cut -f4)
        got=$("$KILN" perplexity -t 2 "$T/$n/$f" -f "$g/text/ppl.txt" -c 128 -b 128 2>&1 |
              sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p')
        check "$f: perplexity of the whole text is llama-perplexity's ($want)" test -n "$want" -a "$got" = "$want"
        rm -f "$T/$n"/*.gguf
    done
fi
finish
