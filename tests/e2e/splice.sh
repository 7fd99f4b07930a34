# tests/e2e/splice.sh - kiln splice from the command line: exit codes,
# the plan, byte equality with base and donor (read independently through
# `kiln inspect --json` offsets), expert surgery, split output, refusals.
. tests/e2e/lib.sh

check "splice --help exits 0" sh -c '"$KILN" splice --help | grep -q "usage: kiln splice"'
"$KILN" splice > /dev/null 2>&1; [ $? -eq 2 ] && ok "no arguments is a usage error (2)" || bad "no arguments is a usage error (2)"
expect_fail "one model without --keep-experts" "expects BASE and DONOR" "$KILN" splice a.gguf
expect_fail "no -o without --dry-run" "needs -o OUT" "$KILN" splice a.gguf b.gguf --experts
expect_fail "bad --split-max-size" "split-max-size" "$KILN" splice a.gguf b.gguf -o x --experts --split-max-size 12X

need_shared "splice with ../shared" || finish
g="$shared/golden/gguf"
base="$g/mixtral-IQ2_XXS.gguf" donor="$g/mixtral-Q4_K_M.gguf"
last=$(( $("$KILN" inspect --json "$base" | python3 -c "
import json,sys; print([m['value'] for m in json.load(sys.stdin)['metadata'] if m['key']=='llama.block_count'][0])") - 1 ))

# sametensors OUT BASE DONOR PYEXPR: every tensor of OUT equals DONOR's bytes
# when PYEXPR (over `name`) holds, else BASE's; names, order, types checked.
sametensors() {
    "$KILN" inspect --json "$1" > "$T/o.json" && "$KILN" inspect --json "$2" > "$T/b.json" &&
    "$KILN" inspect --json "$3" > "$T/d.json" || return 1
    python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys, os
out, base, donor, expr = sys.argv[1:5]
def load(p, j): return json.load(open(j)), open(p, "rb").read()
(o, ob), (b, bb), (d, db) = load(out, os.environ["T"] + "/o.json"), load(base, os.environ["T"] + "/b.json"), load(donor, os.environ["T"] + "/d.json")
dt = {t["name"]: t for t in d["tensors"]}
if [t["name"] for t in o["tensors"]] != [t["name"] for t in b["tensors"]]: sys.exit("tensor order differs")
for ot, bt in zip(o["tensors"], b["tensors"]):
    name = ot["name"]
    src, sb = (dt[name], db) if eval(expr) else (bt, bb)
    got = ob[ot["offset"]:ot["offset"] + ot["bytes"]]
    if ot["type"] != src["type"] or got != sb[src["offset"]:src["offset"] + src["bytes"]]: sys.exit(name + " differs")
PY
}
export T

# The per-layer boosted quant: experts of the first and last layer in Q4_K.
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts --dry-run > "$T/plan.txt"
check "dry run exits 0 and writes nothing" test ! -e "$T/out.gguf"
check "dry run lists the six expert tensors" test "$(grep -c '_exps.weight .*tensor ' "$T/plan.txt")" -eq 6
check "dry run prints the bits-per-weight change" grep -Eq '^bits per weight: [0-9.]+ -> [0-9.]+ \(\+[0-9.]+\)' "$T/plan.txt"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts -o "$T/out.gguf" -q 2> "$T/err"
check "splice exits 0" test $? -eq 0
check "spliced experts are the donor's bytes, the rest the base's" \
    sametensors "$T/out.gguf" "$base" "$donor" "'_exps.' in name and name.split('.')[1] in ('0', '$last')"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts --dry-run --json > "$T/plan.json"
check "--json plan agrees with the output size" python3 -c "
import json, os, sys
p = json.load(open('$T/plan.json'))
t = p['totals']
grow = os.path.getsize('$T/out.gguf') - os.path.getsize('$base')
# the header grows by the three provenance keys only (under 256 bytes)
sys.exit(0 if p['schema'] == 'kiln.splice/1' and t['tensors_changed'] == 6 and 0 <= grow - t['delta_bytes'] < 256 and t['delta_bpw'] > 0 else 1)"
"$KILN" inspect --json "$T/out.gguf" > "$T/i.json"
check "provenance keys recorded" python3 -c "
import json, sys
m = {x['key']: x['value'] for x in json.load(open('$T/i.json'))['metadata']}
ok = m['kiln.splice.donor'].startswith('mixtral-Q4_K_M.gguf xxh64:') and m['kiln.splice.tensors'] == 6 \
     and m['kiln.splice.selection'] == '--layers 0,$last --experts' and m['general.file_type'] == 19
sys.exit(0 if ok else 1)"

# Expert-level splice of one expert with requantization (needs the codec).
imx="$shared/golden/imatrix/mixtral.imatrix.gguf"
"$KILN" splice "$base" "$g/mixtral-f32.gguf" --expert-ids 2 --layers 1 --tensors ffn_up --requantize \
    --imatrix "$imx" -o "$T/rq.gguf" -q 2> "$T/err"
check "requantized expert splice exits 0" test $? -eq 0
"$KILN" inspect --json "$T/rq.gguf" > "$T/o.json"
"$KILN" inspect --json "$base" > "$T/b.json"
check "only expert 2 of blk.1.ffn_up_exps changed" python3 -c "
import json, sys
o, b = json.load(open('$T/o.json')), json.load(open('$T/b.json'))
ob, bb = open('$T/rq.gguf', 'rb').read(), open('$base', 'rb').read()
for ot, bt in zip(o['tensors'], b['tensors']):
    x, y = ob[ot['offset']:ot['offset'] + ot['bytes']], bb[bt['offset']:bt['offset'] + bt['bytes']]
    if ot['name'] != 'blk.1.ffn_up_exps.weight':
        if x != y: sys.exit(ot['name'])
        continue
    s = len(x) // 4
    if x[:2*s] != y[:2*s] or x[3*s:] != y[3*s:] or x[2*s:3*s] == y[2*s:3*s]: sys.exit('slabs')
"
expect_fail "expert splice across types is refused" "donor stores it as Q4_K, base as IQ2_XXS.*--requantize" \
    "$KILN" splice "$base" "$donor" --expert-ids 1 -o "$T/x.gguf"
check "refused splice left no file" test ! -e "$T/x.gguf" -a ! -e "$T/x.gguf.tmp"

# Expert surgery.
"$KILN" splice --keep-experts 0,2 "$donor" -o "$T/keep.gguf" -q 2> /dev/null
check "--keep-experts exits 0" test $? -eq 0
"$KILN" inspect --json "$T/keep.gguf" > "$T/k.json"
"$KILN" inspect --json "$donor" > "$T/b.json"
check "--keep-experts slices experts and router, sets expert_count" python3 -c "
import json, sys
k, b = json.load(open('$T/k.json')), json.load(open('$T/b.json'))
kb, bb = open('$T/keep.gguf', 'rb').read(), open('$donor', 'rb').read()
m = {x['key']: x['value'] for x in k['metadata']}
if m['llama.expert_count'] != 2 or m['llama.expert_used_count'] != 2: sys.exit('counts')
for kt, bt in zip(k['tensors'], b['tensors']):
    x, y = kb[kt['offset']:kt['offset'] + kt['bytes']], bb[bt['offset']:bt['offset'] + bt['bytes']]
    if '_exps.' in kt['name'] or 'ffn_gate_inp' in kt['name']:
        s = len(y) // 4
        if kt['shape'][-1] != 2 or x != y[:s] + y[2*s:3*s]: sys.exit(kt['name'])
    elif x != y: sys.exit(kt['name'])
"
"$KILN" splice --keep-experts 0,1 "$T/out.gguf" -o "$T/keep2.gguf" -q 2> /dev/null
"$KILN" inspect --json "$T/keep2.gguf" > "$T/k.json"
check "cutting a spliced model drops the earlier donor key" python3 -c "
import json, sys
m = {x['key']: x['value'] for x in json.load(open('$T/k.json'))['metadata']}
sys.exit(0 if 'kiln.splice.donor' not in m and m['kiln.splice.selection'] == '--keep-experts 0,1' else 1)"
"$KILN" splice --keep-experts 1 "$donor" -o "$T/keep1.gguf" -q 2> "$T/err"
check "keeping one expert warns that expert_used_count drops" grep -q "expert_used_count lowered from 2 to 1" "$T/err"

# Split output, and a split input read back.
"$KILN" splice "$base" "$donor" --layers 0 --experts --split-max-tensors 20 -o "$T/sp.gguf" -q 2> /dev/null
check "split output has three shards" test -f "$T/sp-00001-of-00003.gguf" -a -f "$T/sp-00003-of-00003.gguf" -a ! -e "$T/sp.gguf"
"$KILN" splice "$base" "$donor" --layers 0 --experts --split-max-size 1M -o "$T/sz.gguf" -q 2> /dev/null
check "--split-max-size splits by bytes" sh -c 'n=$(ls "$0"/sz-0000?-of-0000?.gguf | wc -l); [ "$n" -ge 2 ] && [ "$(du -cb "$0"/sz-*.gguf | tail -1 | cut -f1)" -gt 1000000 ]' "$T"
"$KILN" splice "$T/sp-00002-of-00003.gguf" "$donor" --layers "$last" --experts -o "$T/from-split.gguf" -q 2> /dev/null
check "a split base splices like a whole one" \
    sametensors "$T/from-split.gguf" "$base" "$donor" "'_exps.' in name and name.split('.')[1] in ('0', '$last')"

# Refusals: one line, exit 1, nothing written.
expect_fail "different architecture" "architecture 'qwen2' differs" "$KILN" splice "$base" "$g/qwen2-Q4_K_M.gguf" --experts -o "$T/r.gguf"
expect_fail "different expert count" "expert_count: donor has none" "$KILN" splice "$base" "$g/llama-Q4_K_M.gguf" --tensors . -o "$T/r.gguf"
expect_fail "a selection that matches nothing" "matches no tensor" "$KILN" splice "$base" "$donor" --tensors nothing -o "$T/r.gguf"
expect_fail "output equal to an input" "refusing to overwrite" "$KILN" splice "$base" "$donor" --experts -o "$donor"
expect_fail "an existing output needs --force" "use --force" "$KILN" splice "$base" "$donor" --experts -o "$T/out.gguf"
expect_fail "--keep-experts on a dense model" "not a mixture of experts" "$KILN" splice --keep-experts 0 "$g/llama-Q4_K_M.gguf" -o "$T/r.gguf"
check "error is one line" test "$(wc -l < "$T/err")" -eq 1
check "no refused output was written" test ! -e "$T/r.gguf" -a ! -e "$T/r.gguf.tmp"
finish
