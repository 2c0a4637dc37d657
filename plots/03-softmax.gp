# plots/03-softmax.gp: softmax bandwidth against row length, one panel per pass and dtype.
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/03-softmax.csv'; gpu='<GPU name>'"
# and writes stdout to plots/03-softmax.svg. Everything is read from the CSV by name of column, so
# new rungs appear without editing this file.
#
# x is the row length C (the length of each reduction): the mapping of every rung is chosen by it.
# Only shapes of at least 2^22 elements are drawn (the sweep's are 2^24, `large` 2^27), so each
# point is a bandwidth, not a launch latency. Contiguous rows (H*W = 1) are the lines; rows H*W
# apart (H*W > 1) are the open circles of the same colour, unjoined.

if (!exists("csv")) csv = 'bench/results/h200/03-softmax.csv'
if (!exists("gpu")) gpu = 'the GPU'

set terminal svg size 1100,800 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace

# awk prelude: map header names to column numbers; n(shape) = elements, ch(shape) = C,
# hw(shape) = H*W, for NxCxHxW shapes; printf %.0f because mawk prints numbers past 2^31 as
# 2.14748e+09.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } ' . \
      'function n(s,  d, k, i, p) { k = split(s, d, "x"); p = 1; for (i = 1; i <= k; i++) p *= d[i]; return p } ' . \
      'function ch(s,  d) { split(s, d, "x"); return d[2] } ' . \
      'function hw(s,  d) { split(s, d, "x"); return d[3] * d[4] } ' . \
      'function big(s) { return n(s) >= 4194304 } '
awk(prog) = "awk '" . AWK . prog . "' '" . csv . "'"

# The rungs, in the order the program wrote them (vendor included, the CPU reference left out):
# a rung's colour is its place in this list, so it is the same in every panel.
variants = system(awk('$c["variant"] != "cpu" && !seen[$c["variant"]]++ { print $c["variant"] }'))
index_of(v, i) = i > words(variants) ? 0 : (word(variants, i) eq v ? i : index_of(v, i + 1))

# x: the row lengths measured; log2 axis with a tick every power of four, labelled 2^k.
xmin = real(system(awk('big($c["shape"]) && (m == "" || ch($c["shape"]) < m) { m = ch($c["shape"]) } END { printf "%.0f", m + 0 }')))
xmax = real(system(awk('big($c["shape"]) && ch($c["shape"]) > m { m = ch($c["shape"]) } END { printf "%.0f", m + 0 }')))
if (xmin < 1) xmin = 1
if (xmax < xmin) xmax = xmin
set logscale x 2
set xrange [xmin / 1.3 : xmax * 1.3]
set xtics 2**(2 * floor(log(xmin) / log(4))), 4 format "2^{%L}"
set mxtics 2
set xlabel "row length C (channels summed per output)"
set ylabel "GB/s"
set yrange [0:*]
set grid xtics ytics lc rgb "#dddddd"
KEY = "set key outside right top Left reverse noenhanced box samplen 2"
eval KEY

# One colour per rung, by its place in the variant list.
array colours[10] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
colour(v) = colours[(index_of(v, 1) - 1) % 10 + 1]

# The rows of one panel and rung as "C GB/s", one per shape (strided shapes may share a C),
# sorted by C so the line runs left to right; contiguous = 1 keeps H*W = 1, 0 keeps H*W > 1.
rows(p, d, v, contiguous) = "< " . awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] == "%s" && $c["gbps"] != "" && big($c["shape"]) && (hw($c["shape"]) == 1) == %d { y[$c["shape"]] = $c["gbps"] } END { for (s in y) print ch(s), y[s] }', p, d, v, contiguous)) . " | sort -g"
# The roof of a panel: GB/s / (% of roof) from the row with the largest percentage, the one
# whose rounding matters least (every row of one run has the same roof).
roof(p, d) = real(system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["pct_roof"] > best { best = $c["pct_roof"]; r = $c["gbps"] * 100 / best } END { print r + 0 }', p, d))))

set multiplot layout 2,2 title sprintf("Softmax over NCHW channels: memory bandwidth against row length on the %s", gpu) noenhanced font ",14"
do for [panel_no = 1:4] {
    p = panel_no <= 2 ? "fwd" : "bwd"
    d = panel_no % 2 == 1 ? "fp32" : "fp16"
    set title sprintf("softmax %s, %s (lines: H*W = 1; circles: H*W > 1)", p eq "fwd" ? "forward" : "backward", d)
    # The rungs with rows in this panel (a rung may skip a dtype), coloured by the global list.
    here = system(awk(sprintf('$c["pass"] == "%s" && $c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["gbps"] != "" && big($c["shape"]) && !seen[$c["variant"]]++ { print $c["variant"] }', p, d)))
    r = roof(p, d)
    if (words(here) == 0) {
        # Nothing measured: an empty frame that says so (gnuplot refuses an empty plot).
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [0:1] -1 notitle
        unset label 1
        eval KEY
    } else {
        plot for [v in here] rows(p, d, v, 1) using 1:2 with linespoints \
                 lw 1.5 pt 7 ps 0.6 lc rgb colour(v) dt 1 + (v eq "vendor") title v, \
             for [v in here] rows(p, d, v, 0) using 1:2 with points \
                 pt 6 ps 1.1 lc rgb colour(v) notitle, \
             (r > 0 ? r : 1/0) with lines lw 1 lc rgb "#555555" dt 3 \
                 title (r > 0 ? sprintf("copy roof (%.0f GB/s)", r) : "")
    }
}
unset multiplot
