# tests/e2e/convert.sh - kiln convert from the command line: output equal
# to llama.cpp's files, every kind of input (directory, Hugging Face cache
# folder, tar / tar.gz / tar.zst / zip archives) giving the same bytes,
# --dry-run, --vocab-only, split output, and the failure modes (exit codes,
# one-line messages, nothing left behind).
. tests/e2e/lib.sh

check "convert --help exits 0" sh -c '"$KILN" convert --help | grep -q "usage: kiln convert"'
expect_fail "convert without a model is a usage error" "expected one MODEL" "$KILN" convert
"$KILN" convert >/dev/null 2>&1; check "usage errors exit 2" test $? -eq 2
expect_fail "unknown --outtype" "unknown --outtype 'q4'" "$KILN" convert --outtype q4 x

# A synthetic MoE model (experts stacked out of stream order exercise the
# archive spool), written by kiln testmodel.
"$KILN" testmodel --arch mixtral -o "$T/mx" > /dev/null 2>&1 || bad "testmodel mixtral" "kiln testmodel failed"

if need_shared "CLI output is byte-identical to llama.cpp's"; then
    g="$shared/golden/gguf"
    "$KILN" convert "$shared/models/llama" --outtype q8_0 -o "$T/llama-q8_0.gguf" 2> "$T/err"
    check "CLI output is byte-identical to llama.cpp's (llama q8_0)" cmp -s "$T/llama-q8_0.gguf" "$g/llama-q8_0.gguf"
    check "no output on stderr when it is not a terminal" test ! -s "$T/err"
    "$KILN" convert "$shared/models/qwen2" --outtype f16 -o "$T/qwen2-f16.gguf"
    check "CLI output is byte-identical to llama.cpp's (qwen2 f16)" cmp -s "$T/qwen2-f16.gguf" "$g/qwen2-f16.gguf"
fi

