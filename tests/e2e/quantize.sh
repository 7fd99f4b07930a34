# tests/e2e/quantize.sh - kiln quantize from the command line: exit codes,
# the plan, the summary and its JSON, refusals, splits, and agreement of
# the output with llama-quantize's files in ../shared/golden (through
# kiln inspect and kiln diff).
. tests/e2e/lib.sh

check "quantize --help exits 0 and lists the presets" sh -c '"$KILN" quantize --help | grep -q "Q4_K_M Q4_K_S Q3_K_M Q2_K IQ2_XXS"'
expect_fail "quantize without arguments is a usage error" "expects IN OUT PRESET" "$KILN" quantize
"$KILN" quantize a b c >/dev/null 2>&1; [ $? -eq 2 ] && ok "an unknown preset exits 2" || bad "an unknown preset exits 2"
expect_fail "an unknown preset names the choices" "unknown preset or type 'c' \(presets: Q8_0" "$KILN" quantize a b c
expect_fail "a bad --tensor-type is a usage error" "is not REGEX=TYPE" "$KILN" quantize --tensor-type attn_q a b Q4_K_M
expect_fail "--tensor-type with a type kiln cannot write" "cannot quantize to type 'q4_1'" "$KILN" quantize --tensor-type attn_q=q4_1 a b Q4_K_M
expect_fail "--keep-split and --split-max-size exclude each other" "cannot be combined" "$KILN" quantize --keep-split --split-max-size 1M a b Q8_0
expect_fail "a missing input exits 1" "cannot open|No such file" "$KILN" quantize /nonexistent.gguf "$T/x.gguf" Q8_0

# A GGUF whose second weight has rows of 96 values, which fit no 256-block type.
python3 - "$T/odd.gguf" <<'PY'
import struct, sys, random
random.seed(1)
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [(b'general.architecture', 8, s('llama')), (b'llama.block_count', 4, struct.pack('<I', 1))]
ts = [('blk.0.attn_q.weight', 256, 64), ('blk.0.ffn_down.weight', 96, 64), ('blk.0.attn_norm.weight', 256, 1)]
h = b'GGUF' + struct.pack('<IQQ', 3, len(ts), len(kv))
for k, t, v in kv: h += struct.pack('<Q', len(k)) + k + struct.pack('<I', t) + v
off, data = 0, b''
for name, ne0, ne1 in ts:
    nd = 1 if ne1 == 1 else 2
    h += s(name) + struct.pack('<I', nd) + struct.pack('<%dQ' % nd, *([ne0, ne1][:nd])) + struct.pack('<IQ', 0, off)
    d = struct.pack('<%df' % (ne0 * ne1), *[random.gauss(0, 0.02) for _ in range(ne0 * ne1)])
    d += b'\0' * (-len(d) % 32)
    data += d; off += len(d)
h += b'\0' * (-len(h) % 32)
open(sys.argv[1], 'wb').write(h + data)
PY
"$KILN" quantize "$T/odd.gguf" "$T/odd-q4.gguf" Q4_K_M > "$T/out" 2> "$T/err"
check "a fallback succeeds" test $? -eq 0
check "the summary lists the fallback" grep -q "fallback blk.0.ffn_down.weight: Q6_K -> Q8_0 (row length 96 is not a multiple of 256)" "$T/out"
expect_fail "--no-fallback makes it an error" "blk.0.ffn_down.weight: row length 96 .*--no-fallback" "$KILN" quantize --no-fallback "$T/odd.gguf" "$T/odd-nf.gguf" Q4_K_M
check "--no-fallback wrote nothing" test ! -e "$T/odd-nf.gguf"
"$KILN" quantize --dry-run --json "$T/odd.gguf" Q2_K > "$T/fb.json"
check "--json lists fallbacks" python3 -c "
import json,sys; r=json.load(open('$T/fb.json'))
sys.exit(0 if r['fallbacks']==[{'tensor':'blk.0.ffn_down.weight','wanted':'Q3_K','used':'Q4_0','row_length':96}] else 1)"
expect_fail "an existing output needs --force" "output exists; use --force" "$KILN" quantize "$T/odd.gguf" "$T/odd-q4.gguf" Q4_K_M
check "--force overwrites" "$KILN" quantize -q --force "$T/odd.gguf" "$T/odd-q4.gguf" Q8_0
expect_fail "the input is never the output" "refusing to overwrite" "$KILN" quantize --force "$T/odd.gguf" "$T/odd.gguf" Q8_0

