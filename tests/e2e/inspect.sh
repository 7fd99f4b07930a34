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
    # Every GGUF in the manifest: names, types, shapes, offsets and bytes.
    fails=0
    for f in $(cut -f1 "$shared/golden/MANIFEST.tsv" | tail -n +2 | sort -u); do
        "$KILN" inspect --json "$shared/golden/$f" > "$T/i.json" || { fails=$((fails+1)); continue; }
        python3 - "$T/i.json" "$shared/golden/MANIFEST.tsv" "$f" <<'PY' || fails=$((fails+1))
import json, sys
rep = json.load(open(sys.argv[1]))
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2]) if l.startswith(sys.argv[3] + "\t")]
got = [[sys.argv[3], t["name"], t["type"], ",".join(map(str, t["shape"])), str(t["offset"]), str(t["bytes"])] for t in rep["tensors"]]
sys.exit(0 if got == want else 1)
PY
    done
    [ $fails -eq 0 ] && ok "inspect --json agrees with MANIFEST.tsv" || bad "inspect --json agrees with MANIFEST.tsv" "$fails files differ"
fi

if need_shared "inspect reads safetensors dirs"; then
    "$KILN" inspect --json "$shared/models/llama" > "$T/st.json"
    check "inspect reads safetensors dirs" python3 -c "
import json,sys; r=json.load(open('$T/st.json')); sys.exit(0 if r['format']=='safetensors' and r['n_tensors']==39 and len(r['files'])==2 else 1)"
fi

if need_shared "inspect --stats"; then
    "$KILN" inspect --stats --json --tensors 'output_norm' "$shared/golden/gguf/llama-f32.gguf" > "$T/s.json"
    "$KILN" inspect --dump output_norm.weight --count 0 --json "$shared/golden/gguf/llama-f32.gguf" > "$T/d.json"
    # stats must agree with the dumped values, computed independently here
    check "inspect --stats agrees with --dump" python3 -c "
import json,math,sys
s=json.load(open('$T/s.json'))['tensors'][0]['stats']; v=json.load(open('$T/d.json'))['values']
m=sum(v)/len(v); sd=math.sqrt(sum((x-m)**2 for x in v)/len(v))
ok=abs(s['min']-min(v))<1e-9 and abs(s['max']-max(v))<1e-9 and abs(s['mean']-m)<1e-6 and abs(s['std']-sd)<1e-6 and s['nan']==0
sys.exit(0 if ok else 1)"
fi

if need_shared "diff gates"; then
    g="$shared/golden/gguf"
    "$KILN" diff "$g/llama-f32.gguf" "$g/llama-f32.gguf" --tolerance 0 > /dev/null
    check "diff of a file with itself passes a zero tolerance" test $? -eq 0
    "$KILN" diff "$g/llama-f32.gguf" "$g/llama-Q2_K.gguf" --max-rel 0.01 > "$T/o" 2>&1
    check "a too-tight gate fails with exit 1" test $? -eq 1
    check "failing tensors are named" grep -q "^FAIL blk" "$T/o"
    "$KILN" diff --json "$g/llama-f32.gguf" "$g/llama-Q4_K_M.gguf" > "$T/d.json"
    check "diff --json lists changed types and metadata" python3 -c "
import json,sys; r=json.load(open('$T/d.json'))
keys=[c['key'] for c in r['metadata']['changed']]
sys.exit(0 if 'general.file_type' in keys and any(c['type_b']=='Q4_K' for c in r['tensors']['changed']) and r['passed'] else 1)"
    "$KILN" diff "$g/llama-f32.gguf" "$g/qwen2-f32.gguf" --tolerance 1 > /dev/null 2>&1
    check "different tensor sets fail a gate" test $? -eq 1
fi
finish
