#!/usr/bin/env bash
# bench.sh — the server benchmark harness (BENCHMARKS.md, "Server harness").
#
#   bench/bench.sh MODEL [--quick|--full] [--record] [probe options] [-- server flags]
#   bench/bench.sh [MODEL] --url URL [--quick|--full] [--record] [probe options]
#
# Builds kestrel if needed, boots `kestrel serve MODEL [server flags]` on a
# free loopback port (--port 0: the server picks it and logs it), waits for
# /health, runs the probe (`kestrel bench`: code / edit / chat / prose
# workloads, context ladder, concurrency sweep), stops the server, and writes
#   bench/results/<date>-<host>-<model>[-N].json   the result (with "meta")
#   bench/results/<date>-<host>-<model>[-N].md     markdown tables + history rows
#   bench/results/<date>-<host>-<model>[-N].png    bar chart (gnuplot)
#   bench/results/<date>-<host>-<model>[-N]-ladder.png
# Speculation probe: when the server has --pld/--no-pld (and the given flags
# do not choose one), code, edit and prose are run again on a server booted with
# $SPEC_OFF_FLAGS and one with $SPEC_ON_FLAGS, and the decode ratio and the
# acceptance the server reports are added. --url URL skips the boot and
# probes any running OpenAI-compatible server (llama-server, vLLM, another
# kestrel) with the same protocol; MODEL then only names the result and
# "-- flags" only records how that server was started.
# --record appends the history rows to BENCHMARKS.md (Server harness table).
# Probe options passed through: --runs N --workloads L --max-tokens N
# --prompts-per-workload N --ladder L --streams L --prompts DIR --model NAME
# --api-key KEY --extra-json OBJ --ignore-eos --no-cache-bust.
# Environment: BUILD (build dir, default build), JOBS (make -j), KESTREL (a
# prebuilt kestrel binary to use instead of building), SPEC_ON_FLAGS
# (default --pld), SPEC_OFF_FLAGS (default --no-pld), BOOT_TIMEOUT (s, 600).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }

MODEL="" URL="" SIZE="" RECORD=0
PROBE=() SERVER_FLAGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage 0 ;;
        --quick|--full) SIZE=$1 ;;
        --record) RECORD=1 ;;
        --url) URL=${2:?--url needs a value}; shift ;;
        --ignore-eos|--no-cache-bust) PROBE+=("$1") ;;
        --runs|--workloads|--max-tokens|--prompts-per-workload|--ladder|--streams|--prompts|--model|--api-key|--extra-json|--timeout)
            PROBE+=("$1" "${2:?$1 needs a value}"); shift ;;
        --) shift; SERVER_FLAGS=("$@"); break ;;
        -*) echo "bench.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$MODEL" ] || { echo "bench.sh: unexpected argument $1" >&2; usage; }; MODEL=$1 ;;
    esac
    shift
done
[ -n "$MODEL" ] || [ -n "$URL" ] || usage
if [ -z "$URL" ] && [ ! -d "$MODEL" ]; then echo "bench.sh: model directory $MODEL not found" >&2; exit 1; fi

BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
SPEC_ON_FLAGS=${SPEC_ON_FLAGS:---pld}
SPEC_OFF_FLAGS=${SPEC_OFF_FLAGS:---no-pld}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-600}
if [ -n "${KESTREL:-}" ]; then  # a prebuilt binary: no build
    [ -x "$KESTREL" ] || { echo "bench.sh: KESTREL=$KESTREL is not executable" >&2; exit 1; }
else
    KESTREL=$BUILD/kestrel
    make -s -j"$JOBS" BUILD="$BUILD" "$KESTREL"
fi

tmp=$(mktemp -d)
SERVER_PID=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# GET /health over bash's /dev/tcp (no curl binary needed); 0 when it answers 200.
health() {
    ( exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
      printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
      IFS= read -r -t 5 line <&3 || exit 1
      [[ $line == *" 200"* ]] ) 2>/dev/null
}

# boot NAME FLAGS...: starts the server, sets PORT; fails if it exits or never answers.
boot() {
    local name=$1; shift
    local log="$tmp/serve-$name.log"
    : > "$log"
    "$KESTREL" serve "$MODEL" --host 127.0.0.1 --port 0 "$@" > "$log" 2>&1 &
    SERVER_PID=$!
    PORT=""
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$BOOT_TIMEOUT" ]; do
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "bench.sh: kestrel serve exited:" >&2; cat "$log" >&2; SERVER_PID=""; exit 1; }
        if [ -z "$PORT" ]; then
            PORT=$(sed -n 's/.*serving .* on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1 || true)
        fi
        if [ -n "$PORT" ] && health "$PORT"; then
            echo "bench.sh: $(grep -m1 serving "$log")" >&2
            return 0
        fi
        sleep 0.2
    done
    echo "bench.sh: the server did not answer /health within ${BOOT_TIMEOUT}s" >&2; cat "$log" >&2; exit 1
}

