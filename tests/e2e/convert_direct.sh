# tests/e2e/convert_direct.sh - convert reading a checkpoint the page cache
# does not hold: such bytes are read past the page cache (O_DIRECT, into
# two buffers, the next chunk read ahead by a thread: convert/direct_read.c)
# instead of through the mapping. The DeepSeek fixtures (FP8 with block
# scales, BF16; tests/fixtures/deepseek2) are dropped from the page cache
# before each convert and must still come out byte-identical to llama.cpp's
# converter, as tests/e2e/deepseek2.sh checks them from the page cache
# (they are small enough for the kernel's read-ahead of their headers to
# bring them back whole, so they test the switch between the two paths).
# A 34 MB testmodel checkpoint then must convert to the same bytes from
# disk as from the page cache, its weights not coming into the page cache.
# Where the cache cannot be dropped (tmpfs) or observed (no fincore), the
# cases skip.
. tests/e2e/lib.sh

FX=tests/fixtures/deepseek2
if ! zstd -q -d -c "$FX/DeepSeek-tiny.tar.zst" | tar -x -C "$T" 2> "$T/err"; then
    bad "unpack the fixture" "$(head -c 300 "$T/err")"
    finish
fi
sync "$T"/*/*.safetensors # eviction drops clean pages only

# resident MODEL: bytes of MODEL's safetensors in the page cache
resident() { fincore -b -n -o RES "$T/$1"/*.safetensors | awk '{ s += $1 } END { print s + 0 }'; }

# evict MODEL: drops MODEL's safetensors from the page cache
evict() { for _f in "$T/$1"/*.safetensors; do dd if="$_f" iflag=nocache count=0 status=none || return 1; done; }

# cold_convert MODEL OUTTYPE
cold_convert() {
    _m=$1 _t=$2 _name="convert $1 --outtype $2 from disk"
    if ! command -v fincore > /dev/null || ! evict "$_m" || [ "$(resident "$_m")" != 0 ]; then
        skipt "$_name (the page cache cannot be dropped or observed here)"
        return
    fi
    if ! "$KILN" convert "$T/$_m" --outtype "$_t" -o "$T/$_m-$_t.gguf" 2> "$T/err"; then
        bad "$_name" "$(head -c 300 "$T/err")"
        return
    fi
    _want=$(grep "  $_m-$_t.gguf\$" "$FX/gguf.sha256" | cut -c1-64)
    _got=$(sha256sum < "$T/$_m-$_t.gguf" | cut -c1-64)
    if [ -n "$_want" ] && [ "$_want" = "$_got" ]; then
        ok "$_name: byte-identical to llama.cpp's"
    else
        bad "$_name: byte-identical to llama.cpp's" "sha256 $_got, llama.cpp's ${_want:-missing}"
    fi
}
cold_convert ds3-tiny-fp8 q8_0
cold_convert ds3-tiny-fp8 bf16
cold_convert ds3-tiny-bf16 q8_0
cold_convert ds3-tiny-bf16 f32

# A model larger than the kernel's read-ahead of its header (34 MB): read
# from disk, it converts to the bytes it gives from the page cache, and
# its weights do not come into the page cache.
tm=tm
if ! "$KILN" testmodel --arch llama --hidden 1024 --ffn 2048 --layers 1 --vocab 4096 -q -o "$T/$tm" 2> "$T/err"; then
    bad "testmodel for the direct reads" "$(head -c 300 "$T/err")"
    finish
fi
sync "$T/$tm"/*.safetensors
for t in q8_0 bf16; do
    what="convert a 34 MB model --outtype $t from disk"
    cat "$T/$tm/model.safetensors" > /dev/null
    if ! "$KILN" convert "$T/$tm" --outtype $t -o "$T/cached-$t.gguf" 2> "$T/err"; then
        bad "$what" "$(head -c 300 "$T/err")"
        continue
    fi
    if ! command -v fincore > /dev/null || ! evict "$tm" || [ "$(resident "$tm")" != 0 ]; then
        skipt "$what (the page cache cannot be dropped or observed here)"
        continue
    fi
    if ! "$KILN" convert "$T/$tm" --outtype $t -o "$T/cold-$t.gguf" 2> "$T/err"; then
        bad "$what" "$(head -c 300 "$T/err")"
        continue
    fi
    check "$what: the bytes it gives from the page cache" cmp -s "$T/cached-$t.gguf" "$T/cold-$t.gguf"
    res=$(resident "$tm") size=$(wc -c < "$T/$tm/model.safetensors")
    if [ "$res" -lt $((size / 2)) ]; then
        ok "$what: the weights were read past the page cache ($res of $size bytes cached)"
    else
        bad "$what: the weights were read past the page cache" "$res of $size bytes cached"
    fi
done
finish
