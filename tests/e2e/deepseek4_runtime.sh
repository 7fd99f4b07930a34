# tests/e2e/deepseek4_runtime.sh - kiln's runtime for DeepSeek-V4 (GGUF
# arch deepseek4: hyper-connections with sinkhorn mixing, compressed
# attention with ratio-4 and ratio-128 compressors, Hadamard-rotated
# queries and keys, attention sinks, grouped output projection, sqrt-
# softplus routing with a hash-routed first block, clamped SwiGLU;
# runtime/deepseek4*.c) against what llama.cpp (d32676d7) computed for the
# tiny FP8 checkpoint of tests/fixtures/deepseek4 (REGEN.md there says how
# its files were made; tests/e2e/deepseek4.sh checks the conversion).
#
# Checked: the FP8 model converted by kiln to f32 and quantized by kiln to
# Q8_0 and Q4_K_M (byte-identical to llama.cpp's files, so the fixture's
# logits apply); logits bit-identical (golden check --max-abs 0) for all
# three; that the logits depend on the parts a simpler graph would skip
# (one flipped bit in a hyper-connection matrix, a compressor matrix or
# the BF16 router fails --max-abs 0); perplexity digit for digit as
# llama-perplexity -c 128 -b 128 --chunks 4 printed it (flash attention
# over F16 caches, runtime/deepseek4_flash.c) for all three, and at
# -c 512 -b 512 for f32 and Q4_K_M, where the lightning indexer chooses
# among the compressed blocks (runtime/deepseek4_indexer.c); --exact
# logits within 2e-3 of a float64 reference (tests/fixtures/deepseek4_f64),
# which the BF16 twin and the default numbers are not; several batches
# (the state llama.cpp carries between ubatches, runtime/
# deepseek4_state.c): greedy generation's tokens, logits at 32 and 1
# tokens per call bit-identical, perplexity at -c 128 -b 64, 32 and 1
# digit for digit, also layer by layer (--max-memory, --layer-major)
# (tests/fixtures/deepseek4_runtime). The goldens
# come from a llama.cpp built on an AVX512_BF16 machine, whose BF16
# products kiln follows for this model (runtime/deepseek4_bf16.c).
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek4
S=ds4-tiny-fp8
if ! zstd -q -d -c "$FX/DeepSeek4-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
F32=$T/$S-f32.gguf

# same_sha NAME FILE: FILE's sha256 is the one the fixture records for NAME
same_sha() {
    want=$(awk -v n="$1" '$2 == n { print $1 }' "$FX/gguf.sha256")
    got=$(sha256sum "$2" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ]
}

if ! "$KILN" convert "$T/$S" --outtype f32 -o "$F32" 2> "$T/err"; then
    bad "deepseek4: convert f32" "$(head -c 300 "$T/err")"
    finish
fi
check "deepseek4: convert f32 from FP8: byte-identical to llama.cpp's" same_sha "$S-f32.gguf" "$F32"
for q in Q8_0 Q4_K_M; do
    if "$KILN" quantize -q --allow-requantize "$F32" "$T/$S-$q.gguf" $q 2> "$T/err"; then
        check "deepseek4: quantize $q: byte-identical to llama-quantize's" same_sha "$S-$q.gguf" "$T/$S-$q.gguf"
    else
        bad "deepseek4: quantize $q" "$(head -c 300 "$T/err")"
    fi
done
# Q2_K with llama-quantize's types: kiln's 1-2 bit presets keep the
# hyper-connection mixers and the compressors' position biases Q8_0
# (quantize/policy.c), llama-quantize has no rule for them; asking for
# Q2_K there gives its bytes (blk.1's 128-wide ape falls back to Q4_0 in both)
if "$KILN" quantize -q --allow-requantize --tensor-type 'hc_=q2_k' --tensor-type 'compressor_ape=q2_k' \
    "$F32" "$T/$S-Q2_K.gguf" Q2_K 2> "$T/err"; then
    check "deepseek4: quantize Q2_K with llama-quantize's types: byte-identical to llama-quantize's" \
        same_sha "$S-Q2_K.gguf" "$T/$S-Q2_K.gguf"
