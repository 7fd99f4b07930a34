#!/bin/sh
# bench/bench_deepseek_convert.sh - kiln convert at DeepSeek scale (issue 12
# point 6), on checkpoints `kiln testmodel --arch deepseek2` (DeepSeek-V3)
# and `--arch deepseek4` (DeepSeek-V4-Flash) write with the real layer
# count, tensor names, shapes and dtypes (FP8 with block scales; V4's routed
# experts FP4), the real DeepSeek-V3 tokenizer
# (tests/fixtures/tokenizers/deepseek_v3) and 5 GB shards with an index.
#
# Always (seconds, ~50 MB of disk): `kiln convert --dry-run` of the full
# shapes, 256 routed experts, written --sparse (headers and holes: 673 GB
# of V3 safetensors, 156 GB of V4, that take no disk): time, peak RSS, the
# output size it announces.
#
# With KILN_BENCH_DS2_FULL=1: kiln convert --outtype q8_0 of the full-shape
# models with KILN_BENCH_DS2_EXPERTS routed experts (default 1) instead of
# 256, against cp + sync of the same bytes, and peak RSS against the
# largest tensor + 64 MiB. DeepSeek-V3 at 1 expert: 21.5 GB of safetensors,
# 20.7 GB of q8_0 GGUF, each routed expert more adding 2.55 GB to each;
# V4-Flash at 1 expert: 9.3 GB of safetensors, 0.58 GB a routed expert more
# (KILN_BENCH_DS4=0 leaves it out). The disk must hold a model plus its copy
# or its output: about 43 GB at the default; the copy and the output are
# deleted as soon as they are measured, each model after its figures unless
# KILN_BENCH_DS2_KEEP=1 (then both stay, 31 GB, and the next run reuses
# them). KILN_BENCH_DS2_LAYERS=N makes the models of their first N blocks
# only (embeddings and lm_head stay: 1 block is ~4 GB of V3), to check the
# script itself in minutes; its figures are not the issue's.
#
# Order, per model: cp + sync first, then convert; both read the input as
# the page cache has it after the previous step (this machine's RAM is
# smaller than the input, so mostly from disk). One round (the run is I/O
# bound and long); convert's output is fsynced before its rename, so cp is
# timed with a sync. Figures: input MB/s read and output MB/s written by
# convert, cp's MB/s, the ratio cp time / convert time (target >= 0.7), and
# peak RSS (GNU time) against the largest tensor + 64 MiB.
#
#   KILN_BENCH_DS2_FULL=1         the full converts (otherwise a line says they are skipped)
#   KILN_BENCH_DS2_DIR=DIR        where the models are made (default /tmp/kiln-bench-ds2)
#   KILN_BENCH_DS2_EXPERTS=N      routed experts (default 1)
#   KILN_BENCH_DS2_LAYERS=N       blocks (default all: 61 and 43)
#   KILN_BENCH_DS4=0              no deepseek4 convert
#   KILN_BENCH_DS2_KEEP=1         keep the models afterwards
. "$(dirname "$0")/timed.sh"
TOK=tests/fixtures/tokenizers/deepseek_v3

# tokenizer DIR: DeepSeek-V3's real tokenizer into a testmodel directory
tokenizer() {
    for _f in tokenizer.json tokenizer_config.json; do zstd -q -d -c "$TOK/$_f.zst" > "$1/$_f" || return 1; done
}

bench_tmpdir deepseek
for arch in deepseek2 deepseek4; do
    "$KILN" testmodel --arch "$arch" --sparse -o "$BENCH_TMP/$arch" > "$BENCH_TMP/$arch.txt" 2>&1 &&
        tokenizer "$BENCH_TMP/$arch" ||
        { echo "deepseek convert: testmodel --arch $arch --sparse failed: $(tail -1 "$BENCH_TMP/$arch.txt")"; exit 1; }
    r=$(TIMED_LOG="$BENCH_TMP/dry.log" timed "$KILN" convert "$BENCH_TMP/$arch" --dry-run --outtype q8_0) ||
        { echo "deepseek convert: --dry-run failed: $(tail -2 "$BENCH_TMP/dry.log")"; exit 1; }
    awk -v r="$r" -v arch="$arch" -v plan="$(tail -1 "$BENCH_TMP/dry.log")" \
        -v gen="$(cat "$BENCH_TMP/$arch.txt")" 'BEGIN {
        split(r, t, " "); match(gen, /[0-9]+ parameters/); p = substr(gen, RSTART, RLENGTH) + 0
        match(plan, /output size [0-9]+/); o = substr(plan, RSTART + 12, RLENGTH - 12) + 0
        printf "convert --dry-run --outtype q8_0 %s full shape (%.0f B parameters, 256 experts, sparse): %.2f s, peak RSS %.0f MiB, output %.1f GB announced\n",
               arch, p / 1e9, t[1], t[2] / 1024, o / 1e9
    }'
    rm -rf "${BENCH_TMP:?}/$arch"
