#!/usr/bin/env bash
# run_e2e.sh — end-to-end tests of `kestrel serve`: starts the real binary on
# $KESTREL_SHARED (default ../shared)/models/tinycoder (one server without a
# key, one with --api-key), drives it with the official clients (openai,
# @anthropic-ai/sdk, ollama from npm, pinned in tests/e2e/package-lock.json)
# through Node's test runner, then stops the servers with SIGTERM and checks
# they shut down cleanly (exit 0). npm is needed only to install the clients.
#
# usage: scripts/run_e2e.sh [KESTREL_BINARY] [TEST_FILE...]
#   KESTREL_BINARY  default build/kestrel
#   TEST_FILE       default tests/e2e/*.test.mjs
# Last line: "e2e: N passed, N failed"; exit status non-zero on any failure.
# Without the model, Node/npm, or the npm packages (no network): prints
# "SKIP e2e: <reason>" and exits 0.
set -u
BIN=${1:-}
[ $# -gt 0 ] && shift
# a binary given relative to the caller's directory
[ -n "$BIN" ] && [ "${BIN#/}" = "$BIN" ] && [ -e "$BIN" ] && BIN=$PWD/$BIN
ARGS=()
for f in "$@"; do
    if [ "${f#/}" = "$f" ] && [ -e "$f" ]; then ARGS+=("$PWD/$f"); else ARGS+=("$f"); fi
done
set -- "${ARGS[@]}"
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-build/kestrel}
MODEL=${KESTREL_SHARED:-../shared}/models/tinycoder
E2E=tests/e2e
API_KEY=secret

skip() { echo "SKIP e2e: $*"; exit 0; }

[ -d "$MODEL" ] || skip "$MODEL not found"
command -v node >/dev/null 2>&1 || skip "node not found"
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 11) ? 0 : 1)' ||
    skip "node $(node --version) is too old (the test runner needs >= 20.11)"
if [ ! -x "$BIN" ]; then
    echo "e2e: kestrel binary '$BIN' not found (build it first)"
    echo "e2e: 0 passed, 1 failed"
    exit 1
fi

# -- dependencies (npm ci is idempotent; skipped when the lock is installed) --
if [ ! -f $E2E/node_modules/.package-lock.json ] || [ $E2E/package-lock.json -nt $E2E/node_modules/.package-lock.json ]; then
    command -v npm >/dev/null 2>&1 || skip "npm not found (and $E2E/node_modules not installed)"
    if ! npm ci --prefix $E2E --no-audit --no-fund --loglevel=error >/tmp/kestrel-e2e-npm.$$ 2>&1; then
        reason=$(grep -m1 -iE 'err|error' /tmp/kestrel-e2e-npm.$$ | head -c 200)
        rm -f /tmp/kestrel-e2e-npm.$$
        skip "npm ci failed (no network?): ${reason:-unknown error}"
    fi
    rm -f /tmp/kestrel-e2e-npm.$$
fi

TMP=$(mktemp -d /tmp/kestrel-e2e.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server NAME ARGS... : starts kestrel serve on a free port (--port 0),
# waits for the "serving ... on http://HOST:PORT" line and GET /health.
# Sets SERVER_URL, SERVER_PID, SERVER_CTX.
start_server() {
    local name=$1
    shift
    "$BIN" serve "$MODEL" --port 0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.log" &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    local line=""
    for _ in $(seq 1 600); do
        line=$(grep -m1 'serving .* on http://' "$TMP/$name.log" 2>/dev/null)
        [ -n "$line" ] && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "e2e: server '$name' exited during startup:"
            tail -20 "$TMP/$name.log"
            echo "e2e: 0 passed, 1 failed"
            exit 1
        fi
        sleep 0.1
    done
    SERVER_URL=$(sed -n 's|.* on \(http://[0-9.:]*\).*|\1|p' <<<"$line")
    SERVER_CTX=$(sed -n 's|.*ctx \([0-9]*\).*|\1|p' <<<"$line")
    if [ -z "$SERVER_URL" ]; then
        echo "e2e: server '$name' did not report its address:"
        tail -20 "$TMP/$name.log"
        echo "e2e: 0 passed, 1 failed"
        exit 1
    fi
    if ! node -e '
        const u = process.argv[1] + "/health";
        const t0 = Date.now();
        (async () => {
          while (Date.now() - t0 < 30000) {
            try { const r = await fetch(u); if (r.status === 200) process.exit(0); } catch {}
            await new Promise((r) => setTimeout(r, 100));
          }
          process.exit(1);
        })();' "$SERVER_URL"; then
        echo "e2e: server '$name' at $SERVER_URL never answered /health"
        echo "e2e: 0 passed, 1 failed"
        exit 1
    fi
}

start_server main
MAIN_PID=$SERVER_PID MAIN_URL=$SERVER_URL MAIN_CTX=$SERVER_CTX
start_server auth --api-key "$API_KEY" --max-concurrent 1 --threads 1
AUTH_PID=$SERVER_PID AUTH_URL=$SERVER_URL

if [ $# -gt 0 ]; then FILES=("$@"); else FILES=("$E2E"/*.test.mjs); fi
KESTREL_URL=$MAIN_URL KESTREL_URL_AUTH=$AUTH_URL KESTREL_API_KEY=$API_KEY KESTREL_CTX=${MAIN_CTX:-4096} \
    node --test --test-concurrency=1 --test-timeout=180000 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$TMP/tap.txt" \
    "${FILES[@]}"
node_rc=$?

passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
failed=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
cancelled=$(sed -n 's/^# cancelled \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
skipped=$(sed -n 's/^# skipped \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
passed=${passed:-0}
failed=$((${failed:-0} + ${cancelled:-0}))
[ "$node_rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1 # the runner itself failed

# -- shutdown: both servers must still be up, and exit 0 on SIGTERM --
stop_server() {
    local name=$1 pid=$2
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "e2e: FAIL server '$name' died during the tests:"
        tail -20 "$TMP/$name.log"
        return 1
    fi
    kill -TERM "$pid"
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "e2e: FAIL server '$name' did not exit within 15 s of SIGTERM"
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null
        return 1
    fi
    wait "$pid"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "e2e: FAIL server '$name' exited with status $rc after SIGTERM (not a graceful shutdown):"
        tail -20 "$TMP/$name.log"
        return 1
    fi
    return 0
}
for s in "main $MAIN_PID" "auth $AUTH_PID"; do
    # shellcheck disable=SC2086
    if stop_server $s; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
PIDS=()

if [ "$failed" -ne 0 ]; then
    echo "--- server log (main, last 30 lines) ---"
    tail -30 "$TMP/main.log"
fi
summary="e2e: $passed passed, $failed failed"
[ "${skipped:-0}" -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ "$failed" -eq 0 ]
