# tests/e2e/quantize.sh - kiln quantize from the command line: exit codes,
# the plan, the summary and its JSON, refusals, splits, and agreement of
# the output with llama-quantize's files in ../shared/golden (through
# kiln inspect and kiln diff).
. tests/e2e/lib.sh

check "quantize --help exits 0 and lists the presets" sh -c '"$KILN" quantize --help | grep -q "(Q4_K_M, IQ3_M, Q2_K_S, COPY"'
expect_fail "quantize without arguments is a usage error" "expects IN OUT PRESET" "$KILN" quantize
"$KILN" quantize a b c >/dev/null 2>&1; [ $? -eq 2 ] && ok "an unknown preset exits 2" || bad "an unknown preset exits 2"
expect_fail "an unknown preset names the choices" "unknown preset or type 'c' \(presets: Q1_0 Q2_0 Q4_0" "$KILN" quantize a b c
expect_fail "a bad --tensor-type is a usage error" "is not REGEX=TYPE" "$KILN" quantize --tensor-type attn_q a b Q4_K_M
expect_fail "--tensor-type with a type kiln cannot write" "cannot quantize to type 'i8'" "$KILN" quantize --tensor-type attn_q=i8 a b Q4_K_M
expect_fail "--keep-split and --split-max-size exclude each other" "cannot be combined" "$KILN" quantize --keep-split --split-max-size 1M a b Q8_0
expect_fail "a missing input exits 1" "cannot open|No such file" "$KILN" quantize /nonexistent.gguf "$T/x.gguf" Q8_0

