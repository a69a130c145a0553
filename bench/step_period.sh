#!/usr/bin/env bash
# bench/step_period.sh [LOG...] — the steady decode rate of each run in a
# KESTREL_STEP_LOG=1 log (stdin or files): the period between the starts of
# its one-row decode steps from the third on (the first runs without a CUDA
# graph and the second records one: first-use costs `kestrel run`'s decode
# tok/s keeps; a server pays them once per shape). A run ends at its
# "kestrel: prompt" line; prints one line per run. Host work between steps
# is inside the period (unlike the steps' own times, which end at the
# forward's sync).
awk '
/kestrel: step 1 rows \(0 prompt\)/ {
    n++
    s = $(NF - 1) + 0 # "(started at S s)"
    if (n == 3) first = s
    if (n >= 3) { last = s; m++ }
}
/kestrel: prompt/ {
    if (m > 1)
        printf "steady decode: step period %.3f ms over %d steps after the first two = %.1f tok/s\n",
               1000 * (last - first) / (m - 1), m, (m - 1) / (last - first)
    else
        print "steady decode: fewer than 4 one-row decode steps"
    n = 0; m = 0
}' "$@"
