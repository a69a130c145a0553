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
echo "unit: $unit_line; cli scripts: $cli_pass passed, $cli_fail failed"
up=$(echo "$unit_line" | awk '{print $1}'); uf=$(echo "$unit_line" | awk '{print $3}')
echo "$((up+cli_pass)) passed, $((uf+cli_fail)) failed"
[ $fail -eq 0 ] && [ $cli_fail -eq 0 ]
