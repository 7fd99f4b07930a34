# tests/e2e/lib.sh - sourced by every end-to-end case. Cases print TAP lines
# ("ok N - name", "not ok N - name", "not ok N # SKIP name") that
# tests/run.sh counts, zstd-programs style: run a command, check its exit
# code, stdout and stderr.
#
#   $KILN     the binary under test
#   shared    path of ../shared or empty (need_shared skips or, under
#             CI=true, fails when it is absent)
#   T         a scratch directory, removed at exit
KILN=${KILN:-build/kiln}
T=$(mktemp -d /tmp/kiln-e2e-XXXXXX)
trap 'rm -rf "$T"' EXIT
_n=0 _failed=0
shared=${KILN_SHARED:-../shared}
[ -f "$shared/golden/README.md" ] || shared=""

ok()   { _n=$((_n + 1)); echo "ok $_n - $1"; }
bad()  { _n=$((_n + 1)); _failed=1; echo "not ok $_n - $1"; [ -n "${2:-}" ] && echo "# $2"; }
skipt() { _n=$((_n + 1)); echo "not ok $_n # SKIP $1"; }

# check NAME CONDITION...: runs the condition (a command), ok when it succeeds
check() { name=$1; shift; if "$@"; then ok "$name"; else bad "$name" "failed: $*"; fi; }

# need_shared NAME: returns 1 (after reporting a skip, or a failure in CI)
need_shared() {
    [ -n "$shared" ] && return 0
    if [ "${CI:-}" = true ]; then bad "$1" "../shared missing (required in CI)"; else skipt "$1"; fi
    return 1
}

# expect_fail NAME PATTERN CMD...: the command must exit non-zero, print one
# stderr line matching PATTERN, and not crash (exit code < 128).
expect_fail() {
    name=$1 pat=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"; rc=$?
    if [ "$rc" -eq 0 ]; then bad "$name" "exit 0, expected failure"; return; fi
    if [ "$rc" -ge 128 ]; then bad "$name" "crashed with $rc: $(head -c 300 "$T/err")"; return; fi
    if ! grep -Eq -- "$pat" "$T/err"; then bad "$name" "stderr lacks /$pat/: $(head -c 300 "$T/err")"; return; fi
    ok "$name"
}

finish() { echo "1..$_n"; exit $_failed; }

# peak_rss_below WHAT KIB CMD...: CMD's peak RSS (GNU time) is under KIB
# KiB; a skip without GNU time.
peak_rss_below() {
    _what=$1 _lim=$2; shift 2
    if [ ! -x /usr/bin/time ]; then
        skipt "$_what peak RSS (no GNU time)"
        return
    fi
    if ! /usr/bin/time -v "$@" 2> "$T/time.txt" > /dev/null; then
        bad "$_what under /usr/bin/time" "$(tail -3 "$T/time.txt")"
        return
    fi
    _rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$T/time.txt")
    if [ -n "$_rss" ] && [ "$_rss" -lt "$_lim" ]; then
        ok "$_what peak RSS ${_rss} KiB (< $((_lim / 1024)) MiB)"
    else
        bad "$_what peak RSS < $((_lim / 1024)) MiB" "${_rss:-?} KiB"
    fi
}

# jq_true FILE FILTER [JQ-OPTION...]: FILTER over the JSON in FILE yields
# exactly one value, true (a value that is only truthy, or a jq error, fails).
# FILTER may use `meta`, a GGUF report's metadata as one {key: value} object.
jq_true() {
    _jf=$1 _je=$2; shift 2
    [ "$(jq -c "$@" "def meta: reduce .metadata[] as \$kv ({}; .[\$kv.key] = \$kv.value); [$_je]" "$_jf" 2>&1)" = "[true]" ]
}

# Binary files without a scripting language: bytes V... writes one byte per
# value (0-255), le32/le64 V... little-endian integers, write_at FILE OFF
# overwrites FILE from byte OFF with stdin, flip_bits FILE OFF MASK XORs one
# byte, same_range A OFF_A B OFF_B N compares N bytes of A and B.
bytes() { for _b; do printf "\\$(printf %03o "$_b")"; done; }
le32() { for _w; do bytes $((_w & 255)) $((_w >> 8 & 255)) $((_w >> 16 & 255)) $((_w >> 24 & 255)); done; }
le64() { for _q; do le32 $((_q & 0xffffffff)) $((_q >> 32 & 0xffffffff)); done; }
write_at() { dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }
flip_bits() { _v=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' '); bytes $((_v ^ $3)) | write_at "$1" "$2"; }
same_range() { cmp -s -i "$2:$4" -n "$5" "$1" "$3"; }

# tokens_agree GGUF TSV: every text of a llama.cpp tokens TSV (the factory's
# tokenize_tsv format: INDEX ADD_SPECIAL PARSE_SPECIAL IDS TEXT, TEXT one
# JSON string) tokenized by `kiln tokenize --batch`, one process per flag
# combination, gives llama.cpp's ids. Prints "# " lines for differences and
# sets tokens_checked to the number of texts compared; fails on any
# difference or when a combination has no rows.
tokens_agree() {
    tokens_checked=0
    _tfail=0
    for _combo in "0 0" "0 1" "1 0" "1 1"; do
        set -- "$1" "$2" $_combo
        _flags=""
        [ "$3" = 0 ] && _flags="$_flags --no-bos"
        [ "$4" = 0 ] && _flags="$_flags --no-parse-special"
        awk -F '\t' -v a="$3" -v p="$4" 'NR > 1 && $2 == a && $3 == p { print $5 }' "$2" > "$T/tok_in.jsonl"
        awk -F '\t' -v a="$3" -v p="$4" 'NR > 1 && $2 == a && $3 == p { print $4 }' "$2" > "$T/tok_want"
        [ -s "$T/tok_want" ] || { echo "# $2: no rows for add=$3 parse=$4"; _tfail=1; continue; }
        # shellcheck disable=SC2086
        "$KILN" tokenize "$1" --batch "$T/tok_in.jsonl" --jsonl $_flags > "$T/tok_got" || _tfail=1
        tokens_checked=$((tokens_checked + $(wc -l < "$T/tok_want")))
        cmp -s "$T/tok_got" "$T/tok_want" ||
            { _tfail=1; diff "$T/tok_got" "$T/tok_want" | head -4 | sed "s|^|# add=$3 parse=$4: |"; }
    done
    return $_tfail
}