else
    bad "deepseek4: quantize Q2_K" "$(head -c 300 "$T/err")"
fi

# logits: ggml numbers (the default), every logit equal
for q in f32 Q8_0 Q4_K_M; do
    if zstd -q -d -c "$FX/logits/$S-$q.logits.zst" > "$T/$q.logits" 2> "$T/err"; then
        check "deepseek4: logits $q: bit-identical to llama.cpp's" \
            sh -c '"$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1' _ "$KILN" "$T/$S-$q.gguf" \
            "$T/$q.logits" "$T/check-$q"
    else
        bad "deepseek4: logits $q: unpack" "$(head -c 300 "$T/err")"
    fi
done

# the logits depend on each of these: one flipped bit in the f32 file
# must fail --max-abs 0 (a hyper-connection mixing matrix, the ratio-4
# compressor's gate, the first block's BF16 router)
for t in blk.1.hc_ffn_fn.weight blk.0.attn_compressor_gate.weight blk.2.ffn_gate_inp.weight; do
    cp "$F32" "$T/flip.gguf"
    off=$("$KILN" inspect --json "$T/flip.gguf" | jq -r --arg t "$t" '.tensors[] | select(.name == $t) | .offset // empty')
    if [ -z "$off" ]; then
        bad "deepseek4: $t offset" "inspect --json gave no offset"
        continue
    fi
    flip_bits "$T/flip.gguf" $((off + 2)) 64
    check "deepseek4: logits depend on $t (one flipped bit fails --max-abs 0)" \
        sh -c '! "$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ \
        "$KILN" "$T/flip.gguf" "$T/f32.logits" "$T/flip-check"
done

# --exact (dequantized weights, f32 products) against a float64 forward
# pass of the same f32 file (tests/fixtures/deepseek4_f64: the fixture's
# prompt, and a 294-token one past the sliding window, the ratio-128
# blocks and 4 x indexer.top_k, where the indexer chooses); the BF16
# twin (BF16 where the FP8 file has Q8_0, wo_a included, which only
# --exact runs) must run and must not be within it (2.44), nor must the
# default ggml numbers (2.36: llama.cpp's rounded activations)
F64=tests/fixtures/deepseek4_f64/$S-f32.f64ref.logits.zst
if zstd -q -d -c "$F64" > "$T/f64ref.logits" 2> "$T/err"; then
    check "deepseek4: --exact logits within 2e-3 of a float64 reference" \
        sh -c '"$1" golden check "$2" "$3" --exact --max-abs 2e-3 > "$4" 2>&1' _ "$KILN" "$F32" "$T/f64ref.logits" \
        "$T/check-f64"
    # the same values as F32 (experts and wo_a included), which only
    # --exact runs: the same reference holds
    if "$KILN" quantize -q --allow-requantize "$F32" "$T/all-f32.gguf" F32 2> "$T/err"; then
        check "deepseek4: --exact logits of an all-F32 copy (float experts, wo_a) within 2e-3 of it" \
            sh -c '"$1" golden check "$2" "$3" --exact --max-abs 2e-3 > "$4" 2>&1' _ "$KILN" "$T/all-f32.gguf" \
            "$T/f64ref.logits" "$T/check-f64-all"
    else
        bad "deepseek4: quantize the f32 file to F32" "$(head -c 300 "$T/err")"
    fi
    check "deepseek4: the default (ggml) logits are not within 2e-3 of it" \
        sh -c '! "$1" golden check "$2" "$3" --max-abs 2e-3 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ "$KILN" \
        "$F32" "$T/f64ref.logits" "$T/check-f64-ggml"
    if "$KILN" convert "$T/ds4-tiny-bf16" --outtype f32 -o "$T/bf16-f32.gguf" 2> "$T/err"; then
        check "deepseek4: the BF16 twin's --exact logits are not within 2e-3 of it" \
            sh -c '! "$1" golden check "$2" "$3" --exact --max-abs 2e-3 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ \
            "$KILN" "$T/bf16-f32.gguf" "$T/f64ref.logits" "$T/check-f64-bf16"
    else
        bad "deepseek4: convert the BF16 twin to f32" "$(head -c 300 "$T/err")"
    fi
