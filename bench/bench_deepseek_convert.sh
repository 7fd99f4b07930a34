#!/bin/sh
# bench/bench_deepseek_convert.sh - `make bench` with KILN_BENCH_DS2_FULL=1:
# kiln convert --outtype q8_0 of a full-shape DeepSeek-V3 FP8 checkpoint
# (issue 12 point 6), against cp + sync of the same bytes, and its peak RSS
# against the largest tensor + 64 MiB.
#
# The checkpoint is written by bench/bench_deepseek_convert.c: 61 blocks (3
# dense), the real tensor shapes, F8_E4M3 with 128x128 weight_scale_inv,
# BF16 embeddings / lm_head / norms, ~5 GB shards with an index, the real
# DeepSeek-V3 tokenizer (tests/fixtures/tokenizers/deepseek_v3), but
# KILN_BENCH_DS2_EXPERTS routed experts (default 1, plus the shared one)
# instead of 256: 21.5 GB of safetensors, 20.7 GB of q8_0 GGUF. Each routed
# expert more adds 2.55 GB to each. The disk must hold the input plus its
# copy or the output: about 43 GB at the default; the copy and the output
# are deleted as soon as they are measured, the model at the end unless
# KILN_BENCH_DS2_KEEP=1 (then it is reused by the next run).
#
# Order: cp + sync first, then convert; both read the input as the page
# cache has it after the previous step (this machine's RAM is smaller than
# the input, so mostly from disk). One round (the run is I/O bound and
# long); convert's output is fsynced before its rename, so cp is timed with
# a sync. Figures: input MB/s read and output MB/s written by convert, cp's
# MB/s, the ratio cp time / convert time (target >= 0.7), and peak RSS
# (GNU time) against the largest tensor + 64 MiB.
#
#   KILN_BENCH_DS2_FULL=1         run it (otherwise one line says it is skipped)
#   KILN_BENCH_DS2_DIR=DIR        where the model is made (default /tmp/kiln-bench-ds2)
#   KILN_BENCH_DS2_EXPERTS=N      routed experts (default 1)
#   KILN_BENCH_DS2_KEEP=1         keep the model afterwards
. "$(dirname "$0")/timed.sh"
if [ "${KILN_BENCH_DS2_FULL:-0}" != 1 ]; then
    echo "deepseek convert: skipped (full-shape DeepSeek-V3, ~43 GB of disk: KILN_BENCH_DS2_FULL=1)"
    exit 0
fi
M=${KILN_BENCH_DS2_DIR:-/tmp/kiln-bench-ds2}
E=${KILN_BENCH_DS2_EXPERTS:-1}
GEN=$BUILD/bench/bench_deepseek_convert
TOK=tests/fixtures/tokenizers/deepseek_v3
[ -x "$GEN" ] || { echo "deepseek convert: skipped ($GEN not built: make bench)"; exit 0; }
mkdir -p "$M/model" || exit 1
cleanup() {
    rm -rf "$M/copy" "$M/out.gguf" "$M/out.gguf.tmp"
    [ "${KILN_BENCH_DS2_KEEP:-0}" = 1 ] || rm -rf "$M"
}
trap cleanup EXIT

if [ ! -f "$M/model/gen.txt" ] || [ "$(sed -n 's/^experts //p' "$M/model/gen.txt")" != "$E" ]; then
    rm -f "$M/model"/*
    echo "  making the full-shape DeepSeek-V3 ($E routed + 1 shared experts) in $M/model"
    r=$(TIMED_LOG="$M/gen.log" timed "$GEN" gen "$M/model" "$E") ||
        { echo "deepseek convert: failed to make the model: $(tail -2 "$M/gen.log")"; exit 1; }
    for f in tokenizer.json tokenizer_config.json; do zstd -q -d -c "$TOK/$f.zst" > "$M/model/$f" || exit 1; done
    { cat "$M/gen.log"; echo "experts $E"; } > "$M/model/gen.txt"
    echo "  made in ${r% *} s"
fi
largest=$(sed -n 's/^largest_tensor_bytes //p' "$M/model/gen.txt")
in=$(cat "$M/model"/*.safetensors | wc -c)
shards=$(ls "$M/model"/*.safetensors | wc -l)

rm -rf "$M/copy" && mkdir -p "$M/copy" && sync
r=$(timed sh -c 'cp "$1"/*.safetensors "$2"/ && sync' sh "$M/model" "$M/copy") || exit 1
cs=${r% *}
rm -rf "$M/copy"; sync

# GNU time directly (not timed): the CPU seconds too, since on a shared
# machine a CPU-bound convert loses to other load where cp does not
/usr/bin/time -f '%e %M %U %S' -o "$M/convert.time" "$KILN" convert "$M/model" --outtype q8_0 -o "$M/out.gguf" -q \
    > "$M/convert.log" 2>&1 || { echo "deepseek convert: kiln convert failed: $(tail -3 "$M/convert.log")"; exit 1; }
read -r k rss cpu_u cpu_s < "$M/convert.time"
out=$(stat -c %s "$M/out.gguf")
rm -f "$M/out.gguf"

load=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v n="$in" -v o="$out" -v k="$k" -v cs="$cs" -v rss="$rss" -v big="$largest" -v e="$E" -v sh="$shards" \
    -v cpu="$cpu_u $cpu_s" -v load="$load" 'BEGIN {
    mb = n / 1e6; bound = big / 1048576 + 64
    printf "convert deepseek2 full shape (61 blocks, %d routed + 1 shared experts, FP8, %d shards) -> q8_0:\n", e, sh
    split(cpu, c, " ")
    printf "  %.0f MB in, %.0f MB out in %.1f s: %.0f MB/s read, %.0f MB/s written\n", mb, o / 1e6, k, mb / k,
           o / 1e6 / k
    printf "  CPU %.1f s user + %.1f s system; load average at the end %s\n", c[1], c[2], load
    printf "  cp + sync of the same %.0f MB: %.1f s, %.0f MB/s; ratio cp time / convert time %.2f (target >= 0.7)\n",
           mb, cs, mb / cs, cs / k
    printf "  peak RSS %.0f MiB; largest tensor %.0f MiB + 64 MiB = %.0f MiB (%s)\n", rss / 1024, big / 1048576,
           bound, rss / 1024 <= bound ? "within" : "OVER"
}'
