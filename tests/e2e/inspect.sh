# tests/e2e/inspect.sh - kiln inspect and kiln diff from the command line:
# exit codes, --json against ../shared/golden/MANIFEST.tsv, gates, errors.
. tests/e2e/lib.sh

check "inspect --help exits 0" sh -c '"$KILN" inspect --help | grep -q "usage: kiln inspect"'
expect_fail "inspect without a file is a usage error" "expects exactly one" "$KILN" inspect
"$KILN" inspect /nonexistent.gguf >/dev/null 2>&1; [ $? -eq 1 ] && ok "missing file exits 1" || bad "missing file exits 1"

# A truncated and a corrupt file give one-line errors with file, field, offset.
printf 'GGUF\003\000\000\000' > "$T/short.gguf"
expect_fail "truncated GGUF" "short.gguf: tensor_count at offset 8: file truncated" "$KILN" inspect "$T/short.gguf"
printf 'GGUF\000\000\000\003' > "$T/be.gguf"
expect_fail "big-endian GGUF" "big-endian" "$KILN" inspect "$T/be.gguf"
check "error is one line" test "$(wc -l < "$T/err")" -eq 1

if need_shared "inspect --json agrees with MANIFEST.tsv"; then
    # manifest_agrees MANIFEST: every GGUF MANIFEST lists (paths relative to
    # ../shared/golden), as kiln inspect --json sees it, has exactly the
    # manifest's rows: names, types, shapes, offsets and bytes, in order.
    # Fails when a file has no rows, when no file is checked, or when not
    # every row was compared.
    manifest_agrees() {
        _files=0 _rows=0 _fails=0
        for _f in $(tail -n +2 "$1" | cut -f1 | sort -u); do
            _files=$((_files + 1))
            awk -v f="$_f" 'index($0, f "\t") == 1' "$1" > "$T/want"
            _nrow=$(wc -l < "$T/want")
            if [ "$_nrow" -eq 0 ]; then echo "# $_f: no manifest rows"; _fails=$((_fails + 1)); continue; fi
            _rows=$((_rows + _nrow))
            "$KILN" inspect --json "$shared/golden/$_f" > "$T/i.json" &&
                jq -r --arg f "$_f" '.tensors[] | [$f, .name, .type, (.shape | map(tostring) | join(",")),
                    (.offset | tostring), (.bytes | tostring)] | join("\t")' "$T/i.json" > "$T/got" &&
                cmp -s "$T/got" "$T/want" || { echo "# $_f differs from the manifest"; _fails=$((_fails + 1)); }
        done
        echo "# $_files files, $_rows rows checked"
        [ "$_fails" -eq 0 ] && [ "$_files" -gt 0 ] && [ "$_rows" -eq "$(tail -n +2 "$1" | wc -l)" ]
    }
    check "inspect --json agrees with MANIFEST.tsv" manifest_agrees "$shared/golden/MANIFEST.tsv"
    # The check itself must fail on a manifest that checks nothing: one with
    # no rows, and one that names a file (a vocabulary with no tensors)
    # without any tensor row.
    head -n 1 "$shared/golden/MANIFEST.tsv" > "$T/none.tsv"
    if manifest_agrees "$T/none.tsv" > /dev/null; then bad "a manifest with no rows fails the check"
    else ok "a manifest with no rows fails the check"; fi
    { cat "$T/none.tsv"; echo "tokenizers/ggml-vocab-gpt-2.gguf"; } > "$T/norows.tsv"
    manifest_agrees "$T/norows.tsv" > "$T/out"
    if [ $? -ne 0 ] && grep -q "ggml-vocab-gpt-2.gguf: no manifest rows" "$T/out"; then ok "a file without manifest rows fails the check"
    else bad "a file without manifest rows fails the check" "$(cat "$T/out")"; fi
fi

if need_shared "inspect reads safetensors dirs"; then
    "$KILN" inspect --json "$shared/models/llama" > "$T/st.json"
    check "inspect reads safetensors dirs" jq_true "$T/st.json" \
        '.format == "safetensors" and .n_tensors == 39 and (.files | length) == 2'
fi

if need_shared "inspect --stats"; then
    "$KILN" inspect --stats --json --tensors 'output_norm' "$shared/golden/gguf/llama-f32.gguf" > "$T/s.json"
    "$KILN" inspect --dump output_norm.weight --count 0 --json "$shared/golden/gguf/llama-f32.gguf" > "$T/d.json"
    # stats must agree with the dumped values, computed independently here
    check "inspect --stats agrees with --dump" jq_true "$T/s.json" '
        .tensors[0].stats as $s | $d[0].values as $v | ($v | add / length) as $m |
        ($v | map((. - $m) * (. - $m)) | add / length | sqrt) as $sd |
        (($s.min - ($v | min)) | fabs) < 1e-9 and (($s.max - ($v | max)) | fabs) < 1e-9 and
        (($s.mean - $m) | fabs) < 1e-6 and (($s.std - $sd) | fabs) < 1e-6 and $s.nan == 0' --slurpfile d "$T/d.json"
fi

if need_shared "diff gates"; then
    g="$shared/golden/gguf"
    "$KILN" diff "$g/llama-f32.gguf" "$g/llama-f32.gguf" --tolerance 0 > /dev/null
    check "diff of a file with itself passes a zero tolerance" test $? -eq 0
    "$KILN" diff "$g/llama-f32.gguf" "$g/llama-Q2_K.gguf" --max-rel 0.01 > "$T/o" 2>&1
    check "a too-tight gate fails with exit 1" test $? -eq 1
    check "failing tensors are named" grep -q "^FAIL blk" "$T/o"
    "$KILN" diff --json "$g/llama-f32.gguf" "$g/llama-Q4_K_M.gguf" > "$T/d.json"
    check "diff --json lists changed types and metadata" jq_true "$T/d.json" '
        any(.metadata.changed[]; .key == "general.file_type") and any(.tensors.changed[]; .type_b == "Q4_K") and .passed == true'
    "$KILN" diff "$g/llama-f32.gguf" "$g/qwen2-f32.gguf" --tolerance 1 > /dev/null 2>&1
    check "different tensor sets fail a gate" test $? -eq 1
fi
finish
