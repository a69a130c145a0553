#!/usr/bin/env bash
# run_tests_cuda.sh BUILD — the GPU tests (`make test-cuda`, on a machine with
# a GPU): every CUDA op against the CPU op, the tiny fixtures against
# transformers on CUDA, tinycoder greedy on CUDA == the reference (== CPU),
# batch invariance on CUDA. Fails if no GPU is visible (nothing would run).
set -uo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
out=$("$BUILD/test_runner" cuda)
status=$?
echo "$out"
if echo "$out" | grep -q "^SKIP.*no CUDA GPU"; then
    echo "run_tests_cuda: no CUDA GPU visible: the CUDA tests did not run" >&2
    exit 1
fi
exit $status