if need_shared "archives and HF cache folders give the same bytes"; then
    mkdir -p "$T/src" && cp -r "$shared/models/llama" "$T/src/llama" && chmod -R u+w "$T/src"
    "$KILN" convert "$T/src/llama" --outtype bf16 -o "$T/dir.gguf"
    tar -C "$T/src" -cf "$T/llama.tar" llama
    tar -C "$T/src" -czf "$T/llama.tar.gz" llama
    for a in llama.tar llama.tar.gz; do
        "$KILN" convert "$T/$a" --outtype bf16 -o "$T/a.gguf" -f
        check "$a gives the directory's bytes" cmp -s "$T/a.gguf" "$T/dir.gguf"
    done
    if tar -C "$T/src" --zstd -cf "$T/llama.tar.zst" llama 2>/dev/null; then
        "$KILN" convert "$T/llama.tar.zst" --outtype bf16 -o "$T/a.gguf" -f
        check "llama.tar.zst gives the directory's bytes" cmp -s "$T/a.gguf" "$T/dir.gguf"
    else
        skipt "llama.tar.zst gives the directory's bytes (tar has no --zstd)"
    fi
    if command -v zip >/dev/null 2>&1; then
        (cd "$T/src/llama" && zip -q -r "$T/llama.zip" .)
        "$KILN" convert "$T/llama.zip" --outtype bf16 -o "$T/a.gguf" -f
        check "llama.zip (files at the root) gives the directory's bytes" cmp -s "$T/a.gguf" "$T/dir.gguf"
    else
        skipt "llama.zip gives the directory's bytes (no zip)"
    fi
    # a Hugging Face cache folder: refs/main names the snapshot, whose
    # files are links into blobs/
    c="$T/hub/models--kiln--llama"
    mkdir -p "$c/refs" "$c/blobs" "$c/snapshots/0123abcd" "$c/snapshots/ffff0000"
    printf 0123abcd > "$c/refs/main"
    for f in "$T/src/llama"/*; do
        b=$(basename "$f")
        cp "$f" "$c/blobs/$b.blob"
        ln -s "../../blobs/$b.blob" "$c/snapshots/0123abcd/$b"
    done
    "$KILN" convert "$c" --outtype bf16 -o "$T/a.gguf" -f
    check "HF cache folder gives the directory's bytes" cmp -s "$T/a.gguf" "$T/dir.gguf"
    "$KILN" convert "$c/snapshots/0123abcd" --outtype bf16 -o "$T/a.gguf" -f
    check "HF cache snapshot gives the directory's bytes" cmp -s "$T/a.gguf" "$T/dir.gguf"
fi

if [ -f "$T/mx/config.json" ]; then
    "$KILN" convert "$T/mx" --outtype auto -o "$T/mx-dir.gguf"
    tar -C "$T" -czf "$T/mx.tar.gz" mx
    "$KILN" convert "$T/mx.tar.gz" --outtype auto -o "$T/mx-arc.gguf"
    check "an MoE model from a tar.gz gives the directory's bytes" cmp -s "$T/mx-arc.gguf" "$T/mx-dir.gguf"
fi

if need_shared "--dry-run"; then
    "$KILN" convert "$shared/models/mixtral" --outtype q8_0 --dry-run -o "$T/dry.gguf" > "$T/plan"
    check "--dry-run writes nothing" test ! -e "$T/dry.gguf"
    check "--dry-run lists the stacked experts" grep -q "blk.3.ffn_down_exps.weight *Q8_0 *256 x 256 x 4" "$T/plan"
    "$KILN" convert "$shared/models/mixtral" --outtype q8_0 -o "$T/real.gguf"
    size=$(wc -c < "$T/real.gguf" | tr -d ' ')
    check "--dry-run's output size is the real size" grep -q "output size $size bytes" "$T/plan"
fi

if need_shared "--vocab-only"; then
    "$KILN" convert "$shared/models/qwen2" --vocab-only -o "$T/vocab.gguf"
    "$KILN" convert "$shared/models/qwen2" --vocab-only --dry-run > "$T/vplan"
    check "--dry-run's size is right for --vocab-only too" grep -q "output size $(wc -c < "$T/vocab.gguf" | tr -d ' ') bytes" "$T/vplan"
    "$KILN" inspect --json "$T/vocab.gguf" > "$T/v.json"
    check "--vocab-only writes the tokenizer and no tensors" jq_true "$T/v.json" \
        '.n_tensors == 0 and (["tokenizer.ggml.merges", "qwen2.block_count"] - [.metadata[].key]) == []'
fi

if need_shared "split output"; then
    "$KILN" convert "$shared/models/llama" --outtype f16 --split-max-tensors 10 -o "$T/split.gguf"
    check "--split-max-tensors writes shards" test -f "$T/split-00004-of-00004.gguf"
    "$KILN" inspect --json "$T/split-00001-of-00004.gguf" > "$T/s.json"
    check "the shards hold every tensor" jq_true "$T/s.json" '.n_tensors == 39'
    "$KILN" convert "$shared/models/llama" --outtype f16 --split-max-size 2M -o "$T/bysize.gguf"
    check "--split-max-size writes shards" test -f "$T/bysize-00001-of-00003.gguf"
fi

# failures: one line, exit 1, nothing written
if need_shared "failures leave nothing behind"; then
    mkdir -p "$T/bad" && cp "$shared/models/llama"/* "$T/bad/" && chmod u+w "$T/bad"/*
    sed 's/LlamaForCausalLM/BertModel/' "$shared/models/llama/config.json" > "$T/bad/config.json"
    expect_fail "unknown architecture lists the supported ones" \
        "unsupported architecture 'BertModel'; kiln supports LlamaForCausalLM, .*GPT2LMHeadModel" \
        "$KILN" convert "$T/bad" -o "$T/bad.gguf"
    check "the error is one line" test "$(wc -l < "$T/err")" -eq 1
    check "no output and no .tmp after a failure" test ! -e "$T/bad.gguf" -a ! -e "$T/bad.gguf.tmp"
    sed 's/"num_attention_heads": 4/"num_attention_heads": 3/' "$shared/models/llama/config.json" > "$T/bad/config.json"
    expect_fail "config disagreeing with a shape names key and tensor" \
        "num_attention_heads.*disagrees with tensor model.layers.0.self_attn" "$KILN" convert "$T/bad" -o "$T/bad.gguf"
    check "no output after a shape error" test ! -e "$T/bad.gguf"
    expect_fail "an existing output is not overwritten without -f" "exists" \
        "$KILN" convert "$shared/models/llama" -o "$T/llama-q8_0.gguf"
    expect_fail "an unknown --pre-tokenizer is refused" "unknown pre-tokenizer 'nope'" \
        "$KILN" convert "$shared/models/qwen2" --pre-tokenizer nope -o "$T/p.gguf"
fi
expect_fail "a missing model fails" "cannot open" "$KILN" convert "$T/nothing-here" -o "$T/n.gguf"

finish
