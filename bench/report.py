#!/usr/bin/env python3
"""bench/report.py: the generator behind `make report` (needs no GPU).

Reads bench/results/<gpu>/NN-name.csv (the rows the chapter programs wrote during `make bench`)
and bench/sweeps/NN-name.txt (which shapes are the `seed`, `large` and `sweep` configurations),
and writes
  BENCHMARKS.md                 every GPU folder, every chapter: seed and large tables in full,
                                then one compact table of the size sweep;
  chapters/NN-name/README.md    the text between <!-- bench:begin --> and <!-- bench:end -->:
                                the chapter's ladder at its seed and large shapes, for one GPU
                                ($BENCH_GPU, else h200 if measured, else the first folder);
                                and each summary table, between a comment
                                  <!-- bench:summary SHAPE METRIC
                                  rung: what it teaches
                                  ... -->
                                and <!-- bench:end -->: a row per rung measured at SHAPE, a
                                column per pass and dtype, METRIC (pct_roof, tflops or
                                vs_vendor) in each cell, the best verified rung's in bold, and
                                the comment's words for the rung in a last column.
  README.md                     the headline table, between a comment
                                  <!-- bench:headline
                                  NN-name SHAPE PASS: what the line shows
                                  ... -->
                                and <!-- bench:end -->: a line per entry, the best verified rung
                                at SHAPE and PASS in each dtype, against the vendor, with its
                                share of the roof (or, for FLOP/s, its TFLOP/s).
Chapter 10 (10-train-cnn) is different: its rows are epochs, its CSV has four more columns
(images_per_s, loss, train_acc, test_acc), it keeps its cpu rows (the CPU reference's epoch,
extrapolated), and its PyTorch rows (pytorch_*) stand beside ours; its section and README block
are a table per dtype, a row per batch size (see chapter10_tables). Its step-loss log,
NN-name-loss.csv, is the plot's, not the report's: it is skipped here.
With --check it writes nothing and exits 1 if any file would change (the tests run it).
The output depends on the input files only (and $BENCH_GPU), so it is the same bytes every run.
A malformed CSV stops it with exit status 1 and a message naming the file and line.
"""
import csv
import glob
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = "bench/results"
SWEEPS = "bench/sweeps"
HEADER = ("chapter,pass,variant,dtype,shape,median_us,min_us,max_us,gbps,tflops,pct_roof,"
          "vs_vendor,max_abs_err,rel_err,verified,gpu,cc,cuda,date,ran").split(",")
OLD_HEADER = HEADER[:-1]    # results written before rows said which rung's kernels ran
CH10 = "10-train-cnn"       # the CNN's epochs: HEADER and four columns of its own
CH10_EXTRA = ["images_per_s", "loss", "train_acc", "test_acc"]
CH10_HEADER = HEADER + CH10_EXTRA
CH10_ORDER = ["v1_library", "v2_pool_relu", "ours", "vendor", "cpu", "pytorch_loop",
              "pytorch_resident", "pytorch_graph", "pytorch_compiled_graph"]
NUMERIC = ["median_us", "min_us", "max_us", "gbps", "tflops", "pct_roof", "vs_vendor",
           "max_abs_err", "rel_err"]
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
SUMMARY = "<!-- bench:summary"
HEADLINE = "<!-- bench:headline"
METRICS = ("pct_roof", "tflops", "vs_vendor")
PASS_ORDER = ["fwd", "atb", "abt", "bwd", "fwd_bwd", "bwd_input", "bwd_weight", "step"]
PASS_NAME = {"fwd": "forward", "bwd": "backward", "fwd_bwd": "forward and backward",
             "bwd_input": "backward (input)", "bwd_weight": "backward (weight)",
             "step": "training step",
             "atb": "A^T B", "abt": "A B^T"}     # chapter 05's transposed forms
DTYPE_ORDER = ["fp32", "fp16"]


class Malformed(Exception):
    pass


# ---------------------------------------------------------------------------------- reading