# A GGUF whose second weight has rows of 96 values, which fit no 256-block type.
# gguf_str S: a GGUF string. f32_noise N: N little-endian f32 values of
# about N(0, 0.02) (a sum of 12 uniforms from a Park-Miller generator, exact
# in awk's doubles), as printf escapes.
gguf_str() { le64 ${#1}; printf '%s' "$1"; }
f32_noise() {
    awk -v n="$1" 'function u() { x = (x * 16807) % 2147483647; return x / 2147483647 }
    BEGIN {
        x = 1
        for (i = 0; i < n; i++) {
            g = 0; for (k = 0; k < 12; k++) g += u()
            v = 0.02 * (g - 6); s = v < 0 ? 128 : 0; a = v < 0 ? -v : v; e = 127
            while (a >= 2) { a /= 2; e++ }
            while (a < 1) { a *= 2; e-- }
            m = int((a - 1) * 8388608 + 0.5); if (m == 8388608) { m = 0; e++ }
            printf "\\%03o\\%03o\\%03o\\%03o", m % 256, int(m / 256) % 256, int(m / 65536) + (e % 2) * 128, s + int(e / 2)
        }
    }'
}
{
    printf GGUF; le32 3; le64 3 2                             # version, tensors, metadata keys
    gguf_str general.architecture; le32 8; gguf_str llama
    gguf_str llama.block_count; le32 4 1
    gguf_str blk.0.attn_q.weight; le32 2; le64 256 64; le32 0; le64 0           # F32, at 0
    gguf_str blk.0.ffn_down.weight; le32 2; le64 96 64; le32 0; le64 65536
    gguf_str blk.0.attn_norm.weight; le32 1; le64 256; le32 0; le64 90112
} > "$T/odd.gguf"
head -c $(( (32 - $(wc -c < "$T/odd.gguf") % 32) % 32 )) /dev/zero >> "$T/odd.gguf"
printf "$(f32_noise $((256 * 64 + 96 * 64 + 256)))" >> "$T/odd.gguf"
"$KILN" quantize "$T/odd.gguf" "$T/odd-q4.gguf" Q4_K_M > "$T/out" 2> "$T/err"
check "a fallback succeeds" test $? -eq 0
check "the summary lists the fallback" grep -q "fallback blk.0.ffn_down.weight: Q6_K -> Q8_0 (row length 96 is not a multiple of 256)" "$T/out"
expect_fail "--no-fallback makes it an error" "blk.0.ffn_down.weight: row length 96 .*--no-fallback" "$KILN" quantize --no-fallback "$T/odd.gguf" "$T/odd-nf.gguf" Q4_K_M
check "--no-fallback wrote nothing" test ! -e "$T/odd-nf.gguf"
"$KILN" quantize --dry-run --json "$T/odd.gguf" Q2_K > "$T/fb.json"
check "--json lists fallbacks" jq_true "$T/fb.json" \
    '.fallbacks == [{tensor: "blk.0.ffn_down.weight", wanted: "Q3_K", used: "Q4_0", row_length: 96}]'
expect_fail "an existing output needs --force" "output exists; use --force" "$KILN" quantize "$T/odd.gguf" "$T/odd-q4.gguf" Q4_K_M
check "--force overwrites" "$KILN" quantize -q --force "$T/odd.gguf" "$T/odd-q4.gguf" Q8_0
expect_fail "the input is never the output" "refusing to overwrite" "$KILN" quantize --force "$T/odd.gguf" "$T/odd.gguf" Q8_0

if need_shared "quantize agrees with llama-quantize"; then
    g="$shared/golden"
    "$KILN" quantize "$g/gguf/llama-f32.gguf" "$T/l.gguf" Q4_K_M > "$T/out" 2> "$T/err"
    check "quantize llama-f32 Q4_K_M exits 0" test $? -eq 0
    check "the summary gives sizes and bits per weight" grep -q "32.00 -> .* bits per weight" "$T/out"
    check "the output is byte-identical to llama-quantize's" cmp -s "$T/l.gguf" "$g/gguf/llama-Q4_K_M.gguf"
    # kiln inspect of the output: every tensor's type as in MANIFEST.tsv
    "$KILN" inspect --json "$T/l.gguf" > "$T/i.json"
    jq -r '.tensors[] | "\(.name)\t\(.type)"' "$T/i.json" > "$T/got"
    awk -F '\t' 'index($0, "gguf/llama-Q4_K_M.gguf\t") == 1 { print $2 "\t" $3 }' "$g/MANIFEST.tsv" > "$T/want"
    check "kiln inspect sees llama.cpp's types" sh -c '[ -s "$1" ] && cmp -s "$1" "$2"' sh "$T/want" "$T/got"
    # kiln diff against llama.cpp's IQ2_XXS file: same keys, same types
    "$KILN" quantize -q --imatrix "$g/imatrix/mixtral.imatrix.gguf" "$g/gguf/mixtral-f32.gguf" "$T/m.gguf" IQ2_XXS
    "$KILN" diff --json "$g/gguf/mixtral-IQ2_XXS.gguf" "$T/m.gguf" > "$T/d.json"
    check "kiln diff: IQ2_XXS types equal llama.cpp's" jq_true "$T/d.json" \
        '.tensors.changed == [] and .tensors.added == [] and .tensors.removed == [] and [.metadata.changed[].key] == ["quantize.imatrix.file"]'
    # the legacy .dat imatrix works the same
    "$KILN" quantize -q -f --imatrix "$g/imatrix/qwen2.imatrix.dat" "$g/gguf/qwen2-f32.gguf" "$T/q.gguf" Q2_K
    check "a .dat imatrix is accepted" test $? -eq 0
    "$KILN" inspect --json "$T/q.gguf" > "$T/q.json"
    check "quantize.imatrix.* keys are written" jq_true "$T/q.json" 'meta |
        .["quantize.imatrix.dataset"] == "text/calib.groups_merged.txt" and .["quantize.imatrix.entries_count"] == 14 and
        .["quantize.imatrix.chunks_count"] == 64 and .["general.file_type"] == 10'

    # dry run: a plan, totals, nothing written
    "$KILN" quantize --dry-run "$g/gguf/mixtral-f32.gguf" "$T/dry.gguf" Q4_K_M --tensor-type 'attn_q=q8_0' --tensor-type 'nothing=q4_0' > "$T/out"
    check "--dry-run writes nothing" test ! -e "$T/dry.gguf"
    check "--dry-run prints a plan row per tensor" test "$(grep -c '^blk\.' "$T/out")" -eq 40
    check "the plan shows from, to and bytes" grep -Eq "^blk.2.attn_v.weight +256 x 128 +F32 +Q6_K +131072 +26880 " "$T/out"
    check "applied overrides are listed" grep -q "override attn_q=Q8_0: 4 tensors" "$T/out"
    check "overrides that matched nothing are listed" grep -q "override nothing=Q4_0: matched nothing" "$T/out"
    "$KILN" quantize --dry-run --json "$g/gguf/llama-f32.gguf" Q3_K_M > "$T/p.json"
    # want: llama-quantize's type and bytes of each tensor, from the manifest
    check "--dry-run --json: schema, plan and totals" jq_true "$T/p.json" '
        (reduce ($m | split("\n")[] | select(startswith("gguf/llama-Q3_K_M.gguf\t")) | split("\t")) as $row
            ({}; .[$row[1]] = [$row[2], ($row[5] | tonumber)])) as $want |
        .schema == "kiln.quantize/1" and .dry_run == true and .file_type == 12 and .outputs == [] and
        all(.tensors[]; $want[.name] == [.to, .bytes_out]) and (.tensors | length) == ($want | length) and
        .totals.bytes_out == ([$want[][1]] | add) and ((.totals.bpw_in - 32) | fabs) < 1e-9' --rawfile m "$g/MANIFEST.tsv"

    # refusals
    expect_fail "IQ2_XXS without an imatrix is refused" "IQ2_XXS needs an importance matrix .*pass --imatrix" "$KILN" quantize "$g/gguf/llama-f32.gguf" "$T/n.gguf" IQ2_XXS
    expect_fail "a quantized input is refused" "output.weight: is already quantized \(Q8_0\).*--allow-requantize" "$KILN" quantize "$g/gguf/llama-q8_0.gguf" "$T/r.gguf" Q4_K_M
    check "--allow-requantize accepts it" "$KILN" quantize -q --allow-requantize "$g/gguf/llama-q8_0.gguf" "$T/r.gguf" Q4_K_M
    check "an f16 input needs no permission" "$KILN" quantize -q "$g/gguf/qwen2-f16.gguf" "$T/h.gguf" q4_k
    # a legacy imatrix whose attn_q entry has 128 columns, for a model with 256
    # (legacy layout: entries, then name length, name, ncall, nval, values; then chunks)
    { le32 1 19; printf blk.0.attn_q.weight; le32 1 128; printf '\000\000\200\077%.0s' $(seq 128); le32 1; } > "$T/w.dat"
    expect_fail "an imatrix of another model is refused" "blk.0.attn_q.weight: statistics for 128 columns .* this imatrix is for another model" "$KILN" quantize --imatrix "$T/w.dat" "$g/gguf/qwen2-f32.gguf" "$T/w.gguf" Q2_K
    expect_fail "an imatrix of a shallower model is refused" "qwen2.imatrix.gguf: has entries for 2 of the 4 layers of .*llama-f32.gguf and none for blk.2: it was made for another model" "$KILN" quantize --imatrix "$g/imatrix/qwen2.imatrix.gguf" "$g/gguf/llama-f32.gguf" "$T/w.gguf" Q4_K_M
    check "and leaves no output" test ! -e "$T/w.gguf"
    expect_fail "a corrupt imatrix is refused" "entry count at offset 0" "$KILN" quantize --imatrix "$g/text/prompts.txt" "$g/gguf/qwen2-f32.gguf" "$T/w.gguf" Q2_K

    # one step from a Hugging Face model in an archive: same tensors, types,
    # values and metadata as llama.cpp's convert + quantize
    tar -C "$shared/models" -cf - qwen2 | zstd -q > "$T/qwen2.tar.zst"
    "$KILN" quantize -q "$T/qwen2.tar.zst" "$T/hf.gguf" Q4_K_M
    check "quantize reads a Hugging Face archive" test $? -eq 0
    "$KILN" diff --tolerance 0 "$g/gguf/qwen2-Q4_K_M.gguf" "$T/hf.gguf" > "$T/out" 2>&1
    check "HF archive -> Q4_K_M equals llama.cpp's values" test $? -eq 0
    "$KILN" diff --json "$g/gguf/qwen2-Q4_K_M.gguf" "$T/hf.gguf" > "$T/d.json"
    check "HF archive -> Q4_K_M: same metadata and types" jq_true "$T/d.json" \
        '[.metadata.added, .metadata.removed, .metadata.changed, .tensors.added, .tensors.removed, .tensors.changed] | all(. == [])'

    # --quiet, splits
    "$KILN" quantize -q "$g/gguf/llama-f32.gguf" "$T/qq.gguf" Q8_0 > "$T/out" 2>&1
    check "--quiet prints nothing" test ! -s "$T/out"
    "$KILN" quantize -q --split-max-size 1M "$g/gguf/llama-f32.gguf" "$T/s.gguf" Q8_0
    check "--split-max-size writes shards" test -f "$T/s-00003-of-00004.gguf"
    "$KILN" quantize -q --keep-split "$T/s-00002-of-00004.gguf" "$T/k.gguf" q4_k --allow-requantize
    check "--keep-split keeps the shards" test -f "$T/k-00004-of-00004.gguf"
    "$KILN" inspect --json "$T/k-00001-of-00004.gguf" > "$T/k.json"
    check "the shards read back as one model" jq_true "$T/k.json" '.n_tensors == 39 and (.files | length) == 4'
fi
finish
