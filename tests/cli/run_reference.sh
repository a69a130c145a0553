#!/usr/bin/env bash
# run_reference.sh — `kestrel run MODEL -p PROMPT -n 48 --temp 0` prints exactly
# greedy_text of ../shared/models/tinycoder/reference/greedy.json (transformers,
# float32) for each of its 5 prompts, with the default bf16 KV cache and with
# `--kv-type f32 --device cpu` (f32 KV is the CPU backend's); `-p -` (stdin)
# gives the same text. On a GPU machine the other runs are the CUDA backend's.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
SHARED=${KESTREL_SHARED:-../shared}
REF="$SHARED/models/tinycoder/reference/greedy.json"
if [ ! -f "$REF" ]; then echo "    SKIP run_reference: $REF not found"; exit 0; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 - "$REF" "$work" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for i, c in enumerate(d["cases"]):
    open(f"{sys.argv[2]}/prompt{i}", "w").write(c["prompt"])
    open(f"{sys.argv[2]}/want{i}", "w").write(c["greedy_text"])
PY
fail=0; n=0
for p in "$work"/prompt*; do
    i=${p##*prompt}
    prompt=$(cat "$p"; printf x); prompt=${prompt%x}   # keep trailing newlines
    "$KESTREL" run "$SHARED/models/tinycoder" -p "$prompt" -n 48 --temp 0 > "$work/got$i" 2> "$work/err$i"
    if ! cmp -s "$work/got$i" "$work/want$i"; then
        echo "    FAIL prompt $i: output differs from transformers' greedy_text"; diff <(cat "$work/want$i") <(cat "$work/got$i") | head -5; fail=1
    else
        n=$((n+1))
    fi
    # (f32 KV is the CPU backend's alone: on a GPU machine the default device is cuda)
    "$KESTREL" run "$SHARED/models/tinycoder" -p "$prompt" -n 48 --temp 0 --kv-type f32 --device cpu > "$work/f32$i" 2> "$work/f32err$i"
    cmp -s "$work/f32$i" "$work/want$i" || { echo "    FAIL prompt $i: --kv-type f32 output differs"; tail -3 "$work/f32err$i"; fail=1; }
    "$KESTREL" run "$SHARED/models/tinycoder" -p - -n 48 --temp 0 < "$p" > "$work/stdin$i" 2>/dev/null
    cmp -s "$work/stdin$i" "$work/want$i" || { echo "    FAIL prompt $i: -p - (stdin) output differs"; fail=1; }
    grep -q "decode 48 tokens" "$work/err$i" || { echo "    FAIL prompt $i: stderr lacks the speed line"; cat "$work/err$i"; fail=1; }
done
echo "    run_reference: $n of 5 prompts reproduce greedy_text exactly (48 tokens each; bf16 and f32 KV)"
exit $fail
