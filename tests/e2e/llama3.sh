# tests/e2e/llama3.sh - Llama 3.x end to end against llama.cpp's own
# outputs for the same model: tests/fixtures/llama3/ holds a tiny trained
# Llama-3.2-style HF model (rope_type llama3, tied embeddings, a cut real
# Llama-3 vocabulary) and what llama.cpp (d32676d7) made of it: the sha256
# of its GGUFs, its logits (KLGT) and its perplexities (REGEN.md says how).
#
# convert (f32, bf16) and quantize (Q8_0, Q4_K_M) must give llama.cpp's
# files byte for byte, rope_freqs.weight included; kiln's logits must equal
# llama.cpp's bit for bit in ggml mode, and must not once the rope factors
# are overwritten with 1 (so the factors are applied); kiln's perplexity
# printout must be llama-perplexity's, digit for digit.
. tests/e2e/lib.sh

FX=tests/fixtures/llama3
STEM=llama3-tiny

# same_sha NAME FILE: FILE's sha256 is the one gguf.sha256 records for NAME
same_sha() {
    want=$(awk -v n="$1" '$2 == n { print $1 }' "$FX/gguf.sha256")
    got=$(sha256sum "$2" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ]
}

# the archive's top folder, Llama3-tiny, names the model as llama.cpp's
# converter named it from the same folder
for ot in f32 bf16; do
    if "$KILN" convert "$FX/Llama3-tiny.tar.zst" --outtype $ot -o "$T/$STEM-$ot.gguf" 2> "$T/err"; then
        check "convert $ot: byte-identical to llama.cpp's" same_sha "$STEM-$ot.gguf" "$T/$STEM-$ot.gguf"
    else
        bad "convert $ot" "$(head -c 300 "$T/err")"
    fi
done

F32="$T/$STEM-f32.gguf"
# the cut Llama-3 vocabulary (llama-bpe pre-tokenizer, BOS from the
# TemplateProcessing) tokenizes as llama.cpp's llama_tokenize
tsv="$FX/tokens/$STEM.tsv"
if tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
    ok "tokenize: llama.cpp's ids ($tokens_checked texts)"
else
    bad "tokenize: llama.cpp's ids" "$tokens_checked texts compared"
fi
"$KILN" inspect "$F32" --dump rope_freqs.weight --count 0 > "$T/freqs" 2>&1
# head_dim 64, theta 5e5, factor 8, low 1, high 4, original context 8192:
# 15 factors 1, three in the smooth band, 14 factors 8
check "rope_freqs.weight: 32 factors, 1 ... smooth band ... 8" \
    grep -qx "1 1 1 1 1 1 1 1.55341458" "$T/freqs"
check "rope_freqs.weight: smooth band values" grep -qx "2.69453001 5.25732708 8 8 8 8 8 8" "$T/freqs"
"$KILN" inspect "$F32" --json > "$T/f32.json" 2>&1
check "llama3 scaling writes no rope.scaling keys (as llama.cpp)" \
    jq_true "$T/f32.json" '[meta | keys[] | select(startswith("llama.rope.scaling"))] == []'
check "rope.freq_base is rope_theta" jq_true "$T/f32.json" 'meta["llama.rope.freq_base"] == 500000'

for q in Q8_0 Q4_K_M; do
    if "$KILN" quantize "$F32" "$T/$STEM-$q.gguf" $q > /dev/null 2> "$T/err"; then
        check "quantize $q: byte-identical to llama-quantize's" same_sha "$STEM-$q.gguf" "$T/$STEM-$q.gguf"
    else
        bad "quantize $q" "$(head -c 300 "$T/err")"
    fi
done

# logits: ggml numbers (the default), every logit equal
for q in f32 Q4_K_M Q8_0; do
    if zstd -q -d -c "$FX/logits/$STEM-$q.logits.zst" > "$T/$q.logits" 2> "$T/err"; then
        check "logits $q: bit-identical to llama.cpp's" \
            sh -c '"$1" golden check "$2" "$3" --max-abs 0 > "$4" 2>&1' _ "$KILN" "$T/$STEM-$q.gguf" "$T/$q.logits" \
            "$T/check-$q"
    else
        bad "logits $q: unpack" "$(head -c 300 "$T/err")"
    fi
done

# the factors must matter: with rope_freqs.weight set to all 1 the logits
# of the same file differ from llama.cpp's
off=$(jq '.tensors[] | select(.name == "rope_freqs.weight") | .offset' "$T/f32.json")
cp "$F32" "$T/ones.gguf"
i=0
while [ $i -lt 32 ]; do le32 1065353216; i=$((i + 1)); done | write_at "$T/ones.gguf" "$off"
if [ -n "$off" ] && "$KILN" inspect "$T/ones.gguf" --dump rope_freqs.weight --count 0 2>&1 | grep -qx "1 1 1 1 1 1 1 1" &&
    ! "$KILN" golden check "$T/ones.gguf" "$T/f32.logits" --max-abs 0 > "$T/check-ones" 2>&1 &&
    grep -q "FAIL: max_abs" "$T/check-ones"; then
    ok "rope factors are applied: all-1 factors change the logits"
else
    bad "rope factors are applied: all-1 factors change the logits" "$(tail -2 "$T/check-ones")"
fi

# perplexity over the first 4 chunks of ../shared's ppl.txt, as
# llama-perplexity -c 128 -b 128 --chunks 4 printed it
for q in f32 Q4_K_M Q8_0; do
    need_shared "perplexity $q: llama-perplexity's digits" || continue
    "$KILN" perplexity "$T/$STEM-$q.gguf" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 \
        > "$T/ppl-$q" 2> "$T/err"
    want=$(grep -E '^\[1\]|Final estimate' "$FX/ppl/$STEM-$q.txt" | sed 's/^[0-9.]* I //')
    got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-$q")
    if [ -n "$want" ] && [ "$want" = "$got" ]; then
        ok "perplexity $q: llama-perplexity's digits ($(echo "$got" | tail -1))"
    else
        bad "perplexity $q: llama-perplexity's digits" "want '$want' got '$got' $(head -c 200 "$T/err")"
    fi
done

# kiln testmodel --arch llama3 (default options, written into a folder
# named llama3): llama.cpp's converter made this f32 GGUF of it
if "$KILN" testmodel --arch llama3 -o "$T/llama3" > /dev/null 2> "$T/err" &&
    "$KILN" convert "$T/llama3" --outtype f32 -o "$T/tm.gguf" 2>> "$T/err"; then
    check "testmodel llama3: rope_scaling llama3 and tied embeddings in config.json" \
        jq_true "$T/llama3/config.json" '.rope_scaling.rope_type == "llama3" and .tie_word_embeddings'
    check "testmodel llama3 converts byte-identical to llama.cpp's" same_sha testmodel-llama3-f32.gguf "$T/tm.gguf"
    check "testmodel llama3 generates" sh -c '"$1" generate "$2" -p hello -n 4 > /dev/null 2>&1' _ "$KILN" "$T/tm.gguf"
else
    bad "testmodel llama3" "$(head -c 300 "$T/err")"
fi

finish
