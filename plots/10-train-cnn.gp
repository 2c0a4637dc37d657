# plots/10-train-cnn.gp: chapter 10, one epoch of the CNN, in three panels: the epoch's time
# against the batch size in fp32, the same in fp16 (log-log, a line per variant: our rungs,
# cuDNN, the CPU reference's extrapolated epoch, PyTorch's four ways, dashed), and the loss of
# every step of the epoch at batch 128 in fp32, ours against pytorch_graph (each step faint, the
# running mean of 20 steps bold).
# Rendered by plots/render (make plots), which passes
#   -e "csv='bench/results/<gpu>/10-train-cnn.csv'; gpu='<GPU name>'"
# and writes stdout to plots/10-train-cnn.svg. The step losses are read from the file beside
# the CSV, 10-train-cnn-loss.csv (variant,dtype,batch,step,loss; bench/run writes both). Both
# are read by name of column, so a variant that is not measured is left out of the key, and a
# panel with no rows says "not measured".

if (!exists("csv")) csv = 'bench/results/h200/10-train-cnn.csv'
if (!exists("gpu")) gpu = 'the GPU'
if (!exists("loss_csv")) loss_csv = csv[1:strlen(csv) - 4] . '-loss.csv'
LOSS_BATCH = "128"
LOSS_DTYPE = "fp32"
LOSS_WINDOW = 20

set terminal svg size 1100,1650 font "sans-serif,11" enhanced background "white"
set datafile separator whitespace

# awk prelude: header names to column numbers.
AWK = 'BEGIN { FS = "," } NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } '
awk(prog, file) = "awk '" . AWK . prog . "' '" . file . "'"

# The variants in the order of the key, a colour and a dash type each (PyTorch's dashed); a
# variant not listed here still plots, in grey, after them.
ORDER = "v1_library v2_pool_relu ours vendor cpu pytorch_loop pytorch_resident pytorch_graph " . \
        "pytorch_compiled_graph"
COLOURS = "#98df8a #2ca02c #d62728 #1f77b4 #000000 #c5b0d5 #9467bd #ff7f0e #8c564b"
at(v) = strstrt(" " . ORDER . " ", " " . v . " ")
colour(v) = at(v) > 0 ? word(COLOURS, words((" " . ORDER . " ")[1:at(v)]) + 1) : "#888888"
faint(v) = "#a0" . colour(v)[2:]    # the same colour, mostly transparent
dash(v) = v[1:8] eq "pytorch_" ? 2 : (v eq "cpu" ? 3 : 1)
width(v) = v eq "ours" ? 3 : (v eq "pytorch_graph" || v eq "pytorch_compiled_graph" ? 2 : 1.5)
name(v) = v eq "cpu" ? "cpu (reference; a few steps, extrapolated)" : \
          (v eq "vendor" ? "vendor (cuDNN + cuBLAS, graphed)" : v)

# The variants measured in dtype D, in ORDER, then any other by first appearance.
present(d) = system(awk('BEGIN { n = split("' . ORDER . '", o, " ") } ' . \
    '$c["dtype"] == "' . d . '" && $c["median_us"] != "" { seen[$c["variant"]] = 1; ' . \
    'if (!($c["variant"] in first)) { first[$c["variant"]] = ++m; other[m] = $c["variant"] } } ' . \
    'END { s = ""; for (i = 1; i <= n; i++) ' . \
    'if (o[i] in seen) { s = s " " o[i]; known[o[i]] = 1 } ' . \
    'for (i = 1; i <= m; i++) if (!(other[i] in known)) s = s " " other[i]; print s }', csv))
# "batch seconds" of variant V in dtype D, by increasing batch (the last row of a repeat wins).
times(d, v) = "< " . awk('$c["dtype"] == "' . d . '" && $c["variant"] == "' . v . '" && ' . \
    '$c["median_us"] != "" { t[$c["shape"] + 0] = $c["median_us"] / 1e6 } ' . \
    'END { for (b in t) print b, t[b] }', csv) . " | sort -n"

# One scale for both time panels: the decades the epochs span, and the batch sizes measured.
RANGE = '$c["median_us"] != "" { t = $c["median_us"] / 1e6; b = $c["shape"] + 0; ' . \
        'if (!n++ || t < lo) lo = t; if (t > hi) hi = t; if (n == 1 || b < bl) bl = b; ' . \
        'if (b > bh) bh = b } '
