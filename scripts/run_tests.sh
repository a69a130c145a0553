#!/usr/bin/env bash
# run_tests.sh BUILD — runs the C unit-test runner and the CLI end-to-end
# tests (tests/cli/*.sh) against BUILD/kestrel; prints one summary line.
set -uo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
fail=0
"$BUILD/test_runner" | tee /tmp/kestrel-unit.$$ || fail=1
unit_line=$(tail -1 /tmp/kestrel-unit.$$); rm -f /tmp/kestrel-unit.$$
cli_pass=0; cli_fail=0
for t in tests/cli/*.sh; do
    [ -e "$t" ] || continue
    if KESTREL="$BUILD/kestrel" bash "$t"; then cli_pass=$((cli_pass+1)); else cli_fail=$((cli_fail+1)); echo "FAIL $t"; fi
done
# end-to-end: the real server driven by the official npm clients
e2e_out=$(scripts/run_e2e.sh "$BUILD/kestrel" 2>&1); e2e_rc=$?
echo "$e2e_out" | tail -40
e2e_line=$(echo "$e2e_out" | grep -E "^e2e: [0-9]+ passed" | tail -1)
ep=0; ef=0
if [ -n "$e2e_line" ]; then
    ep=$(echo "$e2e_line" | sed -E 's/^e2e: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    ef=$(echo "$e2e_line" | sed -E 's/^e2e: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
fi
[ $e2e_rc -ne 0 ] && [ "$ef" -eq 0 ] && ef=1
echo "unit: $unit_line; cli scripts: $cli_pass passed, $cli_fail failed; ${e2e_line:-e2e: skipped}"
up=$(echo "$unit_line" | awk '{print $1}'); uf=$(echo "$unit_line" | awk '{print $3}')
echo "$((up+cli_pass+ep)) passed, $((uf+cli_fail+ef)) failed"
[ $fail -eq 0 ] && [ $cli_fail -eq 0 ] && [ "$ef" -eq 0 ]