def read_csv(path, chapter):
    """The rows of one results CSV as dicts, numbers as floats (None where empty)."""
    rows = []
    header = HEADER
    allowed = (CH10_HEADER,) if chapter == CH10 else (HEADER, OLD_HEADER)
    numeric = NUMERIC + (CH10_EXTRA if chapter == CH10 else [])
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        for fields in reader:
            where = f"{path}:{reader.line_num}"
            if reader.line_num == 1:
                if fields not in allowed:
                    raise Malformed(f"{where}: the header is not the schema in README.md "
                                    f"({','.join(allowed[0])})")
                header = fields
                continue
            if not fields:          # a blank line
                continue
            if len(fields) != len(header):
                raise Malformed(f"{where}: {len(fields)} fields, expected {len(header)}")
            row = dict(zip(header, fields))
            row.setdefault("ran", "")
            if row["chapter"] != chapter:
                raise Malformed(f"{where}: chapter is '{row['chapter']}', expected '{chapter}'")
            for key in numeric:
                text = row[key].strip()
                try:
                    row[key] = float(text) if text else None
                except ValueError:
                    raise Malformed(f"{where}: {key} is '{text}', not a number") from None
            if row["verified"] not in ("0", "1"):
                raise Malformed(f"{where}: verified is '{row['verified']}', expected 0 or 1")
            row["verified"] = row["verified"] == "1"
            rows.append(row)
    if not rows and os.path.getsize(path) == 0:
        raise Malformed(f"{path}:1: empty file, expected the header line")
    return rows


def read_sweep(path):
    """{label: [shapes in file order]} from a sweep file (`LABEL SHAPE [FLAGS...]` a line)."""
    shapes = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) < 2:
                raise Malformed(f"{path}:{n}: expected 'LABEL SHAPE [FLAGS...]'")
            if words[1] not in shapes.setdefault(words[0], []):
                shapes[words[0]].append(words[1])
    return shapes


def rank(order, value):
    """Sort key: the listed values first, in list order, then the rest by name."""
    return (order.index(value), "") if value in order else (len(order), value)


def is_vendor(v):
    """The vendor rung and its relatives (vendor_mma_sync: cuBLAS held to v9's instruction)."""
    return v == "vendor" or v.startswith("vendor_")


def is_pytorch(v):
    """Chapter 10's PyTorch rows (pytorch_loop, pytorch_graph, ...): not ours, not the vendor."""
    return v.startswith("pytorch_")


def is_own_rung(r):
    """A rung's row that timed the rung's own kernels: not the vendor's, not the library call
    (the api row), not a rung that handed the shape to another rung's kernels; nor the CPU
    reference or PyTorch (chapter 10 keeps those rows)."""
    return (not is_vendor(r["variant"]) and r["variant"] not in ("api", "cpu")
            and not is_pytorch(r["variant"]) and not r["ran"])


def short(rung):
    """v3_warp_shuffle -> v3, 2d_v3_one_pass -> 2d_v3; a vendor's algorithm
    (IMPLICIT_PRECOMP_GEMM) stays whole"""
    m = re.match(r"((?:\d+d_)?v\d+)(?:_|$)", rung)
    return m.group(1) if m else rung


def variant_key(v):
    """v1 < v2 < ... < v10 by rung number, then a second ladder's (chapter 09's 2d_v1, 2d_v2,
    ...), then api, vendor, its relatives, then the rest."""
    m = re.match(r"v(\d+)", v)
    if m:
        return (0, int(m.group(1)), v)
    m = re.match(r"\d+d_v(\d+)", v)
    if m:
        return (1, int(m.group(1)), v)
    if v == "api":
        return (2, 0, v)
    return (3, 0 if v == "vendor" else 1, v) if is_vendor(v) else (4, 0, v)


def latest(rows):
    """Drop repeats of one (pass, variant, dtype, shape): the last row in the file wins."""
    last = {}
    for r in rows:
        last[(r["pass"], r["variant"], r["dtype"], r["shape"])] = r
    return [r for r in rows if last[(r["pass"], r["variant"], r["dtype"], r["shape"])] is r]


# ---------------------------------------------------------------------------------- formatting

def fmt_us(x):
    """Three significant figures (2.61, 12.3, 517; 0.512), whole microseconds from 100 on."""
    if x is None:
        return ""
    if x < 100:
        x = float(f"{x:.3g}")   # so 9.996 prints 10.0, not 10.00
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def fmt_num(x, spec):
    return "" if x is None else format(x, spec)


def fmt_tflops(x):
    return "" if x is None else (f"{x:.1f}" if x >= 1 else f"{x:.2g}")


def rate_unit(rows):
    """'GB/s', 'TFLOP/s', or '' when the rows mix them (each cell then names its unit)."""
    units = {("GB/s" if r["gbps"] is not None else "TFLOP/s") for r in rows
             if r["gbps"] is not None or r["tflops"] is not None}
    return units.pop() if len(units) == 1 else ("" if units else "GB/s")


