#!/usr/bin/env bash
# bench/gemm_pick_overlay.sh NAME "ROWS:K:I ..." — an ab overlay
# (.devcarry/ab_NAME.tar.xz, see bench/ab_overlay.sh) whose k_gemm.cu takes,
# for each listed weight shape, candidate I of the cuBLASLt heuristic's
# first 8 for 4,096 rows in place of the first (bench/gemm_sweep.cu prints
# them as rI); other shapes keep the first. Still one algorithm per shape,
# so rows stay invariant; the ab stage's AB_PREFILL (with AB_PREFILL_TOKENS
# such as "19 256 4096 4115") and AB_TEST=NAME measure and test it.
# Example (the twenty-fourth session's sweep, Qwen3-8B):
#   bench/gemm_pick_overlay.sh few "6144:4096:6 4096:4096:4 24576:4096:3 4096:12288:4"
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: bench/gemm_pick_overlay.sh NAME "ROWS:K:I ..."}
picks=${2:?usage: bench/gemm_pick_overlay.sh NAME "ROWS:K:I ..."}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$picks" src/backend/cuda/k_gemm.cu "$tmp/k_gemm.cu" <<'EOF'
import sys
picks, src, dst = sys.argv[1].split(), sys.argv[2], sys.argv[3]
s = open(src).read()
old = """    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    ok = ok && lt.heuristic(lt.h, d, la, lb, lc, lc, pref, 1, &res, &nres) == CUBLAS_STATUS_SUCCESS && nres > 0;
"""
if s.count(old) != 1:
    sys.exit("gemm_pick_overlay: k_gemm.cu's heuristic call is not where this script expects it")
table = "".join(
    f"        if (rows == {r} && k == {k}) pick = {i};\n"
    for r, k, i in (p.split(":") for p in picks))
new = f"""    cublasLtMatmulHeuristicResult_t resv[8], res;
    int nres = 0;
    ok = ok && lt.heuristic(lt.h, d, la, lb, lc, lc, pref, 8, resv, &nres) == CUBLAS_STATUS_SUCCESS && nres > 0;
    if (ok) {{ /* gemm_pick_overlay.sh: a listed shape takes candidate `pick` */
        int pick = 0;
{table}        res = resv[pick < nres ? pick : 0];
    }}
"""
open(dst, "w").write(s.replace(old, new))
EOF
bash bench/ab_overlay.sh "$name" "src/backend/cuda/k_gemm.cu=$tmp/k_gemm.cu"
