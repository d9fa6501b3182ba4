"""Training speed, side by side in one process: nxrs vs numpy vs PyTorch (samples/s and ratios).

Run from the repository root::

    python bench/bench_train.py           # best of 5 (Rust-fast rows) / 3 (the others)
    python bench/bench_train.py --quick   # one timed run per row, fewer steps
    python bench/bench_train.py --real    # the speed table only (add --quick: ~2 minutes)
    python bench/bench_train.py --workloads seed,real   # any of the names below

``--workloads`` takes names separated by commas (default: all): ``seed`` (a), ``digits1`` (b),
``digits32`` (c), ``digits-predict`` (d), ``real`` (e)-(g), ``real-predict`` (h) and ``peak``
(p); ``--real`` is ``seed,digits32,real,real-predict,peak``, every row the speed table needs.

Training workloads, each timed over a fixed number of optimiser steps from a fresh state (not
whole training runs, except (a), whose 6400 steps are the seed's whole run):

* (a) the seed: the 6-10-4 MLP, per-sample Adam (lr 0.01), seed math and init, 800 epochs x 8
  samples, in order;
* (b) digits 64-128-10, batch 1; (c) digits 64-128-10, batch 32: scikit-learn's
  ``load_digits()`` (all 1797 samples, x / 16), TRAINING.md's defaults through
  ``nxrs.Trainer(layers=[64, 128, 10], batch_size=B)`` ("ieee" math, He init, seed 0,
  Adam lr 0.001, shuffled every epoch);
* (e) 784-256-10, batch 128; (f) 784-512-512-10, batch 128; (g) 784-512-512-10, batch 1024
  (the speed table's "real size" rows): 8192 random samples (standard normal float32 features from
  ``np.random.default_rng(20)``, 10 classes), the same defaults through
  ``nxrs.Trainer(layers=..., batch_size=B, backend="hw", threads=T)``; 60 / 60 / 20 steps with
  ``--quick``, else 200 / 200 / 60.

Contenders, the same for (a)-(c):

* nxrs ``Trainer.train_steps`` (the steps loop in Rust, softf32 arithmetic);
* the numpy reference ``tests/reference/general_ref.py`` (TRAINING.md in plain numpy float32 in
  the spec's exact operation order: every sequential sum is a Python loop over vector ops, so it
  is slow by construction; it must agree with nxrs bit for bit);
* a natural vectorised numpy float32 MLP (matmuls, ``np.exp``, Adam in array ops): what a numpy
  user would write; NOT bit-identical (other operation order, BLAS sums);
* PyTorch CPU float32 eager, ``nn.functional.linear`` + ``cross_entropy`` + ``torch.optim.Adam``
  with ``torch.set_num_threads(1)`` (optional: skipped when torch is not installed); NOT
  bit-identical.

(e)-(g) run nxrs on the hw backend only (softf32 would take minutes per row) and PyTorch, each
on 1 and 2 threads (and every core, on larger machines): no numpy reference (it would take
hours); instead nxrs's 1- and 2-thread runs must end in the same full-state hash.

All train the same initial weights on the same batches (TRAINING.md's shuffle, drawn by
the reference's ``epoch_order``). (a) also keeps its older rows: the full gate
(``nxrs._audit.gate.run_gate``), ``Trainer.train_until``, 6400 Python-level ``Trainer.step``
calls and the seed's own numpy reference ``tests/reference/seed_ref.py``.

Inference: (d) ``predict_proba`` on 100,000 rows (the digits repeated) of the digits model,
(h) on 100,000 random rows of 784-512-512-10 (initial weights): nxrs per backend and thread
count (all bit-identical), numpy matmuls + softmax (d only), torch eager under ``no_grad`` with
``torch.softmax`` on 1 and 2 threads.

(p) The no-FMA peak: ``rust/nxrs-core/examples/peak_flops.rs``, built first (``nice cargo build
--release --example peak_flops -p nxrs-core``, LTO off; the first build also compiles
nxrs-core's dev-dependencies, a few minutes once) and run before anything else is timed:
GFLOP/s of one core for separate vector multiply and add chains (AVX2, and AVX-512 when the CPU
has it) and for AVX2 FMA chains, register-only. Skipped with a printed reason without cargo.

A training step's flops are counted as 6 x batch x sum(in x out) over the layers (forward 2,
the gradient for the layer below 2, the weight gradient 2: the usual dense-layer count, which
includes the first layer's input gradient that no contender computes, and leaves out biases,
activations, softmax and the optimiser, under 1% at the real sizes); predict_proba's as
2 x rows x sum(in x out). Every table shows GFLOP/s per thread, nxrs's as a share of the no-FMA
peak, and CPU time per wall time (the cores a row really had: on a shared machine a 2-thread row
may get one, and the summary warns).

nxrs and the numpy references must agree bit for bit (full-state hash; exit status 1 otherwise),
and so must nxrs's runs on other backends and thread counts; the natural numpy and PyTorch rows
show their final loss and largest parameter difference from nxrs for information only (other
summation orders: never compared by bits). BLAS and OpenMP default to one thread (environment
variables set before numpy is imported); the torch rows set ``torch.set_num_threads(T)`` and
check it took.

Last, the speed table's summary in markdown: the CPU (model, avx512f / avx2 / fma flags), the
ISA nxrs used (``NXRS_ISA`` and ``nxrs.hardware_isa()`` when the package has it), a table of
samples/s (rows/s for predict_proba) for nxrs and torch on 1 and 2 threads with the ratios, nxrs's
2/1 thread scaling, GFLOP/s per thread and share of the peak, the seed's us per step, and the
table's goals, each MET or NOT MET with its number.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

# One thread for every library, as torch.set_num_threads(1): set before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _machine import cpu_model, print_machine  # noqa: E402
from reference import general_ref, seed_ref  # noqa: E402

import nxrs  # noqa: E402
from nxrs._audit.gate import run_gate  # noqa: E402

F32Array = npt.NDArray[np.float32]
I64Array = npt.NDArray[np.int64]

SEED_EPOCHS = 800
SEED_NSAMP = 8
# T1 800 epochs, T2 400, T3 400 more, T5 400 more from the v2 checkpoint.
GATE_STEPS = (SEED_EPOCHS + 3 * (SEED_EPOCHS // 2)) * SEED_NSAMP
DIGITS_LAYERS = [64, 128, 10]
WARMUP_STEPS = 5
TORCH_SKIPPED = "skipped: torch is not installed (pip install torch, or the bench extra)"
# nxrs's and torch's thread counts: one, two (the speed table) and every core (torch's default).
CORES = os.cpu_count() or 1
NXRS_THREADS = tuple(sorted({1, min(2, CORES), CORES}))
TORCH_THREADS = NXRS_THREADS
PREDICT_ROWS = 100_000
# predict_proba's untimed warm-up runs on this many rows (a whole run of the 784-512-512-10
# model would double its time for nothing).
PREDICT_WARMUP_ROWS = 10_000

# The speed table's "real size" rows: random 784-feature data, 10 classes (fixed seed), and the
# steps each row is timed over (quick, full).
REAL_SAMPLES = 8192
REAL_FEATURES = 784
REAL_CLASSES = 10
REAL_DATA_SEED = 20
REAL_MODELS = (  # key, hidden layers, batch, steps (quick, full)
    ("e", [256], 128, (60, 200)),
    ("f", [512, 512], 128, (60, 200)),
    ("g", [512, 512], 1024, (20, 60)),
)
PREDICT_REAL_HIDDEN = [512, 512]
# What --workloads selects (default: all); --real is the speed table's set: every row it needs.
WORKLOADS = ("seed", "digits1", "digits32", "digits-predict", "real", "real-predict", "peak")
TABLE_WORKLOADS = ("seed", "digits32", "real", "real-predict", "peak")
# The speed table's goals (bench only; nothing fails on them).
GOAL_RATIO = 1.0  # nxrs / torch samples/s (rows/s for predict_proba), at 1 and at 2 threads
GOAL_PEAK_FRACTION = 0.60  # 784-512-512-10 batch 1024: GFLOP/s per thread / no-FMA peak
GOAL_SCALING_REAL = 1.8  # 784-512-512-10 batch 1024: 2 threads / 1 thread
GOAL_DIGITS_RATIO = 7.0  # digits batch 32, 1 thread: nxrs / torch
GOAL_SCALING_DIGITS = 1.5  # digits batch 32: nxrs 2 threads / 1 thread
GOAL_SEED_US = 3.0  # the seed workload, us per step (hw backend, 1 thread)
# A 2-thread row with less CPU time per wall time than this did not have two cores.
BUSY_CPU_PER_WALL = 1.5


# ---------------------------------------------------------------------------
# Workloads and rows
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Workload:
    """A model, its data and a number of steps; ``config`` goes to both trainers."""

    key: str
    title: str
    x: F32Array
    y: I64Array
    steps: int
    config: dict[str, Any]  # nxrs.Trainer's keywords; empty for the seed model
    sizes: tuple[int, ...] = (6, 10, 4)  # the layer sizes (the seed model's by default)

    @property
    def flops_per_sample(self) -> int:
        """A training step's floating-point operations per sample, by the usual count for
        dense layers: 6 per weight (forward 2: a multiply and an add; the gradient for the
        layer below 2; the weight gradient 2). Biases, activations, the softmax and the
        optimiser's per-parameter update are left out (under 1% at the real sizes); the first
        layer's input gradient is counted although no contender computes it (the count the speed
        table's figures use)."""
        return 6 * sum(i * o for i, o in zip(self.sizes, self.sizes[1:]))

    def new_nxrs(self, backend: str = "soft", threads: int = 1) -> nxrs.Trainer:
        b = cast(Literal["hw", "soft"], backend)
        if self.config:
            return nxrs.Trainer(**self.config, backend=b, threads=threads)
        return nxrs.Trainer(seed=1, backend=b, threads=threads)

    @functools.cached_property
    def batches(self) -> list[I64Array]:
        """The sample indices of each of the ``steps`` batches (TRAINING.md section 3, the
        shuffle drawn by the reference's ``epoch_order``, with nxrs's resolved configuration)."""
        cfg = self.new_nxrs().config
        n, bsz = len(self.x), int(cfg["batch_size"])
        out: list[I64Array] = []
        epoch = 0
        while len(out) < self.steps:
            order = np.array(
                general_ref.epoch_order(cfg["seed"], epoch, n, cfg["shuffle"]), np.int64
            )
            out += [order[s : s + bsz] for s in range(0, n, bsz)]
            epoch += 1
        return out[: self.steps]

    @property
    def samples(self) -> int:
        return sum(len(b) for b in self.batches)