def fmt_rate(r, unit):
    if r is None:
        return ""
    if r["gbps"] is not None:
        text = fmt_num(r["gbps"], ".0f")
        return text if unit else text + " GB/s"
    if r["tflops"] is not None:
        text = fmt_tflops(r["tflops"])
        return text if unit else text + " TFLOP/s"
    return ""


def fmt_x(x):
    return "" if x is None else f"{x:.2f}x"


def table(header, align, rows):
    """A Markdown table; align is a string of 'l'/'r', one a column."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def span(dates):
    """'2026-11-29', or '2026-11-28 to 2026-11-29' (ISO dates sort as text)."""
    dates = sorted(set(d for d in dates if d))
    if not dates:
        return "?"
    return dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"


def distinct(values):
    """Every value met, sorted ('CUDA 13.0', or '12.8, 13.0' if the runs differ)."""
    return ", ".join(sorted(set(v for v in values if v))) or "?"


# ---------------------------------------------------------------------------------- BENCHMARKS.md

def sort_rows(rows):
    return sorted(rows, key=lambda r: (rank(PASS_ORDER, r["pass"]), rank(DTYPE_ORDER, r["dtype"]),
                                       variant_key(r["variant"])))


def has_roof(unit):
    """Rows in FLOP/s have no measured roof (the vendor rung is their yardstick)."""
    return unit != "TFLOP/s"


def full_table(rows):
    unit = rate_unit(rows)
    roof = has_roof(unit)
    body = [[r["pass"], r["dtype"], r["variant"], fmt_us(r["median_us"]),
             f"{fmt_us(r['min_us'])}-{fmt_us(r['max_us'])}" if r["min_us"] is not None else "",
             fmt_rate(r, unit)] + ([fmt_num(r["pct_roof"], ".1f")] if roof else []) +
            [fmt_x(r["vs_vendor"]), fmt_num(r["max_abs_err"], ".2e"),
             ("yes" if r["verified"] else "NO") + (f", ran {r['ran']}" if r["ran"] else "")]
            for r in sort_rows(rows)]
    return table(["pass", "dtype", "variant", "median us", "min-max us", unit or "rate"] +
                 (["% of roof"] if roof else []) + ["vs vendor", "max abs err", "verified"],
                 "lllrrr" + ("r" if roof else "") + "rrl", body)


def sweep_table(rows, shapes):
    """One row per (pass, dtype, shape): the fastest verified rung against the vendor."""
    unit = rate_unit(rows)
    by_key = {}
    for r in rows:
        by_key.setdefault((r["pass"], r["dtype"], r["shape"]), []).append(r)
    passes = sorted({r["pass"] for r in rows}, key=lambda p: rank(PASS_ORDER, p))
    dtypes = sorted({r["dtype"] for r in rows}, key=lambda d: rank(DTYPE_ORDER, d))
    body = []
    for p in passes:
        for d in dtypes:
            for shape in shapes:
                group = by_key.get((p, d, shape))
                if not group:
                    continue
                vendor = next((r for r in group if r["variant"] == "vendor"), None)
                api = next((r for r in group if r["variant"] == "api"), None)
                rungs = [r for r in group if is_own_rung(r) and r["verified"]
                         and r["median_us"] is not None]
                best = min(rungs, key=lambda r: (r["median_us"], variant_key(r["variant"])),
                           default=None)
                speedup = (vendor["median_us"] / best["median_us"]
                           if best and vendor and vendor["median_us"] and best["median_us"]
                           else None)
                api_cell = ""
                if api and api["median_us"]:
                    api_cell = fmt_us(api["median_us"]) + (f" ({short(api['ran'])})"
                                                           if api["ran"] else "")
                    if not api["verified"]:
                        api_cell += " (failed check)"
                body.append([p, d, shape, best["variant"] if best else "(none verified)",
                             fmt_us(best and best["median_us"]), fmt_rate(best, unit),
                             fmt_us(vendor and vendor["median_us"]), fmt_rate(vendor, unit),
                             fmt_x(speedup), api_cell,
                             fmt_x(api and best and api["median_us"] and
                                   best["median_us"] / api["median_us"])])
    rate = unit or "rate"
    return table(["pass", "dtype", "shape", "best rung", "us", rate, "vendor us",
                  f"vendor {rate}", "best vs vendor", "api us (its rung)", "api vs best"],
                 "llllrrrrrrr", body)


def chapter_section(chapter, rows, labels):
    out = [f"### {chapter}", ""]
    if labels is None:
        warn(f"no {SWEEPS}/{chapter}.txt: every shape of {chapter} goes in its sweep table")
        labels = {"sweep": list(dict.fromkeys(r["shape"] for r in rows))}
    extra = sorted({r["shape"] for r in rows} - {s for ss in labels.values() for s in ss})
    if extra:
        warn(f"{chapter}: shapes measured but not in {SWEEPS}/{chapter}.txt, left out: "
             + " ".join(extra))
    for label, title in (("seed", "Seed configuration"), ("large", "Large configuration")):
        for shape in labels.get(label, []):
            chosen = [r for r in rows if r["shape"] == shape]
            if chosen:
                out += [f"{title} `{shape}`:", ""] + full_table(chosen) + [""]
    shapes = labels.get("sweep", [])
    chosen = [r for r in rows if r["shape"] in shapes]
    if chosen:
        out += ["Size sweep: the fastest verified rung at each shape against the vendor library "
                "(`best vs vendor` above 1 means faster):", ""]
        out += sweep_table(chosen, shapes) + [""]
    return out


def gpu_section(folder, chapters):
    """chapters: [(chapter, rows)] of one results folder."""
    rows = [r for _, rs in chapters for r in rs]
    # The CUDA of the programs here; PyTorch's rows carry its own build's (chapter 10 says it).
    ours = [r for r in rows if not is_pytorch(r["variant"])]
    out = [f"## {distinct(r['gpu'] for r in rows)}", "",
           f"Compute capability {distinct(r['cc'] for r in rows)}, "
           f"CUDA {distinct(r['cuda'] for r in ours)}, measured {span(r['date'] for r in rows)}; "
           f"results in `{RESULTS}/{folder}/`.", ""]
    for chapter, rs in chapters:
        if chapter == CH10:
            out += chapter10_section(chapter, rs, load_sweep(chapter))
        else:
            out += chapter_section(chapter, rs, load_sweep(chapter))
    return out


# ---------------------------------------------------------------------------------- chapter 10

def ch10_key(v):
    """Chapter 10's variants in the order of its tables: its rungs, the vendor, the CPU
    reference, PyTorch's four ways, then any other by name."""
    return rank(CH10_ORDER, v)


