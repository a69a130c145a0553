#!/usr/bin/env bash
# ollama_options_bench.sh MODEL [-- server flags] — decode speed of Ollama's
# /api/generate under the sampling options its clients send: greedy and
# temperature 0.8, each without a penalty, with repeat_penalty 1.1 over the
# last 64 tokens (Ollama's repeat_last_n default) and over the whole
# context (repeat_last_n -1). Each request decodes NUM tokens (default 256;
# ignore_eos is not an Ollama option, so a short answer shows in its
# count) after a fixed prose prompt; the speed is the answer's eval_count /
# eval_duration, ROUNDS rounds (default 2) of the options interleaved.
# Env: KESTREL (binary), NUM, ROUNDS. Prints one line a request.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: bench/ollama_options_bench.sh MODEL [-- server flags]}
shift
[ "${1:-}" = "--" ] && shift
. scripts/lib/serve.sh
bench_server ollama_options_bench "$@"
python3 - "$port" "${NUM:-256}" "${ROUNDS:-2}" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, sys, urllib.request
port, num, rounds, commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
base = f"http://127.0.0.1:{port}"
model = json.load(urllib.request.urlopen(base + "/api/tags"))["models"][0]["name"]
prompt = open("bench/prose.txt").read()[:1500]
cases = [("greedy", {"temperature": 0}),
         ("greedy repeat 1.1 last 64", {"temperature": 0, "repeat_penalty": 1.1, "repeat_last_n": 64}),
         ("greedy repeat 1.1 whole", {"temperature": 0, "repeat_penalty": 1.1, "repeat_last_n": -1}),
         ("t0.8", {"temperature": 0.8, "seed": 7}),
         ("t0.8 repeat 1.1 last 64", {"temperature": 0.8, "seed": 7, "repeat_penalty": 1.1, "repeat_last_n": 64}),
         ("t0.8 repeat 1.1 whole", {"temperature": 0.8, "seed": 7, "repeat_penalty": 1.1, "repeat_last_n": -1})]
print(f"# ollama_options_bench at {commit}: /api/generate, {num} tokens, {rounds} rounds")
for r in range(rounds):
    for name, opts in cases:
        opts = dict(opts, num_predict=num)
        body = json.dumps({"model": model, "prompt": prompt, "raw": True, "stream": False, "options": opts}).encode()
        req = urllib.request.Request(base + "/api/generate", body, {"Content-Type": "application/json"})
        a = json.load(urllib.request.urlopen(req, timeout=600))
        print(f"{r} {name}: {a['eval_count']} tokens, {a['eval_count'] / (a['eval_duration'] / 1e9):.1f} tok/s", flush=True)
PY
