#!/bin/sh
# bench/bench_tokenize.sh - `make bench`: kiln tokenize --batch lines/s on
# the real Llama-3 vocabulary (128k tokens, tests/fixtures/tokenizers), the
# whole process included, beside llama.cpp's llama-tokenize on the same
# lines in the same run, in turns, when LLAMA_CPP points at a llama.cpp
# folder (with build/bin/llama-tokenize; run through bench/timed.sh's
# llama_run). llama-tokenize has no batch mode: it loads the vocabulary
# once per text, as a user tokenizing a list with it would.
#
# Lines: every line of ../shared/golden/text/ppl.txt (or of
# KILN_BENCH_TOKENIZE_TEXT), as plain-text lines. Best of REPS runs.
#   LLAMA_CPP=DIR  llama.cpp folder: side-by-side ratio
#   KILN_BENCH_TOKENIZE_REPS (default 2; quick mode 1),
#   KILN_BENCH_TOKENIZE_LINES (default 100; quick mode 20)
. "$(dirname "$0")/timed.sh"
if bench_quick; then
    REPS=${KILN_BENCH_TOKENIZE_REPS:-1} NLINES=${KILN_BENCH_TOKENIZE_LINES:-20}
else
    REPS=${KILN_BENCH_TOKENIZE_REPS:-2} NLINES=${KILN_BENCH_TOKENIZE_LINES:-100}
fi
TEXT=${KILN_BENCH_TOKENIZE_TEXT:-$SHARED/golden/text/ppl.txt}
[ -f "$TEXT" ] || { echo "tokenize: skipped ($TEXT missing)"; exit 0; }
bench_tmpdir tokenize
D=$BENCH_TMP

# The llama3 tiny model of tests/fixtures/tokenizers (models.tsv), converted.
FX=tests/fixtures/tokenizers
row=$(grep '^llama3	' "$FX/models.tsv")
set -- $row
m="$D/$4"
"$KILN" testmodel --arch "$2" --hidden 64 --ffn 128 --layers 1 --vocab "$3" --tie-embeddings -o "$m" > /dev/null 2>&1 &&
    rm -f "$m/tokenizer.model" "$m/vocab.json" "$m/merges.txt" "$m/special_tokens_map.json" &&
    zstd -q -f -d "$FX/llama3/tokenizer.json.zst" -o "$m/tokenizer.json" &&
    zstd -q -f -d "$FX/llama3/tokenizer_config.json.zst" -o "$m/tokenizer_config.json" &&
    "$KILN" convert "$m" --outtype f16 -o "$D/llama3.gguf" -q || { echo "tokenize: skipped (model setup failed)"; exit 0; }

grep -v '^[[:space:]]*$' "$TEXT" | head -n "$NLINES" > "$D/lines.txt"
n=$(wc -l < "$D/lines.txt")
LT=
llama_has llama-tokenize && LT=1
[ -n "$LLAMA_CPP" ] && [ -z "$LT" ] && echo "  LLAMA_CPP=$LLAMA_CPP has no build/bin/llama-tokenize"
best_k=1e9 best_l=1e9 i=0
while [ $i -lt "$REPS" ]; do
    i=$((i + 1))
    r=$(timed sh -c '"$1" tokenize "$2" --batch "$3" > /dev/null' sh "$KILN" "$D/llama3.gguf" "$D/lines.txt") || exit 1
    best_k=$(least "$best_k" "${r% *}")
    [ -n "$LT" ] || continue
    # the loop runs in a child shell, which sources timed.sh for llama_run
    r=$(timed sh -c '. "$1"; while IFS= read -r l; do llama_run llama-tokenize -m "$2" -p "$l" --ids --log-disable > /dev/null 2>&1 || exit 1; done < "$3"' \
        sh "$(dirname "$0")/timed.sh" "$D/llama3.gguf" "$D/lines.txt") || { echo "  llama-tokenize failed"; LT=""; continue; }
    best_l=$(least "$best_l" "${r% *}")
done
awk -v n="$n" -v t="$best_k" 'BEGIN { printf "  kiln tokenize --batch, Llama-3 vocab: %d lines in %.3f s = %.0f lines/s\n", n, t, n / t }'
if [ -n "$LT" ]; then
    awk -v n="$n" -v t="$best_l" -v k="$best_k" 'BEGIN { printf "  llama-tokenize, one process per line: %.3f s = %.1f lines/s; ratio (llama.cpp s / kiln s) %.1f\n", t, n / t, t / k }'
else
    llama_note
fi