done

if [ "${KILN_BENCH_DS2_FULL:-0}" != 1 ]; then
    echo "deepseek convert: full converts skipped (full-shape DeepSeek-V3 and V4-Flash, ~43 GB of disk: KILN_BENCH_DS2_FULL=1)"
    exit 0
fi
M=${KILN_BENCH_DS2_DIR:-/tmp/kiln-bench-ds2}
E=${KILN_BENCH_DS2_EXPERTS:-1}
L=${KILN_BENCH_DS2_LAYERS:+--layers $KILN_BENCH_DS2_LAYERS}
mkdir -p "$M" || exit 1
cleanup() {
    rm -rf "$M/copy" "$M/out.gguf" "$M/out.gguf.tmp" "$M"/*.want "$BENCH_TMP"
    [ "${KILN_BENCH_DS2_KEEP:-0}" = 1 ] || rm -rf "$M"
}
trap cleanup EXIT

# full ARCH: makes (or reuses) the model, times cp + sync and convert, prints
full() {
    arch=$1 d=$M/$1
    "$KILN" testmodel --arch "$arch" --experts "$E" $L --dry-run | tail -1 > "$d.want" || return 1
    if ! cmp -s "$d.want" "$d.txt" || [ ! -f "$d/config.json" ]; then
        echo "  making the full-shape $arch ($E routed + 1 shared experts) in $d"
        # shellcheck disable=SC2086 # $L is two words or none
        r=$(TIMED_LOG="$d.log" timed "$KILN" testmodel --arch "$arch" --experts "$E" $L --force -q -o "$d") &&
            tokenizer "$d" || { echo "deepseek convert: failed to make $arch: $(tail -2 "$d.log")"; return 1; }
        mv "$d.want" "$d.txt"
        echo "  made in ${r% *} s"
    fi
    largest=$(sed -n 's/.*largest tensor \([0-9]*\) bytes.*/\1/p' "$d.txt")
    in=$(stat -c %s "$d"/*.safetensors | awk '{ s += $1 } END { print s }')
    shards=$(ls "$d"/*.safetensors | wc -l)
    layers=$(sed -n 's/.*, \([0-9]*\) layers,.*/\1/p' "$d.txt")
    rm -f "$d.want"

    rm -rf "$M/copy" && mkdir -p "$M/copy" && sync
    r=$(timed sh -c 'cp "$1"/*.safetensors "$2"/ && sync' sh "$d" "$M/copy") || return 1
    cs=${r% *}
    rm -rf "$M/copy"; sync

    # GNU time directly (not timed): the CPU seconds too, since on a shared
    # machine a CPU-bound convert loses to other load where cp does not
    /usr/bin/time -f '%e %M %U %S' -o "$M/convert.time" "$KILN" convert "$d" --outtype q8_0 -o "$M/out.gguf" -q \
        > "$M/convert.log" 2>&1 || { echo "deepseek convert: kiln convert failed: $(tail -3 "$M/convert.log")"; return 1; }
    read -r k rss cpu_u cpu_s < "$M/convert.time"
    out=$(stat -c %s "$M/out.gguf")
    rm -f "$M/out.gguf"

    load=$(cut -d' ' -f1-3 /proc/loadavg)
    awk -v n="$in" -v o="$out" -v k="$k" -v cs="$cs" -v rss="$rss" -v big="$largest" -v e="$E" -v sh="$shards" \
        -v cpu="$cpu_u $cpu_s" -v load="$load" -v arch="$arch" -v layers="$layers" 'BEGIN {
        mb = n / 1e6; bound = big / 1048576 + 64
        printf "convert %s full shape (%d blocks, %d routed + 1 shared experts, FP8%s, %d shards) -> q8_0:\n", arch,
               layers, e, arch == "deepseek4" ? " with FP4 experts" : "", sh
        split(cpu, c, " ")
        printf "  %.0f MB in, %.0f MB out in %.1f s: %.0f MB/s read, %.0f MB/s written\n", mb, o / 1e6, k, mb / k,
               o / 1e6 / k
        printf "  CPU %.1f s user + %.1f s system; load average at the end %s\n", c[1], c[2], load
        printf "  cp + sync of the same %.0f MB: %.1f s, %.0f MB/s; ratio cp time / convert time %.2f (target >= 0.7)\n",
               mb, cs, mb / cs, cs / k
        printf "  peak RSS %.0f MiB; largest tensor %.0f MiB + 64 MiB = %.0f MiB (%s)\n", rss / 1024, big / 1048576,
               bound, rss / 1024 <= bound ? "within" : "OVER"
    }'
    [ "${KILN_BENCH_DS2_KEEP:-0}" = 1 ] || rm -rf "$d" "$d.txt" "$d.log"
}

status=0
full deepseek2 || status=1
[ "${KILN_BENCH_DS4:-1}" = 0 ] || full deepseek4 || status=1
exit $status
