#!/usr/bin/env python3
"""bench/pytorch/train_cnn.py: chapter 10's epoch in PyTorch, four ways, as rows of its CSV.

It trains the network of chapters/10-train-cnn/net.h on the same IDX files, from the same
initial weights (--init, the parameter file of the C program's --save-init), on the same batches
in the same order (the C program's shuffle, reproduced bit for bit), with plain SGD, TF32 off,
so that its times, loss curves and accuracies can be set beside the C program's. Each way is a
`variant` of the CSV and measures one thing:

  pytorch_loop            the reference report's loop: every step gathers its batch from host
                          tensors and copies it to the GPU, reads the loss (loss.item()) and
                          counts the hits on the host. What a tutorial's loop costs, host-device
                          round trips included.
  pytorch_resident        the data set on the GPU once; a step indexes it with a slice of the
                          order; loss and hits stay on the GPU until the epoch ends. No step
                          waits for the GPU, but every kernel is still launched from Python.
  pytorch_graph           resident, and the whole step (its batch found through a device-side
                          counter into the order, forward, backward, SGD update, loss log and hit
                          count) captured once in a CUDA graph and replayed once a step; the last,
                          partial batch has a graph of its own. Launch overhead gone: what is
                          left is the time of PyTorch's kernels.
  pytorch_compiled_graph  the same with forward and loss through torch.compile (inductor's fused
                          kernels, backward included), captured by hand: PyTorch at its best.

Warm-up, compilation and capture happen before the timed epochs, on steps whose updates are then
undone (the initial weights are copied back), so every run trains from the same weights. An epoch
is timed with time.perf_counter between two torch.cuda.synchronize() calls, from its first step
to its last finished. --print-order N prints the start of epoch 0's order and needs no torch.
"""
import argparse
import array
import collections
import datetime
import gzip
import math
import os
import statistics
import struct
import sys
import time
import warnings
import zlib

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # flags, the data files and --print-order work without it
    torch = None

ME = "train_cnn.py"
CHAPTER = "10-train-cnn"
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
WAYS = ("loop", "resident", "graph", "compiled_graph")
DTYPES = ("fp32", "fp16")
DEVICE = "cuda"
WARMUP_STEPS = 3          # steps of each batch size before the timing (and before capture)
COMPILE_MODE = "default"  # torch.compile's mode: inductor, no CUDA graphs of its own
EVAL_BATCH = 1000

SIDE = 28
PIXELS = SIDE * SIDE
CLASSES = 10
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049

# net.h's parameters in its order: name (as the state_dict has it), shape, fan-in (He-normal).
PARAMS = (("conv1.weight", (16, 1, 3, 3), 9), ("conv1.bias", (16,), 9),
          ("conv2.weight", (32, 16, 3, 3), 144), ("conv2.bias", (32,), 144),
          ("fc1.weight", (128, 1568), 1568), ("fc1.bias", (128,), 1568),
          ("fc2.weight", (10, 128), 128), ("fc2.bias", (10,), 128))
PARAM_TOTAL = 206922
PARAM_MAGIC = b"KLCNN01\n"

# Multiply-adds of one image's forward pass, layer by layer.
CONV1_MACS = 16 * 9 * 784     # 16 filters of 1x3x3 at 28x28
FORWARD_MACS = (CONV1_MACS
                + 32 * 144 * 196  # conv2: 32 filters of 16x3x3 at 14x14
                + 1568 * 128      # fc1
                + 128 * 10)       # fc2
# Backward: every layer's weight gradient costs its forward's multiply-adds, and so does its
# input gradient, except conv1's, which nothing needs (its input is the image). So an image costs
#   2 * (FORWARD_MACS + 2 * FORWARD_MACS - CONV1_MACS) = 2 * (3 * 1,218,048 - 112,896)
#   = 7,082,496 FLOPs, and 60,000 images 0.425 TFLOP (pooling, ReLU, loss and update not counted).
FLOPS_PER_IMAGE = 2 * (3 * FORWARD_MACS - CONV1_MACS)

