# tests/e2e/gemma.sh - Gemma 3 (text) and Gemma 2 end to end against
# llama.cpp's own outputs for the same models: tests/fixtures/gemma3/ and
# gemma2/ each hold a tiny trained HF model (Gemma's four norms per block
# stored as w for (1 + w), GELU-gated FFN, sliding-window layers of 32
# positions: gemma3 5 local (RoPE base 1e4) to 1 global (1e6) with q/k
# norms, gemma2 alternating with attention and final soft-caps; a
# SentencePiece vocabulary with Gemma's specials) and what llama.cpp
# (d32676d7) made of it: the sha256 of its GGUFs, its logits (KLGT), its
# perplexities, its importance matrix and, where it fits, its IQ2_XXS file
# (REGEN.md says how).
#
# convert (f32, bf16) and quantize (Q8_0, Q4_K_M) must give llama.cpp's
# files byte for byte; kiln's logits must equal llama.cpp's bit for bit in
# ggml mode on prompts longer than the window (so the window, the soft-caps
# and both RoPE bases are all exercised); kiln's perplexity printout must be
# llama-perplexity's, digit for digit; kiln imatrix must be within 1e-4
# (relative) of llama-imatrix's; kiln's IQ2_XXS preset must choose
# llama-quantize's types, and kiln must run llama.cpp's IQ2_XXS file to its
# logits bit for bit.
. tests/e2e/lib.sh

# same_sha NAME FILE: FILE's sha256 is the one gguf.sha256 records for NAME
same_sha() {
    want=$(awk -v n="$1" '$2 == n { print $1 }' "$FX/gguf.sha256")
    got=$(sha256sum "$2" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ]
}

# logits_agree Q GGUF: kiln's logits of GGUF equal llama.cpp's for Q, every one
logits_agree() {
    zstd -q -d -c "$FX/logits/$STEM-$1.logits.zst" > "$T/$1.logits" 2> "$T/err" &&
        "$KILN" golden check "$2" "$T/$1.logits" --max-abs 0 > "$T/check-$1" 2>&1
}

