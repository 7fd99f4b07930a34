# tests/e2e/golden.sh - kiln golden, kiln perplexity and kiln generate from
# the command line: exit codes, llama.cpp's reference logits as gates, the
# fixtures' golden files against kiln's own conversions and quantizations,
# deliberately failing gates, and corrupt files.
. tests/e2e/lib.sh

# rc NAME WANT CMD...: the command's exit status must be WANT
rc() {
    name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"; got=$?
    [ "$got" -eq "$want" ] && ok "$name" || bad "$name" "exit $got, expected $want: $(head -c 300 "$T/err")"
}

# ---- usage ----------------------------------------------------------------
check "golden --help exits 0" sh -c '"$KILN" golden --help | grep -q "usage: kiln golden record"'
check "perplexity --help exits 0" sh -c '"$KILN" perplexity --help | grep -q "usage: kiln perplexity"'
check "generate --help exits 0" sh -c '"$KILN" generate --help | grep -q "usage: kiln generate"'
rc "golden without a subcommand is a usage error" 2 "$KILN" golden
rc "golden with an unknown subcommand is a usage error" 2 "$KILN" golden frob
rc "golden check without GOLDEN is a usage error" 2 "$KILN" golden check model.gguf
rc "golden check with --min-top1 above 1 is a usage error" 2 "$KILN" golden check m.gguf g.golden --min-top1 2
rc "golden check with a non-number threshold is a usage error" 2 "$KILN" golden check m.gguf g.golden --max-kld x
rc "golden record without -o is a usage error" 2 "$KILN" golden record m.gguf --prompts p.txt
rc "perplexity without a text is a usage error" 2 "$KILN" perplexity m.gguf
rc "perplexity -c 1 is a usage error" 2 "$KILN" perplexity m.gguf -f t.txt -c 1
rc "perplexity --save-logits with --kl-divergence is a usage error" 2 \
    "$KILN" perplexity m.gguf -f t.txt --save-logits a --kl-divergence b
rc "generate without -p is a usage error" 2 "$KILN" generate m.gguf
expect_fail "golden check of a missing file" "nothing.golden: cannot open" "$KILN" golden check m.gguf "$T/nothing.golden"

if ! need_shared "golden checks against llama.cpp"; then finish; fi
g="$shared/golden"