CSV_HEADER = ("chapter,pass,variant,dtype,shape,median_us,min_us,max_us,gbps,tflops,pct_roof,"
              "vs_vendor,max_abs_err,rel_err,verified,gpu,cc,cuda,date,ran,"
              "images_per_s,loss,train_acc,test_acc")
LOSS_HEADER = "variant,dtype,batch,step,loss"


class InputError(Exception):
    """A data or parameter file that cannot be used; the message is one line naming it."""


# ---------------------------------------------------------------------------------------------
# Flags

class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{ME}: {message}\n")
        sys.exit(2)


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive integer")
    return value


def seed_value(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer from 0 to 2^64-1")
    return value


def learning_rate(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number")
    return value


def batch_list(text):
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a comma-separated list of positive integers, e.g. 32,128")
    return values


def way_list(text):
    names = list(WAYS) if text == "all" else text.split(",")
    if not names or any(name not in WAYS for name in names):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not 'all' or a comma-separated list of {', '.join(WAYS)}")
    return names


def parse_flags(argv):
    p = OneLineParser(prog=ME, description="One epoch of chapter 10's CNN in PyTorch, four "
                      "ways; appends rows to chapter 10's CSV.")
    p.add_argument("--data", default=DEFAULT_DATA, metavar="DIR",
                   help="folder of the IDX files, gzip or plain (default %(default)s)")
    p.add_argument("--init", metavar="FILE", help="initial weights: a parameter file of net.h "
                   "(default: He-normal from torch's generator seeded with --seed)")
    p.add_argument("--batch", type=batch_list, default=[32, 64, 128, 256, 512, 1024],
                   metavar="LIST", help="batch sizes (default 32,64,128,256,512,1024)")
    p.add_argument("--ways", type=way_list, default=list(WAYS), metavar="LIST",
                   help=f"{','.join(WAYS)} or all (default all)")
    p.add_argument("--dtype", choices=("fp32", "fp16", "all"), default="fp32",
                   help="fp16: autocast with fp32 master weights (default fp32)")
    p.add_argument("--epochs", type=positive_int, default=1, help="epochs a run (default 1)")
    p.add_argument("--lr", type=learning_rate, default=0.01, help="SGD step (default 0.01)")
    p.add_argument("--seed", type=seed_value, default=1,
                   help="shuffle seed, and init seed without --init (default 1)")
    p.add_argument("--runs", type=positive_int, default=1,
                   help="runs a configuration, each from the initial weights (default 1)")
    p.add_argument("--csv", metavar="FILE", help="append a row a configuration to FILE")
    p.add_argument("--loss-csv", metavar="FILE", help="append every step's loss to FILE")
    p.add_argument("--print-order", type=positive_int, metavar="N",
                   help="print the first N images of epoch 0's order and exit")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# Data and parameter files (no torch needed)

Split = collections.namedtuple("Split", "images labels count")


def read_maybe_gzip(directory, name):
    """The bytes of directory/name.gz (decompressed) or of directory/name, and the path read."""
    for path in (os.path.join(directory, name + ".gz"), os.path.join(directory, name)):
        if os.path.isfile(path):
            break
    else:
        raise InputError(f"{directory}: neither {name}.gz nor {name} found")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    return raw, path


def read_idx(directory, name, magic, header_ints, item_bytes):
    """An IDX file's header integers (magic number checked) and payload (length checked)."""
    raw, path = read_maybe_gzip(directory, name)
    header_bytes = 4 * header_ints
    if len(raw) < header_bytes:
        raise InputError(f"{path}: {len(raw)} bytes, too short for an IDX header")
    header = struct.unpack(f">{header_ints}I", raw[:header_bytes])
    if header[0] != magic:
        raise InputError(f"{path}: magic number {header[0]}, expected {magic}")
    if header_ints == 4 and header[2:] != (SIDE, SIDE):
        raise InputError(f"{path}: images of {header[2]}x{header[3]}, expected {SIDE}x{SIDE}")
    expected = header[1] * item_bytes
    if len(raw) - header_bytes != expected:
        raise InputError(f"{path}: {len(raw) - header_bytes} bytes after the header, expected "
                         f"{header[1]} x {item_bytes} = {expected}")
    return header, raw[header_bytes:], path


def read_split(directory, prefix):
    """One split (prefix 'train' or 't10k'): image bytes, label bytes, count, all checked."""
    header, images, _ = read_idx(directory, f"{prefix}-images-idx3-ubyte", IMAGES_MAGIC, 4,
                                 PIXELS)
    count = header[1]
    header, labels, path = read_idx(directory, f"{prefix}-labels-idx1-ubyte", LABELS_MAGIC, 2, 1)
    if header[1] != count:
        raise InputError(f"{path}: {header[1]} labels for {count} images")
    if count == 0:
        raise InputError(f"{path}: no images")
    if max(labels) >= CLASSES:
        raise InputError(f"{path}: label {max(labels)}, expected 0 to {CLASSES - 1}")
    return Split(images, labels, count)


def read_param_file(path):
    """The PARAM_TOTAL floats of a net.h parameter file, as an array('f')."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if raw[:len(PARAM_MAGIC)] != PARAM_MAGIC:
        raise InputError(f"{path}: does not start with {PARAM_MAGIC!r} (not a net.h parameter "
                         "file)")
    if len(raw) != len(PARAM_MAGIC) + 4 * PARAM_TOTAL:
        raise InputError(f"{path}: {len(raw)} bytes, expected {len(PARAM_MAGIC)} + 4 x "
                         f"{PARAM_TOTAL} = {len(PARAM_MAGIC) + 4 * PARAM_TOTAL}")
    values = array.array("f")
    values.frombytes(raw[len(PARAM_MAGIC):])
    if sys.byteorder == "big":
        values.byteswap()
    return values


# ---------------------------------------------------------------------------------------------
# The C program's shuffle (common/rng.h's splitmix64 and rng_below, then Fisher-Yates)

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        """rng_below: ((double)(x >> 11) * 0x1.0p-53) * (double)n, truncated; Python's floats
        are IEEE doubles and evaluate in the same order."""
        return int(float(self.next() >> 11) * 2.0**-53 * float(n))


def epoch_order(count, seed, epoch):
    """The order in which the C program visits the training images in epoch `epoch` (0-based)."""
    rng = SplitMix64(seed + 1 + epoch)
    order = list(range(count))
    for i in range(count - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


# ---------------------------------------------------------------------------------------------
# The network and its initial weights

def new_net():
    """net.h's CNN; its state_dict names and layouts are net.h's."""
    return nn.Sequential(collections.OrderedDict([
        ("conv1", nn.Conv2d(1, 16, 3, padding=1)), ("relu1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)), ("relu2", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(1568, 128)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(128, CLASSES))])).to(DEVICE)


def params_from_file(values):
    """The tensors of a parameter file's flat array, by name."""
    flat = torch.frombuffer(values, dtype=torch.float32)
    tensors, offset = {}, 0
    for name, shape, _ in PARAMS:
        elems = math.prod(shape)
        tensors[name] = flat[offset:offset + elems].view(shape).clone()
        offset += elems
    return tensors


def params_he_normal(seed):
    """net.h's rule with torch's generator: weights normal with std sqrt(2 / fan_in), drawn in
    net.h's order from a CPU generator seeded with `seed`; biases zero."""
    g = torch.Generator().manual_seed(seed)
    return {name: (torch.randn(shape, generator=g) * math.sqrt(2.0 / fan_in)
                   if name.endswith("weight") else torch.zeros(shape))
            for name, shape, fan_in in PARAMS}


# ---------------------------------------------------------------------------------------------
# The four ways

EpochResult = collections.namedtuple("EpochResult", "seconds losses correct")


class Data:
    """The training set on the host (for the loop) and on the GPU, and the test set on the GPU.
    Pixels are bytes times 1/255 in fp32, as the C program's gather computes them."""

    def __init__(self, train, test):
        self.count = train.count
        self.host_x, self.host_y = self.tensors(train)
        self.x, self.y = self.host_x.to(DEVICE), self.host_y.to(DEVICE)
        self.test_x, self.test_y = (t.to(DEVICE) for t in self.tensors(test))

    @staticmethod
    def tensors(split):
        pixels = torch.frombuffer(bytearray(split.images), dtype=torch.uint8)
        x = pixels.view(split.count, 1, SIDE, SIDE).float() * (torch.tensor(1.0) / 255)
        return x, torch.frombuffer(bytearray(split.labels), dtype=torch.uint8).long()


class Way:
    """One network trained one way. prepare() once (warm-up, compile, capture; not timed),
    then for every run reset() to the initial weights and epoch() per epoch (timed)."""
    variant = ""

    def __init__(self, data, init, fp16, batch, lr):
        self.data, self.fp16, self.batch = data, fp16, batch
        self.full, self.rest = divmod(data.count, batch)
        self.steps = self.full + (self.rest > 0)
        self.init = {name: t.to(DEVICE) for name, t in init.items()}
        self.net = new_net()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)  # no momentum: p -= lr * grad
        self.forward_loss = self.make_forward_loss()
        self.reset()

    def make_forward_loss(self):
        # No autocast weight cache, in every way: a cache must not outlive a captured graph.
        def forward_loss(x, y):
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.fp16,
                                cache_enabled=False):
                logits = self.net(x)
                return F.cross_entropy(logits, y), logits
        return forward_loss

    def reset(self):
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                p.copy_(self.init[name])

    def size_of(self, step):
        return min(self.batch, self.data.count - step * self.batch)

    def warmup_steps(self):
        """A few steps of each batch size the epoch has: the first full ones, the partial last."""
        steps = list(range(min(WARMUP_STEPS, self.full)))
        return steps + [self.full] * (WARMUP_STEPS if self.rest else 0)

    def train_step(self, x, y):
        """Forward, hits (predictions before the update), backward, SGD update."""
        loss, logits = self.forward_loss(x, y)
        hits = (logits.argmax(1) == y).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach(), hits

    def prepare(self, order):
        self.run_steps(order, self.warmup_steps())
        self.reset()

    def test_accuracy(self):
        """Percent of the test set the network gets right (first maximum of the logits)."""
        x, y = self.data.test_x, self.data.test_y
        correct = torch.zeros((), dtype=torch.int64, device=DEVICE)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=self.fp16):
            for first in range(0, len(y), EVAL_BATCH):
                logits = self.net(x[first:first + EVAL_BATCH])
                correct += (logits.argmax(1) == y[first:first + EVAL_BATCH]).sum()
        return 100.0 * correct.item() / len(y)


