#!/usr/bin/env bash
# proposer_bench.sh [MODEL] [--full] [-- server flags] — speculation
# proposers side by side: the same server booted once per configuration,
#   plain    --no-pld --no-mtp --no-drafter
#   pld      prompt lookup only
#   mtp      the model's MTP head only
#   drafter  MODEL/drafter only
#   dflash   MODEL/dflash only (block: the checkpoint's)
#   dflash8  MODEL/dflash with --draft-block-size 8
#   dflash16 MODEL/dflash with --draft-block-size 16 (not in the default
#            CONFIGS: the checkpoint's block, for comparison)
#   auto     the defaults (prompt lookup beside the model proposers the model
#            has, which take turns: MTP head, DFlash, draft model)
# each measured by the harness probe (`kestrel bench --quick --workloads
# code,chat,edit,prose`; --full: 5 prompts x 128 tokens) and by /metrics
# after the run (draft tokens, accepted, verify steps -> tokens per verify
# step = 1 + accepted / steps). Configurations whose drafter the model lacks
# are skipped. NOGATES=1 adds --no-spec-gates (every draft verified: the
# acceptance the drafters really have, not a speed measurement; the result
# file then ends in -nogates). WORKLOADS=code,... narrows the workloads.
# Writes bench/results/<date>-<host>-proposers.json and prints markdown rows
# (decode tok/s and the ratio to plain per workload).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-../shared/models/tinycoder}
[ $# -gt 0 ] && shift
SIZE=--quick
[ "${1:-}" = "--full" ] && { SIZE=""; shift; }
[ "${1:-}" = "--" ] && shift
KESTREL=${KESTREL:-build/kestrel}
[ -x "$KESTREL" ] || make -s -j2 "$KESTREL"
EXTRA=("$@")
[ "${NOGATES:-0}" = 1 ] && EXTRA+=(--no-spec-gates)
tmp=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
. scripts/lib/serve.sh
off=(--no-pld --no-mtp --no-drafter)
declare -A FLAGS=(
  [plain]="${off[*]}"
  [pld]="--pld --no-mtp --no-drafter"
  [mtp]="--no-pld --mtp --no-drafter"
  [drafter]="--no-pld --no-mtp --drafter $MODEL/drafter"
  [dflash]="--no-pld --no-mtp --drafter $MODEL/dflash"
  [dflash8]="--no-pld --no-mtp --drafter $MODEL/dflash --draft-block-size 8"
  [dflash16]="--no-pld --no-mtp --drafter $MODEL/dflash --draft-block-size 16"
  [auto]=""
)
CONFIGS=${CONFIGS:-plain pld mtp drafter dflash dflash8 auto}
for c in $CONFIGS; do
    case $c in drafter) [ -d "$MODEL/drafter" ] || continue ;; dflash*) [ -d "$MODEL/dflash" ] || continue ;; esac
    log=$tmp/$c.log
    # shellcheck disable=SC2086
    start_server proposer_bench "$log" ${FLAGS[$c]} "${EXTRA[@]}"
    echo "proposer_bench: $c (${FLAGS[$c]} ${EXTRA[*]})" >&2
    prompts=()
    [ -d "$MODEL/prompts" ] && prompts=(--prompts "$MODEL/prompts")
    "$KESTREL" bench --url "http://127.0.0.1:$port" $SIZE --workloads "${WORKLOADS:-code,chat,edit,prose}" --quiet \
        "${prompts[@]}" --out "$tmp/$c.json" > /dev/null
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
    cat <&3 > "$tmp/$c.metrics"
    exec 3<&-
    kill $srv; wait $srv 2>/dev/null || true
    srv=""
