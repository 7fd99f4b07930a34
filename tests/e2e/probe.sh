# tests/e2e/probe.sh - layer probes from the command line: `kiln diff
# --activations A B -f TEXT` and its other spelling `kiln golden --layers`.
# A model against itself drifts nowhere (cosine exactly 1, rel_rms 0, KLD
# 0); kiln's own Q4_K_M of the llama fixture drifts at every layer, and its
# final-logit KLD is the one `kiln perplexity --kl-divergence` gives on the
# same text and context; the table, JSON and TSV forms agree in shape;
# another network and a missing text are refused.
. tests/e2e/lib.sh

# rc NAME WANT CMD...: the command's exit status must be WANT
rc() {
    name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"; got=$?
    [ "$got" -eq "$want" ] && ok "$name" || bad "$name" "exit $got, expected $want: $(head -c 300 "$T/err")"
}

# ---- usage ------------------------------------------------------------------
check "diff --activations --help exits 0" sh -c '"$KILN" diff --activations --help | grep -q "usage: kiln diff --activations"'
check "golden --layers --help exits 0" sh -c '"$KILN" golden --layers --help | grep -q "kiln golden --layers A B -f TEXT"'
check "diff --help mentions --activations" sh -c '"$KILN" diff --help | grep -q -- "--activations"'
check "golden --help mentions --layers" sh -c '"$KILN" golden --help | grep -q -- "--layers"'
rc "a missing -f is a usage error" 2 "$KILN" diff --activations a.gguf b.gguf
check "saying so in one line" sh -c "[ \$(wc -l < '$T/err') -eq 1 ] && grep -q 'give the text with -f' '$T/err'"
rc "one model is a usage error" 2 "$KILN" golden --layers a.gguf -f t.txt
rc "--json with --tsv is a usage error" 2 "$KILN" diff --activations a b -f t --json --tsv
rc "-c 2 is a usage error" 2 "$KILN" diff --activations a b -f t -c 2

if need_shared "layer probes on ../shared's fixtures"; then
g="$shared/golden"
f32="$g/gguf/llama-f32.gguf"
txt="$g/text/ppl.txt"
opt="-c 128 --chunks 4"

# ---- a model against itself ----------------------------------------------------
# shellcheck disable=SC2086
"$KILN" diff --activations "$f32" "$f32" -f "$txt" $opt --json > "$T/same.json" 2> "$T/err"
check "A against A: cosine exactly 1 and rel_rms 0 everywhere, KLD 0, top-1 1" jq_true "$T/same.json" '
    .schema == "kiln.activations/1" and (.entries | length) > 0 and
    all(.entries[]; .cosine == 1 and .rel_rms == 0) and
    .logits.kld_mean == 0 and .logits.kld_max == 0 and .logits.top1_agreement == 1 and .relation == "same weights"'
check "one entry per layer and tensor: 7 products and the residual per block, then output" jq_true "$T/same.json" '
    (.entries | length) == 8 * .n_layer + 1 and
    ([.entries[] | select(.tensor == "residual") | .layer] == [range(.n_layer)]) and
    (.entries[-1] | .tensor == "output" and .layer == $n) and
    ([.entries[] | select(.layer < $n) | .tensor] | unique) ==
        (["attn_k", "attn_output", "attn_q", "attn_v", "ffn_down", "ffn_gate", "ffn_up", "residual"])' \
    --argjson n "$(jq .n_layer "$T/same.json")"

# ---- F32 against kiln's Q4_K_M ----------------------------------------------------
"$KILN" quantize -q "$f32" "$T/q4.gguf" Q4_K_M < /dev/null > "$T/q.log" 2>&1 || bad "kiln quantize Q4_K_M" "$(tail -c 300 "$T/q.log")"
# shellcheck disable=SC2086
"$KILN" diff --activations "$f32" "$T/q4.gguf" -f "$txt" $opt --json > "$T/q4.json" 2> "$T/err"
check "F32 against Q4_K_M: rel_rms > 0 and cosine < 1 at every layer and tensor" jq_true "$T/q4.json" '
    (.entries | length) == 8 * .n_layer + 1 and all(.entries[]; .rel_rms > 0 and .cosine < 1 and .cosine > 0.9) and
    .relation == "same network, other types or weights" and .n_ctx == 128 and .n_chunks == 4'
