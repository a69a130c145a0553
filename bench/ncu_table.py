#!/usr/bin/env python3
"""bench/ncu_table.py CSV [--by-block] — per-kernel table of an Nsight
Compute `--csv` run (gpu_session.sh's kprof and gprof stages): launches,
GPU time per launch (gpu__time_duration) and, when the run also asked for
sm__cycles_elapsed.avg.per_second, the SM clock. Kernels are keyed by name
and grid (and block with --by-block); rows sorted by total time."""
import collections
import csv
import sys

TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
RATE_GHZ = {"cycle/nsecond": 1.0, "cycle/ns": 1.0, "cycle/usecond": 1e-3, "cycle/us": 1e-3,
            "cycle/second": 1e-9, "cycle/s": 1e-9, "Hz": 1e-9, "GHz": 1.0, "MHz": 1e-3}


def main(path, by_block):
    rows = collections.OrderedDict()
    for r in csv.DictReader(l for l in open(path) if l.startswith('"')):
        key = (r["Kernel Name"].split("(")[0][:80], r["Grid Size"], r["Block Size"] if by_block else "")
        d = rows.setdefault(key, {"n": 0, "us": 0.0, "ghz": None})
        v, u = float(r["Metric Value"].replace(",", "")), r["Metric Unit"]
        if r["Metric Name"].startswith("gpu__time_duration"):
            if u not in TIME_US:
                sys.exit("ncu_table: unknown time unit %r" % u)
            d["n"] += 1
            d["us"] += v * TIME_US[u]
        elif r["Metric Name"].startswith("sm__cycles_elapsed") and u in RATE_GHZ:
            d["ghz"] = v * RATE_GHZ[u]
    total = sum(d["us"] for d in rows.values())
    print("kernels: %d launches, GPU time %.1f us (each kernel alone, no overlap)" %
          (sum(d["n"] for d in rows.values()), total))
    for (name, grid, blk), d in sorted(rows.items(), key=lambda kv: -kv[1]["us"]):
        clk = " clk %.2f GHz" % d["ghz"] if d["ghz"] else ""
        print("%9.1f us %5d calls %9.2f us/call  %s grid %s%s%s" %
              (d["us"], d["n"], d["us"] / max(d["n"], 1), name, grid, " block " + blk if blk else "", clk))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench/ncu_table.py CSV [--by-block]")
    main(sys.argv[1], "--by-block" in sys.argv[2:])
