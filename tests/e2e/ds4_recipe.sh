# tests/e2e/ds4_recipe.sh - `kiln quantize --recipe` (quantize/recipe.h) and
# the ds4 mixed splice on the tiny DeepSeek-V3 fixture (tests/fixtures/
# deepseek2): recipe errors name FILE:LINE and the field and stop before any
# work; every class, a layer range, a /REGEX/ rule and the command line's
# precedence give the planned types of a table written here; the shipped
# recipes/ds4-flash-mixed.recipe loads, and on the deepseek4 fixture (when
# present) gives ds4's types to every tensor kind; the ds4 mix written directly by
# --recipe equals the splice of a Q4_K-experts file into an IQ2_XXS/Q2_K one
# (README: Recipes); the README's class table is --list-classes'.
#
# Every row of this fixture is shorter than 256, so Q4_K, Q2_K and IQ2_XXS
# fall back per tensor to Q5_0, Q4_0 and IQ4_NL (as llama-quantize does):
# the types below are the fallbacks, and the byte check holds for them.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek2
if ! zstd -q -d -c "$FX/DeepSeek-tiny.tar.zst" | tar -x -C "$T" ds3-tiny-fp8 2> "$T/err" ||
    ! "$KILN" convert "$T/ds3-tiny-fp8" --outtype f32 -o "$T/ds.gguf" 2> "$T/err"; then
    bad "unpack and convert the deepseek2 fixture" "$(head -c 300 "$T/err")"
    finish
