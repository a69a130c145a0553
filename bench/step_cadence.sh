#!/usr/bin/env bash
# bench/step_cadence.sh MODEL [-- server flags] — where a batched decode
# step's time goes besides the forward (issue 7: total throughput at 16
# streams vs 1). Boots `kestrel serve` with KESTREL_STEP_LOG=1, drives it with
# the bench probe's concurrency workload (--quick: 1 / 4 / 16 streams), then
# groups the decode steps (no prompt rows) by how many sequences they carried
# and prints, per group: steps, the forward's mean time (launch to results on
# the host) and the mean cadence (start of one step to the start of the next,
# consecutive steps of the same group only). Cadence minus forward is the
# host's own work per step (scheduling, sampling, events).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: bench/step_cadence.sh MODEL [-- server flags]}
shift
[ "${1:-}" = "--" ] && shift
KESTREL=${KESTREL:-build/kestrel}
tmp=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
. scripts/lib/serve.sh
KESTREL_STEP_LOG=1 start_server step_cadence "$tmp/serve.log" "$@"
"$KESTREL" bench --url "http://127.0.0.1:$port" --quick --workloads concurrency --ignore-eos --quiet \
    ${PROMPTS:+--prompts "$PROMPTS"} --out "$tmp/bench.json" > /dev/null
kill $srv; wait $srv 2>/dev/null || true
srv=""
grep "kestrel: step" "$tmp/serve.log" | awk '
    { rows = $3; prompt = substr($5, 2); seqs = $8; ms = $(NF - 5); t = $(NF - 1) + 0 }
    prompt == 0 {
        n[seqs]++; fwd[seqs] += ms
        if (last_seqs == seqs && last_t > 0) { gap[seqs] += (t - last_t) * 1e3; ng[seqs]++ }
    }
    { last_seqs = prompt == 0 ? seqs : -1; last_t = t }
    END {
        for (s in n) printf "step_cadence: %2d sequences: %6d decode steps, forward %.3f ms, cadence %.3f ms\n",
            s, n[s], fwd[s] / n[s], ng[s] ? gap[s] / ng[s] : 0
    }' | sort -k2 -n
