#!/usr/bin/env bash
# bench/gpu_memory.sh MODEL [KV_MEM] — issue 4's memory goal on a GPU: what
# the server holds beyond its weights and its KV pool. Boots `kestrel serve
# MODEL --device cuda --kv-mem KV_MEM` (default 4G, a fixed pool), reads the
# GPU memory in use (nvidia-smi, less what was in use before) after load, after a ~4k-token prompt and
# after 16 concurrent requests, and prints each against weights (the
# safetensors files' bytes) + the pool, and the server's own ledger of its
# allocations (/metrics) beside it. Then asks for a pool that cannot
# fit (--kv-mem 4000G), which must fail with one clear line.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: bench/gpu_memory.sh MODEL [KV_MEM]}
KV=${2:-4G}
KESTREL=${KESTREL:-build/kestrel}
tmp=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
. scripts/lib/serve.sh
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
base=$(gpu_used) # MiB in use before the server (process lists are often empty inside containers)
start_server gpu_memory "$tmp/serve.log" --device cuda --kv-mem "$KV" --no-pld
weights=$(cat "$MODEL"/*.safetensors | wc -c)
kv=$(numfmt --from=iec "$KV")
used() { echo $(( ($(gpu_used) - base) * 1048576 )); }
# the server's own ledger (/metrics kestrel_device_memory_bytes): "weights buffers workspace" in bytes
ledger() {
    python3 - "$port" <<'PY'
import sys, urllib.request
kinds = {}
for line in urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read().decode().splitlines():
    if line.startswith("kestrel_device_memory_bytes{kind="):
        kinds[line.split('"')[1]] = int(line.split()[-1])
print(kinds.get("weights", 0), kinds.get("buffers", 0), kinds.get("workspace", 0))
PY
}
report() {
    local u; u=$(used)
    awk -v l="$1" -v u="$u" -v w="$weights" -v k="$kv" 'BEGIN {
        printf "gpu_memory: %-26s %6.2f GiB used = weights %.2f + KV pool %.2f + %.2f GiB else\n", l, u / 2^30, w / 2^30, k / 2^30, (u - w - k) / 2^30 }'
    read -r lw lb lws <<< "$(ledger)"
    awk -v u="$u" -v k="$kv" -v lw="$lw" -v lb="$lb" -v lws="$lws" 'BEGIN {
        printf "gpu_memory:   the server'"'"'s ledger: weights %.2f, buffers %.2f (KV pool %.2f, activations and logits %.2f), workspace %.2f GiB; not in it (context, kernel images): %.2f GiB\n",
            lw / 2^30, lb / 2^30, k / 2^30, (lb - k) / 2^30, lws / 2^30, (u - lw - lb - lws) / 2^30 }'
}
report "after load"
post() { # N PROMPT_FILE MAX_TOKENS: N concurrent completions of the file's text (python3: no curl needed)
    python3 - "$port" "$@" <<'PY'
import json, sys, threading, urllib.request
port, n, path, mt = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
text = open(path).read()
def one(i):
    body = json.dumps({"prompt": text + f"\n# {i}\n", "max_tokens": mt, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=300).read()
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
PY
}
head -c 11000 src/model/llama.c > "$tmp/long.txt"
post 1 "$tmp/long.txt" 32
report "after a 3.7k-token prompt"
head -c 300 src/model/llama.c > "$tmp/short.txt"
post 16 "$tmp/short.txt" 64
report "after 16 concurrent streams"
kill $srv; wait $srv 2>/dev/null || true
srv=""
echo "gpu_memory: --kv-mem 4000G: $(timeout 60 "$KESTREL" serve "$MODEL" --device cuda --kv-mem 4000G --port 0 2>&1 | tail -1)"