# ---- llama.cpp's logits as gates: every reference GGUF --------------------
for f in "$g"/logits/*.logits; do
    stem=$(basename "$f" .logits)
    case "$stem" in *.f64ref) continue ;; esac
    "$KILN" golden check "$g/gguf/$stem.gguf" "$f" --max-kld 1e-5 --min-top1 0.995 > "$T/out" 2>&1
    r=$?
    if [ $r -eq 0 ]; then ok "golden check $stem against llama.cpp's logits (--max-kld 1e-5 --min-top1 0.995)"
    else bad "golden check $stem against llama.cpp's logits (--max-kld 1e-5 --min-top1 0.995)" \
        "exit $r: $(grep -E '^(all|FAIL)|kiln:' "$T/out" | tr '\n' ' ')"; fi
done

# ---- record / check round trip, and gates that trip ------------------------
head -n 3 "$g/text/prompts.txt" > "$T/prompts.txt"
rc "golden record of llama-f32" 0 "$KILN" golden record "$g/gguf/llama-f32.gguf" --prompts "$T/prompts.txt" -o "$T/f32.golden"
rc "golden record refuses to overwrite without --force" 1 \
    "$KILN" golden record "$g/gguf/llama-f32.gguf" --prompts "$T/prompts.txt" -o "$T/f32.golden"
rc "the same model checks against its own golden file exactly" 0 \
    "$KILN" golden check "$g/gguf/llama-f32.gguf" "$T/f32.golden" --max-kld 1e-12 --max-abs 1e-6 --min-top1 1
check "the report names the model relation" grep -q "same weights" "$T/out"
rc "a Q2_K model fails --max-kld 1e-4 against the F32 golden" 1 \
    "$KILN" golden check "$g/gguf/llama-Q2_K.gguf" "$T/f32.golden" --max-kld 1e-4
check "the failing metric is named" grep -q "^FAIL: kld_mean .* (--max-kld)" "$T/out"
rc "a Q2_K model fails --min-top1 0.99 and --max-ppl-ratio 1.001" 1 \
    "$KILN" golden check "$g/gguf/llama-Q2_K.gguf" "$T/f32.golden" --min-top1 0.99 --max-ppl-ratio 1.001
check "both failing metrics are named" sh -c "grep -q 'FAIL: top1_agreement' '$T/out' && grep -q 'FAIL: ppl_ratio' '$T/out'"
rc "a Q2_K model passes loose gates" 0 \
    "$KILN" golden check "$g/gguf/llama-Q2_K.gguf" "$T/f32.golden" --max-kld 0.1 --min-top1 0.7 --max-abs 5 --max-ppl-ratio 1.1
"$KILN" golden check --json "$g/gguf/llama-Q2_K.gguf" "$T/f32.golden" --max-kld 1e-4 > "$T/c.json"
check "golden check --json exits 1 on a failed gate" test $? -eq 1
check "golden check --json has the documented keys" jq_true "$T/c.json" '
    (["max_abs", "rmse", "cosine_min", "kld_mean", "kld_max", "top1_agreement", "ppl", "passed"] - keys) == [] and
    .passed == false and 0 <= .top1_agreement and .top1_agreement <= 1 and .schema == "kiln.golden.check/1" and
    (.prompts | length) == 3 and (.failed[0] | startswith("kld_mean")) and (.relation | startswith("same network")) and
    (.prompts[0].text | startswith("The old lighthouse")) and .thresholds.max_kld == 1e-4'
"$KILN" golden check --json "$g/gguf/llama-Q4_K_M.gguf" "$g/logits/llama-Q4_K_M.logits" > "$T/k.json"
check "a KLGT reference checks with no fingerprint" jq_true "$T/k.json" '.reference.format == "klgt" and .passed == true'

# ---- corrupt and truncated golden files -------------------------------------
n=$(wc -c < "$T/f32.golden")
head -c $((n / 2)) "$T/f32.golden" > "$T/cut.golden"
expect_fail "a truncated golden file is an error" "cut.golden: .*truncated" "$KILN" golden check "$g/gguf/llama-f32.gguf" "$T/cut.golden"
check "the error is one line" test "$(wc -l < "$T/err")" -eq 1
cp "$T/f32.golden" "$T/flip.golden" && flip_bits "$T/flip.golden" $(($(wc -c < "$T/f32.golden") / 3)) 8
expect_fail "a golden file with a flipped bit is an error" "flip.golden: .*(corrupt|checksum)" \
    "$KILN" golden check "$g/gguf/llama-f32.gguf" "$T/flip.golden"
head -c 1000 "$g/logits/llama-f32.logits" > "$T/cut.logits"
expect_fail "a truncated KLGT file is an error" "cut.logits: prompt\[0\].* truncated" \
    "$KILN" golden check "$g/gguf/llama-f32.gguf" "$T/cut.logits"
expect_fail "a GGUF is not a golden file" "neither a kiln golden file nor a KLGT" \
    "$KILN" golden check "$g/gguf/llama-f32.gguf" "$g/gguf/llama-f32.gguf"

# ---- the fixtures' golden files vs kiln's conversions and quantizations ----
# golden/fixtures/FIXTURE-f32.golden were recorded from `kiln convert
# --outtype f32` of each fixture; thresholds.tsv says what each of kiln's
# conversions and quantizations must reach (README.md there).
# (the loop reads a file, not a pipe, so that its TAP lines are counted)
tail -n +5 golden/fixtures/thresholds.tsv > "$T/thresholds.tsv"
while IFS="$(printf '\t')" read -r fx how name max_kld min_top1 _ _; do
    src="$T/$fx-f32.gguf"
    [ -f "$src" ] || "$KILN" convert -q "$shared/models/$fx" --outtype f32 -o "$src" < /dev/null > "$T/conv.log" 2>&1 \
        || { bad "kiln convert $fx" "$(tail -c 300 "$T/conv.log")"; continue; }
    out="$T/$fx-$name.gguf"
    if [ "$how" = convert ]; then
        "$KILN" convert -q "$shared/models/$fx" --outtype "$name" -o "$out" < /dev/null > "$T/q.log" 2>&1
    else
        im=""
        case $name in Q2_K|IQ2_XXS) im="--imatrix $g/imatrix/$fx.imatrix.gguf" ;; esac
        "$KILN" quantize -q $im "$src" "$out" "$name" < /dev/null > "$T/q.log" 2>&1
    fi || { bad "kiln $how $fx $name" "$(tail -c 300 "$T/q.log")"; continue; }
    "$KILN" golden check "$out" "golden/fixtures/$fx-f32.golden" --max-kld "$max_kld" --min-top1 "$min_top1" < /dev/null > "$T/c.out" 2>&1
    r=$?
    fig=$(grep '^all' "$T/c.out" | awk '{print "kld " $6 ", top1 " $8}')
    if [ $r -eq 0 ]; then ok "kiln $how $fx $name passes its golden gate ($fig; max $max_kld, min $min_top1)"
    else bad "kiln $how $fx $name passes its golden gate" "$(grep -E 'FAIL|kiln:' "$T/c.out" | tr '\n' ' ')"; fi
    rm -f "$out"
done < "$T/thresholds.tsv"

# ---- perplexity from the command line ---------------------------------------
m="$g/gguf/llama-Q8_0.gguf"
rc "perplexity of 4 chunks" 0 "$KILN" perplexity "$m" -f "$g/text/ppl.txt" -c 128 -b 128 --chunks 4
check "prints the running estimate" grep -q '^\[1\][0-9.]*,\[2\][0-9.]*,\[3\][0-9.]*,\[4\][0-9.]*,' "$T/out"
check "prints llama-perplexity's final line" grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$' "$T/out"
"$KILN" perplexity --json "$m" -f "$g/text/ppl.txt" -c 128 -b 128 --chunks 4 > "$T/p.json"
check "perplexity --json has the documented keys" jq_true "$T/p.json" '
    (["ppl", "ppl_err", "n_ctx", "n_chunks", "n_tokens", "tokens_per_second"] - keys) == [] and .schema == "kiln.perplexity/1" and
    .n_ctx == 128 and .n_chunks == 4 and .n_tokens == 512 and .ppl > 1'
rc "perplexity --save-logits" 0 "$KILN" perplexity "$g/gguf/llama-f32.gguf" -f "$g/text/ppl.txt" -c 128 --chunks 4 --save-logits "$T/base.kld"
rc "perplexity --kl-divergence" 0 "$KILN" perplexity "$m" --kl-divergence "$T/base.kld"
check "prints the KLD statistics" sh -c "grep -q '^Mean    KLD:' '$T/out' && grep -q '^99.0%   KLD:' '$T/out' && grep -q '^Median  KLD:' '$T/out' && grep -q '^Same top p:' '$T/out' && grep -q '^RMS .*p    :' '$T/out' && grep -q '^Mean PPL(Q)/PPL(base)' '$T/out'"
"$KILN" perplexity --json "$m" --kl-divergence "$T/base.kld" -f "$g/text/ppl.txt" > "$T/k.json"
check "perplexity --kl-divergence --json" jq_true "$T/k.json" '
    all(.kld_mean, .kld_median, .kld_p90, .kld_p99, .kld_max, .same_top1, .ppl_ratio; type == "number") and
    0 < .kld_mean and .kld_mean < 0.01 and .kld_median <= .kld_p90 and .kld_p90 <= .kld_p99 and .kld_p99 <= .kld_max and
    0.9 < .same_top1 and .same_top1 <= 1 and ((.ppl_ratio - 1) | fabs) < 0.05 and .n_chunks == 4'
rc "a base of another text is refused" 1 "$KILN" perplexity "$m" --kl-divergence "$T/base.kld" -f "$g/text/prompts.txt"
n=$(wc -c < "$T/base.kld")
head -c $((n - 100)) "$T/base.kld" > "$T/cut.kld"
expect_fail "a truncated KLD base is an error" "cut.kld: .*truncated" "$KILN" perplexity "$m" --kl-divergence "$T/cut.kld"
cp "$T/base.kld" "$T/flip.kld" && flip_bits "$T/flip.kld" $(($(wc -c < "$T/base.kld") / 2)) 64
expect_fail "a corrupt KLD base is an error" "flip.kld: .*(corrupt|checksum)" "$KILN" perplexity "$m" --kl-divergence "$T/flip.kld"
expect_fail "a golden file is not a KLD base" "not a KL-divergence base" "$KILN" perplexity "$m" --kl-divergence golden/fixtures/llama-f32.golden
rc "perplexity of a too-short text fails" 1 "$KILN" perplexity "$m" -f "$T/prompts.txt" -c 128
check "saying how many tokens it needs" grep -q "needs at least 256" "$T/err"

# ---- generate ----------------------------------------------------------------
"$KILN" generate "$g/gguf/llama-f32.gguf" -p "The old lighthouse keeper" -n 16 > "$T/g1" 2>/dev/null
r=$?
"$KILN" generate "$g/gguf/llama-f32.gguf" -p "The old lighthouse keeper" -n 16 -t 1 > "$T/g2" 2>/dev/null
check "greedy generation runs and repeats itself exactly (any thread count)" sh -c "[ $r -eq 0 ] && cmp -s '$T/g1' '$T/g2' && grep -q '^The old lighthouse keeper.' '$T/g1'"
"$KILN" generate "$g/gguf/qwen2-Q4_K_M.gguf" -p "Hello" -n 12 --temp 0.8 --seed 7 --ids > "$T/s1" 2>/dev/null
"$KILN" generate "$g/gguf/qwen2-Q4_K_M.gguf" -p "Hello" -n 12 --temp 0.8 --seed 7 --ids > "$T/s2" 2>/dev/null
"$KILN" generate "$g/gguf/qwen2-Q4_K_M.gguf" -p "Hello" -n 12 --temp 0.8 --seed 8 --ids > "$T/s3" 2>/dev/null
check "sampling with a seed is reproducible" cmp -s "$T/s1" "$T/s2"
check "another seed samples something else" sh -c "! cmp -s '$T/s1' '$T/s3'"
finish
