#!/bin/sh
# tests/e2e/budget.sh - `kiln quantize --target-bpw / --target-size`
# (issue 15 parts 3 and 4): usage errors; the refusals that come before any
# work (a sensitivity file of another model, a malformed one, a budget under
# the smallest file, an imatrix without an entry an IQ pick needs); the plan
# of --dry-run, its file size equal to the file written and within the
# budget; the same bytes on a second run; the kiln.quantize.* keys; and the
# proof: on llama, mixtral and qwen2, for Q2_K, IQ2_XXS, Q3_K_M and Q4_K_M,
# the budget file at the preset's size is no larger and has at most 0.8x
# its mean KLD (tests/e2e/budget_proof.inc; KLD on the first
# BUDGET_E2E_CHUNKS chunks of 128 tokens of text/ppl.txt, default 40).
#
# The sensitivity files are tests/fixtures/budget/FX.sens (committed scans
# of calib.groups_merged.txt, never of ppl.txt; REGEN.md there), so this
# test checks the allocation, not the scan (tests/e2e/sensitivity.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/budget_proof.inc"
FIX=tests/fixtures/budget

# rc NAME WANT CMD...: exit code WANT, output in $T/out, $T/err
rc() {
    name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err" < /dev/null; got=$?
    if [ "$got" -eq "$want" ]; then ok "$name"; else bad "$name" "exit $got, want $want: $(head -c 300 "$T/err")"; fi
}

# ---- usage errors (no model needed) ------------------------------------------
rc "--target-bpw and --target-size together are a usage error" 2 \
    "$KILN" quantize in.gguf out.gguf --target-bpw 3 --target-size 1M --sensitivity s
check "... saying so" grep -q "not both" "$T/err"
rc "a budget without --sensitivity or -f is a usage error" 2 "$KILN" quantize in.gguf out.gguf --target-bpw 3
check "... naming both ways" grep -q -- "--sensitivity FILE or -f TEXT" "$T/err"
rc "--per-expert is refused" 2 "$KILN" quantize in.gguf out.gguf --target-bpw 3 --sensitivity s --per-expert
check "... saying why in one line" sh -c "[ \$(wc -l < '$T/err') -eq 1 ] && grep -q 'one type' '$T/err'"
rc "--tensor-type does not combine with a budget" 2 \
    "$KILN" quantize in.gguf out.gguf --target-bpw 3 --sensitivity s --tensor-type attn=Q4_K
rc "a bad --target-size is a usage error" 2 "$KILN" quantize in.gguf out.gguf --target-size 3X --sensitivity s
rc "--sensitivity without a budget is a usage error" 2 "$KILN" quantize in.gguf out.gguf Q4_K_M --sensitivity s
rc "--help documents the size suffixes" 0 "$KILN" quantize --help
check "... in its text" grep -q "as --split-max-size: 3.5G = 3.5 x 1000^3, 3.5Gi" "$T/out"

need_shared "budget on the shared fixtures" || finish
g="$shared/golden"
f32="$g/gguf/llama-f32.gguf" im="$g/imatrix/llama.imatrix.gguf" sens="$FIX/llama.sens"

# ---- refusals before any work -----------------------------------------------
expect_fail "a sensitivity file of another model is refused" "qwen2.sens: sensitivity file is for another model" \
    "$KILN" quantize --imatrix "$im" "$f32" "$T/x.gguf" --target-bpw 3.3 --sensitivity "$FIX/qwen2.sens"
sed '7s/\t[0-9]*\t/\tlots\t/' "$sens" > "$T/bad.sens"
expect_fail "a malformed sensitivity file names the line and field" "bad.sens: bytes at line 7: not a positive integer" \
    "$KILN" quantize --imatrix "$im" "$f32" "$T/x.gguf" --target-bpw 3.3 --sensitivity "$T/bad.sens"
sed '5s/\t[0-9]*\t/\t4096\t/' "$sens" > "$T/bytes.sens"
expect_fail "a row whose bytes are not the model's is refused" "bytes.sens: token_embd.weight: .* the file says 4096 bytes" \
    "$KILN" quantize --imatrix "$im" "$f32" "$T/x.gguf" --target-bpw 3.3 --sensitivity "$T/bytes.sens"
{ cat "$sens"; printf 'output_norm.weight\tQ8_0\t272\t1e-9\n'; } > "$T/norm.sens"
expect_fail "a row for a tensor llama.cpp does not quantize is refused" "output_norm.weight: has rows but llama.cpp does not" \
    "$KILN" quantize --imatrix "$im" "$f32" "$T/x.gguf" --target-bpw 3.3 --sensitivity "$T/norm.sens"
expect_fail "a budget under the smallest file is refused, saying the smallest" \
    "below the smallest file these rows allow, [0-9]+ bytes" \
    "$KILN" quantize --imatrix "$im" "$f32" "$T/x.gguf" --target-size 100K --sensitivity "$sens"
check "... and nothing was written" test ! -e "$T/x.gguf"

# An imatrix with every weight but one the plan gives a type that needs
# one (IQ1/IQ2/IQ3_XXS; token_embd and output never need it) (values
# 1.0; legacy .dat: n, then name, ncall, nval, floats per entry, then
# chunks and dataset).
"$KILN" quantize --dry-run --json --imatrix "$im" "$f32" --target-bpw 3.334249 --sensitivity "$sens" > "$T/plan.json"
iq=$(jq -r '[.tensors[] | select((.to | test("^IQ[12]_|^IQ3_XXS")) and .name != "output.weight" and
    .name != "token_embd.weight") | .name][0]' "$T/plan.json")
