# tests/e2e/imatrix.sh - kiln imatrix from the command line: usage errors
# and refusals, llama.cpp's file layout, every calibration input kind giving
# the statistics plain text gives, a run killed mid-way and resumed giving
# the file one run gives, merging and converting (golden .dat -> GGUF ->
# .dat byte for byte), statistics, experts no token reached, quantize
# refusing another model's imatrix, and llama-imatrix's running perplexity
# over its 64-chunk goldens.
. tests/e2e/lib.sh

check "imatrix --help exits 0" sh -c '"$KILN" imatrix --help | grep -q "usage: kiln imatrix"'
expect_fail "imatrix needs -f with a model" "give the calibration text with -f" "$KILN" imatrix model.gguf
expect_fail "imatrix needs a model or --in-file" "expects MODEL -f CALIB" "$KILN" imatrix
expect_fail "bad --output-format" "gguf or dat" "$KILN" imatrix m.gguf -f x --output-format txt
expect_fail "bad -c" "positive size" "$KILN" imatrix m.gguf -f x -c 0
"$KILN" imatrix m.gguf -f x -c 0 2>/dev/null; [ $? -eq 2 ] && ok "usage errors exit 2" || bad "usage errors exit 2"

# The tensor data of an imatrix GGUF (everything after the header), so
# files whose only difference is the dataset name can be compared.
data_of() {
    off=$("$KILN" inspect --json "$1" | jq '[.tensors[].offset] | min')
    tail -c +$((off + 1)) "$1"
}
same_data() { data_of "$1" > "$T/da"; data_of "$2" > "$T/db"; cmp -s "$T/da" "$T/db"; }

