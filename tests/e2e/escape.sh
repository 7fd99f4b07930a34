# tests/e2e/escape.sh - strings from a model file never reach the terminal
# raw, and tensor-name patterns are PCRE2 in every command.
#
# A crafted GGUF (written here byte by byte) has a metadata key, a string
# value and a tensor name holding ESC [ 31m, BEL, an OSC title sequence,
# DEL, a C1 CSI (U+009B) and a lone 0x9b byte. inspect, diff, splice
# --dry-run, quantize --dry-run, and an error quoting the name must print
# none of those bytes, and must print their escapes instead (so the check
# cannot pass on empty output). Then one PCRE2-only pattern selects the
# same tensors in inspect, splice and quantize, and a bad pattern is a
# one-line usage error (exit 2) in each command that takes one.
. tests/e2e/lib.sh

ESC=$(printf '\033') C1=$(printf '\302\233') RAW9B=$(printf '\233')
EVIL="$ESC[31m$(printf '\007')$ESC]0;pwned$(printf '\007\177')$C1$RAW9B"

# gguf_str S: a GGUF string (u64 length, bytes).
gguf_str() { le64 "$(printf '%s' "$1" | wc -c)"; printf '%s' "$1"; }
# tensor_info NAME OFFSET: a 2-D F32 tensor of 256 x 2.
tensor_info() { gguf_str "$1"; le32 2; le64 256 2; le32 0; le64 "$2"; }

# make_gguf OUT VALUE FIRST_TENSOR: general.architecture llama, one block,
# the crafted key with string VALUE, and three F32 tensors, the first
# named FIRST_TENSOR.
make_gguf() {
    {
        printf 'GGUF'; le32 3; le64 3 4
        gguf_str general.architecture; le32 8; gguf_str llama
        gguf_str llama.block_count; le32 4; le32 1
        gguf_str "key.$EVIL"; le32 8; gguf_str "$2"
        gguf_str llama.embedding_length; le32 4; le32 256
        tensor_info "$3" 0
        tensor_info blk.0.ffn_down.weight 2048
        tensor_info blk.0.attn_q.weight 4096
    } > "$1"
    _pad=$(( (32 - $(wc -c < "$1") % 32) % 32 ))
    head -c "$_pad" /dev/zero >> "$1"
    head -c 6144 /dev/zero >> "$1"
}
make_gguf "$T/a.gguf" "value.$EVIL" "blk.0.ffn_up.$EVIL.weight"
make_gguf "$T/b.gguf" "other.$EVIL" "blk.0.ffn_up.other$EVIL.weight"
cp "$T/a.gguf" "$T/donor.gguf"

# clean NAME FILE...: the files exist, are not empty, hold no C0 byte
# other than newline and tab, no DEL, no 0x9b (raw or in C1's UTF-8), and
# show the escape of ESC [ 31m.
clean() {
    _name=$1; shift
    for _f; do
        [ -s "$_f" ] || { bad "$_name" "$_f is empty"; return; }
    done
    _ctl=$(cat "$@" | LC_ALL=C tr -d '\n\t -~' | LC_ALL=C tr -d '\200-\232\234-\377' | wc -c)
    [ "$_ctl" -eq 0 ] || { bad "$_name" "$_ctl raw control bytes: $(cat "$@" | od -c | head -5 | tr '\n' ' ')"; return; }
    grep -qF '\x1b[31m' "$@" || { bad "$_name" "no \\x1b[31m escape shown: $(head -c 300 "$1")"; return; }
    ok "$_name"
}

"$KILN" inspect "$T/a.gguf" > "$T/out" 2> "$T/err"; rc=$?
check "inspect of the crafted file succeeds" test "$rc" -eq 0
clean "inspect escapes keys, values and tensor names" "$T/out"
check "inspect shows the C1 CSI escaped" grep -qF '\xc2\x9b\x9b' "$T/out"

"$KILN" diff "$T/a.gguf" "$T/b.gguf" > "$T/out" 2> "$T/err"; rc=$?
check "diff of the crafted files succeeds" test "$rc" -eq 0
clean "diff escapes keys, values and tensor names" "$T/out"

"$KILN" splice "$T/a.gguf" "$T/donor.gguf" --tensors 'ffn_up' --dry-run > "$T/out" 2> "$T/err"; rc=$?
check "splice --dry-run of the crafted file succeeds" test "$rc" -eq 0
clean "splice --dry-run escapes tensor names" "$T/out"

