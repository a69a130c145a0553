#!/usr/bin/env bash
# cpu_bench.sh [MODEL_DIR] [--record] — CPU benchmark of `kestrel run`:
# prefill and decode tok/s on the first 3 prompts of the tinycoder completion
# workload (median of 3 runs each, temperature 0, 128 tokens, eos ignored),
# peak RSS with its anonymous / file-mapped split (weights are mmapped), and
# this machine's measured memory read bandwidth (bench/membw.c), so decode
# speed can be stated as a fraction of the bandwidth bound:
#   bound tok/s = read GB/s / (weight bytes read per token).
# Writes bench/results/<date>-<host>-<model>-cpu.json; prints a markdown row;
# --record adds it to BENCHMARKS.md's CPU table (bench/record_rows.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/tinycoder}
RECORD=0
for a in "$@"; do [ "$a" = "--record" ] && RECORD=1; done
[ "${MODEL}" = "--record" ] && MODEL=../shared/models/tinycoder
[ -d "$MODEL" ] || { echo "cpu_bench: model directory $MODEL not found" >&2; exit 1; }
PROMPTS=${PROMPTS:-../shared/models/tinycoder/prompts/completion.jsonl}
N=${N:-128}
THREADS=${THREADS:-$(nproc)}
make -s -j2 build/kestrel
mkdir -p build bench/results
cc -O3 -mavx2 -pthread -Isrc bench/membw.c -o build/membw
MEMBW=$(build/membw "$THREADS")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$PROMPTS" "$tmp" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()[:3]
for i, l in enumerate(lines):
    open(f"{sys.argv[2]}/p{i}.txt", "w").write(json.loads(l)["prompt"])
PY
for i in 0 1 2; do
  for r in 1 2 3; do
    build/kestrel run "$MODEL" -p - -n "$N" --temp 0 --ignore-eos --threads "$THREADS" \
        < "$tmp/p$i.txt" > /dev/null 2>> "$tmp/stats.txt"
  done
done
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
HOST=$(hostname)
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$MODEL" "$tmp/stats.txt" "$MEMBW" "$COMMIT" "$HOST" "$CPU" "$THREADS" <<'PY'
import json, os, re, statistics, struct, sys, datetime, glob
model, stats, membw, commit, host, cpu, threads = sys.argv[1:8]
# bytes of weights read per decoded token: every tensor but mtp.* (embedding
# rows are a lookup, but tied models read the table as lm_head: count it once)
nbytes = 0
for f in glob.glob(os.path.join(model, "*.safetensors")):
    with open(f, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
    for k, v in hdr.items():
        if k == "__metadata__" or k.startswith("mtp."): continue
        nbytes += v["data_offsets"][1] - v["data_offsets"][0]
rows = []
for l in open(stats):
    m = re.search(r"prompt (\d+) tokens, ([\d.]+) tok/s; decode (\d+) tokens, ([\d.]+) tok/s .*rss peak ([\d.]+) MiB \(anon ([\d.]+), file-mapped ([\d.]+)\)", l)
    if m: rows.append([float(x) for x in m.groups()])
if len(rows) != 9: sys.exit(f"cpu_bench: expected 9 runs, parsed {len(rows)}")
med = lambda i: statistics.median(r[i] for r in rows)
bw = json.loads(membw)["read_gb_s"]
bound = bw * 1e9 / nbytes
res = {"date": datetime.date.today().isoformat(), "commit": commit, "host": host, "cpu": cpu,
       "threads": int(threads), "model": os.path.basename(os.path.normpath(model)),
       "prompt_tokens_median": med(0), "prefill_tok_s": med(1), "decode_tokens": med(2),
       "decode_tok_s": med(3), "decode_tok_s_min": min(r[3] for r in rows), "decode_tok_s_max": max(r[3] for r in rows),
       "rss_peak_mib": max(r[4] for r in rows), "rss_anon_mib": med(5), "rss_file_mib": med(6),
       "weight_bytes_per_token": nbytes, "mem_read_gb_s": bw, "decode_bound_tok_s": bound,
       "decode_fraction_of_bound": med(3) / bound}
out = f"bench/results/{res['date']}-{host}-{res['model']}-cpu.json"
json.dump(res, open(out, "w"), indent=2)
row = (f"| {res['date']} | {commit} | {host}: {cpu}, {threads} threads | {res['model']} | cpu run (3 completion prompts, n=128, median of 9) "
       f"| prefill {res['prefill_tok_s']:.0f} tok/s, decode {res['decode_tok_s']:.0f} tok/s "
       f"({res['decode_fraction_of_bound']*100:.0f}% of {bound:.0f} tok/s bound = {bw:.1f} GB/s / {nbytes/1e6:.1f} MB per token), "
       f"RSS peak {res['rss_peak_mib']:.0f} MiB (anon {res['rss_anon_mib']:.0f}, file-mapped {res['rss_file_mib']:.0f}) |")
print(json.dumps(res, indent=2))
print(row)
open(os.path.join(os.path.dirname(stats), "row.md"), "w").write(row + "\n")
PY
if [ "$RECORD" = 1 ]; then bench/record_rows.sh '<!-- cpu_bench.sh --record inserts rows above this line -->' < "$tmp/row.md"; fi
