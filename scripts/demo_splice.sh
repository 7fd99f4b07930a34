#!/bin/sh
# scripts/demo_splice.sh BUILD DEMO_DIR [BASE.gguf DONOR.gguf] - the splice
# part of `make demo`: a per-layer boosted quant (the routed experts of the
# first and last layer taken from a better-quantized DONOR), shown first as
# a --dry-run plan, then written and inspected; then expert surgery
# (--keep-experts) on the result.
#
# BASE and DONOR default to DEMO_DIR/moe-base.gguf and DEMO_DIR/moe-donor.gguf
# (a quantized MoE the main demo writes), else to llama.cpp's Mixtral
# fixture in ../shared (IQ2_XXS base, Q4_K_M donor). Outputs land in DEMO_DIR.
set -eu
BUILD=${1:?usage: demo_splice.sh BUILD DEMO_DIR [BASE DONOR]}
D=${2:?usage: demo_splice.sh BUILD DEMO_DIR [BASE DONOR]}
KILN="$BUILD/kiln"
shared=${KILN_SHARED:-../shared}
if [ $# -ge 4 ]; then
    base=$3 donor=$4
elif [ -f "$D/moe-base.gguf" ] && [ -f "$D/moe-donor.gguf" ]; then
    base="$D/moe-base.gguf" donor="$D/moe-donor.gguf"
elif [ -f "$shared/golden/gguf/mixtral-IQ2_XXS.gguf" ]; then
    base="$shared/golden/gguf/mixtral-IQ2_XXS.gguf" donor="$shared/golden/gguf/mixtral-Q4_K_M.gguf"
else
    echo "demo_splice: no MoE GGUF to splice (give BASE DONOR); skipped"
    exit 0
fi
mkdir -p "$D"
step() { printf '\n==> %s\n' "$*"; }
has() { "$KILN" --help | grep -q "^  $1 "; }

# The last block's index, read from the base's own metadata.
layers=$("$KILN" inspect "$base" | awk '$1 ~ /\.block_count$/ { print $3; exit }')
last=$((layers - 1))

step "kiln splice --dry-run: experts of layers 0 and $last from $(basename "$donor")"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts --dry-run

step "kiln splice: write the boosted model"
"$KILN" splice "$base" "$donor" --layers "0,$last" --experts -o "$D/moe-boosted.gguf" --force -q
ls -l "$base" "$D/moe-boosted.gguf"

if has inspect; then
    step "kiln inspect: provenance keys and expert tensors of the result"
    "$KILN" inspect "$D/moe-boosted.gguf" | grep -E 'kiln\.splice|_exps' || true
fi

step "kiln splice --keep-experts 0,1: a smaller MoE from the boosted model"
"$KILN" splice --keep-experts 0,1 "$D/moe-boosted.gguf" --dry-run | tail -4
"$KILN" splice --keep-experts 0,1 "$D/moe-boosted.gguf" -o "$D/moe-2experts.gguf" --force -q
if has inspect; then
    "$KILN" inspect "$D/moe-2experts.gguf" | grep -E 'expert_(used_)?count|blk\.0\.ffn_(gate_inp|up_exps)' || true
fi
