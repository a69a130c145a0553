#!/usr/bin/env bash
# bench/kernel_regs.sh REV [FILE.cu ...] — what ptxas gives each kernel
# (registers, spill stores / loads in bytes) at REV and in this tree, for
# sm_90a as the Makefile builds it, and the kernels whose figures differ.
# It needs nvcc but no GPU, so it runs before a device call: a kernel that
# gains registers can lose blocks an SM or spill, and that shows here first
# (session 44 landed an unrolled epilogue with 2-46 more registers per
# tile; it cost Qwen3-1.7B decode 6%). FILEs: CUDA sources under
# src/backend/cuda (default: those that differ between REV and this tree).
# Output: one line per changed kernel, "REV -> here: regs spill-st spill-ld
# name", then counts of kernels compared and changed.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/kernel_regs.sh REV [FILE.cu ...]}
shift
git rev-parse --verify -q "$rev^{commit}" > /dev/null || { echo "kernel_regs: no revision $rev" >&2; exit 2; }
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "kernel_regs: no nvcc" >&2; exit 2; }
files=("$@")
if [ ${#files[@]} -eq 0 ]; then # (a changed header: every source)
    if git diff --quiet "$rev" -- 'src/backend/cuda/*.cuh' 'src/backend/cuda/*.h'; then
        mapfile -t files < <(git diff --name-only "$rev" -- 'src/backend/cuda/*.cu')
    else
        files=(src/backend/cuda/*.cu)
    fi
fi
[ ${#files[@]} -gt 0 ] || { echo "kernel_regs: no CUDA source differs from $rev"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/old"
git archive "$rev" src | tar -x -C "$tmp/old"
# ptxas -v to "mangled-name regs spill-stores spill-loads" lines
table() {
    awk '/Compiling entry function/ { match($0, /function .[^ ]*. for/); n = substr($0, RSTART + 10, RLENGTH - 15) }
         /bytes spill stores/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "stores,") st = $i;
                                                           if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "loads") ld = $i } }
         /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i+1); if (n != "") print n, r, st + 0, ld + 0; n = "" }' "$1" | sort
}
compiled=0 changed=0
for f in "${files[@]}"; do
    f=${f#./}
    case $f in src/backend/cuda/*.cu) ;; *) echo "kernel_regs: $f is not a CUDA source of src/backend/cuda" >&2; exit 2 ;; esac
    b=$(basename "$f" .cu)
    flags=(-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -DKS_HAVE_CUDA -Xptxas -v -c -o /dev/null)
    "$NVCC" "${flags[@]}" -Isrc "$f" > "$tmp/$b.new.log" 2>&1 || { cat "$tmp/$b.new.log" >&2; exit 1; }
    if [ -f "$tmp/old/$f" ]; then
        "$NVCC" "${flags[@]}" -I"$tmp/old/src" "$tmp/old/$f" > "$tmp/$b.old.log" 2>&1 || { cat "$tmp/$b.old.log" >&2; exit 1; }
    else
        : > "$tmp/$b.old.log"
    fi
    table "$tmp/$b.old.log" > "$tmp/$b.old"
    table "$tmp/$b.new.log" > "$tmp/$b.new"
    # kernels of both (or of one side: "-" for the other), where any figure differs
    join -a1 -a2 -e - -o 0,1.2,1.3,1.4,2.2,2.3,2.4 "$tmp/$b.old" "$tmp/$b.new" > "$tmp/$b.join"
    compiled=$((compiled + $(wc -l < "$tmp/$b.join")))
    while read -r name r0 s0 l0 r1 s1 l1; do
        [ "$r0 $s0 $l0" = "$r1 $s1 $l1" ] && continue
        changed=$((changed + 1))
        printf '%-5s -> %-5s regs  %s -> %s spill st  %s -> %s ld  %s (%s)\n' "$r0" "$r1" "$s0" "$s1" "$l0" "$l1" \
            "$(echo "$name" | c++filt 2>/dev/null || echo "$name")" "$b"
    done < "$tmp/$b.join"
done
echo "kernel_regs: $compiled kernels compared in ${#files[@]} file(s) against $rev, $changed changed"
