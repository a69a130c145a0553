#!/usr/bin/env bash
# prediction_bench.sh [MODEL] [-- server flags] — OpenAI predicted outputs:
# for the first 10 edit prompts (../shared/models/tinycoder/prompts/edit.jsonl)
# the same chat request is sent without and with `prediction` = the prompt's
# reference answer (temperature 0, streaming, 256 tokens), 3 runs each after a
# warmup; reports decode tok/s of each (from the stream's timestamps: (tokens
# - 1) / (last - first)), their ratio, whether the texts are identical, and
# the accepted prediction tokens from usage. Writes
# bench/results/<date>-<host>-prediction.json and prints a markdown row.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/tinycoder}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
KESTREL=${KESTREL:-build/kestrel}
[ -x "$KESTREL" ] || make -s -j2 build/kestrel
PROMPTS=${PROMPTS:-$MODEL/prompts/edit.jsonl}
[ -f "$PROMPTS" ] || PROMPTS=../shared/models/tinycoder/prompts/edit.jsonl
log=$(mktemp)
srv=
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -f "$log"' EXIT
. scripts/lib/serve.sh
start_server prediction_bench "$log" "$@"
python3 - "$port" "$PROMPTS" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(hostname)" "$*" <<'PY'
import json, sys, time, statistics, urllib.request, datetime
port, prompts, commit, host, flags = sys.argv[1:6]
url = f"http://127.0.0.1:{port}/v1/chat/completions"
def run(messages, prediction):
    body = {"model": "x", "messages": messages, "max_tokens": 256, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    body["model"] = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
    if prediction is not None: body["prediction"] = {"type": "content", "content": prediction}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t_first = t_last = None; text = ""; usage = None
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]": continue
            c = json.loads(line[6:])
            if c.get("usage"): usage = c["usage"]
            for ch in c.get("choices", []):
                d = ch.get("delta", {}).get("content")
                if d:
                    now = time.monotonic()
                    t_first = t_first or now; t_last = now; text += d
    n = usage["completion_tokens"]
    rate = (n - 1) / (t_last - t_first) if n > 1 and t_last > t_first else float("nan")
    return text, rate, usage
rows = []
for line in open(prompts).read().splitlines()[:10]:
    j = json.loads(line)
    run(j["messages"], None)  # warmup
    plain = [run(j["messages"], None) for _ in range(3)]
    pred = [run(j["messages"], j["reference"]) for _ in range(3)]
    r_plain = statistics.median(p[1] for p in plain); r_pred = statistics.median(p[1] for p in pred)
    acc = pred[0][2]["completion_tokens_details"]["accepted_prediction_tokens"]
    rows.append({"tokens": pred[0][2]["completion_tokens"], "decode_tok_s_plain": r_plain, "decode_tok_s_prediction": r_pred,
                 "ratio": r_pred / r_plain, "identical": plain[0][0] == pred[0][0], "accepted_prediction_tokens": acc})
ratios = [r["ratio"] for r in rows]
res = {"date": datetime.date.today().isoformat(), "commit": commit, "host": host, "server_flags": flags,
       "prompts": len(rows), "median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
       "all_identical": all(r["identical"] for r in rows), "rows": rows}
out = f"bench/results/{res['date']}-{host}-prediction.json"
json.dump(res, open(out, "w"), indent=2)
print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=2))
print(f"| {res['date']} | {commit} | {host} | tinycoder | prediction_bench.sh {flags} (10 edit prompts, prediction = reference) "
      f"| decode with prediction / without: median {res['median_ratio']:.2f}x (min {res['min_ratio']:.2f}, max {res['max_ratio']:.2f}); "
      f"outputs identical: {res['all_identical']} |")
PY
