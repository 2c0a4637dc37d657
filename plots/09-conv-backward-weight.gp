# plots/09-conv-backward-weight.gp: the convolution's weight gradient, the fastest verified rung
# against cuDNN at each shape of the sweep, a panel per pass and dtype: dw alone (bwd_weight),
# then dw and db (bwd_weight_bias), each in fp32 and fp16.
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/09-conv-backward-weight.csv'; gpu='<GPU name>'"
# and writes stdout to plots/09-conv-backward-weight.svg. Everything is read from the CSV by
# name of column, so new rungs and shapes appear without editing this file.
#
# At each shape, in TFLOP/s (the forward's 2 K C R S N P Q over the time, for every rung and
# both passes, so that a panel with db shows what summing it costs): the fastest verified rung
# that ran its own kernels (its number above its bar, with its speed against cuDNN), the
# library call (api), cuDNN on NCHW (vendor: with db, its two calls) and, in fp16 without db,
# cuDNN on NHWC tensors (vendor_nhwc, the bwd_weight_nhwc pass: what NCHW costs cuDNN; no rung
# is held to it). y is logarithmic: a 28x28 single-channel image and a ResNet layer are five
# decades apart. A shape or bar missing from the CSV is left out; a panel with no rows says
# "not measured".

if (!exists("csv")) csv = 'bench/results/h200/09-conv-backward-weight.csv'
if (!exists("gpu")) gpu = 'the GPU'

set terminal svg size 1200,1900 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace
set datafile missing "-"

# awk prelude: header names to column numbers (a CSV from before the `ran` column reads it as
# empty), and the shapes numbered in the order the program wrote them, so that every panel
# shares one axis.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } ' . \
      '!($c["shape"] in at) { at[$c["shape"]] = ++shapes; name[shapes] = $c["shape"] } ' . \
      '{ ran = ("ran" in c) ? $c["ran"] : "" } '
awk(prog) = "awk '" . AWK . prog . "' '" . csv . "'"

# One line a shape for dtype D and pass P: "index best-TFLOP/s best-rung best-vs-vendor api
# vendor nhwc", "-" where the CSV has no such row. The best is over verified rows of pass P of
# rungs that ran their own kernels (not api, not a vendor's, not the CPU reference); nhwc is
# vendor_nhwc's bwd_weight_nhwc row, whatever P.
ROWS = '$c["dtype"] != D || $c["tflops"] == "" { next } ' . \
       '{ i = at[$c["shape"]]; v = $c["variant"]; t = $c["tflops"] + 0; p = $c["pass"] } ' . \
       'p == P && v == "api" { api[i] = t } ' . \
       'p == P && v == "vendor" { vendor[i] = t } ' . \
       'p == "bwd_weight_nhwc" && v == "vendor_nhwc" { nhwc[i] = t } ' . \
       'p == P && v !~ /^(api|cpu|vendor)/ && $c["verified"] == 1 && ran == "" && ' . \
       '(!(i in best) || t > best[i]) { best[i] = t; rung[i] = v; x[i] = $c["vs_vendor"] } ' . \
       'function or_dash(v) { return v == "" ? "-" : v } ' . \
       'END { for (i = 1; i <= shapes; i++) printf("%d %s %s %s %s %s %s\n", i, ' . \
       'or_dash(best[i]), or_dash(rung[i]), or_dash(x[i]), or_dash(api[i]), ' . \
       'or_dash(vendor[i]), or_dash(nhwc[i])) }'
rows(d, p) = "< " . awk('BEGIN { D = "' . d . '"; P = "' . p . '" } ' . ROWS)

# The shapes as x tics, and the decades the rates span (every rate of every panel, so that
# the panels share the scale).
n_shapes = int(system(awk('END { print shapes + 0 }')))
tics = system(awk('END { for (i = 1; i <= shapes; i++) ' . \
                  'printf("%s\"%s\" %d", (i == 1 ? "" : ", "), name[i], i) }'))
RATES = '$c["tflops"] != "" && $c["variant"] != "cpu" { t = $c["tflops"] + 0; ' . \
        'if (!n++ || t < lo) lo = t; if (t > hi) hi = t } '
