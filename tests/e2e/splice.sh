# tests/e2e/splice.sh - kiln splice from the command line: exit codes,
# the plan, byte equality with base and donor (read independently through
# `kiln inspect --json` offsets), expert surgery, split output, refusals.
. tests/e2e/lib.sh

check "splice --help exits 0" sh -c '"$KILN" splice --help | grep -q "usage: kiln splice"'
"$KILN" splice > /dev/null 2>&1; [ $? -eq 2 ] && ok "no arguments is a usage error (2)" || bad "no arguments is a usage error (2)"
expect_fail "one model without --keep-experts" "expects BASE and DONOR" "$KILN" splice a.gguf
expect_fail "no -o without --dry-run" "needs -o OUT" "$KILN" splice a.gguf b.gguf --experts
expect_fail "bad --split-max-size" "split-max-size" "$KILN" splice a.gguf b.gguf -o x --experts --split-max-size 12X

need_shared "splice with ../shared" || finish
g="$shared/golden/gguf"
base="$g/mixtral-IQ2_XXS.gguf" donor="$g/mixtral-Q4_K_M.gguf"
last=$(( $("$KILN" inspect --json "$base" | jq '[.metadata[] | select(.key == "llama.block_count") | .value][0]') - 1 ))
# the expert tensors of the first and the last layer, as a jq condition
FIRST_LAST_EXPERTS='(.name | contains("_exps.")) and (.name | split(".")[1] | IN("0", "'"$last"'"))'