fi
case $KILN in /*) kiln_abs=$KILN ;; *) kiln_abs=$PWD/$KILN ;; esac # run from inside $T

# ---- errors: one line naming FILE:LINE and the field, nothing written ----
# bad_recipe NAME PATTERN LINE...: a recipe of these lines is refused with
# exit 1 and one stderr line matching PATTERN, and no output is written
bad_recipe() {
    _name=$1 _pat=$2
    shift 2
    printf '%s\n' "$@" > "$T/bad.recipe"
    "$KILN" quantize "$T/ds.gguf" "$T/bad.gguf" Q8_0 --recipe "$T/bad.recipe" > "$T/out" 2> "$T/err"
    _rc=$?
    if [ "$_rc" -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -Eq -- "$_pat" "$T/err" && [ ! -e "$T/bad.gguf" ] &&
        [ ! -s "$T/out" ]; then
        ok "recipe error: $_name"
    else
        bad "recipe error: $_name" "exit $_rc: $(head -c 300 "$T/err")"
    fi
}
bad_recipe "unknown class" "^kiln: .*bad\.recipe:3: class: 'experts\.routd' is not a tensor class \(experts\.routed," \
    "# a comment" "" "experts.routd   Q4_K"
bad_recipe "unknown type" "^kiln: .*bad\.recipe:2: type: 'Q9_K' is not a type kiln quantizes to" \
    "attn.proj Q8_0" "experts.routed layers=1-2 Q9_K  # comment"
bad_recipe "backwards layer range" "^kiln: .*bad\.recipe:1: layers: '2-1' is not a set of blocks" \
    "experts.routed layers=2-1 Q4_K"
bad_recipe "trailing comma in layers" "^kiln: .*bad\.recipe:1: layers: '1,' is not a set of blocks" \
    "experts.routed layers=1, Q4_K"
bad_recipe "layers on a class without blocks" "^kiln: .*bad\.recipe:1: layers: class output is not a per-block" \
    "output layers=1 Q8_0"
bad_recipe "middle field not layers=" "^kiln: .*bad\.recipe:1: layers: 'layer=1': the middle field" \
    "attn.proj layer=1 Q8_0"
bad_recipe "too many fields" "^kiln: .*bad\.recipe:1: expected CLASS\|/REGEX/ \[layers=SPEC\] TYPE, got more" \
    "attn.proj layers=1 Q8_0 Q4_0"
bad_recipe "bad regex" "^kiln: .*bad\.recipe:1: bad regex 'blk\(': missing closing parenthesis" "/blk(/ Q8_0"
expect_fail "recipe error: missing file" "^kiln: .*nope\.recipe: cannot open recipe" \
    "$KILN" quantize "$T/ds.gguf" "$T/bad.gguf" Q8_0 --recipe "$T/nope.recipe"

# ---- every class, a layer range, a regex, and the command line first -----
cat > "$T/classes.recipe" << 'EOF'
/attn_k_b/           layers=1   IQ4_NL     # a regex rule, one block
attn.proj            layers=0   BF16
attn.proj                       Q5_0
ffn.dense                       F16
experts.routed.gate             Q4_1
experts.routed.up               Q5_1
experts.routed.down             Q4_0
experts.shared                  IQ4_NL
output                          Q5_1
embed                           Q4_0
EOF
cat > "$T/classes.want" << 'EOF'
blk.0.attn_k_b.weight BF16
blk.0.attn_kv_a_mqa.weight BF16
blk.0.attn_output.weight BF16
blk.0.attn_q_a.weight BF16
blk.0.attn_q_b.weight BF16
blk.0.attn_v_b.weight BF16
blk.0.ffn_down.weight F16
blk.0.ffn_gate.weight F16
blk.0.ffn_up.weight F16
blk.1.attn_k_b.weight IQ4_NL
blk.1.attn_kv_a_mqa.weight Q5_0
blk.1.attn_output.weight Q5_0
blk.1.attn_q_a.weight Q5_0
blk.1.attn_q_b.weight Q5_0
blk.1.attn_v_b.weight Q5_0
blk.1.ffn_down_exps.weight Q4_0
blk.1.ffn_down_shexp.weight IQ4_NL
blk.1.ffn_gate_exps.weight Q4_1
blk.1.ffn_gate_shexp.weight IQ4_NL
blk.1.ffn_up_exps.weight Q5_1
blk.1.ffn_up_shexp.weight IQ4_NL
blk.2.attn_k_b.weight Q5_0
blk.2.attn_kv_a_mqa.weight Q5_0
blk.2.attn_output.weight Q8_0
blk.2.attn_q_a.weight Q5_0
blk.2.attn_q_b.weight Q5_0
blk.2.attn_v_b.weight Q5_0
blk.2.ffn_down_exps.weight Q4_0
blk.2.ffn_down_shexp.weight IQ4_NL
blk.2.ffn_gate_exps.weight Q4_1
blk.2.ffn_gate_shexp.weight IQ4_NL
blk.2.ffn_up_exps.weight Q5_1
blk.2.ffn_up_shexp.weight IQ4_NL
output.weight Q5_1
token_embd.weight Q4_0
EOF
# target Q6_K: a tensor no rule matched would show up as Q6_K (-> Q8_0)
if "$KILN" quantize --dry-run --json "$T/ds.gguf" Q6_K --recipe "$T/classes.recipe" \
    --tensor-type 'blk\.2\.attn_output=Q8_0' > "$T/classes.json" 2> "$T/err"; then
    jq -r '.tensors[] | select(.reason | startswith("kept") | not) | "\(.name) \(.wanted)"' "$T/classes.json" |
        sort > "$T/classes.got"
    if cmp -s "$T/classes.got" "$T/classes.want"; then
        ok "every class, layers=, /REGEX/ and --tensor-type before the recipe: the planned types"
    else
        bad "every class, layers=, /REGEX/ and --tensor-type before the recipe: the planned types" \
            "$(diff "$T/classes.want" "$T/classes.got" | head -5 | tr '\n' ' ')"
    fi
    check "each recipe rule is one --tensor-type override, after the command line's" jq_true "$T/classes.json" '
        [.overrides[] | .matched] == [1, 1, 6, 10, 3, 2, 2, 2, 6, 1, 1] and
        .overrides[1].pattern == "^(?=blk\\.(?:1)\\.).*?(?:attn_k_b)" and
        (.overrides[2].pattern | startswith("^blk\\.(?:0)\\.attn_(?:"))'
else
    bad "--dry-run --json with a recipe" "$(head -c 300 "$T/err")"
fi

# ---- the shipped recipe: loads, and on 3 blocks its band (37-42) is empty -
if "$KILN" quantize --dry-run --json "$T/ds.gguf" Q8_0 --recipe recipes/ds4-flash-mixed.recipe \
    > "$T/ds4.json" 2> "$T/err"; then
    check "recipes/ds4-flash-mixed.recipe: IQ2_XXS gate/up, Q2_K down, Q8_0 shared/attention/output" \
        jq_true "$T/ds4.json" '
        .overrides[0].matched == 0 and
        ([.tensors[] | select(.name | test("_exps\\.")) | "\(.name | sub("blk\\.[0-9]+\\."; "")) \(.wanted)"]
            | unique) == ["ffn_down_exps.weight Q2_K", "ffn_gate_exps.weight IQ2_XXS", "ffn_up_exps.weight IQ2_XXS"] and
        ([.tensors[] | select(.name | test("_shexp\\.|attn_(q_a|q_b|kv_a_mqa|k_b|v_b|output)\\.|^output\\.")) | .wanted]
            | unique) == ["Q8_0"]'
else
    bad "recipes/ds4-flash-mixed.recipe loads" "$(head -c 300 "$T/err")"
fi

# ---- the shipped recipe on deepseek4 names (tests/fixtures/deepseek4, when
# that fixture and its converter are there): every ds4 class finds its tensors
FX4=tests/fixtures/deepseek4/DeepSeek4-tiny.tar.zst
if [ ! -f "$FX4" ]; then
    skipt "recipes/ds4-flash-mixed.recipe on deepseek4 (no $FX4)"
elif ! zstd -q -d -c "$FX4" | tar -x -C "$T" ds4-tiny-fp8 2> "$T/err" ||
    ! "$KILN" convert "$T/ds4-tiny-fp8" --outtype f32 -o "$T/ds4.gguf" 2> "$T/err" ||
    ! "$KILN" quantize --dry-run --json --allow-requantize "$T/ds4.gguf" Q8_0 \
        --recipe recipes/ds4-flash-mixed.recipe > "$T/ds4v4.json" 2> "$T/err"; then
    bad "recipes/ds4-flash-mixed.recipe on deepseek4" "$(head -c 300 "$T/err")"
else
    # per tensor kind (block number dropped): the type the recipe wants
    jq -r '.tensors[] | select(.reason | startswith("kept") | not) |
        "\(.name | sub("blk\\.[0-9]+\\."; "blk.N.")) \(.wanted)"' "$T/ds4v4.json" | sort -u > "$T/ds4v4.got"
    cat > "$T/ds4v4.want" << 'EOF2'
blk.N.attn_compressor_ape.weight F16
blk.N.attn_compressor_gate.weight F16
blk.N.attn_compressor_kv.weight F16
blk.N.attn_kv.weight Q8_0
blk.N.attn_output_a.weight Q8_0
blk.N.attn_output_b.weight Q8_0
blk.N.attn_q_a.weight Q8_0
blk.N.attn_q_b.weight Q8_0
blk.N.ffn_down_exps.weight Q2_K
blk.N.ffn_down_shexp.weight Q8_0
blk.N.ffn_gate_exps.weight IQ2_XXS
blk.N.ffn_gate_shexp.weight Q8_0
blk.N.ffn_up_exps.weight IQ2_XXS
blk.N.ffn_up_shexp.weight Q8_0
blk.N.hc_attn_fn.weight F16
blk.N.hc_ffn_fn.weight F16
blk.N.indexer.attn_q_b.weight F16
blk.N.indexer.proj.weight F16
blk.N.indexer_compressor_ape.weight F16
blk.N.indexer_compressor_gate.weight F16
blk.N.indexer_compressor_kv.weight F16
output.weight Q8_0
output_hc_fn.weight F16
token_embd.weight Q8_0
EOF2
    if cmp -s "$T/ds4v4.got" "$T/ds4v4.want"; then
        ok "recipes/ds4-flash-mixed.recipe on deepseek4: ds4's types for every tensor kind"
    else
        bad "recipes/ds4-flash-mixed.recipe on deepseek4: ds4's types for every tensor kind" \
            "$(diff "$T/ds4v4.want" "$T/ds4v4.got" | head -5 | tr '\n' ' ')"
    fi
fi

# ---- the ds4 mix on 3 blocks: Q4_K experts in block 2, directly and by splice
"$KILN" imatrix "$T/ds.gguf" -f README.md -c 128 --chunks 8 -q -o "$T/imx.gguf" > /dev/null 2> "$T/err" ||
    bad "kiln imatrix of the fixture" "$(head -c 300 "$T/err")"
sed 's/layers=37-42/layers=2/' recipes/ds4-flash-mixed.recipe > "$T/tiny.recipe"
q() { (cd "$T" && "$kiln_abs" quantize -q ds.gguf "$@" --imatrix imx.gguf --recipe tiny.recipe) 2>> "$T/err"; }
if q direct.gguf Q8_0 &&
    q q4.gguf Q8_0 --tensor-type '_exps\.weight$=Q4_K' &&
    q q2.gguf Q8_0 --tensor-type 'ffn_down_exps=Q2_K' --tensor-type '_exps\.weight$=IQ2_XXS' &&
    "$KILN" splice "$T/q2.gguf" "$T/q4.gguf" --layers 2 --experts -o "$T/mixed.gguf" -q 2>> "$T/err"; then
    ok "quantize the ds4 mix directly, the Q4_K-experts and 2-bit files, and splice block 2's experts"
else
    bad "quantize the ds4 mix and splice" "$(head -c 300 "$T/err")"
fi
if "$KILN" inspect "$T/direct.gguf" --json > "$T/direct.json" 2> "$T/err" &&
    "$KILN" inspect "$T/mixed.gguf" --json > "$T/mixed.json" 2>> "$T/err"; then
    check "the ds4 mix's types: Q4_K->Q5_0 experts in block 2, IQ2_XXS->IQ4_NL / Q2_K->Q4_0 in block 1" \
        jq_true "$T/direct.json" '
        [.tensors[] | select(.name | test("_exps\\.")) | "\(.name) \(.type)"] | sort ==
        ["blk.1.ffn_down_exps.weight Q4_0", "blk.1.ffn_gate_exps.weight IQ4_NL", "blk.1.ffn_up_exps.weight IQ4_NL",
         "blk.2.ffn_down_exps.weight Q5_0", "blk.2.ffn_gate_exps.weight Q5_0", "blk.2.ffn_up_exps.weight Q5_0"]'
    # splice records where its tensors came from (kiln.splice.*): apart from
    # those three keys the files must be the same, tensor data byte for byte
    meta_but_splice() { jq -c '[.metadata[] | select(.key | startswith("kiln.splice.") | not) | [.key, .value]]' "$1"; }
    meta_but_splice "$T/direct.json" > "$T/d.meta"
    meta_but_splice "$T/mixed.json" > "$T/m.meta"
    check "splice == recipe: the same metadata but for kiln.splice.donor/tensors/selection" \
        cmp -s "$T/d.meta" "$T/m.meta"
    check "splice == recipe: the spliced file has exactly the three kiln.splice.* keys more" \
        jq_true "$T/mixed.json" '
        [.metadata[] | select(.key | startswith("kiln.splice.")) | .key] ==
        ["kiln.splice.donor", "kiln.splice.tensors", "kiln.splice.selection"]'
    tensors() { jq -c '([.tensors[].offset] | min) as $o | [.tensors[] | [.name, .type, .shape, .offset - $o]]' "$1"; }
    check "splice == recipe: the same tensor table (names, types, shapes, data offsets)" \
        [ "$(tensors "$T/direct.json")" = "$(tensors "$T/mixed.json")" ]
    data_sha() { tail -c +$(($(jq '[.tensors[].offset] | min' "$2") + 1)) "$1" | sha256sum | cut -c1-64; }
    d=$(data_sha "$T/direct.gguf" "$T/direct.json") m=$(data_sha "$T/mixed.gguf" "$T/mixed.json")
    if [ "$d" = "$m" ] && [ "$(data_sha "$T/q2.gguf" "$T/direct.json")" != "$d" ]; then
        ok "splice == recipe: tensor data byte-identical (sha256 $d)"
    else
        bad "splice == recipe: tensor data byte-identical" "direct $d, spliced $m"
    fi
else
    bad "inspect the ds4 mix files" "$(head -c 300 "$T/err")"
fi

# ---- the README prints the one class table --------------------------------
"$KILN" quantize --list-classes | grep '^| `' > "$T/classes.md"
readme_has_rows() {
    while IFS= read -r row; do grep -qxF -- "$row" README.md || return 1; done < "$1"
}
if [ -s "$T/classes.md" ] && readme_has_rows "$T/classes.md"; then
    ok "README's recipe class table is kiln quantize --list-classes ($(wc -l < "$T/classes.md") classes)"
else
    bad "README's recipe class table is kiln quantize --list-classes" "a row differs or is missing"
fi
finish
