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
        # the layout llama-quantize ran in: the imatrix path is stored as given
        mkdir -p "$T/$n/gguf" "$T/$n/imatrix"
        ln -s "$g/gguf/$n-f32.gguf" "$T/$n/gguf/$n-f32.gguf"
        ln -s "$g/imatrix/$n.imatrix.gguf" "$T/$n/imatrix/$n.imatrix.gguf"
        for imx in "" -imx; do
            f=$n-IQ4_XS$imx.gguf
            set -- ; [ -n "$imx" ] && set -- --imatrix "imatrix/$n.imatrix.gguf"
            (cd "$T/$n" && "$KILN" quantize --dry-run --json "$@" "gguf/$n-f32.gguf" IQ4_XS) > "$T/plan.json"
            jq -r --arg f "$f" '.tensors[] | [$f, .name, .to] | @tsv' "$T/plan.json" | sort > "$T/kiln.types"
            grep "^$f	" "$F/types.tsv" | sort > "$T/llama.types"
            if [ -s "$T/llama.types" ] && cmp -s "$T/kiln.types" "$T/llama.types"; then
                ok "$f: every tensor's type is llama-quantize's ($(wc -l < "$T/llama.types") tensors)"
            else
                bad "$f: every tensor's type is llama-quantize's" \
                    "$(diff "$T/llama.types" "$T/kiln.types" | head -5 | tr '\n' ' ')"
            fi
            (cd "$T/$n" && "$KILN" quantize -q "$@" "gguf/$n-f32.gguf" "$f" IQ4_XS) > /dev/null 2> "$T/err"
            want=$(grep " $f\$" "$F/SHA256SUMS" | cut -d' ' -f1)
            got=$(sha256sum < "$T/$n/$f" | cut -d' ' -f1)
            check "$f: byte-identical to llama-quantize's file" test -n "$want" -a "$got" = "$want"
        done
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