done
python3 - "$tmp" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(hostname)" "${EXTRA[*]}" "$CONFIGS" "${NOGATES:-0}" <<'PY'
import json, sys, os, datetime, re
tmp, commit, host, extra, configs, nogates = sys.argv[1:7]
def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
res = {"date": datetime.date.today().isoformat(), "commit": commit, "host": host, "server_flags": extra, "configs": {}}
for c in configs.split():
    if not os.path.exists(f"{tmp}/{c}.json"): continue
    r = json.load(open(f"{tmp}/{c}.json"))
    mt = open(f"{tmp}/{c}.metrics").read()
    steps, acc = metric(mt, "kestrel_spec_verify_steps_total"), metric(mt, "kestrel_spec_accepted_tokens_total")
    dec = {}
    for w in r.get("workloads", []):
        name = w.get("name") or w.get("workload")
        d = w.get("decode_tok_s") or {}
        dec[name] = d.get("median") if isinstance(d, dict) else d
    depths = {m.group(1): int(float(m.group(2))) for m in
              re.finditer(r'^kestrel_spec_mtp_depth_steps_total\{depth="(\d+)"\} ([0-9.e+]+)$', mt, re.M)}
    costs = {m.group(1): float(m.group(2)) for m in
             re.finditer(r'^kestrel_spec_proposer_cost_ratio\{proposer="(\w+)"\} ([0-9.e+-]+)$', mt, re.M) if float(m.group(2))}
    src_steps = {m.group(1): int(float(m.group(2))) for m in
                 re.finditer(r'^kestrel_spec_source_verify_steps_total\{source="(\w+)"\} ([0-9.e+]+)$', mt, re.M) if float(m.group(2))}
    passes = {m.group(1): int(float(m.group(2))) for m in
              re.finditer(r'^kestrel_spec_proposer_passes_total\{proposer="(\w+)"\} ([0-9.e+]+)$', mt, re.M) if float(m.group(2))}
    res["configs"][c] = {"decode_tok_s": dec, "drafted": metric(mt, "kestrel_spec_draft_tokens_total"), "accepted": acc,
                         "verify_steps": steps, "tokens_per_verify_step": 1 + acc / steps if steps else None,
                         "mtp_depth_steps": depths, "pass_cost_at_end": costs, "verify_steps_by_source": src_steps,
                         "proposer_passes": passes,
                         "runtime_gates_off": metric(mt, 'kestrel_spec_gate_off_total{gate="runtime"}')}
out = f"bench/results/{res['date']}-{host}-proposers{'-nogates' if nogates == '1' else ''}.json"
json.dump(res, open(out, "w"), indent=2)
plain = res["configs"].get("plain", {}).get("decode_tok_s", {})
print(f"(written {out})")
for c, v in res["configs"].items():
    cells = []
    for w in ["code", "chat", "edit", "prose"]:
        x, p = v["decode_tok_s"].get(w), plain.get(w)
        if x: cells.append(f"{w} {x:.0f} tok/s" + (f" ({x / p:.2f}x)" if p and c != "plain" else ""))
    tps = v["tokens_per_verify_step"]
    print(f"| {res['date']} | {commit} | {host} | {c} {extra} | " + ", ".join(cells) +
          (f"; {tps:.2f} tokens per verify step ({int(v['accepted'])} of {int(v['drafted'])} drafts accepted)" if tps else "") +
          ("; MTP depths verified " + ", ".join(f"{d}: {n} steps" for d, n in sorted(v['mtp_depth_steps'].items())) if v['mtp_depth_steps'] else "") +
          ("; verify steps by source " + ", ".join(f"{s} {n}" for s, n in v['verify_steps_by_source'].items()) if v['verify_steps_by_source'] else "") +
          ("; passes " + ", ".join(f"{s} {n}" for s, n in v['proposer_passes'].items()) if v['proposer_passes'] else "") +
          ("; pass costs at the end " + ", ".join(f"{p} {x:.2f}" for p, x in v['pass_cost_at_end'].items()) if v['pass_cost_at_end'] else "") +
          (f"; runtime gates off {int(v['runtime_gates_off'])}" if v['runtime_gates_off'] else "") + " |")
PY
