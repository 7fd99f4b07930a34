# tests/e2e/deepseek4_imatrix.sh - `kiln imatrix` on DeepSeek-V4 (GGUF
# arch deepseek4) and the 2-bit quantizations llama.cpp cannot make of it
# (issue 12, points 3 and 5), on the tiny FP8 checkpoint of
# tests/fixtures/deepseek4.
#
# Checked against llama-imatrix -c 128 --chunks 64 on the f32 file
# (tests/fixtures/deepseek4_runtime/imatrix, its REGEN.md; four of its
# passes of 16 parallel sequences): every tensor
# llama-imatrix stores is in kiln's file with its shape (attn_output_a as
# llama-imatrix stores the grouped product: groups x columns, one count),
# every count equal, per expert too, and the sums within a relative 1e-5
# per tensor (kiln sums in double, llama-imatrix in float), the running
# perplexity of all 64 chunks digit for digit (chunks 26, 31 and 64 need
# the fused sum update of ggml's flash kernel, runtime/attention_flash.c;
# REGEN.md); kiln adds output_hc_fn, which llama-imatrix skips. Then
# `kiln quantize --imatrix` to Q2_K and IQ2_XXS: with llama-imatrix's
# file (which llama-quantize itself refuses: "imatrix size 256 is
# different from tensor size 128 for blk.0.attn_output_a.weight") each
# group of attn_output_a's rows takes its own group's columns, and with kiln's own file both presets quantize,
# every deepseek4 tensor llama.cpp has no rule for takes kiln's documented
# type (README: Q8_0 for the hyper-connection mixers and the compressors'
# position biases), and the models run: perplexity finite and within a
# factor 1.5 of the f32 model's, mean KL divergence below 0.5.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek4
RX=tests/fixtures/deepseek4_runtime
S=ds4-tiny-fp8
if ! zstd -q -d -c "$FX/DeepSeek4-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
F32=$T/$S-f32.gguf
if ! "$KILN" convert "$T/$S" --outtype f32 -o "$F32" 2> "$T/err"; then
    bad "deepseek4: convert f32" "$(head -c 300 "$T/err")"
    finish
fi
want=$(awk -v n="$S-f32.gguf" '$2 == n { print $1 }' "$FX/gguf.sha256")
check "deepseek4: convert f32: llama.cpp's file (the imatrix golden's model)" \
    sh -c '[ -n "$1" ] && [ "$(sha256sum "$2" | cut -d" " -f1)" = "$1" ]' _ "$want" "$F32"
LIMX=$T/llama.imatrix.gguf
if ! zstd -q -d -c "$RX/imatrix/$S.imatrix.gguf.zst" > "$LIMX" 2> "$T/err"; then
    bad "deepseek4: unpack llama-imatrix's file" "$(head -c 300 "$T/err")"
    finish
fi

# names NAME FILE: the imatrix entries of FILE, one a line
names() { "$KILN" inspect --json "$1" | jq -r '.tensors[].name' | sed -n 's/\.in_sum2$//p' | sort; }
# shape_of FILE TENSOR: its shape as JSON
shape_of() { "$KILN" inspect --json "$1" | jq -c --arg t "$2" '.tensors[] | select(.name == $t) | .shape'; }