def ch10_name(v):
    return "cpu (extrapolated)" if v == "cpu" else v


def ch10_batches(rows, labels, quiet=False):
    """The batch sizes of the sweep file (every label, in file order), else of the rows, in
    increasing order; quiet: no warnings (BENCHMARKS.md's section has given them)."""
    if labels is None:
        if not quiet:
            warn(f"no {SWEEPS}/{CH10}.txt: every batch size of {CH10} goes in its tables")
        return sorted({r["shape"] for r in rows}, key=lambda b: (len(b), b))
    batches = list(dict.fromkeys(s for ss in labels.values() for s in ss))
    extra = sorted({r["shape"] for r in rows} - set(batches), key=lambda b: (len(b), b))
    if extra and not quiet:
        warn(f"{CH10}: batch sizes measured but not in {SWEEPS}/{CH10}.txt, left out: "
             + " ".join(extra))
    return batches


def fmt_s(x):
    """Seconds to three significant figures, trailing zeros kept (0.0140, 1.20, 93.8, 412)."""
    if x is None or x <= 0:
        return "" if x is None else "0"
    x = float(f"{x:.3g}")
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.{max(0, 2 - math.floor(math.log10(x)))}f}"


def fmt_ratio(x):
    """1.62x; a ratio under 0.01 (the CPU reference against cuDNN) to two figures."""
    if x is None or x >= 0.01 or x <= 0:
        return fmt_x(x)
    two = float(f"{x:.2g}")
    return f"{two:.{1 - math.floor(math.log10(two))}f}x"


def ch10_seconds(r):
    """An epoch's seconds, with a note where the row's check did not pass (the CPU reference
    is the check, and PyTorch's verified says that its loss stayed finite)."""
    if r is None or r["median_us"] is None:
        return ""
    text = fmt_s(r["median_us"] / 1e6)
    if not r["verified"] and r["variant"] != "cpu":
        text += " (loss not finite)" if is_pytorch(r["variant"]) else " (failed check)"
    return text