"$KILN" quantize --dry-run "$T/a.gguf" Q8_0 > "$T/out" 2> "$T/err"; rc=$?
check "quantize --dry-run of the crafted file succeeds" test "$rc" -eq 0
clean "quantize --dry-run escapes tensor names" "$T/out"

# An error quoting the name: the donor lacks the crafted tensor.
"$KILN" splice "$T/a.gguf" "$T/b.gguf" --tensors 'ffn_up' --dry-run > "$T/out" 2> "$T/err"; rc=$?
check "splice with a missing donor tensor fails" test "$rc" -eq 1
clean "an error quoting a tensor name escapes it" "$T/err"
check "that error is one line" test "$(wc -l < "$T/err")" -eq 1

# ---- one regex dialect: PCRE2 --------------------------------------------
# \d and (?:...) are PCRE2 (and ECMAScript, as llama.cpp's --tensor-type),
# not POSIX ERE: the pattern must select ffn_up and ffn_down, not attn_q.
PAT='blk\.\d+\.ffn_(?:up|down)'
# names_of FILE: the sorted tensor names a plan lists (first column of
# rows starting with blk.).
names_of() { grep -ao '^ *blk\.[^ ]*' "$1" | tr -d ' ' | sort; }
printf 'blk.0.ffn_down.weight\nblk.0.ffn_up.\\x1b[31m\\x07\\x1b]0;pwned\\x07\\x7f\\xc2\\x9b\\x9b.weight\n' | sort > "$T/want"

"$KILN" splice "$T/a.gguf" "$T/donor.gguf" --tensors "$PAT" --dry-run > "$T/out" 2> "$T/err"; rc=$?
names_of "$T/out" > "$T/splice.names"
check "splice --tensors takes a PCRE2 pattern" test "$rc" -eq 0
check "splice --tensors PCRE2 selects ffn_up and ffn_down" cmp -s "$T/splice.names" "$T/want"

"$KILN" quantize --dry-run --tensor-type "$PAT=q4_0" "$T/a.gguf" Q8_0 > "$T/out" 2> "$T/err"; rc=$?
grep -a -- "--tensor-type" "$T/out" | grep -av override > "$T/q"
names_of "$T/q" > "$T/quant.names"
check "quantize --tensor-type takes the same pattern" test "$rc" -eq 0
check "quantize --tensor-type selects the same tensors as splice" cmp -s "$T/quant.names" "$T/splice.names"

"$KILN" inspect --tensors "$PAT" "$T/a.gguf" > "$T/out" 2> "$T/err"; rc=$?
sed -n '/^tensors:/,/^per type:/p' "$T/out" > "$T/t"
names_of "$T/t" > "$T/inspect.names"
check "inspect --tensors selects the same tensors" cmp -s "$T/inspect.names" "$T/want"

# usage_rc NAME CMD...: exit 2 with one stderr line naming the pattern.
usage_rc() {
    _name=$1; shift
    "$@" > "$T/out" 2> "$T/err"; _rc=$?
    if [ "$_rc" -ne 2 ]; then bad "$_name" "exit $_rc, expected 2: $(head -c 300 "$T/err")"; return; fi
    if [ "$(wc -l < "$T/err")" -ne 1 ]; then bad "$_name" "stderr is not one line: $(head -c 300 "$T/err")"; return; fi
    if ! grep -q "bad regex 'blk(': .* at pattern offset 4" "$T/err"; then bad "$_name" "$(head -c 300 "$T/err")"; return; fi
    ok "$_name"
}
usage_rc "splice: a bad pattern is a usage error" "$KILN" splice "$T/a.gguf" "$T/donor.gguf" --tensors 'blk(' --dry-run
usage_rc "quantize: a bad pattern is a usage error" "$KILN" quantize --dry-run --tensor-type 'blk(=q4_0' "$T/a.gguf" Q8_0
usage_rc "inspect: a bad pattern is a usage error" "$KILN" inspect --tensors 'blk(' "$T/a.gguf"
usage_rc "diff: a bad pattern is a usage error" "$KILN" diff --tensors 'blk(' "$T/a.gguf" "$T/b.gguf"

finish
