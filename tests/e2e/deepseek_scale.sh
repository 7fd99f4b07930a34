# tests/e2e/deepseek_scale.sh - issue 12 point 6: kiln convert at the scale
# of the real DeepSeek checkpoints, on `kiln testmodel --arch deepseek2`
# (DeepSeek-V3 shapes) and `--arch deepseek4` (V4-Flash shapes).
#
#  - --sparse full shapes (V3: 61 blocks x 256 experts, 671 B parameters,
#    673 GB of safetensors as headers and holes; V4-Flash: 43 x 256): the
#    --dry-run plan comes from the index and headers alone, with bounded RSS,
#    and its output size is checked independently of its own sum: convert's
#    file grows by exactly the same bytes per routed expert, so the sizes at
#    8, 16 and 256 experts (of otherwise equal models) must satisfy
#    size(256) - size(8) = 31 x (size(16) - size(8)).
#  - small real models (V3: one block; V4: three, the third with compressor
#    and indexer; two experts, every tensor of the real
#    shape but for a kiln tokenizer of 1024 tokens) convert to the size
#    --dry-run announced, and kiln inspect opens the results.
#  - peak RSS of the convert <= largest tensor + 64 MiB, the issue's bound,
#    where the largest tensor is the embedding (32768 tokens x 7168, 448
#    MiB; read from a sparse input, which maps and costs RSS as real data
#    does). Not on the 1024-token models: their largest tensor (o_proj, 112
#    MiB) is smaller than convert's own constant (the FP8 step's f32 chunk
#    and the writer's two buffers: 222 MiB peak there), so the bound would
#    not hold, and says nothing about scale. Skipped under ASan.
# No timing here (make bench has the figures); the runs take seconds.
. tests/e2e/lib.sh

TOK=tests/fixtures/tokenizers/deepseek_v3

# rss_below: peak_rss_below, but a skip under make check's ASan, whose
# shadow memory and quarantine are not kiln's
rss_below() {
    if [ -n "${ASAN_OPTIONS:-}" ]; then skipt "$1 peak RSS (under ASan)"; else peak_rss_below "$@"; fi
}

# testmodel DIR ARGS...: a model, with DeepSeek-V3's real tokenizer when the
# vocabulary is the real one
testmodel() {
    _d=$1; shift
    "$KILN" testmodel -q -o "$_d" "$@" 2> "$T/err" || { echo "testmodel $*: $(head -c 300 "$T/err")"; return 1; }
    case " $* " in *" --vocab "*) return 0 ;; esac
    for _f in tokenizer.json tokenizer_config.json; do
        zstd -q -d -c "$TOK/$_f.zst" > "$_d/$_f" || return 1
    done
}

# out_size DIR [CONVERT-ARGS]: the output size --dry-run announces
out_size() {
    _d=$1; shift
    "$KILN" convert "$_d" --dry-run "$@" > "$T/plan" 2> "$T/err" || return 1
    sed -n 's/.*output size \([0-9]*\) bytes.*/\1/p' "$T/plan" | tail -1
}

for arch in deepseek2 deepseek4; do
    if [ "$arch" = deepseek2 ]; then n_layers=61 cls=DeepseekV3ForCausalLM; else n_layers=43 cls=DeepseekV4ForCausalLM; fi
    ok_gen=1
    for e in 8 16 256; do
        testmodel "$T/$arch-$e" --arch "$arch" --experts "$e" --sparse > "$T/gen.err" ||
            { bad "$arch --sparse, $e experts" "$(cat "$T/gen.err")"; ok_gen=0; }
    done
    [ "$ok_gen" = 1 ] || continue
    ok "$arch --sparse: $n_layers blocks at 8, 16 and 256 experts"
    used=$(du -sk "$T/$arch-256" | cut -f1)
    check "$arch full shape takes no disk (${used} KiB)" [ "$used" -lt 102400 ]

    s256=$(out_size "$T/$arch-256" --outtype q8_0)
    if [ -n "$s256" ] && grep -q "^$T/$arch-256 ($cls) -> $arch" "$T/plan" && grep -q "ffn_gate_exps" "$T/plan"; then
        ok "$arch full shape --dry-run: plan and output size $s256 bytes"
    else
        bad "$arch full shape --dry-run" "$(head -c 300 "$T/err")"
        continue
    fi
    s8=$(out_size "$T/$arch-8" --outtype q8_0) s16=$(out_size "$T/$arch-16" --outtype q8_0)
    if [ -n "$s8" ] && [ -n "$s16" ] && [ $((s256 - s8)) -eq $((31 * (s16 - s8))) ] && [ $((s16 - s8)) -gt 0 ]; then
        ok "$arch output size linear in the experts: $s8 / $s16 / $s256"
    else
        bad "$arch output size linear in the experts" "8: $s8, 16: $s16, 256: $s256"
    fi
    rss_below "$arch full shape --dry-run" 262144 "$KILN" convert "$T/$arch-256" --dry-run
    rm -rf "$T/$arch-8" "$T/$arch-16" "$T/$arch-256"
done

# small real models: the announced size is the size written, and it loads
for arch in deepseek2 deepseek4; do
    [ "$arch" = deepseek2 ] && layers=1 || layers=3
    m=$T/$arch-small
    if ! testmodel "$m" --arch "$arch" --layers "$layers" --experts 2 --vocab 1024 > "$T/gen.err"; then
        bad "$arch small real model" "$(cat "$T/gen.err")"
        continue
    fi
    want=$(out_size "$m" --outtype q8_0)
    if ! "$KILN" convert "$m" --outtype q8_0 -o "$m.gguf" -q 2> "$T/err"; then
        bad "$arch small real model converts" "$(head -c 300 "$T/err")"
        continue
    fi
    got=$(stat -c %s "$m.gguf")
    check "$arch small model: --dry-run's size ${want:-?} is the file's ($got)" [ "${want:-x}" = "$got" ]
    check "$arch small model: kiln inspect opens it" sh -c '"$1" inspect "$2" > /dev/null' sh "$KILN" "$m.gguf"
    rm -rf "$m" "$m.gguf"
done

# the issue's bound, largest tensor + 64 MiB, where the largest is the embedding
m=$T/ds3-embed big=$((32768 * 7168 * 2 / 1024))
if [ -n "${ASAN_OPTIONS:-}" ]; then
    rss_below "deepseek2 convert, largest tensor $((big / 1024)) MiB + 64 MiB"
elif testmodel "$m" --arch deepseek2 --layers 1 --experts 2 --vocab 32768 --sparse > "$T/gen.err"; then
    rss_below "deepseek2 convert, largest tensor $((big / 1024)) MiB + 64 MiB" $((big + 65536)) \
        "$KILN" convert "$m" --outtype q8_0 -o "$m.gguf" -q
else
    bad "deepseek2 --vocab 32768 --sparse" "$(cat "$T/gen.err")"
fi

finish