# ---- labels for the result ----
DATE=$(date +%Y-%m-%d)
HOST=$(hostname -s 2>/dev/null || hostname)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+dirty"
if [ -n "$MODEL" ]; then NAME=$(basename "$(cd "$MODEL" 2>/dev/null && pwd || echo "$MODEL")"); else NAME=remote; fi
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//; s/(R)//g; s/(TM)//g; s/ Processor//; s/ [0-9]*-Core//')
MACHINE="$HOST: $CPU, $(nproc) threads"
flags="${SERVER_FLAGS[*]:-}"
if [ -z "$URL" ] && [[ $flags != *"--device cpu"* ]] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    MACHINE="$HOST: $GPU ($(nvidia-smi -L | wc -l) GPU), $CPU"
fi
[ -n "$URL" ] && MACHINE="$MACHINE (probe side; server at $URL)"
MODE="bench.sh${SIZE:+ $SIZE}${URL:+ --url}"
mkdir -p bench/results
BASE="bench/results/$DATE-$HOST-$NAME"
if [ -e "$BASE.json" ]; then i=2; while [ -e "$BASE-$i.json" ]; do i=$((i + 1)); done; BASE="$BASE-$i"; fi
META=(--meta "date=$DATE" --meta "commit=$COMMIT" --meta "machine=$MACHINE" --meta "model=$NAME" --meta "mode=$MODE")

probe() { # probe URL OUT FLAGS-LABEL [extra probe args]
    local url=$1 out=$2 fl=$3; shift 3
    "$KESTREL" bench --url "$url" ${SIZE:+$SIZE} "${PROBE[@]+"${PROBE[@]}"}" "${META[@]}" \
        --meta "server_flags=$fl" --out "$out" --md /dev/null "$@"
}

SPEC_ARGS=()
if [ -n "$URL" ]; then
    probe "$URL" "$tmp/main.json" "${flags:-(not started by bench.sh)}"
else
    boot main "${SERVER_FLAGS[@]+"${SERVER_FLAGS[@]}"}"
    probe "http://127.0.0.1:$PORT" "$tmp/main.json" "${flags:-(defaults)}"
    stop_server
    # speculation on/off: only where the server has the switch and the user did not pick a side
    if "$KESTREL" serve --help 2>/dev/null | grep -q -- "${SPEC_OFF_FLAGS%% *}" && [[ " $flags " != *" $SPEC_ON_FLAGS "* && " $flags " != *" $SPEC_OFF_FLAGS "* ]]; then
        for side in off on; do
            if [ $side = on ]; then sf=$SPEC_ON_FLAGS; else sf=$SPEC_OFF_FLAGS; fi
            # shellcheck disable=SC2086
            boot "spec-$side" "${SERVER_FLAGS[@]+"${SERVER_FLAGS[@]}"}" $sf
            probe "http://127.0.0.1:$PORT" "$tmp/spec-$side.json" "${flags:+$flags }$sf" --workloads code,edit,prose
            stop_server
        done
        SPEC_ARGS=(--spec-on "$tmp/spec-on.json" --spec-off "$tmp/spec-off.json")
    fi
fi

"$KESTREL" bench --report "$tmp/main.json" "${SPEC_ARGS[@]+"${SPEC_ARGS[@]}"}" --out "$BASE.json" --md "$BASE.md" \
    --plot-data "$tmp/plot"
if command -v gnuplot >/dev/null; then
    gnuplot -e "data='$tmp/plot'; out='$BASE'; title='kestrel bench: $NAME, $MODE ($DATE, $COMMIT)'" bench/plot.gnuplot ||
        echo "bench.sh: gnuplot failed (charts incomplete)" >&2
    charts=""
    [ -f "$BASE.png" ] && charts="[$(basename "$BASE").png]($(basename "$BASE").png)"
    [ -f "$BASE-ladder.png" ] && charts="${charts:+$charts, }[context ladder]($(basename "$BASE")-ladder.png)"
    [ -n "$charts" ] && printf '\nCharts: %s\n' "$charts" >> "$BASE.md"
else
    echo "bench.sh: gnuplot not found (scripts/setup.sh installs gnuplot-nox): no charts" >&2
fi
cat "$BASE.md"
echo "bench.sh: wrote $(ls "$BASE".json "$BASE".md "$BASE".png "$BASE"-ladder.png 2>/dev/null | tr '\n' ' ')" >&2

if [ "$RECORD" = 1 ]; then
    rows=$(sed -n '/^History rows/,$p' "$BASE.md" | grep '^| ' || true)
    link="[charts](bench/results/$(basename "$BASE").png)"
    printf '%s\n' "$rows" | sed "1s# |\$# ($link) |#" |
        bench/record_rows.sh '<!-- bench.sh --record inserts rows above this line -->'
fi
