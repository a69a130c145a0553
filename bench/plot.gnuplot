# plot.gnuplot — charts of one bench/bench.sh run, from the data files that
# `kestrel bench --plot-data PREFIX` writes:
#   gnuplot -e "data='PREFIX'; out='OUT'; title='TEXT'" bench/plot.gnuplot
# writes OUT.png (bars: decode tok/s and TTFT per workload, the concurrency
# sweep) and OUT-ladder.png (prefill / decode tok/s and TTFT against prompt
# length); a chart (or panel) whose data file is missing is left out.
# Needs gnuplot (Debian gnuplot-nox: pngcairo, or png as fallback).
if (!exists("data") || !exists("out")) { print "usage: gnuplot -e \"data='PREFIX'; out='OUT'\" bench/plot.gnuplot"; exit }
if (!exists("title")) title = "kestrel bench"
has(f) = system("test -s '".f."' && echo 1 || echo 0") eq "1"
bars = has(data."-bars.dat")
conc = has(data."-concurrency.dat")
ladder = has(data."-ladder.dat")

if (bars + conc > 0) {
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 1500,480 font "sans,10"
} else {
    set terminal png size 1500,480
}
set output out.".png"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key top right
set multiplot layout 1, 2 * bars + conc title title
if (bars) {
    set title "decode tok/s, one stream (median)"
    plot data."-bars.dat" using 2:xtic(1) title "decode tok/s" lc rgb "#3b7dd8"
    set title "time to first token, ms (median)"
    plot data."-bars.dat" using 4:xtic(1) title "TTFT ms" lc rgb "#d8843b"
}
if (conc) {
    set title "concurrency: tok/s vs streams"
    plot data."-concurrency.dat" using 2:xtic(1) title "total" lc rgb "#2e9e5b", \
         "" using 3 title "per stream (decode)" lc rgb "#9e2e7a"
}
unset multiplot
}

if (!ladder) exit
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,520 font "sans,10"
} else {
    set terminal png size 900,520
}
set output out."-ladder.png"
set style data linespoints
set title title." — context ladder"
set logscale x 2
set xlabel "prompt tokens"
set ylabel "tok/s"
set y2label "TTFT ms"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key top right
plot data."-ladder.dat" using 2:3 title "prefill tok/s" lw 2 pt 7 lc rgb "#3b7dd8", \
     "" using 2:4 title "decode tok/s" lw 2 pt 5 lc rgb "#2e9e5b", \
     "" using 2:5 axes x1y2 title "TTFT ms (right)" lw 2 pt 9 dt 2 lc rgb "#d8843b"