def ch10_faster(ours, other):
    """other's epoch over ours': above 1, ours is faster."""
    if not ours or not other or not ours["median_us"] or not other["median_us"]:
        return ""
    return fmt_x(other["median_us"] / ours["median_us"])


def chapter10_tables(rows, batches):
    """A table per dtype, a row per batch size: each variant's epoch in seconds, then ours
    against the vendor and PyTorch's graphed ways, and ours' test accuracy beside
    pytorch_graph's. Where a dtype has no PyTorch row at a batch (fp16 PyTorch not run), the
    comparisons take PyTorch's fp32 row and say so. Columns with nothing in them are left out."""
    cell = {(r["variant"], r["dtype"], r["shape"]): r for r in rows}
    dtypes = sorted({r["dtype"] for r in rows}, key=lambda d: rank(DTYPE_ORDER, d))
    out = []
    for d in dtypes:
        variants = sorted({r["variant"] for r in rows if r["dtype"] == d}, key=ch10_key)
        header = ["batch"] + [f"{ch10_name(v)} s" for v in variants] + \
            ["ours vs vendor", "ours vs pytorch_graph", "ours vs pytorch_compiled_graph",
             "ours test %", "pytorch_graph test %"]
        body = []
        for b in batches:
            if not any((v, d, b) in cell for v in variants):
                continue
            ours = cell.get(("ours", d, b))

            def torch_row(v):
                """PyTorch's row of this dtype, else its fp32 row, marked."""
                r = cell.get((v, d, b))
                if r is None and d != "fp32" and (v, "fp32", b) in cell:
                    return cell[(v, "fp32", b)], " (fp32 PyTorch)"
                return r, ""

            graph, graph_note = torch_row("pytorch_graph")
            compiled, compiled_note = torch_row("pytorch_compiled_graph")
            line = [b] + [ch10_seconds(cell.get((v, d, b))) for v in variants]
            line.append(ch10_faster(ours, cell.get(("vendor", d, b))))
            for r, note in ((graph, graph_note), (compiled, compiled_note)):
                text = ch10_faster(ours, r)
                line.append(text + note if text else "")
            line.append(fmt_num(ours and ours["test_acc"], ".2f"))
            text = fmt_num(graph and graph["test_acc"], ".2f")
            line.append(text + graph_note if text else "")
            body.append(line)
        if not body:
            continue
        keep = [0] + [k for k in range(1, len(header)) if any(line[k] for line in body)]
        out += [f"**{d}{' (PyTorch: autocast, fp32 master weights)' if d == 'fp16' else ''}, "
                f"epoch seconds**", ""]
        out += table([header[k] for k in keep], "l" + "r" * (len(keep) - 1),
                     [[line[k] for k in keep] for line in body]) + [""]
    return out


def chapter10_intro(rows):
    torch = [r for r in rows if is_pytorch(r["variant"])]
    text = ("A row per batch size: each variant's time for one epoch, in seconds (the median of "
            "the epochs it trained), from the same initial weights on the same batches in the "
            "same order. `ours vs X` is X's epoch over ours (above 1 means ours is faster); test "
            "% is the accuracy on the test images after the epoch. `cpu (extrapolated)` is the "
            "CPU reference's mean time over its first few steps, times the steps of an epoch.")
    if torch:
        text += (f" PyTorch's rows come from `bench/pytorch/train_cnn.py` (its CUDA "
                 f"{distinct(r['cuda'] for r in torch)}), timed on the host's clock between "
                 "two synchronizations; where a dtype has no PyTorch row at a batch size, the "
                 "comparison takes PyTorch's fp32 row and says `(fp32 PyTorch)`.")
    return [text, ""]


def chapter10_rows_table(rows, batches):
    """Every row of chapter 10 in full, for BENCHMARKS.md."""
    order = {b: i for i, b in enumerate(batches)}
    chosen = sorted((r for r in rows if r["shape"] in order),
                    key=lambda r: (rank(DTYPE_ORDER, r["dtype"]), order[r["shape"]],
                                   ch10_key(r["variant"])))

    def check(r):
        if r["variant"] == "cpu":
            return "reference"
        if is_pytorch(r["variant"]):
            return "loss finite" if r["verified"] else "loss NOT finite"
        return "yes" if r["verified"] else "NO"

    body = [[r["dtype"], r["shape"], ch10_name(r["variant"]),
             fmt_s(r["median_us"] and r["median_us"] / 1e6),
             f"{fmt_s(r['min_us'] / 1e6)}-{fmt_s(r['max_us'] / 1e6)}"
             if r["min_us"] is not None and r["max_us"] is not None else "",
             fmt_num(r["images_per_s"], ".0f"), fmt_tflops(r["tflops"]),
             fmt_num(r["loss"], ".4f"), fmt_num(r["train_acc"], ".2f"),
             fmt_num(r["test_acc"], ".2f"), fmt_ratio(r["vs_vendor"]), check(r)]
            for r in chosen]
    return table(["dtype", "batch", "variant", "epoch s", "min-max s", "images/s", "TFLOP/s",
                  "mean loss", "train %", "test %", "vs vendor", "step check"],
                 "lrlrrrrrrrrl", body)