class Loop(Way):
    variant = "pytorch_loop"

    def run_steps(self, order, steps):
        losses, correct = [], 0
        for s in steps:
            index = order[s * self.batch:(s + 1) * self.batch]
            x = self.data.host_x.index_select(0, index).to(DEVICE)
            y = self.data.host_y.index_select(0, index).to(DEVICE)
            loss, hits = self.train_step(x, y)
            losses.append(loss.item())
            correct += hits.item()
        return losses, correct

    def epoch(self, order):
        torch.cuda.synchronize()
        start = time.perf_counter()
        losses, correct = self.run_steps(order, range(self.steps))
        torch.cuda.synchronize()
        return EpochResult(time.perf_counter() - start, losses, correct)


class Resident(Way):
    variant = "pytorch_resident"

    def run_steps(self, order, steps, losses=None, correct=None):
        order = order.to(DEVICE)
        for i, s in enumerate(steps):
            index = order[s * self.batch:(s + 1) * self.batch]
            loss, hits = self.train_step(self.data.x.index_select(0, index),
                                         self.data.y.index_select(0, index))
            if losses is not None:
                losses[i] = loss
                correct.add_(hits)

    def epoch(self, order):
        order = order.to(DEVICE)
        losses = torch.zeros(self.steps, device=DEVICE)
        correct = torch.zeros((), dtype=torch.int64, device=DEVICE)
        torch.cuda.synchronize()
        start = time.perf_counter()
        self.run_steps(order, range(self.steps), losses, correct)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return EpochResult(seconds, losses.tolist(), correct.item())