if need_shared "quantize agrees with llama-quantize"; then
    g="$shared/golden"
    "$KILN" quantize "$g/gguf/llama-f32.gguf" "$T/l.gguf" Q4_K_M > "$T/out" 2> "$T/err"
    check "quantize llama-f32 Q4_K_M exits 0" test $? -eq 0
    check "the summary gives sizes and bits per weight" grep -q "32.00 -> .* bits per weight" "$T/out"
    check "the output is byte-identical to llama-quantize's" cmp -s "$T/l.gguf" "$g/gguf/llama-Q4_K_M.gguf"
    # kiln inspect of the output: every tensor's type as in MANIFEST.tsv
    "$KILN" inspect --json "$T/l.gguf" > "$T/i.json"
    check "kiln inspect sees llama.cpp's types" python3 - "$T/i.json" "$g/MANIFEST.tsv" <<'PY'
import json, sys
got = [(t["name"], t["type"]) for t in json.load(open(sys.argv[1]))["tensors"]]
want = [tuple(l.split("\t")[1:3]) for l in open(sys.argv[2]) if l.startswith("gguf/llama-Q4_K_M.gguf\t")]
sys.exit(0 if got == want else 1)
PY
    # kiln diff against llama.cpp's IQ2_XXS file: same keys, same types
    "$KILN" quantize -q --imatrix "$g/imatrix/mixtral.imatrix.gguf" "$g/gguf/mixtral-f32.gguf" "$T/m.gguf" IQ2_XXS
    "$KILN" diff --json "$g/gguf/mixtral-IQ2_XXS.gguf" "$T/m.gguf" > "$T/d.json"
    check "kiln diff: IQ2_XXS types equal llama.cpp's" python3 -c "
import json,sys; r=json.load(open('$T/d.json'))
ch=[c['key'] for c in r['metadata']['changed']]
sys.exit(0 if r['tensors']['changed']==[] and r['tensors']['added']==[] and r['tensors']['removed']==[] and ch==['quantize.imatrix.file'] else 1)"
    # the legacy .dat imatrix works the same
    "$KILN" quantize -q -f --imatrix "$g/imatrix/qwen2.imatrix.dat" "$g/gguf/qwen2-f32.gguf" "$T/q.gguf" Q2_K
    check "a .dat imatrix is accepted" test $? -eq 0
    "$KILN" inspect --json "$T/q.gguf" > "$T/q.json"
    check "quantize.imatrix.* keys are written" python3 -c "
import json,sys; m={k['key']:k['value'] for k in json.load(open('$T/q.json'))['metadata']}
sys.exit(0 if m['quantize.imatrix.dataset']=='text/calib.groups_merged.txt' and m['quantize.imatrix.entries_count']==14 and m['quantize.imatrix.chunks_count']==64 and m['general.file_type']==10 else 1)"

    # dry run: a plan, totals, nothing written
    "$KILN" quantize --dry-run "$g/gguf/mixtral-f32.gguf" "$T/dry.gguf" Q4_K_M --tensor-type 'attn_q=q8_0' --tensor-type 'nothing=q4_0' > "$T/out"
    check "--dry-run writes nothing" test ! -e "$T/dry.gguf"
    check "--dry-run prints a plan row per tensor" test "$(grep -c '^blk\.' "$T/out")" -eq 40
    check "the plan shows from, to and bytes" grep -Eq "^blk.2.attn_v.weight +256 x 128 +F32 +Q6_K +131072 +26880 " "$T/out"
    check "applied overrides are listed" grep -q "override attn_q=Q8_0: 4 tensors" "$T/out"
    check "overrides that matched nothing are listed" grep -q "override nothing=Q4_0: matched nothing" "$T/out"
    "$KILN" quantize --dry-run --json "$g/gguf/llama-f32.gguf" Q3_K_M > "$T/p.json"
    check "--dry-run --json: schema, plan and totals" python3 - "$T/p.json" "$g/MANIFEST.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = {l.split("\t")[1]: (l.split("\t")[2], int(l.split("\t")[5])) for l in open(sys.argv[2]) if l.startswith("gguf/llama-Q3_K_M.gguf\t")}