for ARCH in gemma3 gemma2; do
    FX=tests/fixtures/$ARCH
    STEM=$ARCH-tiny
    HF=$(ls "$FX"/*-tiny.tar.zst 2> /dev/null | head -1)
    if [ -z "$HF" ]; then
        skipt "$ARCH: no fixture model in $FX"
        continue
    fi
    # the archive's top folder (Gemma3-tiny) names the model as llama.cpp's
    # converter named it from the same folder
    for ot in f32 bf16; do
        if "$KILN" convert "$HF" --outtype $ot -o "$T/$STEM-$ot.gguf" 2> "$T/err"; then
            check "$ARCH convert $ot: byte-identical to llama.cpp's" same_sha "$STEM-$ot.gguf" "$T/$STEM-$ot.gguf"
        else
            bad "$ARCH convert $ot" "$(head -c 300 "$T/err")"
        fi
    done
    F32="$T/$STEM-f32.gguf"
    "$KILN" inspect "$F32" --json > "$T/f32.json" 2>&1
    check "$ARCH: window of 32, no space prefix" jq_true "$T/f32.json" \
        "meta[\"$ARCH.attention.sliding_window\"] == 32 and meta[\"tokenizer.ggml.add_space_prefix\"] == false"
    "$KILN" inspect "$F32" --dump blk.0.attn_norm.weight --count 8 2>&1 | tail -n +2 > "$T/norm"
    check "$ARCH: attn_norm values are 1 + w (the converter's shift)" \
        awk '{ for (i = 1; i <= NF; i++) if ($i < 0.5 || $i > 1.5) exit 1; n += NF } END { exit n != 8 }' "$T/norm"
    if [ $ARCH = gemma3 ]; then
        check "gemma3: global RoPE base 1e6, sliding 1e4" jq_true "$T/f32.json" \
            'meta["gemma3.rope.freq_base"] == 1000000 and meta["gemma3.rope.freq_base_swa"] == 10000'
    else
        check "gemma2: soft-caps 50 (attention) and 30 (final)" jq_true "$T/f32.json" \
            'meta["gemma2.attn_logit_softcapping"] == 50 and meta["gemma2.final_logit_softcapping"] == 30'
    fi

    tsv="$T/$STEM.tsv"
    zstd -q -d -f "$FX/tokens/$STEM.tsv.zst" -o "$tsv"
    if tokens_agree "$F32" "$tsv" && [ "$tokens_checked" -eq "$(($(wc -l < "$tsv") - 1))" ]; then
        ok "$ARCH tokenize: llama.cpp's ids ($tokens_checked texts)"
    else
        bad "$ARCH tokenize: llama.cpp's ids" "$tokens_checked texts compared"
    fi

    for q in Q8_0 Q4_K_M; do
        if "$KILN" quantize "$F32" "$T/$STEM-$q.gguf" $q > /dev/null 2> "$T/err"; then
            check "$ARCH quantize $q: byte-identical to llama-quantize's" same_sha "$STEM-$q.gguf" "$T/$STEM-$q.gguf"
        else
            bad "$ARCH quantize $q" "$(head -c 300 "$T/err")"
        fi
    done

    # logits: ggml numbers (the default), every logit equal; f32 and Q4_K_M
    # always, Q8_0 where the fixture kept llama.cpp's (gemma2)
    for q in f32 Q4_K_M Q8_0; do
        [ $q = Q8_0 ] && [ ! -f "$FX/logits/$STEM-$q.logits.zst" ] && continue
        check "$ARCH logits $q: bit-identical to llama.cpp's" logits_agree $q "$T/$STEM-$q.gguf"
    done
    # the prompts run past the window, so sliding layers mask for real
    check "$ARCH: a golden prompt is longer than the window of 32" \
        awk '$1 ~ /^[0-9]+$/ && $2 > 32 { found = 1 } END { exit !found }' "$T/check-f32"

    # IQ2_XXS: kiln's preset picks llama-quantize's types from llama.cpp's
    # imatrix; kiln runs llama.cpp's own IQ2_XXS file to its logits
    IMX="$T/$STEM.llama.imatrix.gguf"
    zstd -q -d -f "$FX/$STEM.imatrix.gguf.zst" -o "$IMX"
    if "$KILN" quantize -q --imatrix "$IMX" "$F32" "$T/$STEM-IQ2_XXS.gguf" IQ2_XXS > /dev/null 2> "$T/err"; then
        "$KILN" inspect "$T/$STEM-IQ2_XXS.gguf" --json > "$T/iq2.json" 2>&1
        got=$(jq -r '.tensors[] | "\(.name) \(.type)"' "$T/iq2.json" | sort | sha256sum | cut -d' ' -f1)
        want=$(awk '$2 == "IQ2_XXS-types" { print $1 }' "$FX/gguf.sha256")
        check "$ARCH quantize IQ2_XXS: llama-quantize's type for every tensor" test -n "$want" -a "$got" = "$want"
    else
        bad "$ARCH quantize IQ2_XXS" "$(head -c 300 "$T/err")"
    fi
    if [ -f "$FX/$STEM-IQ2_XXS.gguf.zst" ]; then
        zstd -q -d -c "$FX/$STEM-IQ2_XXS.gguf.zst" > "$T/llama-IQ2_XXS.gguf"
        check "$ARCH llama.cpp's IQ2_XXS file is the one it made" same_sha "$STEM-IQ2_XXS.gguf" "$T/llama-IQ2_XXS.gguf"
        check "$ARCH logits IQ2_XXS (llama.cpp's file): bit-identical to llama.cpp's" \
            logits_agree IQ2_XXS "$T/llama-IQ2_XXS.gguf"
    fi

    for q in f32 Q4_K_M; do
        need_shared "$ARCH perplexity $q: llama-perplexity's digits" || continue
        "$KILN" perplexity "$T/$STEM-$q.gguf" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 \
            > "$T/ppl-$q" 2> "$T/err"
        want=$(grep -E '^\[1\]|Final estimate' "$FX/ppl/$STEM-$q.txt" | sed 's/^[0-9.]* I //')
        got=$(grep -E '^\[1\]|Final estimate' "$T/ppl-$q")
        if [ -n "$want" ] && [ "$want" = "$got" ]; then
            ok "$ARCH perplexity $q: llama-perplexity's digits ($(echo "$got" | tail -1))"
        else
            bad "$ARCH perplexity $q: llama-perplexity's digits" "want '$want' got '$got' $(head -c 200 "$T/err")"
        fi
    done

    # imatrix as llama-imatrix ran it (64 chunks of 128 of calib.groups_merged.txt)
    if need_shared "$ARCH imatrix within 1e-4 of llama-imatrix's"; then
        "$KILN" imatrix "$F32" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 --chunks 64 -q \
            -o "$T/$STEM.imatrix.gguf" 2> "$T/err"
        if "$KILN" diff "$IMX" "$T/$STEM.imatrix.gguf" --max-rel 1e-4 -q > "$T/imx" 2>&1; then
            ok "$ARCH imatrix within 1e-4 (relative) of llama-imatrix's, every tensor"
        else
            bad "$ARCH imatrix within 1e-4 of llama-imatrix's" "$(grep FAIL "$T/imx" | head -3) $(head -c 200 "$T/err")"
        fi
    fi
done

# kiln testmodel --arch gemma3 (default options, written into a folder
# named gemma3): llama.cpp's converter made this f32 GGUF of it
FX=tests/fixtures/gemma3
mkdir -p "$T/tm"
if "$KILN" testmodel --arch gemma3 -o "$T/tm/gemma3" > /dev/null 2> "$T/err" &&
    "$KILN" convert "$T/tm/gemma3" --outtype f32 -o "$T/tm.gguf" 2>> "$T/err"; then
    check "testmodel gemma3: 6 layers, window pattern 6, tied embeddings in config.json" \
        jq_true "$T/tm/gemma3/config.json" '.num_hidden_layers == 6 and .sliding_window_pattern == 6 and .tie_word_embeddings'
    check "testmodel gemma3 converts byte-identical to llama.cpp's" same_sha testmodel-gemma3-f32.gguf "$T/tm.gguf"
    check "testmodel gemma3 generates" sh -c '"$1" generate "$2" -p hello -n 4 > /dev/null 2>&1' _ "$KILN" "$T/tm.gguf"
else
    bad "testmodel gemma3" "$(head -c 300 "$T/err")"
fi

finish