check "the worst output and the largest jump are named" jq_true "$T/q4.json" '
    (.worst | .rel_rms == ([$e[] | select(.tensor != "residual") | .rel_rms] | max)) and
    (.largest_jump | .tensor == "residual" and .jump > 0)' --argjson e "$(jq .entries "$T/q4.json")"
# shellcheck disable=SC2086
"$KILN" perplexity "$f32" -f "$txt" $opt --save-logits "$T/base.kld" > /dev/null 2>&1
"$KILN" perplexity --json "$T/q4.gguf" --kl-divergence "$T/base.kld" > "$T/ppl.json" 2> "$T/err"
check "the final-logit KLD is kiln perplexity --kl-divergence's, to every printed digit" jq_true "$T/q4.json" '
    .logits.kld_mean == $p.kld_mean and .logits.kld_max == $p.kld_max and .logits.top1_agreement == $p.same_top1 and
    .logits.kld_mean > 0' --argjson p "$(cat "$T/ppl.json")"

# the table
# shellcheck disable=SC2086
"$KILN" diff --activations "$f32" "$T/q4.gguf" -f "$txt" $opt > "$T/table" 2> "$T/err"
kld_want=$(jq -r '.kld_mean' "$T/ppl.json" | awk '{printf "%.6f", $1}')
check "the table prints that KLD and marks the largest jump" sh -c "
    grep -q '^final logits: KLD mean $kld_want' '$T/table' && grep -q '<- largest jump' '$T/table' &&
    grep -q '^worst outputs: ' '$T/table' && grep -q '^output: rel_rms ' '$T/table'"

# the TSV, both spellings
# shellcheck disable=SC2086
"$KILN" diff --activations "$f32" "$T/q4.gguf" -f "$txt" $opt --tsv > "$T/a.tsv" 2> "$T/err"
# shellcheck disable=SC2086
"$KILN" golden --layers "$f32" "$T/q4.gguf" -f "$txt" $opt --tsv > "$T/b.tsv" 2> "$T/err"
n=$(jq '.entries | length' "$T/q4.json")
check "--tsv: a header and one row of four fields per (layer, tensor)" sh -c "
    [ \"\$(head -1 '$T/a.tsv')\" = \"\$(printf 'layer\ttensor\tcosine\trel_rms')\" ] &&
    [ \$(wc -l < '$T/a.tsv') -eq $((n + 1)) ] &&
    awk -F '\t' 'NR > 1 && (NF != 4 || \$4 <= 0) { exit 1 }' '$T/a.tsv'"
check "kiln golden --layers gives the same report" cmp -s "$T/a.tsv" "$T/b.tsv"

# ---- mixture of experts --------------------------------------------------------------
"$KILN" diff --activations "$g/gguf/mixtral-f32.gguf" "$g/gguf/mixtral-Q4_K_M.gguf" -f "$txt" -c 64 --chunks 2 \
    --json > "$T/moe.json" 2> "$T/err"
check "mixtral: the experts of each 3-D tensor together, one entry per layer" jq_true "$T/moe.json" '
    ([.entries[] | select(.tensor == "ffn_down_exps")] | length) == .n_layer and
    all(.entries[] | select(.tensor | endswith("_exps")); .rel_rms > 0 and .n_rows > 0)'

# ---- refusals ----------------------------------------------------------------
expect_fail "llama against qwen2 is refused, naming both files" "llama-f32.gguf .*qwen2-f16.gguf.*not the same network" \
    "$KILN" diff --activations "$f32" "$g/gguf/qwen2-f16.gguf" -f "$txt"
check "in one line" sh -c "[ \$(wc -l < '$T/err') -eq 1 ] && [ ! -s '$T/out' ]"
printf 'hi' > "$T/short.txt"
expect_fail "a text shorter than the context is refused" "tokenizes to .* tokens" \
    "$KILN" golden --layers "$f32" "$f32" -f "$T/short.txt"
fi
finish