ok = r["schema"] == "kiln.quantize/1" and r["dry_run"] and r["file_type"] == 12 and r["outputs"] == []
ok = ok and all(want[t["name"]] == (t["to"], t["bytes_out"]) for t in r["tensors"]) and len(r["tensors"]) == len(want)
ok = ok and r["totals"]["bytes_out"] == sum(b for _, b in want.values()) and abs(r["totals"]["bpw_in"] - 32) < 1e-9
sys.exit(0 if ok else 1)
PY

    # refusals
    expect_fail "IQ2_XXS without an imatrix is refused" "IQ2_XXS needs an importance matrix .*pass --imatrix" "$KILN" quantize "$g/gguf/llama-f32.gguf" "$T/n.gguf" IQ2_XXS
    expect_fail "a quantized input is refused" "output.weight: is already quantized \(Q8_0\).*--allow-requantize" "$KILN" quantize "$g/gguf/llama-q8_0.gguf" "$T/r.gguf" Q4_K_M
    check "--allow-requantize accepts it" "$KILN" quantize -q --allow-requantize "$g/gguf/llama-q8_0.gguf" "$T/r.gguf" Q4_K_M
    check "an f16 input needs no permission" "$KILN" quantize -q "$g/gguf/qwen2-f16.gguf" "$T/h.gguf" q4_k
    # a legacy imatrix whose attn_q entry has 128 columns, for a model with 256
    python3 -c "
import struct; n=b'blk.0.attn_q.weight'
open('$T/w.dat','wb').write(struct.pack('<ii',1,len(n))+n+struct.pack('<ii',1,128)+struct.pack('<128f',*[1.0]*128)+struct.pack('<i',1))"
    expect_fail "an imatrix of another model is refused" "blk.0.attn_q.weight: statistics for 128 columns .* this imatrix is for another model" "$KILN" quantize --imatrix "$T/w.dat" "$g/gguf/qwen2-f32.gguf" "$T/w.gguf" Q2_K
    expect_fail "an imatrix of a shallower model is refused" "qwen2.imatrix.gguf: has entries for 2 of the 4 layers of .*llama-f32.gguf and none for blk.2: it was made for another model" "$KILN" quantize --imatrix "$g/imatrix/qwen2.imatrix.gguf" "$g/gguf/llama-f32.gguf" "$T/w.gguf" Q4_K_M
    check "and leaves no output" test ! -e "$T/w.gguf"
    expect_fail "a corrupt imatrix is refused" "entry count at offset 0" "$KILN" quantize --imatrix "$g/text/prompts.txt" "$g/gguf/qwen2-f32.gguf" "$T/w.gguf" Q2_K

    # one step from a Hugging Face model in an archive: same tensors, types,
    # values and metadata as llama.cpp's convert + quantize
    tar -C "$shared/models" -cf - qwen2 | zstd -q > "$T/qwen2.tar.zst"
    "$KILN" quantize -q "$T/qwen2.tar.zst" "$T/hf.gguf" Q4_K_M
    check "quantize reads a Hugging Face archive" test $? -eq 0
    "$KILN" diff --tolerance 0 "$g/gguf/qwen2-Q4_K_M.gguf" "$T/hf.gguf" > "$T/out" 2>&1
    check "HF archive -> Q4_K_M equals llama.cpp's values" test $? -eq 0
    "$KILN" diff --json "$g/gguf/qwen2-Q4_K_M.gguf" "$T/hf.gguf" > "$T/d.json"
    check "HF archive -> Q4_K_M: same metadata and types" python3 -c "
import json,sys; r=json.load(open('$T/d.json')); m=r['metadata']; t=r['tensors']
sys.exit(0 if not (m['added'] or m['removed'] or m['changed'] or t['added'] or t['removed'] or t['changed']) else 1)"

    # --quiet, splits
    "$KILN" quantize -q "$g/gguf/llama-f32.gguf" "$T/qq.gguf" Q8_0 > "$T/out" 2>&1
    check "--quiet prints nothing" test ! -s "$T/out"
    "$KILN" quantize -q --split-max-size 1M "$g/gguf/llama-f32.gguf" "$T/s.gguf" Q8_0
    check "--split-max-size writes shards" test -f "$T/s-00003-of-00004.gguf"
    "$KILN" quantize -q --keep-split "$T/s-00002-of-00004.gguf" "$T/k.gguf" q4_k --allow-requantize
    check "--keep-split keeps the shards" test -f "$T/k-00004-of-00004.gguf"
    "$KILN" inspect --json "$T/k-00001-of-00004.gguf" > "$T/k.json"
    check "the shards read back as one model" python3 -c "
import json,sys; r=json.load(open('$T/k.json')); sys.exit(0 if r['n_tensors']==39 and len(r['files'])==4 else 1)"
fi
finish
