# tests/e2e/splice_logits.sh - splice checked through the runtime: a model
# spliced with every one of the donor's tensors must compute exactly the
# donor's logits (max abs difference 0), and a per-layer boosted quant must
# compute something between the two (it is a different model).
. tests/e2e/lib.sh

if need_shared "spliced model computes the donor's logits"; then
    g="$shared/golden/gguf"
    head -n 3 "$shared/golden/text/prompts.txt" > "$T/prompts.txt"
    "$KILN" splice "$g/mixtral-IQ2_XXS.gguf" "$g/mixtral-Q4_K_M.gguf" --tensors . -o "$T/all.gguf" --quiet > /dev/null
    check "splice of every donor tensor succeeds" test -f "$T/all.gguf"
    "$KILN" golden record "$g/mixtral-Q4_K_M.gguf" --prompts "$T/prompts.txt" -o "$T/donor.golden" > /dev/null
    "$KILN" golden check "$T/all.gguf" "$T/donor.golden" --max-abs 0 > "$T/out" 2>&1
    check "spliced model computes the donor's logits" test $? -eq 0
    # the boosted quant differs from the donor: the same gate must trip
    "$KILN" splice "$g/mixtral-IQ2_XXS.gguf" "$g/mixtral-Q4_K_M.gguf" --experts --layers 0,3 -o "$T/boost.gguf" --quiet > /dev/null
    "$KILN" golden check "$T/boost.gguf" "$T/donor.golden" --max-abs 0 > "$T/out" 2>&1
    check "a partly spliced model does not (gate trips, exit 1)" test $? -eq 1
fi
finish
