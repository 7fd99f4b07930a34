# tests/e2e/layer_major.sh - `--layer-major` and `--max-memory` of kiln
# imatrix and kiln perplexity: all chunks through layer L before layer L+1
# (for models larger than memory) must give the very bytes (imatrix) and
# figures (perplexity, KLD) of the token-major run, on a dense model, an
# MoE (per-expert hooks), qwen2 (biases) and gpt2 (learned positions, a
# kiln testmodel), with the output tensor collected, with activations kept
# in memory and spilled to a scratch file (a 1M cap), with chunks longer
# than one 512-token batch and with perplexity's -b smaller than a chunk.
# The memory-capped figures on a model larger than the cap are
# `make bench`'s (bench/bench_imatrix.sh).
. tests/e2e/lib.sh

TEXT="$shared/golden/text/calib.groups_merged.txt"
run() { # run OUT ARGS...: imatrix of the first chunks of the calibration text
    out=$1; shift
    rm -f "$out"
    "$KILN" imatrix -q -f "$TEXT" --chunks 3 --force -o "$out" "$@" 2> "$T/err" ||
        echo "# imatrix $*: $(head -c 300 "$T/err")"
}
ppl() { # ppl ARGS...: perplexity figures as one JSON line
    "$KILN" perplexity --json -q -f "$shared/golden/text/ppl.txt" --chunks 3 "$@" 2> "$T/err" |
        jq -c '[.ppl, .ppl_err, .kld]' || echo "# perplexity $*: $(head -c 300 "$T/err")"
}
if need_shared "layer-major imatrix and perplexity"; then
    "$KILN" testmodel --arch gpt2 -o "$T/gpt2" > /dev/null 2>&1 &&
        "$KILN" convert "$T/gpt2" --outtype f32 -o "$T/gpt2-f32.gguf" 2> "$T/err"
    check "a gpt2 test model converts" test -s "$T/gpt2-f32.gguf"
    for arch in llama mixtral qwen2 gpt2; do
        m="$shared/golden/gguf/$arch-f32.gguf"
        [ "$arch" = gpt2 ] && m="$T/gpt2-f32.gguf"
        run "$T/tok.gguf" -m "$m" -c 128 --process-output
        run "$T/lay.gguf" -m "$m" -c 128 --process-output --layer-major
        check "$arch: --layer-major gives the token-major file byte for byte" cmp -s "$T/tok.gguf" "$T/lay.gguf"
        run "$T/cap.gguf" -m "$m" -c 128 --process-output --max-memory 1M --scratch-dir "$T"
        check "$arch: --max-memory 1M (activations spilled) too" cmp -s "$T/tok.gguf" "$T/cap.gguf"
        check "$arch: the spill file is gone" test -z "$(ls "$T" | grep kiln-activations)"
        want=$(ppl "$m" -c 128 -b 48)
        check "$arch: perplexity --max-memory 1M (-b 48) gives the same figures" \
            test "$want" = "$(ppl "$m" -c 128 -b 48 --max-memory 1M --scratch-dir "$T")" -a "${want#\[}" != "$want"
    done
    m="$shared/golden/gguf/llama-f32.gguf"
    "$KILN" perplexity -q -f "$shared/golden/text/ppl.txt" --chunks 3 -c 128 "$m" --save-logits "$T/base.lgf" \
        > /dev/null 2>&1
    q="$shared/golden/gguf/llama-Q4_K_M.gguf"
    want=$(ppl "$q" --kl-divergence "$T/base.lgf")
    check "llama Q4_K_M: KLD against a base, --layer-major, same figures" \
        test "$want" = "$(ppl "$q" --kl-divergence "$T/base.lgf" --layer-major)" -a "${want%null]}" != "$want"
    m="$shared/golden/gguf/llama-f32.gguf"
    run "$T/tok.gguf" -m "$m" -c 1024
    run "$T/lay.gguf" -m "$m" -c 1024 --max-memory 1M
    check "llama: chunks of 1024 tokens (two batches each) agree" cmp -s "$T/tok.gguf" "$T/lay.gguf"
    expect_fail "--save-frequency with --max-memory is refused" "save-frequency.*writes no checkpoints" \
        "$KILN" imatrix -m "$m" -f "$TEXT" --chunks 2 -c 128 --max-memory 1G --save-frequency 1 -o "$T/x.gguf"
    check "and no output was written" test ! -e "$T/x.gguf"
    expect_fail "--max-memory wants a size" "max-memory wants a size" \
        "$KILN" imatrix -m "$m" -f "$TEXT" --max-memory lots -o "$T/x.gguf"
    expect_fail "an unwritable scratch folder names it" "nowhere/kiln-activations.*cannot create" \
        "$KILN" imatrix -m "$m" -f "$TEXT" --chunks 2 -c 128 --max-memory 1M --scratch-dir "$T/nowhere" -o "$T/x.gguf"
fi
finish
