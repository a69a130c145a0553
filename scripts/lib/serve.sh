# serve.sh — sourced by the CLI tests and the bench scripts that need a
# running `kestrel serve`.
# server_test_setup NAME: a CLI test's start on tinycoder — MODEL (under
# KESTREL_SHARED, default ../shared), or "SKIP NAME" and exit 0 where it is
# absent; work (a temporary directory) and an exit trap that stops the
# server in srv (when set) and removes work.
# bench_server NAME [flags...]: a bench script's server on $MODEL — KESTREL
# (default build/kestrel, built when missing), its log in a temporary file
# (log), an exit trap that stops it, booted by start_server with 300 s to
# load (BOOT_TIMEOUT) — setting srv and port.
# start_server NAME LOG [flags...]: boots `$KESTREL serve $MODEL --port 0
# flags...` in the background with stderr to LOG, waits (up to $BOOT_TIMEOUT
# seconds, default 60) for the line naming its address, and sets srv (the
# pid) and port. If the server exits or never says where it listens: "FAIL
# NAME" with the log, exit 1.
start_server() {
    local name=$1 log=$2
    shift 2
    "$KESTREL" serve "$MODEL" --port 0 "$@" 2> "$log" &
    srv=$!
    port=
    for _ in $(seq 1 $((${BOOT_TIMEOUT:-60} * 10))); do
        port=$(sed -n 's|.*serving .* on http://[^:]*:\([0-9]*\).*|\1|p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$srv" 2> /dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "    FAIL $name: the server did not start:"
        sed 's/^/      /' "$log"
        exit 1
    fi
}

server_test_setup() {
    MODEL="${KESTREL_SHARED:-../shared}/models/tinycoder"
    if [ ! -f "$MODEL/config.json" ]; then echo "    SKIP $1: $MODEL not found"; exit 0; fi
    work=$(mktemp -d)
    srv=
    trap '[ -n "$srv" ] && kill "$srv" 2> /dev/null && wait "$srv" 2> /dev/null; rm -rf "$work"' EXIT
}

bench_server() {
    local name=$1
    shift
    KESTREL=${KESTREL:-build/kestrel}
    [ -x "$KESTREL" ] || make -s -j2 "$KESTREL"
    log=$(mktemp)
    srv=
    trap '[ -n "$srv" ] && kill $srv 2>/dev/null; rm -f "$log"' EXIT
    BOOT_TIMEOUT=${BOOT_TIMEOUT:-300} start_server "$name" "$log" "$@"
}