def chapter10_section(chapter, rows, labels):
    """BENCHMARKS.md's section for chapter 10: the tables of its README, then every row."""
    batches = ch10_batches(rows, labels)
    out = [f"### {chapter}", ""] + chapter10_intro(rows) + chapter10_tables(rows, batches)
    out += ["Every row (train % counts each prediction made before its step's update; the "
            "cpu row's loss and train % are those of the steps it ran):", ""]
    out += chapter10_rows_table(rows, batches) + [""]
    return out


def chapter10_block(rows, labels):
    """Chapter 10's README block: where it was measured, then a table per dtype."""
    c_rows = [r for r in rows if not is_pytorch(r["variant"])] or rows
    out = ["", f"Measured on the {distinct(r['gpu'] for r in rows)} "
           f"(compute capability {distinct(r['cc'] for r in rows)}, "
           f"CUDA {distinct(r['cuda'] for r in c_rows)}), "
           f"{span(r['date'] for r in rows)}. Reproduce with `make bench && make report`; "
           f"every row is in [BENCHMARKS.md](../../BENCHMARKS.md).", ""]
    batches = ch10_batches(rows, labels, quiet=True)
    return out + chapter10_intro(rows) + chapter10_tables(rows, batches)


# ---------------------------------------------------------------------------------- READMEs

def readme_block(rows, labels):
    """The chapter's ladder at its seed and large shapes, fp32 and fp16 side by side."""
    unit = rate_unit(rows)
    rate = unit or "rate"
    roof = has_roof(unit)
    dtypes = sorted({r["dtype"] for r in rows}, key=lambda d: rank(DTYPE_ORDER, d))
    out = ["", f"Measured on the {distinct(r['gpu'] for r in rows)} "
           f"(compute capability {distinct(r['cc'] for r in rows)}, "
           f"CUDA {distinct(r['cuda'] for r in rows)}), "
           f"{span(r['date'] for r in rows)}. Reproduce with `make bench && make report`; "
           f"every shape is in [BENCHMARKS.md](../../BENCHMARKS.md). "
           f"`vs vendor` above 1 means faster than the vendor library.", ""]
    for label, title in (("seed", "Seed"), ("large", "Large")):
        for shape in labels.get(label, []):
            chosen = [r for r in rows if r["shape"] == shape]
            for p in sorted({r["pass"] for r in chosen}, key=lambda p: rank(PASS_ORDER, p)):
                cells = {(r["variant"], r["dtype"]): r for r in chosen if r["pass"] == p}
                header, body = ["rung"], []
                for d in dtypes:
                    header += [f"{d} us", f"{d} {rate}"] + ([f"{d} % roof"] if roof else []) + \
                        [f"{d} vs vendor"]
                for v in sorted({v for v, _ in cells}, key=variant_key):
                    line = [v]
                    for d in dtypes:
                        r = cells.get((v, d))
                        us = fmt_us(r and r["median_us"])
                        if r and r["ran"]:
                            us += f" ({short(r['ran'])})"
                        if r and not r["verified"]:
                            us += " (failed check)"
                        line += [us, fmt_rate(r, unit)] + \
                            ([fmt_num(r and r["pct_roof"], ".1f")] if roof else []) + \
                            [fmt_x(r and r["vs_vendor"])]
                    body.append(line)
                out += [f"**{title}, `{shape}`, {PASS_NAME.get(p, p)}**", ""]
                out += table(header, "l" + "r" * (len(header) - 1), body) + [""]
    return out


def summary_cell(r, metric):
    if r is None:
        return ""
    if metric == "pct_roof":
        return fmt_num(r["pct_roof"], ".1f") + "%" if r["pct_roof"] else ""
    if metric == "vs_vendor":
        return fmt_x(r["vs_vendor"])
    text = fmt_tflops(r["tflops"])
    if text and r["vs_vendor"] and r["variant"] != "vendor":
        text += f" ({100 * r['vs_vendor']:.1f}%)"
    return text