@dataclasses.dataclass
class Outcome:
    """What a finished run is checked by: the full-state hash (when the contender has one),
    the parameters (W1, b1, W2, b2, ... flattened) and the last step's loss."""

    params: F32Array
    loss: float
    state_hash: int | None = None


@dataclasses.dataclass
class Row:
    """One contender on one workload: ``setup()`` builds fresh state (untimed),
    ``run(state, steps)`` is timed, ``outcome(result)`` reads the result (untimed)."""

    name: str
    kind: str  # "nxrs", "ref", "natural", "torch", or "extra" for (a)'s older rows
    steps: int
    samples: int
    repeats: int
    setup: Callable[[], Any]
    run: Callable[[Any, int], Any]
    outcome: Callable[[Any], Outcome | None] = lambda _: None
    backend: str = ""  # nxrs's backend ("soft", "hw"), "torch", or "" for the others
    threads: int = 1
    best_s: float = float("nan")
    cpu_s: float = float("nan")  # the process's CPU time during the fastest run
    result: Any = None
    skipped: str | None = None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.best_s

    @property
    def cpu_per_wall(self) -> float:
        """CPU seconds per second of the fastest run: about the threads a row really used
        (spinning OpenMP workers count too)."""
        return self.cpu_s / self.best_s


def best_of(row: Row) -> None:
    """A warm-up of ``WARMUP_STEPS`` steps on fresh state (untimed), then ``row.repeats`` timed
    runs of ``row.steps`` steps, each from fresh state; keeps the fastest and its result."""
    # Another library's worker threads spin for a while after the row before (OpenMP's
    # spin-wait): let them fall asleep so that they do not share this row's cores.
    time.sleep(1.0)
    row.run(row.setup(), WARMUP_STEPS)
    best = float("inf")
    for _ in range(row.repeats):
        state = row.setup()
        c0, t0 = time.process_time(), time.perf_counter()
        result = row.run(state, row.steps)
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, row.result = elapsed, result
            row.cpu_s = time.process_time() - c0
    row.best_s = best


# ---------------------------------------------------------------------------
# The contenders
# ---------------------------------------------------------------------------


def flat(arrays: Sequence[Any]) -> F32Array:
    return np.concatenate([np.asarray(a, dtype=np.float32).reshape(-1) for a in arrays])


def nxrs_outcome(t: nxrs.Trainer, loss: float) -> Outcome:
    sd = t.state_dict()
    n = len(t.sizes) - 1
    params = flat([sd[f"{p}{i + 1}"] for i in range(n) for p in ("W", "b")])
    return Outcome(params, loss, t.state_hash())