class Graph(Way):
    """The step reads everything it varies from device tensors: the epoch's order, a counter of
    the step within the epoch, the running hit count and the loss log. So one captured graph
    serves every full step, and a second the partial last one."""
    variant = "pytorch_graph"

    def __init__(self, *args):
        super().__init__(*args)
        self.order = torch.zeros(self.data.count, dtype=torch.int64, device=DEVICE)
        self.counter = torch.zeros(1, dtype=torch.int64, device=DEVICE)
        self.correct = torch.zeros((), dtype=torch.int64, device=DEVICE)
        self.loss_log = torch.zeros(self.steps, device=DEVICE)
        self.sizes = [self.batch] * (self.full > 0) + [self.rest] * (self.rest > 0)
        self.rows = {n: torch.arange(n, device=DEVICE) for n in self.sizes}
        self.graphs = {}

    def graph_step(self, n):
        index = self.order.index_select(0, self.counter * self.batch + self.rows[n])
        loss, hits = self.train_step(self.data.x.index_select(0, index),
                                     self.data.y.index_select(0, index))
        self.correct += hits
        self.loss_log.index_copy_(0, self.counter, loss.reshape(1))
        self.counter += 1

    def prepare(self, order):
        """Warm-up on a side stream (as torch.cuda.graph's documentation asks), then capture."""
        self.order.copy_(order)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for s in self.warmup_steps():
                self.counter.fill_(s)
                self.graph_step(self.size_of(s))
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        for n in self.sizes:
            self.graphs[n] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graphs[n]):
                self.graph_step(n)
        self.reset()

    def epoch(self, order):
        self.order.copy_(order)
        for t in (self.counter, self.correct, self.loss_log):
            t.zero_()
        torch.cuda.synchronize()
        start = time.perf_counter()
        full = self.graphs.get(self.batch)
        for _ in range(self.full):
            full.replay()
        if self.rest:
            self.graphs[self.rest].replay()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return EpochResult(seconds, self.loss_log.tolist(), self.correct.item())


