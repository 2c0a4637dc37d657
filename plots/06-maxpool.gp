# plots/06-maxpool.gp: max pooling bandwidth against the size of x, one panel per pass and dtype.
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/06-maxpool.csv'; gpu='<GPU name>'"
# and writes stdout to plots/06-maxpool.svg. Everything is read from the CSV by name of column, so
# new rungs appear without editing this file.

if (!exists("csv")) csv = 'bench/results/h200/06-maxpool.csv'
if (!exists("gpu")) gpu = 'the GPU'

set terminal svg size 1100,800 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace

# awk prelude: map header names to column numbers, and n(shape) = the number of elements, the
# product of the x-separated dimensions (window parameters after a '-' are not dimensions),
# printed with %.0f because mawk prints numbers past 2^31 as 2.14748e+09.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } ' . \
      'function n(s,  w, d, k, i, p) { split(s, w, "-"); k = split(w[1], d, "x"); ' . \
      'p = 1; for (i = 1; i <= k; i++) p *= d[i]; return p } '
awk(prog) = "awk '" . AWK . prog . "' '" . csv . "'"

# The rungs, in the order the program wrote them (vendor included, the CPU reference left out):
# a rung's colour is its place in this list, so it is the same in every panel.
variants = system(awk('$c["variant"] != "cpu" && !seen[$c["variant"]]++ { print $c["variant"] }'))
index_of(v, i) = i > words(variants) ? 0 : (word(variants, i) eq v ? i : index_of(v, i + 1))

# x: only the sizes measured; log2 axis with a tick every power of four, labelled 2^k.
xmin = real(system(awk('NR == 2 || n($c["shape"]) < m { m = n($c["shape"]) } END { printf "%.0f", m }')))
xmax = real(system(awk('n($c["shape"]) > m { m = n($c["shape"]) } END { printf "%.0f", m }')))
set logscale x 2
set xrange [xmin / 1.3 : xmax * 1.3]
set xtics 2**(2 * floor(log(xmin) / log(4))), 4 format "2^{%L}"
set mxtics 2
set xlabel "elements of x"
set ylabel "GB/s"
set yrange [0:*]
set grid xtics ytics lc rgb "#dddddd"
KEY = "set key left center Left reverse noenhanced box opaque samplen 3"
eval KEY

# One colour per rung, by its place in the variant list.
array colours[8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
colour(v) = colours[(index_of(v, 1) - 1) % 8 + 1]

# The rows of one panel and rung as "elements GB/s", sorted by size so the line runs left to right.
# Two shapes of one size (the seed 1024x1024 and the sweep's 1048576) give one point: the later row.
panel(p, d, v) = "< " . awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] == "%s" && $c["gbps"] != "" { y[sprintf("%%.0f", n($c["shape"]))] = $c["gbps"] } END { for (x in y) print x, y[x] }', p, d, v)) . " | sort -g"
# The roof of a panel: GB/s / (% of roof) from the row with the largest percentage, the one
# whose rounding matters least (every row of one run has the same roof).
roof(p, d) = real(system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["pct_roof"] > best { best = $c["pct_roof"]; r = $c["gbps"] * 100 / best } END { print r + 0 }', p, d))))

set multiplot layout 2,2 title sprintf("Max pooling: memory bandwidth against the size of x on the %s", gpu) noenhanced font ",14"
do for [panel_no = 1:4] {
    p = panel_no <= 2 ? "fwd" : "bwd"
    d = panel_no % 2 == 1 ? "fp32" : "fp16"
    set title sprintf("Max pooling %s, %s", p eq "fwd" ? "forward" : "backward", d)
    # The rungs with rows in this panel (a rung may skip a dtype), coloured by the global list.
    here = system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["gbps"] != "" && !seen[$c["variant"]]++ { print $c["variant"] }', p, d)))
    r = roof(p, d)
    if (words(here) == 0) {
        # Nothing measured: an empty frame that says so (gnuplot refuses an empty plot).
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [0:1] -1 notitle
        unset label 1
        eval KEY
    } else {
        plot for [v in here] panel(p, d, v) using 1:2 with linespoints \
                 lw 1.5 pt 7 ps 0.6 lc rgb colour(v) dt 1 + (v eq "vendor") title v, \
             (r > 0 ? r : 1/0) with lines lw 1 lc rgb "#555555" dt 3 \
                 title (r > 0 ? sprintf("copy roof (%.0f GB/s)", r) : "")
    }
}
unset multiplot