def summary_table(rows, shape, metric, notes, where):
    """A rung a row at one shape, a (pass, dtype) a column: the chapter's ladder at a glance."""
    chosen = [r for r in rows if r["shape"] == shape]
    if not chosen:
        raise Malformed(f"{where}: no rows at shape {shape}")
    columns = sorted({(r["pass"], r["dtype"]) for r in chosen},
                     key=lambda c: (rank(PASS_ORDER, c[0]), rank(DTYPE_ORDER, c[1])))
    cells = {(r["variant"], r["pass"], r["dtype"]): r for r in chosen}
    best = {}
    for p, d in columns:
        rungs = [r for r in chosen if r["pass"] == p and r["dtype"] == d and r["verified"]
                 and is_own_rung(r) and r["median_us"]]
        if rungs:
            best[(p, d)] = min(rungs, key=lambda r: r["median_us"])["variant"]
    body = []
    for v in sorted({r["variant"] for r in chosen}, key=variant_key):
        line = [v]
        for p, d in columns:
            r = cells.get((v, p, d))
            text = summary_cell(r, metric)
            if r and r["ran"]:
                text += f" ({short(r['ran'])})"
            if r and not r["verified"]:
                text += " (failed check)"
            line.append(f"**{text}**" if text and best.get((p, d)) == v else text)
        line.append(notes.get(v, ""))
        body.append(line)
    unknown = sorted(set(notes) - {r["variant"] for r in chosen})
    if unknown:
        raise Malformed(f"{where}: notes for rungs not measured at {shape}: {', '.join(unknown)}")
    header = ["rung"] + [f"{p} {d}" for p, d in columns] + ["what it teaches"]
    return table(header, "l" + "r" * len(columns) + "l", body)


def replace_summaries(lines, rows, path):
    """Regenerates every summary table of a README (see the module's docstring)."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith(SUMMARY):
            out.append(line)
            i += 1
            continue
        where = f"{path}:{i + 1}"
        words = line[len(SUMMARY):].split()
        if len(words) != 2 or words[1] not in METRICS:
            raise Malformed(f"{where}: expected '{SUMMARY} SHAPE METRIC' with METRIC one of "
                            f"{', '.join(METRICS)}")
        shape, metric = words
        notes = {}
        j = i + 1
        while j < len(lines) and lines[j].strip() != "-->":
            rung, _, words = lines[j].partition(":")
            notes[rung.strip()] = words.strip()
            j += 1
        end = next((k for k in range(j, len(lines)) if lines[k].strip() == END), None)
        if j >= len(lines) or end is None:
            raise Malformed(f"{where}: the summary needs a closing '-->' and then '{END}'")
        out += lines[i:j + 1] + summary_table(rows, shape, metric, notes, where) + [END]
        i = end + 1
    return out


def update_readme(chapter, rows):
    path = f"chapters/{chapter}/README.md"
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    try:
        b = next(i for i, l in enumerate(lines) if l.strip() == BEGIN)
        e = next(i for i, l in enumerate(lines) if l.strip() == END and i > b)
    except StopIteration:
        warn(f"{path} has no {BEGIN} ... {END} lines; left alone")
        return
    if chapter == CH10:
        block = chapter10_block(rows, load_sweep(chapter))
    else:
        block = readme_block(rows, load_sweep(chapter) or {})
    lines = replace_summaries(lines[:b + 1] + block + lines[e:], rows, path)
    write(path, "\n".join(lines))


def best_verified(rows):
    rungs = [r for r in rows if r["verified"] and is_own_rung(r) and r["median_us"]]
    return min(rungs, key=lambda r: r["median_us"], default=None)


def headline_cells(rows):
    """best rung, vs vendor, and % of roof or TFLOP/s, for one dtype's rows."""
    best = best_verified(rows)
    if best is None:
        return ["(none verified)", "", ""]
    rate = (fmt_num(best["pct_roof"], ".1f") + "%" if best["pct_roof"]
            else fmt_tflops(best["tflops"]) + " TFLOP/s" if best["tflops"] else "")
    return [best["variant"], fmt_x(best["vs_vendor"]), rate]


