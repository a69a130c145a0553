#!/usr/bin/env bash
# api_fuzz.sh — tests/fuzz/api_fuzz.py against `kestrel serve` on tinycoder:
# 1,200 seeded mutations of valid requests on every surface (wrong types,
# invalid UTF-8, hostile schemas, penalties, logprobs, truncated and
# oversized uploads, clients that hang up mid-stream), each answered in its
# surface's own format with no 5xx, well-formed streams, logprobs where
# asked, and /health afterwards; then 300 more from 4 clients at once. The
# seeds are fixed, so a failure here is reproducible with --only I.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
. scripts/lib/serve.sh
server_test_setup api_fuzz

start_server api_fuzz "$work/log" --ctx-size 1024
fail=0
export PYTHONDONTWRITEBYTECODE=1 # (no __pycache__ in the checkout)
python3 tests/fuzz/api_fuzz.py --url "http://127.0.0.1:$port" -n 1200 --seed 42 --server-log "$work/log" \
    > "$work/seq.txt" 2>&1 || fail=1
python3 tests/fuzz/api_fuzz.py --url "http://127.0.0.1:$port" -n 300 --seed 43 --threads 4 --server-log "$work/log" \
    > "$work/par.txt" 2>&1 || fail=1
for f in seq par; do
    tail -1 "$work/$f.txt" | sed 's/^/    /'
    [ $fail -ne 0 ] && grep -B2 -A12 "FAIL" "$work/$f.txt" | head -60 | sed 's/^/    /'
done
kill -0 "$srv" 2> /dev/null || { echo "    FAIL api_fuzz: the server is gone"; fail=1; }
[ $fail -eq 0 ] && echo "ok   api_fuzz" || echo "FAIL api_fuzz"
exit $fail
