#!/bin/sh
# scripts/demo.sh BUILD - `make demo`: kiln writes a small deterministic
# model in Hugging Face layout, then runs every kiln tool on it in pipeline
# order: testmodel -> inspect -> convert -> tokenize -> quantize -> diff ->
# perplexity -> generate -> imatrix + IQ2_XXS -> splice (on an MoE model).
# Everything lands in BUILD/demo/. The models are untrained: their text is
# noise, but every number shown is real.
set -eu
BUILD=${1:-build}
KILN="$BUILD/kiln"
D="$BUILD/demo"
rm -rf "$D"
mkdir -p "$D"
step() { printf '\n==> %s\n' "$*"; }
has() { "$KILN" --help | grep -q "^  $1 "; }

step "kiln testmodel: a small llama-style model in Hugging Face layout"
"$KILN" testmodel --arch llama --seed 1 -o "$D/demo-llama" --quiet
ls -l "$D/demo-llama"

step "kiln inspect on the safetensors"
"$KILN" inspect "$D/demo-llama" | head -12

step "kiln convert: HF -> GGUF (f16)"
"$KILN" convert "$D/demo-llama" --outtype f16 -o "$D/model-f16.gguf" --quiet
"$KILN" inspect "$D/model-f16.gguf" | sed -n '1,3p;/^tensors:/,/^$/p' | head -12

step "kiln tokenize with the converted vocabulary"
"$KILN" tokenize "$D/model-f16.gguf" -p "Hello kiln, hello llama." | head -12

step "kiln quantize: Q4_K_M"
"$KILN" quantize "$D/model-f16.gguf" "$D/model-Q4_K_M.gguf" Q4_K_M --quiet

step "kiln diff: f16 against Q4_K_M (per-tensor error)"
"$KILN" diff --values --quiet "$D/model-f16.gguf" "$D/model-Q4_K_M.gguf" | tail -8

# The text for perplexity: kiln's own README.
if has perplexity; then
    step "kiln perplexity: f16, then Q4_K_M against the f16 logits (KL divergence)"
    "$KILN" perplexity "$D/model-f16.gguf" -f README.md -c 128 --chunks 8 --save-logits "$D/f16.logits" --quiet | tail -2
    "$KILN" perplexity "$D/model-Q4_K_M.gguf" -f README.md -c 128 --chunks 8 --kl-divergence "$D/f16.logits" --quiet | tail -8
fi
if has generate; then
    step "kiln generate: 16 greedy tokens (an untrained model writes noise)"
    "$KILN" generate "$D/model-Q4_K_M.gguf" -p "Once upon a time" -n 16
fi
if has imatrix; then
    ./scripts/demo_imatrix.sh "$BUILD" "$D"
fi
if has splice; then
    step "an MoE model for splicing: mixtral-style, 4 experts"
    "$KILN" testmodel --arch mixtral --seed 2 -o "$D/demo-mixtral" --quiet
    "$KILN" convert "$D/demo-mixtral" --outtype f16 -o "$D/moe-f16.gguf" --quiet
    "$KILN" quantize "$D/moe-f16.gguf" "$D/moe-base.gguf" Q2_K --quiet
    "$KILN" quantize "$D/moe-f16.gguf" "$D/moe-donor.gguf" Q6_K --quiet
    ./scripts/demo_splice.sh "$BUILD" "$D"
fi
step "demo done: files in $D"
