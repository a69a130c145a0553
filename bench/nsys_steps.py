#!/usr/bin/env python3
"""bench/nsys_steps.py CSV [MARKER] — where a decode step's time goes on the
GPU timeline (gpu_session.sh's nsys stage). CSV is `nsys stats --report
cuda_gpu_trace --format csv` of a run traced with --cuda-graph-trace=node.
Steps end at each launch of the MARKER kernel (default: the argmax that
ends every greedy forward); the steady state is the second half of the
steps. Prints the mean step period, the GPU's busy time in it (kernels and
copies, overlap counted once) and the idle rest, then per kernel name:
launches per step, mean duration and the mean idle gap before it."""
import collections
import csv
import sys


def main(path, marker):
    ev = []
    for r in csv.DictReader(l for l in open(path) if l.startswith('"') or l[:1].isdigit() or l.startswith("Start")):
        try:
            s, d = float(r["Start (ns)"]), float(r["Duration (ns)"])
        except (KeyError, ValueError):
            continue
        ev.append((s, d, (r.get("Name") or "?").split("(")[0][:70]))
    ev.sort()
    ends = [i for i, e in enumerate(ev) if marker in e[2]]
    if len(ends) < 8:
        sys.exit("nsys_steps: %d steps with marker %r" % (len(ends), marker))
    half = ends[len(ends) // 2:]
    steps = len(half) - 1
    period = (ev[half[-1]][0] - ev[half[0]][0]) / steps
    busy, gaps = 0.0, collections.OrderedDict()
    for a, b in zip(half, half[1:]):
        t = ev[a][0] + ev[a][1]
        for s, d, name in ev[a + 1:b + 1]:
            g = gaps.setdefault(name, [0, 0.0, 0.0])
            g[0] += 1
            g[1] += d
            g[2] += max(0.0, s - t)
            busy += max(0.0, s + d - max(s, t))
            t = max(t, s + d)
    print("nsys_steps: %d steady steps, period %.1f us, GPU busy %.1f us (%.0f%%), idle %.1f us" %
          (steps, period / 1e3, busy / steps / 1e3, 100 * busy / steps / period, (period - busy / steps) / 1e3))
    print("%-70s %8s %9s %9s" % ("kernel", "per step", "mean us", "gap us"))
    for name, (n, d, g) in sorted(gaps.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print("%-70s %8.2f %9.2f %9.2f" % (name, n / steps, d / n / 1e3, g / n / 1e3))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "k_argmax")