class CompiledGraph(Graph):
    """Graph, with forward and loss compiled once for each batch size (dynamic=False) during the
    warm-up; inductor's kernels are then captured like eager ones."""
    variant = "pytorch_compiled_graph"

    def make_forward_loss(self):
        torch._dynamo.reset()  # a fresh cache for each configuration, away from the recompile limit
        return torch.compile(super().make_forward_loss(), mode=COMPILE_MODE, dynamic=False)


WAY_CLASSES = {"loop": Loop, "resident": Resident, "graph": Graph,
               "compiled_graph": CompiledGraph}


# ---------------------------------------------------------------------------------------------
# Measuring and reporting

Measurement = collections.namedtuple(
    "Measurement", "variant dtype batch seconds losses log correct test_acc count")


def measure(way, dtype, orders, runs):
    """Every run: the initial weights, then an epoch per order, each timed. Loss, accuracies and
    the loss log are the first run's (the runs differ only in timing and rounding)."""
    way.prepare(orders[0])
    seconds, first = [], None
    for _ in range(runs):
        way.reset()
        epochs = [way.epoch(order) for order in orders]
        seconds += [e.seconds for e in epochs]
        if first is None:
            first = epochs, way.test_accuracy()
    epochs, test_acc = first
    log = [loss for e in epochs for loss in e.losses]
    return Measurement(way.variant, dtype, way.batch, seconds, epochs[-1].losses, log,
                       epochs[-1].correct, test_acc, way.data.count)