# sametensors OUT BASE DONOR COND: every tensor of OUT equals DONOR's bytes
# when the jq condition COND (over the tensor's entry) holds, else BASE's;
# names, order, types checked.
sametensors() {
    "$KILN" inspect --json "$1" > "$T/o.json" && "$KILN" inspect --json "$2" > "$T/b.json" &&
    "$KILN" inspect --json "$3" > "$T/d.json" || return 1
    [ "$(jq -c '[.tensors[].name]' "$T/o.json")" = "$(jq -c '[.tensors[].name]' "$T/b.json")" ] ||
        { echo "# tensor order differs"; return 1; }
    # per tensor: name, OUT's type, offset, bytes, then its source's
    jq -r --slurpfile b "$T/b.json" --slurpfile d "$T/d.json" 'INDEX($d[0].tensors[]; .name) as $dt |
        [.tensors, $b[0].tensors] | transpose[] | . as [$o, $bt] |
        (if ($o | '"$4"') then ["donor", ($dt[$o.name] // error($o.name + ": not in the donor"))] else ["base", $bt] end) as [$w, $s] |
        [$o.name, $o.type, $o.offset, $o.bytes, $w, $s.type, $s.offset, $s.bytes] | @tsv' "$T/o.json" > "$T/src.tsv" || return 1
    while IFS="$(printf '\t')" read -r _tn _ot _oo _ob _w _st _so _sb; do
        _src=$2; [ "$_w" = donor ] && _src=$3
        [ "$_ot" = "$_st" ] && [ "$_ob" = "$_sb" ] && same_range "$1" "$_oo" "$_src" "$_so" "$_ob" ||
            { echo "# $_tn differs"; return 1; }
    done < "$T/src.tsv"
}

# tensor_pairs A.json B.json: for each position in both reports' tensor
# lists (up to the shorter), NAME LAST_DIM OFFSET BYTES of A's tensor, then
# OFFSET BYTES of B's
tensor_pairs() {
    jq -r --slurpfile b "$2" '[.tensors, $b[0].tensors] as [$x, $y] | range([($x | length), ($y | length)] | min) as $i |
        [$x[$i].name, $x[$i].shape[-1], $x[$i].offset, $x[$i].bytes, $y[$i].offset, $y[$i].bytes] | @tsv' "$1"
}

# The per-layer boosted quant: experts of the first and last layer in Q4_K.
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts --dry-run > "$T/plan.txt"
check "dry run exits 0 and writes nothing" test ! -e "$T/out.gguf"
check "dry run lists the six expert tensors" test "$(grep -c '_exps.weight .*tensor ' "$T/plan.txt")" -eq 6
check "dry run prints the bits-per-weight change" grep -Eq '^bits per weight: [0-9.]+ -> [0-9.]+ \(\+[0-9.]+\)' "$T/plan.txt"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts -o "$T/out.gguf" -q 2> "$T/err"
check "splice exits 0" test $? -eq 0
check "spliced experts are the donor's bytes, the rest the base's" \
    sametensors "$T/out.gguf" "$base" "$donor" "$FIRST_LAST_EXPERTS"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts --dry-run --json > "$T/plan.json"
# the header grows by the three provenance keys only (under 256 bytes)
grow=$(( $(wc -c < "$T/out.gguf") - $(wc -c < "$base") ))
check "--json plan agrees with the output size" jq_true "$T/plan.json" '.totals as $t |
    .schema == "kiln.splice/1" and $t.tensors_changed == 6 and ($grow - $t.delta_bytes | . >= 0 and . < 256) and $t.delta_bpw > 0' \
    --argjson grow "$grow"
"$KILN" inspect --json "$T/out.gguf" > "$T/i.json"
check "provenance keys recorded" jq_true "$T/i.json" 'meta |
    (.["kiln.splice.donor"] | startswith("mixtral-Q4_K_M.gguf xxh64:")) and .["kiln.splice.tensors"] == 6 and
    .["kiln.splice.selection"] == "--layers 0,\($last) --experts" and .["general.file_type"] == 19' --arg last "$last"

# Expert-level splice of one expert with requantization (needs the codec).
imx="$shared/golden/imatrix/mixtral.imatrix.gguf"
"$KILN" splice "$base" "$g/mixtral-f32.gguf" --expert-ids 2 --layers 1 --tensors ffn_up --requantize \
    --imatrix "$imx" -o "$T/rq.gguf" -q 2> "$T/err"
check "requantized expert splice exits 0" test $? -eq 0
"$KILN" inspect --json "$T/rq.gguf" > "$T/o.json"
"$KILN" inspect --json "$base" > "$T/b.json"
# every tensor the base's bytes but the third of blk.1.ffn_up_exps's four expert slabs
only_expert2_changed() {
    tensor_pairs "$T/o.json" "$T/b.json" > "$T/pairs" || return 1
    while IFS="$(printf '\t')" read -r _tn _ _xo _xb _yo _yb; do
        [ "$_xb" = "$_yb" ] || { echo "# $_tn: size"; return 1; }
        if [ "$_tn" != blk.1.ffn_up_exps.weight ]; then
            same_range "$T/rq.gguf" "$_xo" "$base" "$_yo" "$_xb" || { echo "# $_tn"; return 1; }
            continue
        fi
        _s=$((_xb / 4))
        same_range "$T/rq.gguf" "$_xo" "$base" "$_yo" $((2 * _s)) &&
            same_range "$T/rq.gguf" $((_xo + 3 * _s)) "$base" $((_yo + 3 * _s)) $((_xb - 3 * _s)) &&
            ! same_range "$T/rq.gguf" $((_xo + 2 * _s)) "$base" $((_yo + 2 * _s)) "$_s" || { echo "# slabs"; return 1; }
    done < "$T/pairs"
}
check "only expert 2 of blk.1.ffn_up_exps changed" only_expert2_changed
expect_fail "expert splice across types is refused" "donor stores it as Q4_K, base as IQ2_XXS.*--requantize" \
    "$KILN" splice "$base" "$donor" --expert-ids 1 -o "$T/x.gguf"
check "refused splice left no file" test ! -e "$T/x.gguf" -a ! -e "$T/x.gguf.tmp"

# Expert surgery.
"$KILN" splice --keep-experts 0,2 "$donor" -o "$T/keep.gguf" -q 2> /dev/null
check "--keep-experts exits 0" test $? -eq 0
"$KILN" inspect --json "$T/keep.gguf" > "$T/k.json"
"$KILN" inspect --json "$donor" > "$T/b.json"
# experts and router hold slabs 0 and 2 of the donor's four, the rest the donor's bytes
kept_experts_0_2() {
    jq_true "$T/k.json" 'meta | .["llama.expert_count"] == 2 and .["llama.expert_used_count"] == 2' || { echo "# counts"; return 1; }
    tensor_pairs "$T/k.json" "$T/b.json" > "$T/pairs" || return 1
    while IFS="$(printf '\t')" read -r _tn _last _xo _xb _yo _yb; do
        case $_tn in
        *_exps.* | *ffn_gate_inp*)
            _s=$((_yb / 4))
            [ "$_last" = 2 ] && [ "$_xb" = $((2 * _s)) ] && same_range "$T/keep.gguf" "$_xo" "$donor" "$_yo" "$_s" &&
                same_range "$T/keep.gguf" $((_xo + _s)) "$donor" $((_yo + 2 * _s)) "$_s" ;;
        *) [ "$_xb" = "$_yb" ] && same_range "$T/keep.gguf" "$_xo" "$donor" "$_yo" "$_xb" ;;
        esac || { echo "# $_tn"; return 1; }
    done < "$T/pairs"
}
check "--keep-experts slices experts and router, sets expert_count" kept_experts_0_2
"$KILN" splice --keep-experts 0,1 "$T/out.gguf" -o "$T/keep2.gguf" -q 2> /dev/null
"$KILN" inspect --json "$T/keep2.gguf" > "$T/k.json"
check "cutting a spliced model drops the earlier donor key" jq_true "$T/k.json" \
    'meta | (has("kiln.splice.donor") | not) and .["kiln.splice.selection"] == "--keep-experts 0,1"'
"$KILN" splice --keep-experts 1 "$donor" -o "$T/keep1.gguf" -q 2> "$T/err"
check "keeping one expert warns that expert_used_count drops" grep -q "expert_used_count lowered from 2 to 1" "$T/err"

# Split output, and a split input read back.
"$KILN" splice "$base" "$donor" --layers 0 --experts --split-max-tensors 20 -o "$T/sp.gguf" -q 2> /dev/null
check "split output has three shards" test -f "$T/sp-00001-of-00003.gguf" -a -f "$T/sp-00003-of-00003.gguf" -a ! -e "$T/sp.gguf"
"$KILN" splice "$base" "$donor" --layers 0 --experts --split-max-size 1M -o "$T/sz.gguf" -q 2> /dev/null
check "--split-max-size splits by bytes" sh -c 'n=$(ls "$0"/sz-0000?-of-0000?.gguf | wc -l); [ "$n" -ge 2 ] && [ "$(du -cb "$0"/sz-*.gguf | tail -1 | cut -f1)" -gt 1000000 ]' "$T"
"$KILN" splice "$T/sp-00002-of-00003.gguf" "$donor" --layers "$last" --experts -o "$T/from-split.gguf" -q 2> /dev/null
check "a split base splices like a whole one" \
    sametensors "$T/from-split.gguf" "$base" "$donor" "$FIRST_LAST_EXPERTS"

# Refusals: one line, exit 1, nothing written.
expect_fail "different architecture" "architecture 'qwen2' differs" "$KILN" splice "$base" "$g/qwen2-Q4_K_M.gguf" --experts -o "$T/r.gguf"
expect_fail "different expert count" "expert_count: donor has none" "$KILN" splice "$base" "$g/llama-Q4_K_M.gguf" --tensors . -o "$T/r.gguf"
expect_fail "a selection that matches nothing" "matches no tensor" "$KILN" splice "$base" "$donor" --tensors nothing -o "$T/r.gguf"
expect_fail "output equal to an input" "refusing to overwrite" "$KILN" splice "$base" "$donor" --experts -o "$donor"
expect_fail "an existing output needs --force" "use --force" "$KILN" splice "$base" "$donor" --experts -o "$T/out.gguf"
expect_fail "--keep-experts on a dense model" "not a mixture of experts" "$KILN" splice --keep-experts 0 "$g/llama-Q4_K_M.gguf" -o "$T/r.gguf"
check "error is one line" test "$(wc -l < "$T/err")" -eq 1
check "no refused output was written" test ! -e "$T/r.gguf" -a ! -e "$T/r.gguf.tmp"
finish