def headline_table(entries, rows_of, where):
    body = []
    for chapter, shape, p, words in entries:
        rows = [r for r in rows_of.get(chapter, []) if r["shape"] == shape and r["pass"] == p]
        if not rows:
            raise Malformed(f"{where}: no {chapter} rows at {shape}, pass {p}")
        line = [words, f"`{shape}` {p}"]
        for d in DTYPE_ORDER:
            line += headline_cells([r for r in rows if r["dtype"] == d])
        body.append(line)
    header = ["operation", "shape, pass"] + [f"{d} {h}" for d in DTYPE_ORDER
                                             for h in ("best rung", "vs vendor", "of roof")]
    return table(header, "ll" + "lrr" * len(DTYPE_ORDER), body)


def update_headline(rows_of):
    """README.md's headline table (see the module's docstring)."""
    path = "README.md"
    lines = open(path, encoding="utf-8").read().split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith(HEADLINE)]
    if not starts:
        return
    i = starts[0]
    j = next((k for k in range(i, len(lines)) if lines[k].strip() == "-->"), None)
    end = next((k for k in range(j or i, len(lines)) if lines[k].strip() == END), None)
    if j is None or end is None:
        raise Malformed(f"{path}:{i + 1}: the headline needs a closing '-->' and then '{END}'")
    entries = []
    for n in range(i + 1, j):
        spec, _, words = lines[n].partition(":")
        fields = spec.split()
        if len(fields) != 3:
            raise Malformed(f"{path}:{n + 1}: expected 'NN-name SHAPE PASS: words'")
        entries.append((*fields, words.strip()))
    table_lines = headline_table(entries, rows_of, f"{path}:{i + 1}")
    write(path, "\n".join(lines[:j + 1] + table_lines + lines[end:]))


# ---------------------------------------------------------------------------------- main

def warn(message):
    print(f"bench/report.py: warning: {message}", file=sys.stderr)


def load_sweep(chapter):
    path = f"{SWEEPS}/{chapter}.txt"
    return read_sweep(path) if os.path.exists(path) else None


CHECK = "--check" in sys.argv[1:]
STALE = []


def write(path, text):
    """Write only when the bytes change, so make and git see no churn; with --check, only
    note that it would."""
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old != text and CHECK:
        STALE.append(path)
    elif old != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path}")
    elif not CHECK:
        print(f"{path} unchanged")


def main():
    os.chdir(ROOT)
    folders = {}    # folder -> [(chapter, rows)]
    for path in sorted(glob.glob(f"{RESULTS}/*/[0-9][0-9]-*.csv")):
        chapter = os.path.basename(path)[:-4]
        if chapter.endswith("-loss"):
            continue    # a chapter's step-loss log (chapter 10's NN-name-loss.csv), for the plot
        rows = latest([r for r in read_csv(path, chapter)
                       if r["variant"] != "cpu" or chapter == CH10])
        if rows:
            folders.setdefault(os.path.basename(os.path.dirname(path)), []).append((chapter, rows))

    out = ["# Benchmarks", "",
           f"Generated by `make report` from the CSVs in `{RESULTS}/` (written by `make bench`); "
           "do not edit by hand. Times are kernel times in microseconds (median of the samples, "
           "then min-max), `% of roof` is against the roof measured in the same run, and "
           "`vs vendor` is the vendor's time over the rung's (above 1 means faster).", ""]
    if not folders:
        out += ["No results yet: run `make bench` on a machine with an NVIDIA GPU.", ""]
    for folder in sorted(folders):
        out += gpu_section(folder, folders[folder])
    while out[-1] == "":
        out.pop()
    write("BENCHMARKS.md", "\n".join(out) + "\n")

    # The chapter READMEs show one GPU: the one the plots show too.
    env = os.environ.get("BENCH_GPU")
    folder = env if env else ("h200" if "h200" in folders else min(folders, default=None))
    if env and env not in folders:
        warn(f"BENCH_GPU={env}, but {RESULTS}/{env}/ has no results; READMEs left alone")
    for chapter, rows in folders.get(folder, []):
        update_readme(chapter, rows)
    update_headline(dict(folders.get(folder, [])))


if __name__ == "__main__":
    unknown = [a for a in sys.argv[1:] if a != "--check"]
    if unknown:
        sys.exit(f"bench/report.py: unknown argument '{unknown[0]}' (allowed: --check)")
    try:
        main()
    except Malformed as e:
        sys.exit(f"bench/report.py: {e}")
    if STALE:
        sys.exit("bench/report.py: not what the CSVs give (run make report): " + " ".join(STALE))
