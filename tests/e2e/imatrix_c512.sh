# tests/e2e/imatrix_c512.sh - kiln imatrix at -c 512 gives llama-imatrix's
# numbers: the running perplexity to its last digit and every tensor's
# statistics within 1e-4 (relative), on a dense model and an MoE. At this
# chunk size llama-imatrix's parallel sequences give each sequence 128
# queries per ubatch and ggml's tiled flash-attention kernel runs; the
# ../shared goldens (-c 128) only exercise its one_chunk kernel
# (tests/fixtures/imatrix_c512/REGEN.md).
. tests/e2e/lib.sh
F=tests/fixtures/imatrix_c512

if need_shared "imatrix at -c 512 agrees with llama-imatrix"; then
    for m in llama mixtral; do
        "$KILN" imatrix "$shared/golden/gguf/$m-f32.gguf" -f "$shared/golden/text/calib.groups_merged.txt" \
            -c 512 --chunks 4 -t 2 -o "$T/$m.gguf" > "$T/out" 2>&1
        got=$(grep -o '\[[0-9]\][0-9.]*' "$T/out" | tr '\n' ',')
        want=$(grep "^$m	" "$F/PPL.tsv" | cut -f2)
        check "$m: running perplexity is llama-imatrix's ($want)" test -n "$want" -a "$got" = "$want"
        "$KILN" diff "$T/$m.gguf" "$F/$m-c512.imatrix.gguf" --values --json > "$T/diff.json"
        check "$m: every in_sum2 within 1e-4 and every count equal" jq_true "$T/diff.json" \
            '(.values | length) > 0 and ([.values[] | select(.name | endswith("in_sum2")) | .rel] | max) < 1e-4
             and ([.values[] | select(.name | endswith("counts")) | .max_abs] | max) == 0
             and (.tensors.added | length) == 0 and (.tensors.removed | length) == 0'
    done
fi
finish
