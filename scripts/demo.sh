#!/bin/sh
# scripts/demo.sh BUILD - `make demo`: kiln writes a small deterministic
# model in Hugging Face layout, then every kiln tool that exists runs on it
# in pipeline order. Everything lands in BUILD/demo/.
set -eu
BUILD=${1:-build}
KILN="$BUILD/kiln"
D="$BUILD/demo"
rm -rf "$D"
mkdir -p "$D"
step() { printf '\n==> %s\n' "$*"; }
has() { "$KILN" --help | grep -q "^  $1 "; }

if has testmodel; then
    step "kiln testmodel: a small llama-style model in HF layout"
    "$KILN" testmodel --arch llama --seed 1 -o "$D/hf" --quiet
    ls -l "$D/hf"
    step "kiln inspect on the safetensors"
    "$KILN" inspect "$D/hf" | head -20
fi
if has convert; then
    step "kiln convert: HF -> GGUF (f16)"
    "$KILN" convert "$D/hf" --outtype f16 -o "$D/model-f16.gguf"
    step "kiln inspect on the GGUF"
    "$KILN" inspect "$D/model-f16.gguf" | head -40
fi
if has quantize && [ -f "$D/model-f16.gguf" ]; then
    step "kiln quantize: Q4_K_M"
    "$KILN" quantize "$D/model-f16.gguf" "$D/model-Q4_K_M.gguf" Q4_K_M
    step "kiln diff: f16 against Q4_K_M"
    "$KILN" diff --values "$D/model-f16.gguf" "$D/model-Q4_K_M.gguf" | tail -12
fi
step "demo done: files in $D"
