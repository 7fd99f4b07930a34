# tests/e2e/quant_presets.sh - every llama-quantize preset through the
# command line (ground truth in tests/fixtures/quant_presets/, REGEN.md
# there says how it was made; tests/test_quant_presets.c checks the same
# table on every fixture architecture through the library):
#   - on ../shared's three f32 GGUFs, with and without the imatrix,
#     `kiln quantize --dry-run --json` gives every tensor llama-quantize's
#     type for each preset whose codecs kiln has (a preset needing a codec
#     kiln lacks is reported as a skip); where llama-quantize refused
#     (no imatrix for an IQ1/IQ2/IQ3_XXS/Q2_K_S mix), kiln refuses too,
#     with one line, before writing anything;
#   - presets by alias and by ftype number, COPY;
#   - `--list-types` is the table in README.md, and its JSON agrees with
#     the block sizes it is derived from.
. tests/e2e/lib.sh
F=$PWD/tests/fixtures/quant_presets
zstd -dcq "$F/types.tsv.zst" > "$T/types.tsv"
presets=$(awk -F'\t' '$3 == "-" { print $2 }' "$F/presets.tsv")

if need_shared "presets agree with llama-quantize"; then
    g=$(cd "$shared/golden" && pwd)
    for n in llama mixtral qwen2; do
        agree=0 refused=0 nocodec=""
        for p in $presets; do
            for imx in yes no; do
                set -- "$g/gguf/$n-f32.gguf" "$p"
                [ $imx = yes ] && set -- --imatrix "$g/imatrix/$n.imatrix.gguf" "$@"
                grep "^$n	$p	$imx	" "$T/types.tsv" | cut -f4,5 | sort > "$T/llama.types"
                if grep -q '^-	FAIL: ' "$T/llama.types"; then
                    # a real run must refuse, in one line, and write nothing
                    if "$KILN" quantize "$@" "$T/refused.gguf" > /dev/null 2> "$T/err" ||
                        [ "$(wc -l < "$T/err")" != 1 ] || [ -e "$T/refused.gguf" ]; then
                        bad "$n $p imatrix=$imx: refused as llama-quantize refuses" "$(head -2 "$T/err")"
                    else
                        refused=$((refused + 1))
                    fi
                    continue
                fi
                if ! "$KILN" quantize --dry-run --json "$@" > "$T/plan.json" 2> "$T/err"; then
                    if grep -q 'kiln cannot quantize to' "$T/err"; then
                        nocodec="$nocodec $p"
                        continue
                    fi
                    bad "$n $p imatrix=$imx: dry run" "$(head -2 "$T/err")"
                    continue
                fi
                jq -r '.tensors[] | [.name, .to] | @tsv' "$T/plan.json" | sort > "$T/kiln.types"
                if [ -s "$T/llama.types" ] && cmp -s "$T/kiln.types" "$T/llama.types"; then
                    agree=$((agree + 1))
                else
                    bad "$n $p imatrix=$imx: every tensor's type is llama-quantize's" \
                        "$(diff "$T/llama.types" "$T/kiln.types" | head -5 | tr '\n' ' ')"
                fi
            done
        done
        check "$n: $agree preset runs give llama-quantize's type for every tensor, $refused refused as it does" \
            test $((agree + refused)) -ge 20
        if [ -n "$nocodec" ]; then
            skipt "$n: kiln has no codec yet for a type of:$(echo $nocodec | tr ' ' '\n' | sort -u | tr '\n' ' ')"
        fi
    done

    f=$g/gguf/llama-f32.gguf
    "$KILN" quantize --dry-run --json "$f" Q4_K > "$T/a.json"
    "$KILN" quantize --dry-run --json "$f" 15 > "$T/b.json"
    "$KILN" quantize --dry-run --json "$f" Q4_K_M > "$T/c.json"
    check "Q4_K and 15 are Q4_K_M, as in llama-quantize" jq_true "$T/a.json" \
        '.file_type == 15 and .tensors == $b[0].tensors and .tensors == $c[0].tensors' \
        --slurpfile b "$T/b.json" --slurpfile c "$T/c.json"
    "$KILN" quantize -q "$f" "$T/copy.gguf" COPY
    "$KILN" inspect --json "$T/copy.gguf" > "$T/copy.json"
    check "COPY keeps every tensor's type and the input's file type" jq_true "$T/copy.json" \
        '(meta["general.file_type"] == 0) and ([.tensors[].type] | unique == ["F32"])'
    expect_fail "Q2_K_S without an imatrix is refused" "Q2_K \(in the Q2_K_S mix\) needs an importance matrix" \
        "$KILN" quantize "$f" "$T/n.gguf" Q2_K_S
    check "and leaves no output" test ! -e "$T/n.gguf"
fi

# --list-types: the README's table is its output, and its numbers are the
# type table's
"$KILN" quantize --list-types > "$T/list.md"
sed -n '/^<!-- kiln quantize --list-types -->$/,/^<!-- end of kiln quantize --list-types -->$/p' README.md |
    sed '1d;$d' > "$T/readme.md"
check "README.md's type and preset table is 'kiln quantize --list-types'" cmp -s "$T/list.md" "$T/readme.md"
"$KILN" quantize --list-types --json > "$T/list.json"
check "--list-types --json: every preset, bits per weight from the block sizes" jq_true "$T/list.json" \
    '(.presets | length) == ($n | tonumber) and all(.types[]; .bpw == 8 * .block_bytes / .block_size)
     and (.types[] | select(.name == "IQ2_XXS") | .needs_imatrix == "yes")
     and (.presets[] | select(.name == "Q2_K_S") | .needs_imatrix)' \
    --arg n "$(echo $presets | wc -w)"
"$KILN" quantize --help > "$T/help"
check "--help names --list-types and the aliases" grep -q -- '--list-types' "$T/help"
expect_fail "an unknown preset lists the presets" "unknown preset or type 'Q4_K_Z' \(presets: Q1_0 .* COPY;" \
    "$KILN" quantize "$T/none.gguf" "$T/o.gguf" Q4_K_Z
finish