def nxrs_row(wl: Workload, repeats: int, backend: str, threads: int, first: bool) -> Row:
    """nxrs on ``backend`` and ``threads`` threads; the first row is the baseline (kind "nxrs"),
    another's is kind "nxrs-<backend>-t<threads>" and must end in the same full-state hash."""

    def run(t: nxrs.Trainer, steps: int) -> tuple[nxrs.Trainer, float]:
        losses = t.train_steps(wl.x, wl.y, steps)
        return t, losses[-1]

    return Row(
        f"nxrs Trainer.train_steps ({backend}, {threads} thread{'s' * (threads > 1)})",
        "nxrs" if first else f"nxrs-{backend}-t{threads}",
        wl.steps,
        wl.samples,
        repeats,
        lambda: wl.new_nxrs(backend, threads),
        run,
        lambda r: nxrs_outcome(*r),
        backend,
        threads,
    )


def ref_row(wl: Workload, repeats: int) -> Row:
    """The general numpy reference, TRAINING.md's exact operation order."""
    if wl.config:
        cfg = general_ref.Config.make(**wl.config)
    else:  # the seed model, built as the seed builds its hyperparameters
        cfg = general_ref.Config.make(
            layers=[6, 10, 4],
            math="seed",
            init="seed",
            seed=1,
            lr=general_ref.f32i(1) / general_ref.f32i(100),
            batch_size=1,
            shuffle=False,
        )

    def run(tr: general_ref.Trainer, steps: int) -> tuple[general_ref.Trainer, float]:
        losses = tr.train_steps(wl.x, wl.y, steps)
        return tr, float(losses[-1])

    def outcome(r: tuple[general_ref.Trainer, float]) -> Outcome:
        tr, loss = r
        return Outcome(flat([a for wb in zip(tr.W, tr.b) for a in wb]), loss, tr.state_hash())

    return Row(
        "numpy reference general_ref (exact order)",
        "ref",
        wl.steps,
        wl.samples,
        repeats,
        lambda: general_ref.Trainer(cfg),
        run,
        outcome,
    )