# ---- kiln imatrix against llama-imatrix ----
KIMX=$T/kiln.imatrix.gguf
if need_shared "deepseek4: imatrix like llama-imatrix's"; then
    if "$KILN" imatrix "$F32" -f "$shared/golden/text/calib.groups_merged.txt" -c 128 --chunks 64 \
        -o "$KIMX" > "$T/imx.out" 2> "$T/err"; then
        names "$LIMX" > "$T/l.names"
        names "$KIMX" > "$T/k.names"
        check "deepseek4: imatrix: every tensor llama-imatrix stores ($(wc -l < "$T/l.names")), indexer included" \
            sh -c '[ -s "$1" ] && [ -z "$(comm -23 "$1" "$2")" ]' _ "$T/l.names" "$T/k.names"
        check "deepseek4: imatrix: only output_hc_fn besides (llama-imatrix skips it by name)" \
            sh -c '[ "$(comm -13 "$1" "$2")" = output_hc_fn.weight ]' _ "$T/l.names" "$T/k.names"
        oa="$(shape_of "$LIMX" blk.0.attn_output_a.weight.in_sum2) $(shape_of "$KIMX" blk.0.attn_output_a.weight.in_sum2)"
        oa="$oa $(shape_of "$KIMX" blk.2.attn_output_a.weight.counts)"
        check "deepseek4: imatrix: attn_output_a as llama-imatrix stores it (groups x columns, one count: $oa)" \
            [ "$oa" = "[256] [256] [1]" ]
        # counts: every one equal, the experts' too (1 x 4 per expert tensor)
        check "deepseek4: imatrix: counts equal llama-imatrix's, per expert too" \
            sh -c '"$1" diff "$2" "$3" --tensors "^blk\\..*\\.counts$" --tolerance 0 > "$4" 2>&1 &&
                   grep -q "ffn_up_exps.weight.counts" "$4"' _ "$KILN" "$KIMX" "$LIMX" "$T/counts-diff"
        check "deepseek4: imatrix: sums within 1e-5 (relative, per tensor) of llama-imatrix's" \
            sh -c '"$1" diff "$2" "$3" --tensors "^blk\\..*\\.in_sum2$" --max-rel 1e-5 > "$4" 2>&1' _ \
            "$KILN" "$KIMX" "$LIMX" "$T/sums-diff"
        # the collection's perplexity: every running estimate digit for digit
        want=$(tr ',' ' ' < "$RX/imatrix/PPL.txt")
        got=$(cat "$T/imx.out" "$T/err" | grep -o '\[[0-9]*\][0-9.]*' | tr '\n' ' ' | sed 's/ $//')
        check "deepseek4: imatrix: running perplexity of all 64 chunks as llama-imatrix printed it (${want##* })" \
            sh -c '[ "$(echo "$1" | wc -w)" -eq 64 ] && [ "$1" = "$2" ]' _ "$want" "$got"
        check "deepseek4: imatrix: the file says 64 chunks of 128, as llama-imatrix's" \
            sh -c '"$1" inspect --json "$2" | jq -e "[.metadata[] | select(.key == \"imatrix.chunk_count\" or .key == \"imatrix.chunk_size\") | .value] == [64, 128]" > /dev/null' _ \
            "$KILN" "$KIMX"
    else
        bad "deepseek4: imatrix" "$(head -c 300 "$T/err")"
    fi
fi

# ---- attn_output_a: each group of rows weighed by its own columns ----
# llama-imatrix's file, and a copy whose group-1 columns (values 128..255 of
# blk.0.attn_output_a's sums) weigh 65536: only rows 64..127 may change
off=$("$KILN" inspect --json "$LIMX" | jq -r '.tensors[] | select(.name == "blk.0.attn_output_a.weight.in_sum2") | .offset // empty')
if [ -n "$off" ]; then
    cp "$LIMX" "$T/group1.imatrix.gguf"
    i=0
    while [ $i -lt 64 ]; do
        bytes 0 0 128 71 | write_at "$T/group1.imatrix.gguf" $((off + 512 + 4 * i))
        i=$((i + 1))
    done
    if "$KILN" quantize -q --allow-requantize --imatrix "$LIMX" "$F32" "$T/g0.gguf" Q2_K 2> "$T/err" &&
        "$KILN" quantize -q --allow-requantize --imatrix "$T/group1.imatrix.gguf" "$F32" "$T/g1.gguf" Q2_K 2>> "$T/err"; then
        ok "deepseek4: quantize Q2_K with llama-imatrix's file (llama-quantize refuses its attn_output_a size)"
        qoff=$("$KILN" inspect --json "$T/g0.gguf" | jq -r '.tensors[] | select(.name == "blk.0.attn_output_a.weight") | .offset')
        qlen=$("$KILN" inspect --json "$T/g0.gguf" | jq -r '.tensors[] | select(.name == "blk.0.attn_output_a.weight") | .bytes')
        half=$((qlen / 2))
        check "deepseek4: attn_output_a: group 0's rows ignore group 1's columns" same_range "$T/g0.gguf" "$qoff" "$T/g1.gguf" "$qoff" "$half"
        check "deepseek4: attn_output_a: group 1's rows follow group 1's columns" \
            sh -c '! cmp -s -i "$2:$2" -n "$3" "$1" "$4"' _ "$T/g0.gguf" $((qoff + half)) "$half" "$T/g1.gguf"
    else
        bad "deepseek4: quantize Q2_K with llama-imatrix's file" "$(head -c 300 "$T/err")"
    fi
