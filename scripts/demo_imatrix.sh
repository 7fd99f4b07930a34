#!/bin/sh
# scripts/demo_imatrix.sh BUILD DEMO_DIR - the imatrix part of `make demo`
# (called by scripts/demo.sh): collect an importance matrix on the demo
# model, show its statistics, then quantize the model to IQ2_XXS with it.
# Uses DEMO_DIR/model-f16.gguf, made here first if demo.sh has not made it.
set -eu
BUILD=${1:-build}
D=${2:-$BUILD/demo}
KILN="$BUILD/kiln"
MODEL="$D/model-f16.gguf"
step() { printf '\n==> %s\n' "$*"; }
mkdir -p "$D"

if [ ! -f "$MODEL" ]; then
    step "kiln testmodel + convert: the demo model"
    "$KILN" testmodel --arch llama --seed 1 -o "$D/hf" --quiet --force
    "$KILN" convert "$D/hf" --outtype f16 -o "$MODEL" --quiet --force
fi

# Calibration text: llama.cpp's calibration file when ../shared is there,
# else kiln's own documentation (any real text will do for a demo).
CALIB="$D/calib.txt"
SHARED=${KILN_SHARED:-../shared}
if [ -f "$SHARED/golden/text/calib.groups_merged.txt" ]; then
    cp "$SHARED/golden/text/calib.groups_merged.txt" "$CALIB"
else
    cat README.md README.md README.md README.md > "$CALIB"
fi
zstd -q -f "$CALIB" -o "$CALIB.zst" 2>/dev/null || true
[ -f "$CALIB.zst" ] && CALIB="$CALIB.zst"

step "kiln imatrix: importance statistics from $(basename "$CALIB") (chunks of 128 tokens, 16 chunks)"
"$KILN" imatrix "$MODEL" -f "$CALIB" -c 128 --chunks 16 -o "$D/imatrix.gguf" --force

step "kiln imatrix --show-statistics"
"$KILN" imatrix --show-statistics --in-file "$D/imatrix.gguf" | head -12

step "kiln quantize --imatrix: IQ2_XXS"
"$KILN" quantize --imatrix "$D/imatrix.gguf" "$MODEL" "$D/model-IQ2_XXS.gguf" IQ2_XXS --force
ls -l "$MODEL" "$D/model-IQ2_XXS.gguf"