else
    bad "deepseek4: float64 reference: unpack" "$(head -c 300 "$T/err")"
fi

# several batches carry the state llama.cpp carries between ubatches
# (runtime/deepseek4_state.c: raw keys, compressed caches, the
# compressors' rows of unfinished blocks). Greedy generation (the prompt
# as one batch, then one token per call) gives llama.cpp's 60 tokens for
# two prompts, the second crossing the first ratio-128 block (position
# 127) while generating (tests/fixtures/deepseek4_runtime/gen)
RT=tests/fixtures/deepseek4_runtime
for q in f32 Q8_0 Q4_K_M; do
    : > "$T/gen-$q"
    i=0
    while IFS= read -r prompt; do
        i=$((i + 1))
        np=$("$KILN" tokenize "$T/$S-$q.gguf" -p "$prompt" --ids 2> /dev/null | wc -w)
        "$KILN" generate "$T/$S-$q.gguf" -p "$prompt" -n 60 --ids 2> "$T/err" | head -1 |
            awk -v np="$np" '{ s = ""; for (i = np + 1; i <= NF; i++) s = s (s ? " " : "") $i; print s }' >> "$T/gen-$q"
    done < "$RT/gen/prompts.txt"
    if [ "$i" -eq 2 ] && diff "$T/gen-$q" "$RT/gen/$S-$q.ids" > "$T/gen-diff" 2>&1; then
        ok "deepseek4: generate $q (greedy, 2 prompts x 60 tokens): llama.cpp's tokens"
    else
        bad "deepseek4: generate $q (greedy, 2 prompts x 60 tokens): llama.cpp's tokens" \
            "$(head -c 300 "$T/gen-diff") $(head -c 200 "$T/err")"
    fi
done