lo = real(system(awk(RANGE . 'END { print lo + 0 }', csv)))
hi = real(system(awk(RANGE . 'END { print hi + 0 }', csv)))
blo = real(system(awk(RANGE . 'END { print bl + 0 }', csv)))
bhi = real(system(awk(RANGE . 'END { print bh + 0 }', csv)))
ybottom = lo > 0 ? 10 ** floor(log10(lo)) : 1e-3
ytop = hi > 0 ? 10 ** ceil(log10(hi * 1.5)) : 1
ytop = ytop <= ybottom ? 10 * ybottom : ytop
bticks = system(awk('{ b[$c["shape"] + 0] = 1 } END { for (x in b) print x }', csv) . \
                " | sort -n | paste -s -d, -")

# The step losses of variant V at LOSS_BATCH, LOSS_DTYPE: "step loss running-mean".
have_losses = int(system("test -f '" . loss_csv . "' && echo 1 || echo 0"))
losses(v) = "< " . awk('BEGIN { W = ' . LOSS_WINDOW . ' } $c["variant"] == "' . v . '" && ' . \
    '$c["dtype"] == "' . LOSS_DTYPE . '" && $c["batch"] == "' . LOSS_BATCH . '" { ' . \
    'l[$c["step"] + 0] = $c["loss"] + 0; if ($c["step"] + 0 > last) last = $c["step"] + 0; ' . \
    'n++ } END { if (!n) exit; s = 0; for (i = 0; i <= last; i++) { s += l[i]; ' . \
    'if (i >= W) s -= l[i - W]; print i, l[i], s / (i < W ? i + 1 : W) } }', loss_csv)
loss_steps(v) = have_losses ? int(system(awk('$c["variant"] == "' . v . '" && $c["dtype"] == "' . \
    LOSS_DTYPE . '" && $c["batch"] == "' . LOSS_BATCH . '" { n++ } END { print n + 0 }', \
    loss_csv))) : 0

KEY = "set key outside right top vertical Left reverse noenhanced samplen 3 spacing 1.2 " . \
      "font ',10'"
TITLE = "Chapter 10, one epoch of the CNN on Fashion-MNIST, on the %s"
set multiplot layout 3,1 title sprintf(TITLE, gpu) noenhanced font ",14"
set grid xtics ytics lc rgb "#dddddd"
# The same margins in every panel, the key in the right one, so that the panels line up.
set lmargin at screen 0.08
set rmargin at screen 0.60

# Panels 1 and 2: the epoch's time against the batch size.
set logscale x 2
set logscale y 10
set xrange [blo > 0 ? blo / 1.3 : 16 : bhi > 0 ? bhi * 1.3 : 2048]
set yrange [ybottom : ytop]
set format y "10^{%L}"
if (strlen(bticks) > 0) { eval "set xtics (" . bticks . ")" }
set xlabel "batch size (images a step)"
set ylabel "epoch time, seconds (log scale)"
do for [d in "fp32 fp16"] {
    set title "Epoch time, " . d . (d eq "fp16" ? " (fp16 storage, fp32 sums; PyTorch: " . \
                  "autocast)" : " (TF32 off everywhere)") noenhanced
    V = present(d)
    if (words(V) == 0) {
        set label 1 "not measured" at graph 0.5, 0.5 center
        unset key
        plot [] [ybottom:ytop] -1 notitle
        unset label 1
    } else {
        eval KEY
        plot for [v in V] times(d, v) using 1:2 with linespoints lw width(v) dt dash(v) \
             pt 7 ps 0.6 lc rgb colour(v) title name(v)
    }
}

# Panel 3: the loss of every step, ours against pytorch_graph.
unset logscale x
unset logscale y
set autoscale xy
set xtics autofreq
set format y "%g"
set xlabel "step of the epoch (batch " . LOSS_BATCH . ")"
set ylabel "training loss (mean cross-entropy of the batch)"
set title sprintf("The loss of every step (faint) and its running mean of %d steps, batch %s, " . \
                  "%s", LOSS_WINDOW, LOSS_BATCH, LOSS_DTYPE) noenhanced
LOSS_VARIANTS = ""
do for [v in "ours pytorch_graph"] {
    if (loss_steps(v) > 0) { LOSS_VARIANTS = LOSS_VARIANTS . " " . v }
}
if (words(LOSS_VARIANTS) == 0) {
    set label 1 "not measured" at graph 0.5, 0.5 center
    unset key
    plot [0:1] [0:1] -1 notitle
    unset label 1
} else {
    eval KEY
    plot for [v in LOSS_VARIANTS] losses(v) using 1:2 with lines lw 0.8 lc rgb faint(v) \
             dt 1 notitle, \
         for [v in LOSS_VARIANTS] losses(v) using 1:3 with lines lw 2.5 lc rgb colour(v) \
             dt dash(v) title v . sprintf(" (running mean of %d)", LOSS_WINDOW)
}
unset multiplot