if need_shared "imatrix on the fixtures"; then
    G=$shared/golden
    M=$G/gguf/qwen2-f32.gguf
    CAL=$G/text/calib.groups_merged.txt
    run() { "$KILN" imatrix "$M" -c 128 --chunks 4 --no-ppl -q "$@"; }

    run -f "$CAL" -o "$T/plain.gguf" 2> "$T/err"
    check "collects an imatrix" test -s "$T/plain.gguf"
    # llama.cpp's layout: the same keys in the same order, the same tensors.
    "$KILN" inspect --json "$T/plain.gguf" > "$T/a.json"
    "$KILN" inspect --json "$G/imatrix/qwen2.imatrix.gguf" > "$T/b.json"
    check "keys, tensor names and shapes as llama-imatrix writes them" jq_true "$T/a.json" '
        def layout: [[.metadata[].key], [.tensors[] | [.name, .type, .shape]]];
        layout == ($b[0] | layout)' --slurpfile b "$T/b.json"
    expect_fail "no overwrite without --force" "exists" run -f "$CAL" -o "$T/plain.gguf"
    run -f "$CAL" -o "$T/plain.gguf" --force && ok "--force overwrites" || bad "--force overwrites"

    # Every kind of calibration input gives the same statistics.
    zstd -q -19 -c "$CAL" > "$T/calib.zst"
    # one record per line, its newline kept (-a: non-ASCII as \u escapes)
    jq -R -s -a -c 'split("\n") as $l | range($l | length) as $i | ($i < ($l | length) - 1) as $more |
        select($more or $l[$i] != "") | {id: 0, text: ($l[$i] + (if $more then "\n" else "" end))}' \
        "$CAL" > "$T/calib.jsonl"
    head -n 1000 "$CAL" > "$T/part1.txt"
    tail -n +1001 "$CAL" > "$T/part2.txt"
    (cd "$T" && tar cf calib.tar part1.txt part2.txt && zip -q calib.zip part1.txt part2.txt)
    for src in calib.zst calib.jsonl calib.tar calib.zip "part1.txt part2.txt"; do
        args=""
        for f in $src; do args="$args -f $T/$f"; done
        # shellcheck disable=SC2086
        run $args -o "$T/x.gguf" --force
        check "input $src gives the plain-text statistics" same_data "$T/x.gguf" "$T/plain.gguf"
    done
    jq -R -s -a -c '{body: .}' "$CAL" > "$T/other.jsonl"
    run -f "$T/other.jsonl" --jsonl-field body -o "$T/x.gguf" --force
    check "--jsonl-field reads another field" same_data "$T/x.gguf" "$T/plain.gguf"
    expect_fail "a JSON Lines file without the field" "other.jsonl: line 1: no string field \"text\"" run -f "$T/other.jsonl" -o "$T/y.gguf"

    # Refusals.
    : > "$T/empty.txt"
    expect_fail "an empty text" "empty.txt: the calibration text is empty" run -f "$T/empty.txt" -o "$T/y.gguf"
    printf 'Just a few words.\n' > "$T/short.txt"
    expect_fail "a text shorter than one chunk" "short.txt: the calibration text is [0-9]+ tokens long, shorter than one chunk of 128" run -f "$T/short.txt" -o "$T/y.gguf"
    check "no output after a refusal" test ! -e "$T/y.gguf"

    # output.weight only with --process-output, as llama-imatrix.
    LM=$G/gguf/llama-f32.gguf
    "$KILN" imatrix "$LM" -f "$CAL" -c 128 --chunks 2 --no-ppl -q -o "$T/po.gguf" --process-output
    "$KILN" imatrix "$LM" -f "$CAL" -c 128 --chunks 2 --no-ppl -q -o "$T/npo.gguf"
    check "--process-output adds output.weight" sh -c "'$KILN' inspect '$T/po.gguf' | grep -q '^  output.weight.in_sum2 ' && ! '$KILN' inspect '$T/npo.gguf' | grep -q '^  output.weight'"

    # A non-finite activation stops the run, naming the tensor and the chunk:
    # the llama fixture with one weight of blk.1.ffn_up set to 1e38.
    cp "$LM" "$T/bad.gguf"
    off=$("$KILN" inspect --json "$T/bad.gguf" | jq '[.tensors[] | select(.name == "blk.1.ffn_up.weight") | .offset][0]')
    # 256 times 1e38 as a little-endian f32 (bytes 99 76 96 7e)
    printf '\231\166\226\176%.0s' $(seq 256) | write_at "$T/bad.gguf" "$off"
    expect_fail "a non-finite activation stops the run" "chunk 1: tensor blk.1.ffn_down.weight: activation (inf|-inf|nan) at token" \
        "$KILN" imatrix "$T/bad.gguf" -f "$CAL" -c 128 --chunks 4 -q -o "$T/bad.imatrix"
    check "no output after a non-finite activation" test ! -e "$T/bad.imatrix"

    # A run killed after a checkpoint, resumed, gives the file one run gives.
    MX=$G/gguf/mixtral-f32.gguf
    "$KILN" imatrix "$MX" -f "$CAL" -c 128 --chunks 32 -t 1 -q -o "$T/one.gguf"
    "$KILN" imatrix "$MX" -f "$CAL" -c 128 --chunks 32 -t 1 -q -o "$T/two.gguf" --save-frequency 3 &
    pid=$!
    i=0
    while [ ! -e "$T/two.gguf.ckpt" ] && [ $i -lt 600 ] && kill -0 $pid 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    if [ -e "$T/two.gguf" ]; then
        skipt "kill + --resume (the run finished before it could be killed)"
    else
        check "a killed run leaves a checkpoint and no output" test -e "$T/two.gguf.ckpt"
        "$KILN" imatrix "$MX" -f "$CAL" -c 128 --chunks 32 -t 1 -o "$T/two.gguf" --resume --save-frequency 3 2> "$T/err"
        check "resume says where it continues" grep -q "resumed from .*two.gguf.ckpt after chunk" "$T/err"
        check "killed + resumed run gives the file of one run" cmp -s "$T/one.gguf" "$T/two.gguf"
        check "the checkpoint is removed after success" test ! -e "$T/two.gguf.ckpt"
    fi
    cp "$T/one.gguf" "$T/fake.gguf.ckpt"
    expect_fail "resume refuses a file that is not a checkpoint" "not a kiln imatrix checkpoint" \
        "$KILN" imatrix "$M" -f "$CAL" -c 128 --chunks 4 -q -o "$T/fake.gguf" --resume
    expect_fail "a new run does not write over a checkpoint" "fake.gguf.ckpt: a checkpoint of an earlier run exists" \
        "$KILN" imatrix "$M" -f "$CAL" -c 128 --chunks 4 -q -o "$T/fake.gguf" --save-frequency 2

    # Merging and converting.
    "$KILN" imatrix --in-file "$G/imatrix/mixtral.imatrix.gguf" --in-file "$G/imatrix/mixtral.imatrix.gguf" -o "$T/m2.gguf" -q
    "$KILN" inspect --dump blk.0.ffn_up_exps.weight.counts "$T/m2.gguf" > "$T/dump"
    check "merge adds counts" grep -qx "9046 9704 8144 5874" "$T/dump"
    "$KILN" imatrix --in-file "$G/imatrix/llama.imatrix.gguf" --output-format dat -o "$T/l.dat" -q
    check "GGUF -> .dat gives llama-imatrix's .dat" cmp -s "$T/l.dat" "$G/imatrix/llama.imatrix.dat"
    "$KILN" imatrix --in-file "$G/imatrix/mixtral.imatrix.dat" -o "$T/m.gguf" -q
    "$KILN" imatrix --in-file "$T/m.gguf" --output-format dat -o "$T/m.dat" -q
    check ".dat -> GGUF -> .dat loses nothing" cmp -s "$T/m.dat" "$G/imatrix/mixtral.imatrix.dat"

    # Statistics, as a table and as JSON.
    "$KILN" imatrix --show-statistics --in-file "$G/imatrix/mixtral.imatrix.gguf" > "$T/st.txt"
    check "statistics table shows expert coverage" grep -q "blk.0.ffn_up_exps.weight .* 4/4" "$T/st.txt"
    "$KILN" imatrix --show-statistics --json --in-file "$G/imatrix/mixtral.imatrix.gguf" > "$T/st.json"
    check "statistics JSON" jq_true "$T/st.json" '
        (INDEX(.tensors[]; .name) | .["blk.0.ffn_up_exps.weight"]) as $e |
        .schema == "kiln.imatrix.stats/1" and $e.matrices == 4 and $e.experts_covered == 4 and $e.tokens == 16384 and
        (.tensors | length) == 32'

    # kiln quantize must refuse an imatrix made for another model.
    if "$KILN" quantize --help 2>/dev/null | grep -q -- "--imatrix"; then
        expect_fail "quantize refuses another model's imatrix" "imatrix" \
            "$KILN" quantize --imatrix "$G/imatrix/llama.imatrix.gguf" "$MX" "$T/q2.gguf" Q2_K -q
    else
        skipt "quantize refuses another model's imatrix (no kiln quantize --imatrix yet)"
    fi