# logits of a 128-token chunk evaluated 1 token per call (F32 caches, no
# flash attention: llama.cpp's golden context with n_ubatch 1), every logit
# equal (n_ubatch 32 is checked by the -b 32 perplexity digits above; its
# logits file is left out to keep the fixtures under 4 MB)
for f in f32-u1:1 Q8_0-u1:1; do
    name=${f%:*} b=${f#*:}
    q=${name%-u*}
    if zstd -q -d -c "$RT/logits/$S-$name.logits.zst" > "$T/$name.logits" 2> "$T/err"; then
        check "deepseek4: logits $q, $b token(s) per call: bit-identical to llama.cpp's (n_ubatch $b)" \
            sh -c '"$1" golden check "$2" "$3" -b "$4" --max-abs 0 > "$5" 2>&1' _ "$KILN" "$T/$S-$q.gguf" \
            "$T/$name.logits" "$b" "$T/check-$name"
    else
        bad "deepseek4: logits $name: unpack" "$(head -c 300 "$T/err")"
    fi
done
# ... and token by token is not one batch: the -b 1 golden fails when
# the chunk is evaluated whole
check "deepseek4: the -b 1 logits are not the one-batch logits" \
    sh -c '! "$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1 && grep -q "FAIL: max_abs" "$4"' _ "$KILN" \
    "$T/$S-f32.gguf" "$T/f32-u1.logits" "$T/check-u1-whole"

# llama.cpp's sliding-window cache reuses cells past n_swa + 1 rounded to
# 256 (256 here), in an order kiln does not follow: a batch after the
# first that reaches past them is refused, not approximated (a 309-token
# prompt is one batch; its first generated token is the second)
long=$(head -c 480 tests/fixtures/deepseek4/REGEN.md | tr '\n' ' ')
expect_fail "deepseek4: a second batch past the raw cache's 256 cells is refused" \
    'deepseek4: kiln evaluates positions past 256 .* only as one batch from an empty cache' \
    "$KILN" generate "$F32" -p "$long" -n 8

# past 4 x indexer.top_k tokens each token of a ratio-4 block keeps the
# 64 compressed blocks the lightning indexer scores best (ties as ggml's
# partial_sort breaks them): perplexity at 512-token batches, digit for
# digit (tests/fixtures/deepseek4_runtime)
for q in f32 Q4_K_M; do
    need_shared "deepseek4: perplexity $q at -c 512 (the indexer's choice): llama-perplexity's digits" || continue
    "$KILN" perplexity "$T/$S-$q.gguf" -f "$shared/golden/text/ppl.txt" -c 512 -b 512 --chunks 3 \
        > "$T/ppl512-$q" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "tests/fixtures/deepseek4_runtime/ppl/$S-$q-c512.txt" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl512-$q")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "deepseek4: perplexity $q at -c 512 (the indexer's choice): llama-perplexity's digits ($(echo "$got" | tail -1))"
    else
        bad "deepseek4: perplexity $q at -c 512 (the indexer's choice): llama-perplexity's digits" \
            "want '$want' got '$got' $(head -c 200 "$T/err")"
    fi
done

# ... and the choice is the indexer's: its head weights changed, the first
# chunk's perplexity moves
if [ -n "$shared" ]; then
    cp "$F32" "$T/flip.gguf"
    off=$("$KILN" inspect --json "$T/flip.gguf" | jq -r '.tensors[] | select(.name == "blk.0.indexer.proj.weight") | .offset // empty')
    if [ -n "$off" ]; then
        flip_bits "$T/flip.gguf" $((off + 1)) 64
        first=$(grep -o '^\[1\][0-9.]*' "tests/fixtures/deepseek4_runtime/ppl/$S-f32-c512.txt")
        "$KILN" perplexity "$T/flip.gguf" -f "$shared/golden/text/ppl.txt" -c 512 -b 512 --chunks 1 > "$T/ppl-flip" 2> "$T/err"
        got=$(grep -o '^\[1\][0-9.]*' "$T/ppl-flip")
        if [ -n "$got" ] && [ -n "$first" ] && [ "$got" != "$first" ]; then
            ok "deepseek4: the -c 512 perplexity depends on the indexer (blk.0.indexer.proj: $first -> $got)"
        else
            bad "deepseek4: the -c 512 perplexity depends on the indexer" "unchanged '$got' (want other than '$first') $(head -c 200 "$T/err")"
        fi
    else
        bad "deepseek4: blk.0.indexer.proj.weight offset" "inspect --json gave no offset"
    fi
fi

# ppl_digits NAME WANT GGUF ARGS...: kiln perplexity of GGUF over
# ../shared's ppl.txt with ARGS prints the chunk line and final estimate of
# llama-perplexity's log WANT
ppl_digits() {
    _name=$1 _want=$2 _gguf=$3
    shift 3
    need_shared "$_name" || return 0
    "$KILN" perplexity "$_gguf" -f "$shared/golden/text/ppl.txt" "$@" > "$T/ppl-out" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "$_want" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-out")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "$_name ($(echo "$got" | tail -1))"
    else
        bad "$_name" "want '$want' got '$got' $(head -c 200 "$T/err")"
    fi
}

# perplexity over the first 4 chunks of ../shared's ppl.txt, as
# llama-perplexity -c 128 -b 128 --chunks 4 printed it
for q in f32 Q8_0 Q4_K_M; do
    ppl_digits "deepseek4: perplexity $q: llama-perplexity's digits" "$FX/ppl/$S-$q.txt" "$T/$S-$q.gguf" \
        -c 128 -b 128 --chunks 4
done

# perplexity at -c 128 with 64, 32 and 1 tokens per call, as
# llama-perplexity -b 64 / 32 / 1 printed it (F16 caches, flash
# attention: the tiled kernel at 64, one_chunk at 32, and at 1 the
# split-KV decode kernel on every view of 512+ cells,
# runtime/deepseek4_split.c)
for q in f32 Q8_0 Q4_K_M; do
    for b in 64 32 1; do
        ppl_digits "deepseek4: perplexity $q -c 128 -b $b: llama-perplexity's digits" \
            "$RT/ppl/$S-$q-c128-b$b.txt" "$T/$S-$q.gguf" -c 128 -b "$b" --chunks 4 -t 2
    done
done

# ... and llama-quantize's Q2_K file at -b 64
ppl_digits "deepseek4: perplexity Q2_K -c 128 -b 64: llama-perplexity's digits" "$RT/ppl/$S-Q2_K-c128-b64.txt" \
    "$T/$S-Q2_K.gguf" -c 128 -b 64 --chunks 4 -t 2

# layer by layer (--max-memory: all chunks through block L before L + 1,
# the hc streams spilled to a scratch file under a 1M cap; --layer-major
# without a cap), the batches of each chunk carrying the state as above:
# the same digits
for run in "Q8_0 32 --max-memory 1M" "f32 1 --layer-major"; do
    set -- $run
    q=$1 b=$2
    shift 2
    ppl_digits "deepseek4: perplexity $q -c 128 -b $b $*: llama-perplexity's digits" "$RT/ppl/$S-$q-c128-b$b.txt" \
        "$T/$S-$q.gguf" -c 128 -b "$b" --chunks 4 -t 2 "$@"
done
# ... and kiln imatrix layer by layer writes the same file as chunk by chunk
if need_shared "deepseek4: imatrix --max-memory 1M: the same file as token-major"; then
    for mm in "" "--max-memory 1M"; do
        # shellcheck disable=SC2086
        "$KILN" imatrix "$F32" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 --chunks 4 -t 2 \
            -o "$T/im${mm:+-lm}.gguf" $mm > "$T/im-log" 2> "$T/err" || bad "deepseek4: imatrix $mm" "$(head -c 300 "$T/err")"
    done
    check "deepseek4: imatrix --max-memory 1M: the same file as token-major" cmp -s "$T/im.gguf" "$T/im-lm.gguf"
fi

# the split-KV kernel cuts the view into one chunk per thread, so at one
# token per call the digits follow the thread count, llama.cpp's as
# kiln's: -t 1 gives llama-perplexity -t 1's (other than -t 2's above)
if need_shared "deepseek4: perplexity f32 -c 128 -b 1 -t 1: llama-perplexity -t 1's digits"; then
    "$KILN" perplexity "$T/$S-f32.gguf" -f "$shared/golden/text/ppl.txt" -c 128 -b 1 --chunks 4 -t 1 \
        > "$T/ppl-t1" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "$RT/ppl/$S-f32-c128-b1-t1.txt" | sed 's/^[0-9.]* I //')
    other=$(grep -E 'Final estimate' "$RT/ppl/$S-f32-c128-b1.txt" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-t1")
    if [ -n "$want" ] && [ "$want" = "$got" ] && ! echo "$got" | grep -qF "$other"; then
        ok "deepseek4: perplexity f32 -c 128 -b 1 -t 1: llama-perplexity -t 1's digits ($(echo "$got" | tail -1))"
    else
        bad "deepseek4: perplexity f32 -c 128 -b 1 -t 1: llama-perplexity -t 1's digits" \
            "want '$want' (not '$other') got '$got' $(head -c 200 "$T/err")"
    fi
fi
finish