# quant_layout N: $T/N laid out as llama-quantize ran for the golden
# quantizations (gguf/N-f32.gguf, imatrix/N.imatrix.gguf from ../shared),
# since the imatrix path is stored in the output as given.
quant_layout() {
    _g=$(cd "$shared/golden" && pwd)
    mkdir -p "$T/$1/gguf" "$T/$1/imatrix"
    ln -sf "$_g/gguf/$1-f32.gguf" "$T/$1/gguf/$1-f32.gguf"
    ln -sf "$_g/imatrix/$1.imatrix.gguf" "$T/$1/imatrix/$1.imatrix.gguf"
}

# preset_agrees FIX N PRESET IMX: in $T/N (quant_layout), kiln's plan for
# PRESET (with N's imatrix when IMX is "-imx") gives every tensor the type
# FIX/types.tsv holds for N-PRESET[IMX].gguf, and kiln quantize writes the
# file whose sha256 FIX/SHA256SUMS holds. Two TAP lines. Arguments after
# IMX are more quantize options (e.g. --pure, a plain type's overrides).
preset_agrees() {
    _fix=$1 _pn=$2 _q=$3 _imx=$4
    shift 4
    [ -n "$_imx" ] && set -- "$@" --imatrix "imatrix/$_pn.imatrix.gguf"
    file_agrees "$_fix" "$_pn" "$_pn-$_q$_imx.gguf" "$_q" "$@"
}

# file_agrees FIX N FILE TARGET [ARG...]: as preset_agrees, for
# llama-quantize's FILE made with `ARG... TARGET` (a file not named after
# its preset).
file_agrees() {
    _fix=$1 _pn=$2 _f=$3 _q=$4
    shift 4
    (cd "$T/$_pn" && "$KILN" quantize --dry-run --json "$@" "gguf/$_pn-f32.gguf" "$_q") > "$T/plan.json"
    jq -r --arg f "$_f" '.tensors[] | [$f, .name, .to] | @tsv' "$T/plan.json" | sort > "$T/kiln.types"
    grep "^$_f	" "$_fix/types.tsv" | sort > "$T/llama.types"
    if [ -s "$T/llama.types" ] && cmp -s "$T/kiln.types" "$T/llama.types"; then
        ok "$_f: every tensor's type is llama-quantize's ($(wc -l < "$T/llama.types") tensors)"
    else
        bad "$_f: every tensor's type is llama-quantize's" \
            "$(diff "$T/llama.types" "$T/kiln.types" | head -5 | tr '\n' ' ')"
    fi
    (cd "$T/$_pn" && "$KILN" quantize -q "$@" "gguf/$_pn-f32.gguf" "$_f" "$_q") > /dev/null 2> "$T/err"
    _want=$(grep " $_f\$" "$_fix/SHA256SUMS" | cut -d' ' -f1)
    _got=$(sha256sum < "$T/$_pn/$_f" | cut -d' ' -f1)
    check "$_f: byte-identical to llama-quantize's file" test -n "$_want" -a "$_got" = "$_want"
}

# runtime_agrees FIX N FILE [LOGITS]: kiln's runtime on $T/N/FILE gives
# llama.cpp's numbers: the logits of LOGITS (llama.cpp's dump_logits file,
# .zst allowed) bit for bit, when given, and the perplexity of the whole
# ../shared text that FIX/PPL.tsv holds for FILE, to the last digit. The
# quant fixtures keep llama.cpp's logits of some files only (issue 14's
# 6 MB budget for them); every file's perplexity is checked.
runtime_agrees() {
    _fix=$1 _rn=$2 _rf=$3 _lg=${4:-}
    if [ -n "$_lg" ]; then
        case $_lg in *.zst) zstd -dcq "$_lg" > "$T/ref.logits" && _lg=$T/ref.logits ;; esac
        "$KILN" golden check -t 2 "$T/$_rn/$_rf" "$_lg" --max-abs 0 > "$T/out" 2>&1
        check "$_rf: logits bit-identical to llama.cpp's" test $? -eq 0
    fi
    _want=$(grep "^$_rf	" "$_fix/PPL.tsv" | cut -f4)
    _got=$("$KILN" perplexity -t 2 "$T/$_rn/$_rf" -f "$shared/golden/text/ppl.txt" -c 128 -b 128 2>&1 |
           sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p')
    check "$_rf: perplexity of the whole text is llama-perplexity's ($_want)" test -n "$_want" -a "$_got" = "$_want"
}

# kept_logits FILE KEY LIST...: FILE when KEY is one of LIST, else nothing.
kept_logits() {
    _kf=$1 _kk=$2
    shift 2
    for _k in "$@"; do [ "$_k" = "$_kk" ] && { echo "$_kf"; return; }; done
}
