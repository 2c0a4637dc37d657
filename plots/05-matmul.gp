# plots/05-matmul.gp: matmul throughput against size, one panel per dtype.
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/05-matmul.csv'; gpu='<GPU name>'"
# and writes stdout to plots/05-matmul.svg. Everything is read from the CSV by name of column, so
# new rungs appear without editing this file.
#
# x is the cube root of M N K. Square products of a power of two (the sweep's 128 to 8192) are
# the lines; the other shapes (1000, 4097, 1023x77x513) are open circles of the rung's colour,
# named once in the key. y is logarithmic: the rates span three decades, and on a linear axis
# the fp16 panel's tensor-core rungs press v1-v7 flat against zero.

if (!exists("csv")) csv = 'bench/results/h200/05-matmul.csv'
if (!exists("gpu")) gpu = 'the GPU'

set terminal svg size 1100,640 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace

# awk prelude: header names to column numbers; side(shape) = (M N K)^(1/3); square(shape) = 1
# when M = N = K is a power of two.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } ' . \
      'function side(s,  d) { split(s, d, "x"); return exp(log(d[1] * d[2] * d[3]) / 3) } ' . \
      'function square(s,  d) { split(s, d, "x"); return d[1] == d[2] && d[2] == d[3] && ' . \
      '2 ^ int(log(d[1]) / log(2) + 0.5) == d[1] } '
awk(prog) = "awk '" . AWK . prog . "' '" . csv . "'"

# The rungs, in the order the program wrote them (vendor included, the CPU reference left out).
variants = system(awk('$c["variant"] != "cpu" && !seen[$c["variant"]]++ { print $c["variant"] }'))
index_of(v, i) = i > words(variants) ? 0 : (word(variants, i) eq v ? i : index_of(v, i + 1))
array colours[12] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#000000"]
colour(v) = colours[(index_of(v, 1) - 1) % 12 + 1]

xmin = real(system(awk('NR == 2 || side($c["shape"]) < m { m = side($c["shape"]) } END { printf "%.0f", m }')))
xmax = real(system(awk('side($c["shape"]) > m { m = side($c["shape"]) } END { printf "%.0f", m }')))
set logscale x 2
set xrange [xmin / 1.3 : xmax * 1.3]
set xtics 2**floor(log(xmin) / log(2)), 2 format "%.0f"
set xlabel "(M N K)^{1/3}"
set ylabel "TFLOP/s (log scale)"
set logscale y 10
set yrange [*:*]
set grid xtics ytics lc rgb "#dddddd"
KEY = "set key outside below center horizontal maxcols 4 Left reverse noenhanced box samplen 3"
eval KEY

# The shapes that are no power-of-two square, for the key's entry of the open circles.
others = system(awk('!square($c["shape"]) && !seen[$c["shape"]]++ { printf "%s%s", n++ ? ", " : "", $c["shape"] }'))

# The rows of one panel and rung as "side TFLOP/s", square shapes (lines) or the others (points).
rows(d, v, sq) = "< " . awk(sprintf('$c["dtype"] == "%s" && $c["variant"] == "%s" && $c["tflops"] != "" && square($c["shape"]) == %d { printf "%%.3f %%s\n", side($c["shape"]), $c["tflops"] }', d, v, sq)) . " | sort -g"

set multiplot layout 1,2 title sprintf("Matmul: throughput against size on the %s", gpu) noenhanced font ",14"
do for [panel_no = 1:2] {
    d = panel_no == 1 ? "fp32" : "fp16"
    set title sprintf("C = A B, %s%s", d, d eq "fp16" ? " (fp32 accumulation)" : "")
    here = system(awk(sprintf('$c["dtype"] == "%s" && $c["variant"] != "cpu" && $c["tflops"] != "" && !seen[$c["variant"]]++ { print $c["variant"] }', d)))
    if (words(here) == 0) {
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [0.1:1] -1 notitle
        unset label 1
        eval KEY
    } else {
        plot for [v in here] rows(d, v, 1) using 1:2 with linespoints \
                 lw 1.5 pt 7 ps 0.6 lc rgb colour(v) dt 1 + (strstrt(v, "vendor") == 1) title v, \
             for [v in here] rows(d, v, 0) using 1:2 with points pt 6 ps 1 lc rgb colour(v) notitle, \
             keyentry with points pt 6 ps 1 lc rgb "#444444" \
                 title (others eq "" ? "" : "open circles: " . others)
    }
}
unset multiplot
