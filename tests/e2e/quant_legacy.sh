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

if need_shared "legacy presets agree with llama-quantize"; then
    g=$(cd "$shared/golden" && pwd)
    for n in llama mixtral qwen2; do
        quant_layout "$n"
        for q in Q4_0 Q4_1 Q5_0 Q5_1; do
            for imx in "" -imx; do preset_agrees "$F" "$n" "$q" "$imx"; done
        done
        for q in Q4_1 Q5_1; do
            f=$n-$q.gguf
            "$KILN" golden check -t 2 "$T/$n/$f" "$F/logits/$n-$q.logits" --max-abs 0 > "$T/out" 2>&1
            check "$f: logits bit-identical to llama.cpp's" test $? -eq 0
            want=$(grep "^$f	" "$F/PPL.tsv" | cut -f4)
            got=$("$KILN" perplexity -t 2 "$T/$n/$f" -f "$g/text/ppl.txt" -c 128 -b 128 2>&1 |
                  sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p')
            check "$f: perplexity of the whole text is llama-perplexity's ($want)" test -n "$want" -a "$got" = "$want"
        done
        rm -f "$T/$n"/*.gguf
    done
fi
finish
