#!/usr/bin/env bash
# bench/record_rows.sh MARKER [FILE] — puts the table rows read on stdin
# into FILE (default BENCHMARKS.md) just above its MARKER line, the one way
# the benches' --record adds history rows (bench.sh: the server harness
# table; cpu_bench.sh: the CPU table). Fails, changing nothing, when FILE
# has no MARKER line.
set -euo pipefail
marker=${1:?usage: bench/record_rows.sh MARKER [FILE] < rows}
file=${2:-BENCHMARKS.md}
grep -qF -- "$marker" "$file" || { echo "record_rows.sh: $file has no '$marker' line" >&2; exit 1; }
rows=$(cat)
[ -n "$rows" ] || { echo "record_rows.sh: no rows on stdin" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# (the rows and marker through the environment: awk -v would expand backslashes)
ROWS="$rows" MARKER="$marker" awk 'index($0, ENVIRON["MARKER"]) == 1 { print ENVIRON["ROWS"] } { print }' "$file" > "$tmp"
cat "$tmp" > "$file"
echo "record_rows.sh: $(printf '%s\n' "$rows" | wc -l) rows into $file" >&2