else
    bad "deepseek4: attn_output_a in llama-imatrix's file" "inspect --json gave no offset"
fi

# ---- Q2_K and IQ2_XXS with kiln's imatrix ----
[ -s "$KIMX" ] || KIMX=""
if [ -n "$KIMX" ]; then
    "$KILN" perplexity "$F32" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 --chunks 4 --save-logits "$T/base.kld" \
        -q > /dev/null 2> "$T/err" || bad "deepseek4: f32 base logits" "$(head -c 300 "$T/err")"
    for q in Q2_K IQ2_XXS; do
        if ! "$KILN" quantize -q --allow-requantize --imatrix "$KIMX" "$F32" "$T/$q.gguf" $q 2> "$T/err"; then
            bad "deepseek4: quantize $q with kiln's imatrix" "$(head -c 300 "$T/err")"
            continue
        fi
        check "deepseek4: quantize $q with kiln's imatrix: a statistic for every tensor that needs one, no warning" \
            sh -c '! grep -q warning "$1"' _ "$T/err"
        # kiln's rules for what llama.cpp has none for: every mixer and position bias Q8_0
        check "deepseek4: $q: hc_*_fn, output_hc_fn and *_compressor_ape are Q8_0 (kiln's rule)" \
            sh -c '"$1" inspect --json "$2" | jq -e "[.tensors[] | select(.name | test(\"hc_(attn_|ffn_)?fn|compressor_ape\"))]
                   | length == 10 and all(.type == \"Q8_0\")" > /dev/null' _ "$KILN" "$T/$q.gguf"
        # everything else as the plan (llama-quantize's table) puts it, and
        # every tensor quantized with importance weights but those that
        # cannot have any (Q8_0, token_embd)
        "$KILN" quantize --allow-requantize --dry-run --json --imatrix "$KIMX" "$F32" $q > "$T/plan-$q.json" 2> "$T/err"
        check "deepseek4: $q: the file's types are the plan's" \
            sh -c 'jq -r ".tensors[] | \"\\(.name) \\(.to)\"" "$1" | sort > "$2.plan" &&
                   "$3" inspect --json "$4" | jq -r ".tensors[] | \"\\(.name) \\(.type)\"" | sort > "$2.file" &&
                   [ -s "$2.plan" ] && cmp -s "$2.plan" "$2.file"' _ "$T/plan-$q.json" "$T/types-$q" "$KILN" "$T/$q.gguf"
        check "deepseek4: $q: every quantized tensor but Q8_0 and token_embd weighed by kiln's imatrix" \
            sh -c 'jq -e "[.tensors[] | select(.to != .from and .to != \"Q8_0\" and .name != \"token_embd.weight\") | .imatrix]
                   | length > 40 and all" "$1" > /dev/null' _ "$T/plan-$q.json"
        if "$KILN" perplexity "$T/$q.gguf" --kl-divergence "$T/base.kld" -f "$shared/golden/text/ppl.txt" -b 128 --json \
            > "$T/kld-$q.json" 2> "$T/err"; then
            check "deepseek4: $q runs: perplexity finite, within 1.5x of f32's; mean KLD < 0.5 ($(jq -c '{ppl, ppl_base, kld_mean}' "$T/kld-$q.json"))" \
                sh -c 'jq -e "(.ppl | isinfinite | not) and .ppl > 1 and .ppl_ratio < 1.5 and .ppl_ratio > 0.67 and .kld_mean >= 0 and .kld_mean < 0.5" "$1" > /dev/null' _ \
                "$T/kld-$q.json"
        else
            bad "deepseek4: $q perplexity" "$(head -c 300 "$T/err")"
        fi
    done
else
    skipt "deepseek4: Q2_K / IQ2_XXS with kiln's imatrix (no imatrix: needs ../shared)"
fi
finish