"$KILN" quantize --dry-run --json "$f32" COPY | jq -r --arg iq "$iq" '.tensors[] | select(.shape | length == 2) |
    select(.name != "token_embd.weight" and .name != "output.weight" and .name != $iq) |
    "\(.name) \(.shape[0])"' > "$T/entries"
{
    le32 "$(wc -l < "$T/entries")"
    while read -r name n; do
        le32 ${#name}; printf %s "$name"; le32 1 "$n"
        printf '\000\000\200?%.0s' $(seq "$n")
    done < "$T/entries"
    le32 1 4; printf test
} > "$T/partial.dat"
expect_fail "an imatrix without an entry an IQ pick needs is refused ($iq)" \
    "$iq: IQ[0-9A-Z_]+ needs an importance matrix and the imatrix has no entry" \
    "$KILN" quantize --imatrix "$T/partial.dat" "$f32" "$T/x.gguf" --target-bpw 3.334249 --sensitivity "$sens"
check "... and nothing was written" test ! -e "$T/x.gguf"
rc "without --imatrix the IQ rows are left out, with a warning" 0 \
    "$KILN" quantize --dry-run --json "$f32" --target-bpw 3.334249 --sensitivity "$sens"
check "... the warning" jq_true "$T/out" '[.warnings[] | select(test("left out"))] | length == 1'
check "... and no type that needs one in the plan" jq_true "$T/out" \
    '[.tensors[].to | select(test("^IQ[12]_|^IQ3_XXS"))] | length == 0'

# ---- the plan, the file, its size, its bytes, its keys ----------------------
rc "--dry-run prints the plan" 0 "$KILN" quantize --dry-run --imatrix "$im" "$f32" --target-bpw 3.334249 --sensitivity "$sens"
check "... with each pick's estimate" grep -q -- "--target-bpw, est. dKLD [0-9.]*e-" "$T/out"
check "... and the totals" grep -Eq "budget: 1202783 bytes \(3.3342 bpw\); file [0-9]+ bytes .* estimated KLD" "$T/out"
plan_size=$(sed -n 's/.*; file \([0-9]*\) bytes.*/\1/p' "$T/out")
rc "the budget file is written" 0 "$KILN" quantize -q --imatrix "$im" "$f32" "$T/a.gguf" --target-bpw 3.334249 --sensitivity "$sens"
check "its size is the one the plan computed ($plan_size)" test "$(wc -c < "$T/a.gguf")" = "$plan_size"
check "... within the budget" test "$(wc -c < "$T/a.gguf")" -le 1202783
rc "a second run" 0 "$KILN" quantize -q --imatrix "$im" "$f32" "$T/b.gguf" --target-bpw 3.334249 --sensitivity "$sens"
check "... gives the same bytes" cmp -s "$T/a.gguf" "$T/b.gguf"
"$KILN" inspect --json "$T/a.gguf" > "$T/i.json"
check "the kiln.quantize.* keys record the run" jq_true "$T/i.json" '
    meta as $m | ($m["kiln.quantize.budget_bytes"] == 1202783) and ($m["kiln.quantize.sensitivity"] == "llama.sens") and
    ($m["kiln.quantize.sensitivity.layout_xxh64"] | test("^[0-9a-f]{16}$")) and
    ($m["kiln.quantize.sensitivity.text"] == "calib.groups_merged.txt") and ($m["kiln.quantize.estimated_kld"] > 0) and
    (($m["kiln.quantize.target_bpw"] - 3.334249) | fabs) < 1e-6'
rc "--target-size with a Ki suffix (1024-based)" 0 \
    "$KILN" quantize -q --imatrix "$im" "$f32" "$T/c.gguf" --target-size 1000Ki --sensitivity "$sens"
check "... is within 1000 x 1024 bytes" test "$(wc -c < "$T/c.gguf")" -le 1024000
check "... and not far below it" test "$(wc -c < "$T/c.gguf")" -ge 1000000
rc "-f with a budget is the text, so --force overwrites" 0 \
    "$KILN" quantize -q --force --imatrix "$im" "$f32" "$T/c.gguf" --target-size 1024000 --sensitivity "$sens"

# ---- the proof ----------------------------------------------------------------
chunks=${BUDGET_E2E_CHUNKS:-40}
for fx in llama mixtral qwen2; do
    if ! budget_base "$KILN" "$g" "$fx" "$T/$fx.kld" "$chunks"; then bad "$fx: KLD base"; continue; fi
    for p in $BUDGET_PRESETS; do
        if ! budget_compare "$KILN" "$g" "$fx" "$p" "$FIX/$fx.sens" "$T/$fx.kld" "$T"; then
            bad "$fx $p: budget file vs preset" "$BP_ERR"
            continue
        fi
        echo "# $(budget_row "$fx" "$p")"
        fig="$BP_KSIZE <= $BP_PSIZE bytes, KLD $BP_KKLD vs $BP_PKLD, ratio $BP_RATIO"
        if [ "$BP_KSIZE" -le "$BP_PSIZE" ] && awk -v r="$BP_RATIO" 'BEGIN { exit !(r <= 0.8) }'; then
            ok "$fx at $p's size ($BP_BPW bpw): $fig"
        else
            bad "$fx at $p's size ($BP_BPW bpw): no larger and KLD <= 0.8x" "$fig"
        fi
        rm -f "$T/$fx-$p.gguf" "$T/$fx-$p-budget.gguf"
    done
    rm -f "$T/$fx.kld"
done
finish