class NumpyMLP:
    """A natural vectorised numpy float32 MLP with Adam (ReLU hidden layers, softmax
    cross-entropy averaged over the batch): matmuls and array ops in numpy's own order.
    Not bit-identical to TRAINING.md (BLAS sums, ``np.exp``, Adam's textbook form)."""

    def __init__(self, weights: Sequence[F32Array], hyper: dict[str, float]) -> None:
        self.W = [np.array(w, dtype=np.float32) for w in weights]
        self.b = [np.zeros(w.shape[0], dtype=np.float32) for w in weights]
        self.params = [p for wb in zip(self.W, self.b) for p in wb]
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.lr = np.float32(hyper["lr"])
        self.beta1 = np.float32(hyper["beta1"])
        self.beta2 = np.float32(hyper["beta2"])
        self.eps = np.float32(hyper["eps"])
        self.t = 0

    def step(self, x: F32Array, y: I64Array) -> np.float32:
        acts = [x]
        n_layers = len(self.W)
        for i, (w, b) in enumerate(zip(self.W, self.b)):
            z = acts[-1] @ w.T + b
            acts.append(np.maximum(z, np.float32(0)) if i < n_layers - 1 else z)
        z = acts.pop()
        e = np.exp(z - z.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss: np.float32 = np.float32(-np.log(p[rows, y]).mean())
        delta = p
        delta[rows, y] -= np.float32(1)
        delta /= np.float32(len(y))
        grads: list[F32Array] = []
        for i in range(n_layers - 1, -1, -1):
            grads += [delta.sum(axis=0), delta.T @ acts[i]]  # gb, gW (reversed below)
            if i > 0:
                delta = (delta @ self.W[i]) * (acts[i] > 0)
        grads.reverse()
        self.t += 1
        bc1 = np.float32(1) - self.beta1**self.t
        bc2 = np.float32(1) - self.beta2**self.t
        for p_, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.beta1
            m += (np.float32(1) - self.beta1) * g
            v *= self.beta2
            v += (np.float32(1) - self.beta2) * (g * g)
            p_ -= (self.lr / bc1) * m / (np.sqrt(v / bc2) + self.eps)
        return loss


def initial_weights(wl: Workload) -> list[F32Array]:
    t = wl.new_nxrs()
    sd = t.state_dict()
    return [sd[f"W{i + 1}"] for i in range(len(t.sizes) - 1)]


def natural_row(wl: Workload, repeats: int) -> Row:
    weights, hyper = initial_weights(wl), wl.new_nxrs().hyperparameters
    batches = wl.batches

    def run(net: NumpyMLP, steps: int) -> tuple[NumpyMLP, float]:
        loss = np.float32(np.nan)
        for idx in batches[:steps]:
            loss = net.step(wl.x[idx], wl.y[idx])
        return net, float(loss)

    def outcome(r: tuple[NumpyMLP, float]) -> Outcome:
        return Outcome(flat(r[0].params), r[1])

    return Row(
        "numpy natural vectorised (NOT bit-identical)",
        "natural",
        wl.steps,
        wl.samples,
        repeats,
        lambda: NumpyMLP(weights, hyper),
        run,
        outcome,
    )


def torch_row(torch: Any, wl: Workload, repeats: int, threads: int) -> Row:
    """PyTorch eager: the same layers, initial weights and batches, ``torch.optim.Adam``, on
    ``threads`` intra-op threads."""
    name = f"torch CPU f32 eager + optim.Adam ({threads} thread{'s' * (threads > 1)})"
    kind = "torch" if threads == 1 else f"torch-t{threads}"
    if torch is None:
        row = Row(name, kind, wl.steps, 0, 0, _none, _none, backend="torch", threads=threads)
        row.skipped = TORCH_SKIPPED
        return row
    fn = torch.nn.functional
    weights, hyper = initial_weights(wl), wl.new_nxrs().hyperparameters
    xt, yt = torch.from_numpy(wl.x.copy()), torch.from_numpy(wl.y.copy())
    batches = [torch.from_numpy(b.copy()) for b in wl.batches]

    def setup() -> tuple[list[Any], Any]:
        params: list[Any] = []
        for w in weights:
            params += [
                torch.tensor(w, requires_grad=True),
                torch.zeros(w.shape[0], dtype=torch.float32, requires_grad=True),
            ]
        opt = torch.optim.Adam(
            params, lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"]
        )
        return params, opt

    def run(state: tuple[list[Any], Any], steps: int) -> tuple[list[Any], float]:
        set_torch_threads(torch, threads)
        params, opt = state
        n_layers = len(params) // 2
        loss: Any = None
        for idx in batches[:steps]:
            opt.zero_grad(set_to_none=True)
            a = xt[idx]
            for i in range(n_layers):
                a = fn.linear(a, params[2 * i], params[2 * i + 1])
                if i < n_layers - 1:
                    a = torch.relu(a)
            loss = fn.cross_entropy(a, yt[idx])
            loss.backward()
            opt.step()
        return params, float(loss.item())

    def outcome(r: tuple[list[Any], float]) -> Outcome:
        return Outcome(flat([p.detach().numpy() for p in r[0]]), r[1])

    return Row(name, kind, wl.steps, wl.samples, repeats, setup, run, outcome, "torch", threads)


def set_torch_threads(torch: Any, threads: int) -> None:
    """``torch.set_num_threads``, checked: the row must really run on ``threads`` threads
    (OMP_NUM_THREADS=1 above only sets torch's default)."""
    torch.set_num_threads(threads)
    if torch.get_num_threads() != threads:
        raise SystemExit(f"torch runs {torch.get_num_threads()} threads, not {threads}")


def seed_extra_rows(wl: Workload, fast_n: int, slow_n: int) -> list[Row]:
    """(a)'s older rows: the gate, ``train_until``, Python-level ``step`` and ``seed_ref``."""
    xs = [wl.x[s] for s in range(SEED_NSAMP)]
    ys = [int(v) for v in wl.y]
    epochs = wl.steps // SEED_NSAMP

    def gate(_: None, steps: int) -> None:
        if not run_gate(io.StringIO()):
            raise SystemExit("nxrs gate is not GREEN")

    def until(t: nxrs.Trainer, steps: int) -> nxrs.Trainer:
        t.train_until(wl.x, wl.y, -(-steps // SEED_NSAMP))
        return t

    def python_steps(t: nxrs.Trainer, steps: int) -> tuple[nxrs.Trainer, float]:
        loss, step = 0.0, t.step
        for k in range(steps):
            loss = step(xs[k % SEED_NSAMP], ys[k % SEED_NSAMP])
        return t, float(loss)

    def seed_run(st: seed_ref.State, steps: int) -> seed_ref.State:
        seed_ref.train_run(st, wl.x, wl.y, -(-steps // SEED_NSAMP))
        return st

    return [
        Row("nxrs gate (run_gate, T1-T6)", "extra", GATE_STEPS, GATE_STEPS, fast_n, _none, gate),
        Row("nxrs Trainer.train_until", "extra", wl.steps, wl.steps, fast_n, wl.new_nxrs, until),
        Row(
            f"nxrs {wl.steps} x Trainer.step (Python loop)",
            "extra",
            wl.steps,
            wl.steps,
            fast_n,
            wl.new_nxrs,
            python_steps,
        ),
        Row(
            "numpy reference seed_ref.train_run",
            "extra",
            epochs * SEED_NSAMP,
            epochs * SEED_NSAMP,
            slow_n,
            lambda: seed_ref.mk_state(1),
            seed_run,
        ),
    ]


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def print_table(wl: Workload, rows: list[Row], peak: float | None) -> None:
    """Per row: steps, samples, time, samples/s, the ratio to nxrs, CPU time per wall time
    (the threads used), GFLOP/s per thread (``Workload.flops_per_sample``) and, for nxrs's
    rows when the no-FMA peak was measured, that as a share of the peak of one core."""
    base = next(r for r in rows if r.kind == "nxrs")
    print(f"({wl.key}) {wl.title}")
    w = max(len(r.name) for r in rows)
    head = ("steps", "samples", "time (s)", "samples/s", "nxrs t / this t", "cpu/wall")
    print(
        f"  {'':<{w}}  {head[0]:>6}  {head[1]:>7}  {head[2]:>9}  {head[3]:>10}  {head[4]:>15}  "
        f"{head[5]:>8}  {'GFLOP/s/thread':>14}  {'of no-FMA peak':>14}"
    )
    for r in rows:
        if r.skipped is not None:
            print(f"  {r.name:<{w}}  {r.skipped}")
            continue
        # nxrs's time for this row's samples over this row's time: how many times slower nxrs
        # is (below 1: faster).
        ratio = r.samples_per_s / base.samples_per_s
        per_thread = gflops(wl, r) / r.threads
        share = f"{per_thread / peak:.1%}" if peak and r.backend in ("soft", "hw") else ""
        print(
            f"  {r.name:<{w}}  {r.steps:>6}  {r.samples:>7}  {r.best_s:>9.3f}  "
            f"{r.samples_per_s:>10,.0f}  {ratio:>14.2f}x  {r.cpu_per_wall:>8.2f}  "
            f"{per_thread:>14.2f}  {share:>14}"
        )
    print()


def gflops(wl: Workload, r: Row) -> float:
    """A training row's GFLOP/s, all threads together."""
    return wl.flops_per_sample * r.samples_per_s / 1e9


def check_agreement(wl: Workload, rows: list[Row]) -> bool:
    """nxrs vs the numpy references bit for bit; the others' distance for information."""
    by_kind = {r.kind: r for r in rows if r.skipped is None and r.kind != "extra"}
    nx = by_kind["nxrs"].outcome(by_kind["nxrs"].result)
    assert nx is not None and nx.state_hash is not None
    ok = True
    print(f"({wl.key}) agreement after {wl.steps} steps")
    for r in by_kind.values():
        if r.kind == "nxrs":
            continue
        o = r.outcome(r.result)
        assert o is not None
        diff = float(np.max(np.abs(o.params.astype(np.float64) - nx.params.astype(np.float64))))
        if o.state_hash is not None:
            same = o.state_hash == nx.state_hash
            ok &= same
            verdict = "BIT-IDENTICAL" if same else "MISMATCH"
            print(
                f"  {r.name}: full-state hash {o.state_hash:016x} vs nxrs {nx.state_hash:016x}"
                f" -> {verdict}"
            )
        else:
            print(
                f"  {r.name}: last loss {o.loss:.6f} (nxrs {nx.loss:.6f}), "
                f"max |param - nxrs param| = {diff:.3g} (information only)"
            )
    return ok


def check_seed_extras(wl: Workload, rows: list[Row]) -> bool:
    """(a)'s older checks: ``train_until``, the ``step`` loop and ``seed_ref`` against nxrs."""
    names = {r.name: r for r in rows}
    until: nxrs.Trainer = names["nxrs Trainer.train_until"].result
    stepped_row = names[f"nxrs {wl.steps} x Trainer.step (Python loop)"]
    stepped: nxrs.Trainer = stepped_row.result[0]
    step_loss: float = stepped_row.result[1]
    ref: seed_ref.State = names["numpy reference seed_ref.train_run"].result
    same = until.state_hash() == seed_ref.state_hash(ref)
    same &= until.hash() == seed_ref.seed_hash(ref)
    # Trainer.step does not advance the epoch counter (nor does seed_ref.train_step), so the
    # stepped run is compared with the reference state at epoch 0.
    ref_e0 = dataclasses.replace(ref, epoch=0)
    same_steps = stepped.state_hash() == seed_ref.state_hash(ref_e0)
    print(
        f"  nxrs train_until vs seed_ref: full-state hash {until.state_hash():016x} vs "
        f"{seed_ref.state_hash(ref):016x} -> {'BIT-IDENTICAL' if same else 'MISMATCH'}"
    )
    print(
        f"  nxrs {wl.steps} x step vs seed_ref (epoch counter excluded): "
        f"{'BIT-IDENTICAL' if same_steps else 'MISMATCH'}; last-step loss {step_loss:.6f}"
    )
    return bool(same and same_steps)


def print_summary(results: list[tuple[Workload, list[Row]]]) -> None:
    kinds = [
        ("ref", "numpy ref (exact order)"),
        ("natural", "numpy natural"),
        ("torch", "torch eager"),
        *((f"torch-t{t}", f"torch eager {t} threads") for t in TORCH_THREADS[1:]),
    ]
    first = results[0][1]
    base_name = next(r.name for r in first if r.kind == "nxrs").split("(")[-1].rstrip(")")
    kinds = [
        (r.kind, f"nxrs {r.kind.removeprefix('nxrs-').replace('-t', ' t')}")
        for r in first
        if r.kind.startswith("nxrs-")
    ] + kinds
    print("summary: samples/s, and in brackets nxrs time / other time for the same samples")
    cols = [f"{'nxrs ' + base_name:>10}"] + [f"{label:>26}" for _, label in kinds]
    print(f"  {'workload':<32}  " + "  ".join(cols))
    for wl, rows in results:
        by_kind = {r.kind: r for r in rows if r.kind != "extra"}
        base = by_kind["nxrs"].samples_per_s
        cells = [f"{base:>10,.0f}"]
        for kind, _ in kinds:
            r = by_kind[kind]
            if r.skipped is not None:
                cells.append(f"{'skipped':>26}")
            else:
                sps = r.samples_per_s
                cells.append(f"{f'{sps:,.0f} ({sps / base:.2f}x)':>26}")
        print(f"  ({wl.key}) {wl.title.split(':')[0]:<28}  " + "  ".join(cells))


def parse_workloads(text: str) -> list[str]:
    """``--workloads``: names from ``WORKLOADS`` separated by commas, or ``all``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown) or '(none)'}; "
            f"choose from all, {', '.join(WORKLOADS)}"
        )
    return names


def real_workloads(quick: bool) -> list[Workload]:
    """(e)-(g): the speed table's real-size rows on random data (fixed seed), hw defaults."""
    rng = np.random.default_rng(REAL_DATA_SEED)
    x = rng.standard_normal((REAL_SAMPLES, REAL_FEATURES), dtype=np.float32)
    y = rng.integers(0, REAL_CLASSES, REAL_SAMPLES, dtype=np.int64)
    out = []
    for key, hidden, bsz, steps in REAL_MODELS:
        sizes = (REAL_FEATURES, *hidden, REAL_CLASSES)
        model = "-".join(map(str, sizes))
        out.append(
            Workload(
                key,
                f"{model}, batch {bsz}: random {REAL_SAMPLES} x {REAL_FEATURES} data, "
                "ieee math, He init, Adam lr 0.001, shuffled",
                x,
                y,
                steps[0] if quick else steps[1],
                {"layers": list(sizes), "batch_size": bsz},
                sizes,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--quick", action="store_true", help="one timed run per row, fewer steps per workload"
    )
    ap.add_argument(
        "--backend",
        choices=["soft", "hw", "both"],
        default="both",
        help="nxrs's backend(s) for (a)-(d): softf32, the verified hardware floats, or both "
        "(the default; soft is the baseline of the ratios, hw must end bit-identical to it); "
        "the real-size rows (e)-(h) always run hw",
    )
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument(
        "--workloads",
        type=parse_workloads,
        default=list(WORKLOADS),
        metavar="LIST",
        help=f"comma-separated, from: {', '.join(WORKLOADS)} (default: all)",
    )
    pick.add_argument(
        "--real",
        action="store_const",
        dest="workloads",
        const=list(TABLE_WORKLOADS),
        help=f"the speed table only: --workloads {','.join(TABLE_WORKLOADS)}",
    )
    args = ap.parse_args(argv)
    selected: list[str] = args.workloads
    backends = ["soft", "hw"] if args.backend == "both" else [args.backend]
    fast_n, slow_n = (1, 1) if args.quick else (5, 3)
    digits_steps = (200, 40) if args.quick else (1000, 200)

    torch: Any = None
    try:
        import torch as _torch

        torch = _torch
    except ImportError:
        torch = None

    # First, before anything is timed: building the microbenchmark takes both cores.
    peak = measure_peak() if "peak" in selected else PeakResult(skipped="not selected")

    sx, sy = nxrs.seed_dataset()
    rx, ry = seed_ref.dataset()
    assert np.array_equal(sx.view(np.uint32), rx.view(np.uint32)) and np.array_equal(sy, ry)
    dx, dy = general_ref.load_digits_f32()
    seed_wl = Workload(
        "a",
        "seed 6-10-4, batch 1: per-sample Adam lr 0.01, seed math and init",
        sx,
        sy,
        SEED_EPOCHS * SEED_NSAMP,
        {},
    )
    digits_wl = [
        Workload(
            key,
            f"digits 64-128-10, batch {bsz}: ieee math, He init, Adam lr 0.001, shuffled",
            dx,
            dy,
            steps,
            {"layers": DIGITS_LAYERS, "batch_size": bsz},
            tuple(DIGITS_LAYERS),
        )
        for key, bsz, steps in (("b", 1, digits_steps[0]), ("c", 32, digits_steps[1]))
    ]
    small = [
        wl
        for wl, name in zip([seed_wl, *digits_wl], ("seed", "digits1", "digits32"))
        if name in selected
    ]
    real = real_workloads(args.quick) if "real" in selected else []

    results: list[tuple[Workload, list[Row]]] = []
    for wl in small:
        # nxrs on the seed model runs its steps in Rust in milliseconds: more repeats there.
        nxrs_n = fast_n if wl.key == "a" else slow_n
        variants = [(b, 1) for b in backends] + [
            ("hw" if "hw" in backends else backends[0], t) for t in NXRS_THREADS[1:]
        ]
        rows = [
            *(nxrs_row(wl, nxrs_n, b, t, k == 0) for k, (b, t) in enumerate(variants)),
            ref_row(wl, slow_n),
            natural_row(wl, slow_n),
            *(torch_row(torch, wl, slow_n, t) for t in TORCH_THREADS),
        ]
        if wl.key == "a":
            rows += seed_extra_rows(wl, fast_n, slow_n)
        results.append((wl, rows))
    for wl in real:
        # hw only (softf32 would take minutes a row); no numpy reference (hours): nxrs's 1- and
        # 2-thread runs must agree bit for bit instead.
        rows = [
            *(nxrs_row(wl, slow_n, "hw", t, k == 0) for k, t in enumerate(NXRS_THREADS)),
            *(torch_row(torch, wl, slow_n, t) for t in TORCH_THREADS),
        ]
        results.append((wl, rows))
    for wl, rows in results:
        for row in rows:
            if row.skipped is None:
                print(f"timing ({wl.key}) {row.name} ...", file=sys.stderr, flush=True)
                best_of(row)

    predicts: list[PredictResult] = []
    if "digits-predict" in selected:
        predicts.append(
            predict_rows(
                "d",
                digits_wl[0],
                np.resize(dx, (PREDICT_ROWS, dx.shape[1])),
                backends,
                torch,
                slow_n,
                numpy_row=True,
            )
        )
    if "real-predict" in selected:
        rng = np.random.default_rng(REAL_DATA_SEED)
        sizes = (REAL_FEATURES, *PREDICT_REAL_HIDDEN, REAL_CLASSES)
        model = Workload("h", "", dx[:0], dy[:0], 0, {"layers": list(sizes)}, sizes)
        xs = rng.standard_normal((PREDICT_ROWS, REAL_FEATURES), dtype=np.float32)
        predicts.append(predict_rows("h", model, xs, ["hw"], torch, slow_n, numpy_row=False))

    print_machine()
    print(f"  numpy    : {np.__version__}")
    print(f"  nxrs     : {nxrs.__version__}")
    if torch is not None:
        print(f"  torch    : {torch.__version__} (torch.set_num_threads: {TORCH_THREADS})")
    else:
        print("  torch    : not installed")
    mode = "quick, N=1" if args.quick else f"best of N={slow_n} (N={fast_n} for Rust-fast rows)"
    print(f"timing: time.perf_counter, {WARMUP_STEPS}-step warm-up excluded, {mode}")
    print(f"workloads: {', '.join(selected)}")
    print()
    print_peak(peak)
    ok = True
    for wl, rows in results:
        print_table(wl, rows, peak.no_fma)
    for wl, rows in results:
        ok &= check_agreement(wl, rows)
        if wl.key == "a":
            ok &= check_seed_extras(wl, rows)
    print()
    if small:
        print_summary([(wl, rows) for wl, rows in results if wl in small])
        print()
    for pr in predicts:
        ok &= print_predict(pr, peak.no_fma)
        print()
    print_speed_table(results, predicts, peak)
    if not ok:
        print("FAILED: a bit-identity check above did not hold")
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# Inference
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Timing:
    """One contender of a predict table: its fastest time and output."""

    name: str
    backend: str  # "soft", "hw", "numpy", "torch"
    threads: int
    secs: float
    cpu_s: float  # the process's CPU time during the fastest run
    out: F32Array


@dataclasses.dataclass
class PredictResult:
    """A predict table: the model, its input rows and every contender's timing."""

    key: str
    model: Workload
    rows: int
    timings: list[Timing]

    @property
    def title(self) -> str:
        sizes = "-".join(map(str, self.model.sizes))
        data = "digits repeated" if self.key == "d" else "random"
        return f"predict_proba on {self.rows:,} rows ({data}), {sizes} (initial weights)"

    def gflops_per_thread(self, t: Timing) -> float:
        """Forward flops only: 2 per weight per row (biases, ReLU and softmax left out)."""
        flops = 2 * sum(i * o for i, o in zip(self.model.sizes, self.model.sizes[1:]))
        return flops * self.rows / t.secs / 1e9 / t.threads


def predict_rows(
    key: str,
    wl: Workload,
    x: F32Array,
    backends: list[str],
    torch: Any,
    repeats: int,
    numpy_row: bool,
) -> PredictResult:
    """Times class probabilities for the rows of ``x`` with ``wl``'s initial weights: nxrs
    ``predict_proba`` per backend (hw: per thread count), numpy matmuls + softmax (when
    ``numpy_row``), torch eager under ``no_grad`` per thread count. Each runs once untimed on
    the first ``PREDICT_WARMUP_ROWS`` rows, then ``repeats`` times; the fastest counts."""
    weights = initial_weights(wl)
    timings: list[Timing] = []

    def best(name: str, backend: str, threads: int, run: Callable[[F32Array], F32Array]) -> None:
        print(f"timing ({key}) {name} ...", file=sys.stderr, flush=True)
        run(x[:PREDICT_WARMUP_ROWS])
        best_s, cpu_s, out = float("inf"), 0.0, None
        for _ in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            res = run(x)
            secs = time.perf_counter() - t0
            if secs < best_s:
                best_s, cpu_s, out = secs, time.process_time() - c0, res
        assert out is not None
        timings.append(Timing(name, backend, threads, best_s, cpu_s, out))

    for b in backends:
        for t in NXRS_THREADS if b == "hw" else (1,):
            trainer = wl.new_nxrs(b, t)
            name = f"nxrs predict_proba ({b}, {t} thread{'s' * (t > 1)})"
            best(name, b, t, trainer.predict_proba)

    def numpy_forward(xs: F32Array) -> F32Array:
        a = xs
        for i, w in enumerate(weights):
            a = a @ w.T
            if i < len(weights) - 1:
                a = np.maximum(a, np.float32(0))
        e = np.exp(a - a.max(axis=1, keepdims=True))
        p: F32Array = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        return p

    if numpy_row:
        best("numpy natural (matmul, float32)", "numpy", 1, numpy_forward)
    if torch is not None:
        wt = [torch.from_numpy(w.copy()) for w in weights]
        for t in TORCH_THREADS:

            def torch_forward(xs: F32Array, t: int = t) -> F32Array:
                set_torch_threads(torch, t)
                with torch.no_grad():
                    a = torch.from_numpy(xs)
                    for i, w in enumerate(wt):
                        a = torch.nn.functional.linear(a, w)
                        if i < len(wt) - 1:
                            a = torch.relu(a)
                    p: F32Array = torch.softmax(a, dim=1).numpy()
                    return p

            best(f"torch eager no_grad ({t} thread{'s' * (t > 1)})", "torch", t, torch_forward)
    return PredictResult(key, wl, len(x), timings)


def print_predict(pr: PredictResult, peak: float | None) -> bool:
    """The table of a predict run, and nxrs's rows checked bit-identical to the first."""
    timings = pr.timings
    base = timings[0]
    print(f"({pr.key}) {pr.title}")
    w = max(len(t.name) for t in timings)
    print(
        f"  {'':<{w}}  {'time (s)':>9}  {'rows/s':>12}  {'nxrs t / this t':>15}  "
        f"{'cpu/wall':>8}  {'GFLOP/s/thread':>14}  {'of no-FMA peak':>14}"
    )
    ok = True
    for t in timings:
        ratio = base.secs / t.secs
        per_thread = pr.gflops_per_thread(t)
        share = f"{per_thread / peak:.1%}" if peak and t.backend in ("soft", "hw") else ""
        print(
            f"  {t.name:<{w}}  {t.secs:>9.4f}  {pr.rows / t.secs:>12,.0f}  {ratio:>14.2f}x  "
            f"{t.cpu_s / t.secs:>8.2f}  {per_thread:>14.2f}  {share:>14}"
        )
    for t in timings[1:]:
        if t.backend in ("soft", "hw"):
            same = np.array_equal(t.out.view(np.uint32), base.out.view(np.uint32))
            ok &= same
            print(f"  {t.name}: {'BIT-IDENTICAL' if same else 'MISMATCH'} to {base.name}")
        else:
            diff = float(np.max(np.abs(t.out.astype(np.float64) - base.out.astype(np.float64))))
            print(f"  {t.name}: max |p - nxrs p| = {diff:.3g} (information only)")
    return ok


# ---------------------------------------------------------------------------
# The no-FMA peak (rust/nxrs-core/examples/peak_flops.rs)
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class PeakResult:
    """The microbenchmark's kernels as (name, GFLOP/s of one core, fused), or why not run."""

    kernels: list[tuple[str, float, bool]] = dataclasses.field(default_factory=list)
    features: dict[str, bool] = dataclasses.field(default_factory=dict)
    skipped: str | None = None

    @property
    def no_fma(self) -> float | None:
        """The best rate of separate multiplies and adds (the widest vectors the CPU has)."""
        rates = [g for _, g, fused in self.kernels if not fused]
        return max(rates) if rates else None


JSON_MSG = ["--message-format=json-render-diagnostics"]  # the artifacts' paths, as JSON


def measure_peak() -> PeakResult:
    """Builds (niced, LTO off: a register loop gains nothing from it, and the build reuses
    HELPERS' fast release artifacts) and runs ``peak_flops``; its JSON line, in GFLOP/s."""
    cargo = shutil.which("cargo")
    if cargo is None:
        return PeakResult(skipped="skipped: cargo is not installed (the peak is a Rust example)")
    print("building rust/nxrs-core/examples/peak_flops.rs ...", file=sys.stderr, flush=True)
    env = {
        **os.environ,
        "CARGO_PROFILE_RELEASE_LTO": "false",
        "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16",
    }
    nice = ["nice"] if shutil.which("nice") else []
    build = subprocess.run(
        [
            *nice,
            cargo,
            "build",
            "--release",
            "--example",
            "peak_flops",
            "-p",
            "nxrs-core",
            *JSON_MSG,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    exe = None
    for line in build.stdout.splitlines():
        msg = json.loads(line) if line.startswith("{") else {}
        if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == (
            "peak_flops"
        ):
            exe = msg.get("executable")
    if build.returncode != 0 or not exe:
        return PeakResult(skipped=f"skipped: cargo build failed (exit {build.returncode})")
    print("running peak_flops ...", file=sys.stderr, flush=True)
    done = subprocess.run([exe], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        return PeakResult(skipped=f"skipped: peak_flops failed (exit {done.returncode})")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    kernels = [(k["name"], k["flops"] / k["ns"], bool(k["fma"])) for k in data["kernels"]]
    return PeakResult(kernels, {k: bool(v) for k, v in data["features"].items()})


def print_peak(peak: PeakResult) -> None:
    print("(p) register-only peak of one core, float32 (rust/nxrs-core/examples/peak_flops.rs)")
    if peak.skipped is not None:
        print(f"  {peak.skipped}")
    for name, rate, fused in peak.kernels:
        kind = "FMA chains, 2 flops each" if fused else "separate multiply and add chains"
        print(f"  {name:<16}  {rate:>7.1f} GFLOP/s  ({kind})")
    if peak.no_fma is not None:
        print(f"  no-FMA peak (the best separate mul + add): {peak.no_fma:.1f} GFLOP/s per core")
    print()


# ---------------------------------------------------------------------------
# The speed table
# ---------------------------------------------------------------------------


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def nxrs_isa() -> str:
    """The ISA nxrs's hw kernels use, if the package says (``nxrs.hardware_isa``)."""
    isa = getattr(nxrs, "hardware_isa", None)
    if isa is None:
        return "n/a"
    return str(isa() if callable(isa) else isa)


def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def print_speed_table(
    results: list[tuple[Workload, list[Row]]],
    predicts: list[PredictResult],
    peak: PeakResult,
) -> None:
    """The speed table in markdown (samples/s; rows/s for predict_proba), then its goals."""

    def find(rows: list[Row], backend: str, threads: int) -> Row | None:
        return next(
            (
                r
                for r in rows
                if r.backend == backend and r.threads == threads and r.skipped is None
            ),
            None,
        )

    def fmt(v: float | None, spec: str = ",.0f") -> str:
        return "n/a" if v is None else format(v, spec)

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a / b

    no_fma = peak.no_fma
    flags = cpu_flags()
    isa_env = os.environ.get("NXRS_ISA")
    print("speed table summary (markdown)")
    print()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(
        f"CPU: {cpu_model()}, {CORES} logical CPUs; flags: "
        + ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx512f", "avx2", "fma"))
        + f". nxrs ISA: NXRS_ISA={isa_env if isa_env else '(unset)'}, "
        f"nxrs.hardware_isa(): {nxrs_isa()}. No-FMA peak per core: "
        + (f"{no_fma:.1f} GFLOP/s" if no_fma else peak.skipped or "n/a")
        + f". Load average at the end: {load}."
    )
    print()
    print(
        "| model, batch | nxrs 1 thread | torch 1 thread | ratio | nxrs 2 threads "
        "| torch 2 threads | ratio | nxrs 2t / 1t | nxrs GFLOP/s per thread (1t / 2t) "
        "| torch GFLOP/s per thread (1t / 2t) | nxrs % of no-FMA peak (1t / 2t) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    # (goal, held, the numbers, the threads of the rows it judges)
    goals: list[tuple[str, bool | None, str, int]] = []
    notes: list[str] = []  # lines printed under the table

    def line(
        label: str,
        n1: float | None,
        t1: float | None,
        n2: float | None,
        t2: float | None,
        g: Callable[[float | None, int], float | None],
    ) -> None:
        gn1, gn2, gt1, gt2 = g(n1, 1), g(n2, 2), g(t1, 1), g(t2, 2)
        share = [None if v is None or not no_fma else v / no_fma for v in (gn1, gn2)]
        print(
            f"| {label} | {fmt(n1)} | {fmt(t1)} | {fmt(ratio(n1, t1), '.2f')} | {fmt(n2)} "
            f"| {fmt(t2)} | {fmt(ratio(n2, t2), '.2f')} | {fmt(ratio(n2, n1), '.2f')} "
            f"| {fmt(gn1, '.1f')} / {fmt(gn2, '.1f')} | {fmt(gt1, '.1f')} / {fmt(gt2, '.1f')} "
            f"| {fmt(share[0], '.0%')} / {fmt(share[1], '.0%')} |"
        )

    for wl, rows in results:
        if wl.key not in ("c", "e", "f", "g"):
            continue
        backend = "hw" if find(rows, "hw", 1) else "soft"
        sps = [
            None if (r := find(rows, b, t)) is None else r.samples_per_s
            for b, t in ((backend, 1), ("torch", 1), (backend, 2), ("torch", 2))
        ]

        def g(v: float | None, threads: int, wl: Workload = wl) -> float | None:
            return None if v is None else wl.flops_per_sample * v / 1e9 / threads

        model = "digits " if wl.key == "c" else ""
        model += "-".join(map(str, wl.sizes))
        bsz = int(wl.config["batch_size"])
        label = f"{model}, {bsz}" + ("" if backend == "hw" else f" ({backend})")
        line(label, sps[0], sps[1], sps[2], sps[3], g)
        n1, t1, n2, t2 = sps
        r1, r2, sc = ratio(n1, t1), ratio(n2, t2), ratio(n2, n1)
        if wl.key == "c":
            goals.append(
                (
                    f"{label}: nxrs 1t >= {GOAL_DIGITS_RATIO:g}x torch 1t",
                    _ge(r1, GOAL_DIGITS_RATIO),
                    _x(r1),
                    1,
                )
            )
            goals.append(
                (
                    f"{label}: nxrs 2t >= {GOAL_SCALING_DIGITS:g}x nxrs 1t",
                    _ge(sc, GOAL_SCALING_DIGITS),
                    _x(sc),
                    2,
                )
            )
            continue
        goals.append(
            (f"{label}: nxrs 1t >= {GOAL_RATIO:g}x torch 1t", _ge(r1, GOAL_RATIO), _x(r1), 1)
        )
        goals.append(
            (f"{label}: nxrs 2t >= {GOAL_RATIO:g}x torch 2t", _ge(r2, GOAL_RATIO), _x(r2), 2)
        )
        if wl.key == "g":
            g1 = g(n1, 1)
            share = None if g1 is None or not no_fma else g1 / no_fma
            goals.append(
                (
                    f"{label}: nxrs 1t >= {GOAL_PEAK_FRACTION:.0%} of the no-FMA peak",
                    _ge(share, GOAL_PEAK_FRACTION),
                    "n/a" if share is None else f"{share:.0%} ({g1:.1f} of {no_fma:.1f} GFLOP/s)",
                    1,
                )
            )
            goals.append(
                (
                    f"{label}: nxrs 2t >= {GOAL_SCALING_REAL:g}x nxrs 1t",
                    _ge(sc, GOAL_SCALING_REAL),
                    _x(sc),
                    2,
                )
            )
    for pr in predicts:
        if pr.key != "h":
            continue
        rps: list[float | None] = []
        for b, t in (("hw", 1), ("torch", 1), ("hw", 2), ("torch", 2)):
            hit = next((x for x in pr.timings if x.backend == b and x.threads == t), None)
            rps.append(None if hit is None else pr.rows / hit.secs)

        def gp(v: float | None, threads: int, pr: PredictResult = pr) -> float | None:
            flops = 2 * sum(i * o for i, o in zip(pr.model.sizes, pr.model.sizes[1:]))
            return None if v is None else flops * v / 1e9 / threads

        label = f"predict_proba {pr.rows:,} rows, {'-'.join(map(str, pr.model.sizes))} (rows/s)"
        line(label, rps[0], rps[1], rps[2], rps[3], gp)
        for t, (n, o) in ((1, rps[0:2]), (2, rps[2:4])):
            rr = ratio(n, o)
            goals.append(
                (
                    f"predict_proba: nxrs {t}t >= {GOAL_RATIO:g}x torch no_grad {t}t",
                    _ge(rr, GOAL_RATIO),
                    _x(rr),
                    t,
                )
            )
    for wl, rows in results:
        if wl.key != "a":
            continue
        # The seed row in us per step (lower is better); its ratio is still nxrs's speed over
        # torch's (torch's time over nxrs's), as above.
        us = [
            None if (r := find(rows, b, t)) is None else r.best_s / r.steps * 1e6
            for b, t in (("hw", 1), ("torch", 1), ("hw", 2), ("torch", 2))
        ]
        print(
            f"| seed 6-10-4, 1: us per step | {fmt(us[0], '.2f')} | {fmt(us[1], '.1f')} "
            f"| {fmt(ratio(us[1], us[0]), '.0f')} | {fmt(us[2], '.2f')} | {fmt(us[3], '.1f')} "
            f"| {fmt(ratio(us[3], us[2]), '.0f')} | {fmt(ratio(us[0], us[2]), '.2f')} "
            "| | | |"
        )
        soft = find(rows, "soft", 1)
        if soft is not None:
            soft_us = f"{soft.best_s / soft.steps * 1e6:.2f}"
            notes.append(f"seed 6-10-4 on the soft backend, 1 thread: {soft_us} us per step")
        hw1 = find(rows, "hw", 1)
        us1 = None if hw1 is None else hw1.best_s / hw1.steps * 1e6
        goals.append(
            (
                f"seed 6-10-4: <= {GOAL_SEED_US:g} us per step (hw, 1 thread)",
                None if us1 is None else us1 <= GOAL_SEED_US,
                "n/a" if us1 is None else f"{us1:.2f} us",
                1,
            )
        )
    print()
    for note_line in notes:
        print(note_line)
        print()
    # torch splits every real-size matrix product over its threads, so a real-size 2-thread
    # torch row that got less than 1.5 CPUs' worth of time shared a core with other work: the
    # 2-thread figures say nothing about the code then, and the 2-thread goals are not judged.
    # (nxrs's rows are no probe: whether nxrs uses its threads is what is measured; nor are the
    # small models', whose steps may rightly run on one thread.)
    used = [
        r.cpu_per_wall
        for wl, rows in results
        if wl.key in ("e", "f", "g")
        for r in rows
        if r.backend == "torch" and r.threads == 2 and r.skipped is None
    ]
    used += [
        t.cpu_s / t.secs
        for pr in predicts
        if pr.key == "h"
        for t in pr.timings
        if t.backend == "torch" and t.threads == 2
    ]
    contended = bool(used) and min(used) < BUSY_CPU_PER_WALL
    print("Goals (the speed table's):")
    print()
    for goal, held, numbers, threads in goals:
        if threads > 1 and contended:
            verdict = "not judged (the 2-thread rows did not get two cores)"
        else:
            verdict = "n/a" if held is None else _verdict(held)
        print(f"- {goal}: {numbers} -> {verdict}")
    if used:
        note = (
            " -- WARNING: other work held a core; the 2-thread figures are not meaningful "
            "(rerun on an idle machine)"
            if contended
            else ""
        )
        print(
            f"- real-size torch 2-thread rows: CPU time / wall time {min(used):.2f} at the least "
            f"(two cores: 2.00){note}"
        )


def _ge(v: float | None, goal: float) -> bool | None:
    return None if v is None else v >= goal


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _none(*_: Any) -> None:
    return None


if __name__ == "__main__":
    sys.exit(main())