def device_fields():
    major, minor = torch.cuda.get_device_capability()
    return {"gpu": torch.cuda.get_device_name(), "cc": f"{major}.{minor}",
            "cuda": torch.version.cuda or "",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


Summary = collections.namedtuple(
    "Summary", "median low high images_per_s tflops loss train_acc test_acc")


def summary(m):
    """Epoch times in seconds; loss = the mean of the last epoch's per-step losses; train
    accuracy = that epoch's correct predictions (made before each update) over the images."""
    median = statistics.median(m.seconds)
    return Summary(median, min(m.seconds), max(m.seconds), m.count / median,
                   FLOPS_PER_IMAGE * m.count / median / 1e12, statistics.fmean(m.losses),
                   100.0 * m.correct / m.count, m.test_acc)


def csv_row(m, dev):
    """gbps, vs_vendor and the error columns stay empty; verified says the loss stayed finite."""
    s = summary(m)
    rate = f"{s.tflops:.4f}" if s.tflops >= 0.01 else f"{s.tflops:.3e}"
    fields = [CHAPTER, "epoch", m.variant, m.dtype, str(m.batch),
              f"{s.median * 1e6:.3f}", f"{s.low * 1e6:.3f}", f"{s.high * 1e6:.3f}", "", rate,
              "0.00", "", "", "", "1" if math.isfinite(s.loss) else "0", dev["gpu"], dev["cc"],
              dev["cuda"], dev["date"], "", f"{s.images_per_s:.1f}", f"{s.loss:.5f}",
              f"{s.train_acc:.2f}", f"{s.test_acc:.2f}"]
    return ",".join(fields)


def append_csv(path, header, rows):
    with open(path, "a") as f:
        if f.tell() == 0:
            f.write(header + "\n")
        f.writelines(row + "\n" for row in rows)


TABLE_FORMAT = "{:<23} {:<5} {:>5} {:>10} {:>19} {:>10} {:>8} {:>8} {:>7} {:>7}"


def print_table_header():
    print(TABLE_FORMAT.format("variant", "dtype", "batch", "epoch ms", "min-max ms", "images/s",
                              "TFLOP/s", "loss", "train%", "test%"), flush=True)


def print_table_row(m):
    s = summary(m)
    print(TABLE_FORMAT.format(m.variant, m.dtype, m.batch, f"{s.median * 1e3:.1f}",
                              f"{s.low * 1e3:.1f}-{s.high * 1e3:.1f}", f"{s.images_per_s:.0f}",
                              f"{s.tflops:.3f}", f"{s.loss:.4f}", f"{s.train_acc:.2f}",
                              f"{s.test_acc:.2f}"), flush=True)


# ---------------------------------------------------------------------------------------------

def require_torch_cuda():
    """Without torch or a CUDA device there is nothing to measure: one line, exit status 0."""
    if torch is None:
        print(f"{ME}: PyTorch is not installed; nothing measured")
        sys.exit(0)
    if not torch.cuda.is_available():
        print(f"{ME}: PyTorch {torch.__version__} sees no CUDA device; nothing measured")
        sys.exit(0)


def load_inputs(args):
    """The training and test splits and the initial weights; one line and exit 2 if bad."""
    try:
        init = read_param_file(args.init) if args.init else None
        train, test = read_split(args.data, "train"), read_split(args.data, "t10k")
    except InputError as e:
        sys.stderr.write(f"{ME}: {e}\n")
        sys.exit(2)
    return train, test, params_from_file(init) if init else params_he_normal(args.seed)


def main(argv):
    args = parse_flags(argv)
    if args.print_order:
        try:
            count = read_split(args.data, "train").count
        except InputError as e:
            sys.stderr.write(f"{ME}: {e}\n")
            return 2
        print(" ".join(map(str, epoch_order(count, args.seed, 0)[:args.print_order])))
        return 0
    require_torch_cuda()
    train, test, init = load_inputs(args)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")  # off on purpose
    data = Data(train, test)
    orders = [torch.tensor(epoch_order(data.count, args.seed, e)) for e in range(args.epochs)]
    dev = device_fields()
    dtypes = DTYPES if args.dtype == "all" else (args.dtype,)
    print_table_header()
    for dtype in dtypes:
        for batch in args.batch:
            for name in args.ways:
                way = WAY_CLASSES[name](data, init, dtype == "fp16", batch, args.lr)
                m = measure(way, dtype, orders, args.runs)
                del way
                torch.cuda.empty_cache()
                print_table_row(m)
                if args.csv:
                    append_csv(args.csv, CSV_HEADER, [csv_row(m, dev)])
                if args.loss_csv:
                    append_csv(args.loss_csv, LOSS_HEADER,
                               [f"{m.variant},{dtype},{batch},{step},{loss:.6f}"
                                for step, loss in enumerate(m.log)])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
