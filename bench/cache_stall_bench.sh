#!/usr/bin/env bash
# cache_stall_bench.sh MODEL [-- server flags] — two measurements of the
# scheduler (issue "continuous batching, chunked prefill and a prefix cache"):
#  1. time to first token of a PREFIX-token prompt on a warm server (after
#     one unrelated warm-up request), cold and then with the same prefix
#     cached (three different 16-token endings, median): their ratio;
#  2. the stall a long prompt (LONG tokens) causes to running streams: two
#     streams decode; their tokens/s and longest gap between tokens before,
#     and while the long prompt is prefilled in chunks (--prefill-chunk; a
#     quarter of it per step while other sequences are decoding).
# Prompts are token ids (POST /v1/completions accepts an array), so any model
# works. Env: PREFIX (default 8192), LONG (default 32768), KESTREL (binary).
# Prints JSON and markdown rows; writes bench/results/<date>-<host>-cache-stall.json.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: bench/cache_stall_bench.sh MODEL [-- server flags]}
shift
[ "${1:-}" = "--" ] && shift
. scripts/lib/serve.sh
bench_server cache_stall_bench "$@"
python3 - "$port" "${PREFIX:-8192}" "${LONG:-32768}" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(hostname)" "$*" <<'PY'
import json, sys, time, threading, random, statistics, urllib.request, datetime
port, prefix_n, long_n, commit, host, flags = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
base = f"http://127.0.0.1:{port}"
model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
rng = random.Random(7)
def ids(n): return [rng.randrange(100, 8000) for _ in range(n)]
def stream(prompt, max_tokens, times):
    """POST a streaming completion on a raw socket; times[] gets the arrival
    time of every event carrying text (the time of the read it came in)."""
    import socket
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
    sk = socket.create_connection(("127.0.0.1", int(port)))
    t0 = time.monotonic()
    sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    buf = b""
    while True:
        d = sk.recv(1 << 16)
        if not d: break
        now = time.monotonic()
        buf += d
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.startswith(b"data: {"):
                c = json.loads(line[6:])
                if c.get("choices") and c["choices"][0].get("text"): times.append(now)
            elif line.startswith(b"data: [DONE]"):
                sk.close()
                return t0
    sk.close()
    return t0
# 1. cached-prefix TTFT, on a warm server (a first request pays one-off
# costs: CUDA graph captures, library handles): a warm-up prompt, the cold
# prompt, then the same prefix with three different endings (median)
pre = ids(prefix_n)
res = {}
def ttft(prompt):
    t = []; t0 = stream(prompt, 4, t)
    return (t[0] - t0) * 1e3 if t else None
ttft(ids(prefix_n // 4))
res["ttft_cold_ms"] = ttft(pre + ids(16))
cached = [ttft(pre + ids(16)) for _ in range(3)]
res["ttft_cached_runs_ms"] = cached
ok = sorted(c for c in cached if c is not None)
res["ttft_cached_ms"] = ok[len(ok) // 2] if ok else None
res["ttft_ratio"] = res["ttft_cold_ms"] / res["ttft_cached_ms"] if res["ttft_cold_ms"] and res["ttft_cached_ms"] else None
# 2. stall of running streams while a long prompt is prefilled
times = [[], []]
th = [threading.Thread(target=stream, args=(ids(32), 100000, times[i])) for i in range(2)]
for x in th: x.daemon = True; x.start()
time.sleep(3.0)
t_long = []; t_sub = time.monotonic()
long_thread = threading.Thread(target=lambda: stream(ids(long_n), 2, t_long)); long_thread.start()
long_thread.join()
t_done = time.monotonic()
time.sleep(1.0)
def gaps(ts, a, b):
    sel = [t for t in ts if a <= t <= b]
    return [y - x for x, y in zip(sel, sel[1:])]
before = sum((gaps(ts, t_sub - 2.5, t_sub) for ts in times), [])
during = sum((gaps(ts, t_sub, t_done) for ts in times), [])
def rate(a, b): return sum(1 for ts in times for t in ts if a <= t <= b) / 2 / (b - a)
res.update({"prefix_tokens": prefix_n, "long_prompt_tokens": long_n,
            "long_prompt_ttft_s": (t_long[0] - t_sub) if t_long else None,
            "stream_tok_s_before": rate(t_sub - 2.5, t_sub), "stream_tok_s_during": rate(t_sub, t_done),
            "gap_before_max_ms": max(before) * 1e3,
            "gap_during_max_ms": max(during) * 1e3 if during else None})
res.update({"date": datetime.date.today().isoformat(), "commit": commit, "host": host, "server_flags": flags})
out = f"bench/results/{res['date']}-{host}-cache-stall.json"
json.dump(res, open(out, "w"), indent=2)
print(json.dumps(res, indent=2))
runs = ", ".join(f"{c:.1f}" if c is not None else "none" for c in cached)
if res["ttft_ratio"]:
    print(f"| {res['date']} | {commit} | {host} | {flags} | cache_stall_bench.sh: TTFT of a {prefix_n}-token prompt (warm server) | cold {res['ttft_cold_ms']:.0f} ms, prefix cached {res['ttft_cached_ms']:.1f} ms (median of {runs}): {res['ttft_ratio']:.1f}x |")
else:
    print(f"| {res['date']} | {commit} | {host} | {flags} | cache_stall_bench.sh: TTFT of a {prefix_n}-token prompt | no text arrived (cold {res['ttft_cold_ms']}, cached {runs}) |")
print(f"| {res['date']} | {commit} | {host} | {flags} | cache_stall_bench.sh: 2 streams while a {long_n}-token prompt arrives | each stream {res['stream_tok_s_before']:.0f} tok/s before (longest gap {res['gap_before_max_ms']:.0f} ms); during its {res['long_prompt_ttft_s']:.1f} s prefill {res['stream_tok_s_during']:.0f} tok/s, longest gap {res['gap_during_max_ms']:.0f} ms |")
import os; os._exit(0)
PY