fi

# Experts no calibration token reached: a model with 32 experts, 2 used per
# token, sees at most 16 of them in one chunk of 8 tokens. They are kept
# with count 0, and the summary names them.
if "$KILN" testmodel --help >/dev/null 2>&1 && "$KILN" convert --help >/dev/null 2>&1; then
    "$KILN" testmodel --arch mixtral --experts 32 --experts-used 2 --layers 2 -o "$T/moe" -q &&
        "$KILN" convert "$T/moe" --outtype f32 -o "$T/moe.gguf" -q
    printf 'one two three four five six seven eight nine ten eleven twelve\n' > "$T/tiny.txt"
    "$KILN" imatrix "$T/moe.gguf" -f "$T/tiny.txt" -c 8 --chunks 1 --no-ppl -o "$T/moe.imatrix" 2> "$T/err"
    check "partial coverage: the run succeeds" test -s "$T/moe.imatrix"
    check "partial coverage: the summary lists idle experts per layer" grep -Eq "^layer 0: experts [0-9 ]+ of 32 got no calibration tokens \(ffn_down_exps, ffn_gate_exps, ffn_up_exps\) kept with count 0" "$T/err"
    "$KILN" imatrix --show-statistics --json --in-file "$T/moe.imatrix" > "$T/moe.json"
    check "partial coverage: idle experts are kept with count 0" jq_true "$T/moe.json" '
        (INDEX(.tensors[]; .name) | .["blk.1.ffn_up_exps.weight"]) as $e |
        $e.matrices == 32 and $e.experts_covered <= 16 and ($e.experts_uncovered | length) == 32 - $e.experts_covered and
        $e.tokens == 16'
else
    skipt "partial coverage (needs kiln testmodel and kiln convert)"
fi
# The running perplexity llama-imatrix printed over its four passes of 16
# sequences (../shared/golden/logs/imatrix-MODEL.log: -c 128, 64 chunks),
# digit for digit: the flash kernels' running sum is fused as GCC compiles
# ggml's (runtime/attention_flash.c), which one chunk in 64 already shows
for m in llama qwen2 mixtral; do
    need_shared "imatrix $m: llama-imatrix's running perplexity over 64 chunks" || continue
    grep -o '\[[0-9]*\][0-9.]*' "$shared/golden/logs/imatrix-$m.log" > "$T/want-$m.ppl"
    "$KILN" imatrix "$shared/golden/gguf/$m-f32.gguf" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 \
        --chunks 64 -o "$T/ppl-$m.gguf" > "$T/out-$m" 2>&1
    grep -o '\[[0-9]*\][0-9.]*' "$T/out-$m" > "$T/got-$m.ppl"
    if [ "$(wc -l < "$T/want-$m.ppl")" -eq 64 ] && cmp -s "$T/want-$m.ppl" "$T/got-$m.ppl"; then
        ok "imatrix $m: llama-imatrix's running perplexity over 64 chunks"
    else
        bad "imatrix $m: llama-imatrix's running perplexity over 64 chunks" \
            "$(diff "$T/want-$m.ppl" "$T/got-$m.ppl" | head -c 300) $(tail -c 200 "$T/out-$m")"
    fi
done
finish
