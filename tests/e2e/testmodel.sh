# tests/e2e/testmodel.sh - `kiln testmodel` from the command line: every
# architecture writes a complete model directory that `kiln inspect` opens,
# same options give identical bytes, sharding writes an index, usage errors
# exit 2, and an existing model is only replaced with --force.
. "$(dirname "$0")/lib.sh"

# has_files DIR FILE...: every FILE exists in DIR
has_files() { d=$1; shift; for f in "$@"; do [ -f "$d/$f" ] || return 1; done; }

check "help exits 0" sh -c "$KILN testmodel --help | grep -q 'usage: kiln testmodel'"
expect_fail "missing --arch is a usage error" "--arch is required" $KILN testmodel -o "$T/x"
expect_fail "unknown arch is a usage error" "unknown architecture 'bert'" $KILN testmodel --arch bert -o "$T/x"
expect_fail "heads must divide hidden" "do not divide" $KILN testmodel --arch llama --heads 3 -o "$T/x"
expect_fail "experts only for MoE" "not a mixture-of-experts" $KILN testmodel --arch qwen2 --experts 4 -o "$T/x"
expect_fail "bad dtype" "bf16, f16 or f32" $KILN testmodel --arch llama --dtype q4 -o "$T/x"
for rc_case in "--arch bert -o $T/x:2" "--arch llama --heads 3 -o $T/x:2"; do
    args=${rc_case%:*} want=${rc_case##*:}
    $KILN testmodel $args > /dev/null 2>&1; rc=$?
    check "exit code $want for: $args" [ "$rc" -eq "$want" ]
done

for arch in llama mistral qwen2 qwen3 mixtral qwen2moe qwen3moe gpt2; do
    d="$T/$arch"
    if $KILN testmodel --arch "$arch" -o "$d" -q > "$T/out" 2> "$T/err"; then
        case $arch in
        llama | mistral | mixtral) tok=tokenizer.model ;;
        *) tok=tokenizer.json ;;
        esac
        check "$arch: complete directory" has_files "$d" config.json generation_config.json model.safetensors \
            tokenizer_config.json special_tokens_map.json $tok
        check "$arch: --quiet prints nothing" [ ! -s "$T/out" ]
        check "$arch: kiln inspect opens it" sh -c "$KILN inspect '$d' > /dev/null"
    else
        bad "$arch: testmodel failed" "$(head -c 300 "$T/err")"
    fi
done

$KILN testmodel --arch mixtral --seed 7 -o "$T/a" -q && OMP_NUM_THREADS=1 $KILN testmodel --arch mixtral --seed 7 -o "$T/b" -q
check "same options, identical files (2 threads or 1)" diff -r "$T/a" "$T/b"
$KILN testmodel --arch mixtral --seed 8 -o "$T/c" -q
check "another seed, other weights" sh -c "! cmp -s '$T/a/model.safetensors' '$T/c/model.safetensors'"
check "another seed, same tokenizer" cmp -s "$T/a/tokenizer.model" "$T/c/tokenizer.model"

expect_fail "an existing model is not overwritten" "use --force" $KILN testmodel --arch llama -o "$T/a"
check "--force overwrites it" $KILN testmodel --arch llama -o "$T/a" --force -q
check "... leaving no stale shard or tmp file" sh -c "! ls '$T/a' | grep -Eq -- '-of-|\.tmp$'"

$KILN testmodel --arch qwen3 --layers 4 --shard-size 1M -o "$T/sh" > "$T/out"
check "sharded: index and shards" sh -c "[ -f '$T/sh/model.safetensors.index.json' ] && ls '$T/sh' | grep -q 'model-00001-of-0000[2-9].safetensors'"
check "sharded: no single file" [ ! -e "$T/sh/model.safetensors" ]
check "sharded: summary line" grep -Eq "wrote .*Qwen3ForCausalLM, 4 layers, [0-9]+ parameters, BF16, [0-9]+ bytes in [2-9] safetensors files" "$T/out"
check "sharded: kiln inspect opens the index" sh -c "$KILN inspect '$T/sh' > /dev/null"

$KILN testmodel --arch gpt2 --dry-run > "$T/out"
check "--dry-run lists tensors" grep -q "transformer.h.1.attn.c_attn.weight *\[256, 768\]" "$T/out"
$KILN testmodel --arch gpt2 -o "$T/gpt2-dry" --dry-run > /dev/null
check "--dry-run writes nothing" [ ! -e "$T/gpt2-dry" ]
$KILN testmodel --arch llama --size 1b --dry-run > "$T/out"
check "--size 1b is the llama-bench shape" grep -q "1104218112 parameters" "$T/out"

finish
