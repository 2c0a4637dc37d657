# plots/04-cross-entropy.gp: cross-entropy bandwidth against size, a panel per pass and dtype.
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/04-cross-entropy.csv'; gpu='<GPU name>'"
# and writes stdout to plots/04-cross-entropy.svg. Everything is read from the CSV by name of
# column, so new rungs appear without editing this file.
#
# x is the number of logits, N x C. The sweep (bench/sweeps/04-cross-entropy.txt) has two
# families of shapes: C growing at N = 1024, drawn as lines, and everything else (the seed
# presets, the large preset, N growing at C = 1000), drawn as unconnected points in the same
# colour: at one size a few long rows and many short ones can run very differently, so a line
# through both families would zigzag.

if (!exists("csv")) csv = 'bench/results/h200/04-cross-entropy.csv'
if (!exists("gpu")) gpu = 'the GPU'

set terminal svg size 1100,1150 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace

# awk prelude: map header names to column numbers; n(shape) = N x C, rows(shape) = N, printed
# with %.0f because mawk prints numbers past 2^31 as 2.14748e+09.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } ' . \
      'function n(s,  w, d, k, i, p) { split(s, w, "-"); k = split(w[1], d, "x"); ' . \
      'p = 1; for (i = 1; i <= k; i++) p *= d[i]; return p } ' . \
      'function rows(s,  d) { split(s, d, "x"); return d[1] + 0 } '
awk(prog) = "awk '" . AWK . prog . "' '" . csv . "'"

# The rungs, in the order the program wrote them (vendor included, the CPU reference left out):
# a rung's colour is its place in this list, so it is the same in every panel.
variants = system(awk('$c["variant"] != "cpu" && !seen[$c["variant"]]++ { print $c["variant"] }'))
index_of(v, i) = i > words(variants) ? 0 : (word(variants, i) eq v ? i : index_of(v, i + 1))

# x: only the sizes measured; log2 axis with a tick every power of four, labelled 2^k.
xmin = real(system(awk('NR == 2 || n($c["shape"]) < m { m = n($c["shape"]) } END { printf "%.0f", m }')))
xmax = real(system(awk('n($c["shape"]) > m { m = n($c["shape"]) } END { printf "%.0f", m }')))
set logscale x 2
set xrange [xmin / 1.5 : xmax * 1.5]
set xtics 2**(2 * floor(log(xmin) / log(4))), 4 format "2^{%L}"
set mxtics 2
set xlabel "logits, N x C"
set ylabel "GB/s"
set yrange [0:*]
set grid xtics ytics lc rgb "#dddddd"
KEY = "set key left top Left reverse noenhanced box opaque samplen 3 font ',9'"
eval KEY

array colours[8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
colour(v) = colours[(index_of(v, 1) - 1) % 8 + 1]

# The rows of one panel and rung as "logits GB/s", sorted by size; `family` selects N == 1024
# (sel = "==") or the rest (sel = "!=").
rows_of(p, d, v, sel) = "< " . awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] == "%s" && $c["gbps"] != "" && rows($c["shape"]) %s 1024 { y[sprintf("%%.0f", n($c["shape"]))] = $c["gbps"] } END { for (x in y) print x, y[x] }', p, d, v, sel)) . " | sort -g"
# The roof of a panel: GB/s / (% of roof) from the row with the largest percentage, the one
# whose rounding matters least (every row of one run has the same roof).
roof(p, d) = real(system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["pct_roof"] > best { best = $c["pct_roof"]; r = $c["gbps"] * 100 / best } END { print r + 0 }', p, d))))

array pass_names[3] = ["fwd", "bwd", "fwd_bwd"]
array pass_titles[3] = ["forward (loss)", "backward (dx)", "forward and backward (loss and dx)"]

set multiplot layout 3,2 title sprintf("Cross-entropy: memory bandwidth against size on the %s (lines: N = 1024, C growing; points: the other shapes)", gpu) noenhanced font ",13"
do for [panel_no = 1:6] {
    p = pass_names[(panel_no + 1) / 2]
    d = panel_no % 2 == 1 ? "fp32" : "fp16"
    set title sprintf("%s, %s", pass_titles[(panel_no + 1) / 2], d)
    here = system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["gbps"] != "" && !seen[$c["variant"]]++ { print $c["variant"] }', p, d)))
    r = roof(p, d)
    if (words(here) == 0) {
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [0:1] -1 notitle
        unset label 1
        eval KEY
    } else {
        plot for [v in here] rows_of(p, d, v, "==") using 1:2 with linespoints \
                 lw 1.5 pt 7 ps 0.6 lc rgb colour(v) dt 1 + (v eq "vendor") title v, \
             for [v in here] rows_of(p, d, v, "!=") using 1:2 with points \
                 pt 6 ps 0.9 lc rgb colour(v) notitle, \
             (r > 0 ? r : 1/0) with lines lw 1 lc rgb "#555555" dt 3 \
                 title (r > 0 ? sprintf("copy roof (%.0f GB/s)", r) : "")
    }
}
unset multiplot