lo = real(system(awk(RATES . 'END { print lo + 0 }')))
hi = real(system(awk(RATES . 'END { print hi + 0 }')))
ybottom = lo > 0 ? 10 ** floor(log10(lo)) : 1e-3
ytop = hi > 0 ? 10 ** ceil(log10(hi) + 1) : 1  # a decade above the tallest bar for its label

set logscale y 10
set yrange [ybottom : ytop]
set format y "10^{%L}"
set ylabel "TFLOP/s (log scale)"
set xrange [0.4 : (n_shapes > 0 ? n_shapes : 1) + 0.6]
if (n_shapes > 0) { eval "set xtics (" . tics . ") rotate by -35 left noenhanced font ',9'" }
set grid ytics lc rgb "#dddddd"
set style fill solid 0.85 noborder
KEY = "set key outside below center horizontal Left reverse noenhanced samplen 2 font ',10'"
eval KEY

# Four bars side by side at each shape, W wide, centred on the shape's index.
W = 0.2
# Above the best bar: the rung's number (v5 of v5_fused_bias, 2d_v3 of 2d_v3_one_pass), and
# its speed against cuDNN where the row has one.
head(s) = s[1:strstrt(s . "_", "_") - 1]
number(rung) = rung[1:3] eq "2d_" ? "2d_" . head(rung[4:]) : head(rung)
best_label(rung, x) = " " . number(rung) . (x eq "-" ? "" : sprintf(" %.2fx", real(x)))

# The plot command of a panel (of dtype d and pass p), and vendor_nhwc's bars, which only
# fp16 without db has: elsewhere they are left out rather than plotted empty.
BARS = 'plot rows(d, p) using ($1 - 1.5 * W):2:($1 - 2 * W):($1 - W):(ybottom):2 ' . \
       'with boxxyerror lc rgb "#2ca02c" ' . \
       'title "fastest verified rung (above it: which, and its speed against cuDNN NCHW)", ' . \
       'rows(d, p) using ($1 - 1.5 * W):2:(best_label(strcol(3), strcol(4))) ' . \
       'with labels rotate by 90 left font ",8" noenhanced notitle, ' . \
       'rows(d, p) using ($1 - 0.5 * W):5:($1 - W):($1):(ybottom):5 with boxxyerror ' . \
       'lc rgb "#98df8a" title "api (the library call)", ' . \
       'rows(d, p) using ($1 + 0.5 * W):6:($1):($1 + W):(ybottom):6 with boxxyerror ' . \
       'lc rgb "#1f77b4" title "vendor: cuDNN, NCHW"'
NHWC_BARS = ', rows(d, p) using ($1 + 1.5 * W):7:($1 + W):($1 + 2 * W):(ybottom):7 ' . \
            'with boxxyerror lc rgb "#aec7e8" title "vendor_nhwc: cuDNN, NHWC (no rung held to it)"'

TITLE = "Convolution backward, weight gradient: the fastest verified rung against cuDNN at " . \
        "each shape on the %s"
set multiplot layout 4,1 title sprintf(TITLE, gpu) noenhanced font ",14"
do for [panel_no = 1:4] {
    d = panel_no % 2 == 1 ? "fp32" : "fp16"
    p = panel_no <= 2 ? "bwd_weight" : "bwd_weight_bias"
    set title d . (d eq "fp16" ? " storage, fp32 sums" : " (cuDNN in FMA math, no TF32)") . \
              (p eq "bwd_weight" ? ", dw (bwd_weight)" : \
               ", dw and db (bwd_weight_bias: cuDNN adds its bias call)") noenhanced
    measured = int(system(awk('$c["dtype"] == "' . d . '" && $c["pass"] == "' . p . '" && ' . \
                              '$c["tflops"] != "" && $c["variant"] != "cpu" { n++ } ' . \
                              'END { print n + 0 }')))
    if (measured == 0) {
        # Nothing measured: an empty frame that says so (gnuplot refuses an empty plot).
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [ybottom:ytop] -1 notitle
        unset label 1
        eval KEY
    } else {
        eval BARS . (d eq "fp16" && p eq "bwd_weight" ? NHWC_BARS : "")
    }
}
unset multiplot
