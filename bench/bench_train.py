"""Training speed, side by side in one process: nxrs vs numpy vs PyTorch (samples/s and ratios).

Run from the repository root::

    python bench/bench_train.py           # best of 5 (Rust-fast rows) / 3 (the others)
    python bench/bench_train.py --quick   # one timed run per row, fewer steps for (b) and (c)

Three workloads, each timed over a fixed number of optimiser steps from a fresh state (not whole
training runs, except (a), whose 6400 steps are the seed's whole run):

* (a) the seed: the 6-10-4 MLP, per-sample Adam (lr 0.01), seed math and init, 800 epochs x 8
  samples, in order;
* (b) digits 64-128-10, batch 1; (c) digits 64-128-10, batch 32: scikit-learn's
  ``load_digits()`` (all 1797 samples, x / 16), TRAINING.md's defaults through
  ``nxrs.Trainer(layers=[64, 128, 10], batch_size=B)`` ("ieee" math, He init, seed 0,
  Adam lr 0.001, shuffled every epoch).

Contenders, the same for every workload:

* nxrs ``Trainer.train_steps`` (the steps loop in Rust, softf32 arithmetic);
* the numpy reference ``tests/reference/general_ref.py`` (TRAINING.md in plain numpy float32 in
  the spec's exact operation order: every sequential sum is a Python loop over vector ops, so it
  is slow by construction; it must agree with nxrs bit for bit);
* a natural vectorised numpy float32 MLP (matmuls, ``np.exp``, Adam in array ops): what a numpy
  user would write; NOT bit-identical (other operation order, BLAS sums);
* PyTorch CPU float32 eager, ``nn.functional.linear`` + ``cross_entropy`` + ``torch.optim.Adam``
  with ``torch.set_num_threads(1)`` (optional: skipped when torch is not installed); NOT
  bit-identical.

All four train the same initial weights on the same batches (TRAINING.md's shuffle, drawn by
the reference's ``epoch_order``). (a) also keeps its older rows: the full gate
(``nxrs._gate.run_gate``), ``Trainer.train_until``, 6400 Python-level ``Trainer.step`` calls and
the seed's own numpy reference ``tests/reference/seed_ref.py``.

nxrs and the numpy references must agree bit for bit (full-state hash; exit status 1 otherwise);
the natural numpy and PyTorch rows show their final loss and largest parameter difference from
nxrs for information only. BLAS and OpenMP are held to one thread (environment variables set
before numpy is imported) so that every contender runs on one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# One thread for every library, as torch.set_num_threads(1): set before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _machine import print_machine  # noqa: E402
from reference import general_ref, seed_ref  # noqa: E402

import nxrs  # noqa: E402
from nxrs._gate import run_gate  # noqa: E402

F32Array = npt.NDArray[np.float32]
I64Array = npt.NDArray[np.int64]

SEED_EPOCHS = 800
SEED_NSAMP = 8
# T1 800 epochs, T2 400, T3 400 more, T5 400 more from the v2 checkpoint.
GATE_STEPS = (SEED_EPOCHS + 3 * (SEED_EPOCHS // 2)) * SEED_NSAMP
DIGITS_LAYERS = [64, 128, 10]
WARMUP_STEPS = 5
TORCH_SKIPPED = "skipped: torch is not installed (pip install torch, or the bench extra)"
# nxrs's and torch's thread counts: one, and every core (torch's default).
CORES = os.cpu_count() or 1
NXRS_THREADS = (1, CORES) if CORES > 1 else (1,)
TORCH_THREADS = NXRS_THREADS
PREDICT_ROWS = 100_000


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

    def new_nxrs(self, backend: str = "soft", threads: int = 1) -> nxrs.Trainer:
        if self.config:
            return nxrs.Trainer(**self.config, backend=backend, threads=threads)
        return nxrs.Trainer(seed=1, backend=backend, threads=threads)

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
    best_s: float = float("nan")
    result: Any = None
    skipped: str | None = None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.best_s


def best_of(row: Row) -> None:
    """A warm-up of ``WARMUP_STEPS`` steps on fresh state (untimed), then ``row.repeats`` timed
    runs of ``row.steps`` steps, each from fresh state; keeps the fastest and its result."""
    row.run(row.setup(), WARMUP_STEPS)
    best = float("inf")
    for _ in range(row.repeats):
        state = row.setup()
        t0 = time.perf_counter()
        result = row.run(state, row.steps)
        elapsed = time.perf_counter() - t0
        if elapsed < best:
            best, row.result = elapsed, result
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
        row = Row(name, kind, wl.steps, 0, 0, _none, _none)
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
        torch.set_num_threads(threads)
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

    return Row(name, kind, wl.steps, wl.samples, repeats, setup, run, outcome)


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


def print_table(wl: Workload, rows: list[Row]) -> None:
    base = next(r for r in rows if r.kind == "nxrs")
    print(f"({wl.key}) {wl.title}")
    w = max(len(r.name) for r in rows)
    head = ("steps", "samples", "time (s)", "samples/s", "nxrs t / this t")
    print(f"  {'':<{w}}  {head[0]:>6}  {head[1]:>7}  {head[2]:>9}  {head[3]:>10}  {head[4]:>15}")
    for r in rows:
        if r.skipped is not None:
            print(f"  {r.name:<{w}}  {r.skipped}")
            continue
        # nxrs's time for this row's samples over this row's time: how many times slower nxrs
        # is (below 1: faster).
        ratio = r.samples_per_s / base.samples_per_s
        print(
            f"  {r.name:<{w}}  {r.steps:>6}  {r.samples:>7}  {r.best_s:>9.3f}  "
            f"{r.samples_per_s:>10,.0f}  {ratio:>14.2f}x"
        )
    print()


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
    return same and same_steps


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--quick", action="store_true", help="one timed run per row, 200 / 40 digits steps"
    )
    ap.add_argument(
        "--backend",
        choices=["soft", "hw", "both"],
        default="both",
        help="nxrs's backend(s): softf32, the verified hardware floats, or both (the default; "
        "soft is the baseline of the ratios, hw must end bit-identical to it)",
    )
    args = ap.parse_args(argv)
    backends = ["soft", "hw"] if args.backend == "both" else [args.backend]
    fast_n, slow_n = (1, 1) if args.quick else (5, 3)
    digits_steps = (200, 40) if args.quick else (1000, 200)

    torch: Any = None
    try:
        import torch as _torch

        torch = _torch
    except ImportError:
        torch = None

    sx, sy = nxrs.seed_dataset()
    rx, ry = seed_ref.dataset()
    assert np.array_equal(sx.view(np.uint32), rx.view(np.uint32)) and np.array_equal(sy, ry)
    dx, dy = general_ref.load_digits_f32()
    workloads = [
        Workload(
            "a",
            "seed 6-10-4, batch 1: per-sample Adam lr 0.01, seed math and init",
            sx,
            sy,
            SEED_EPOCHS * SEED_NSAMP,
            {},
        ),
        *(
            Workload(
                key,
                f"digits 64-128-10, batch {bsz}: ieee math, He init, Adam lr 0.001, shuffled",
                dx,
                dy,
                steps,
                {"layers": DIGITS_LAYERS, "batch_size": bsz},
            )
            for key, bsz, steps in (("b", 1, digits_steps[0]), ("c", 32, digits_steps[1]))
        ),
    ]

    results: list[tuple[Workload, list[Row]]] = []
    for wl in workloads:
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
        for row in rows:
            if row.skipped is None:
                print(f"timing ({wl.key}) {row.name} ...", file=sys.stderr, flush=True)
                best_of(row)
        results.append((wl, rows))

    print_machine()
    print(f"  numpy    : {np.__version__}")
    print(f"  nxrs     : {nxrs.__version__}")
    if torch is not None:
        print(f"  torch    : {torch.__version__} (torch.set_num_threads: {TORCH_THREADS})")
    else:
        print("  torch    : not installed")
    mode = "quick, N=1" if args.quick else f"best of N={slow_n} (N={fast_n} for Rust-fast rows)"
    print(f"timing: time.perf_counter, {WARMUP_STEPS}-step warm-up excluded, {mode}")
    print()
    ok = True
    for wl, rows in results:
        print_table(wl, rows)
    for wl, rows in results:
        ok &= check_agreement(wl, rows)
        if wl.key == "a":
            ok &= check_seed_extras(wl, rows)
    print()
    print_summary(results)
    print()
    ok &= predict_table(workloads[1], backends, torch, slow_n)
    return 0 if ok else 1


def predict_table(wl: Workload, backends: list[str], torch: Any, repeats: int) -> bool:
    """(d) inference: class probabilities for ``PREDICT_ROWS`` rows (digits repeated) with the
    digits model's initial weights: nxrs ``predict_proba`` per backend and thread count (all
    bit-identical), numpy matmuls + softmax, torch eager under ``no_grad``."""
    x = np.resize(wl.x, (PREDICT_ROWS, wl.x.shape[1]))
    weights = initial_weights(wl)
    timings: list[tuple[str, float, Any]] = []

    def best(name: str, run: Callable[[], Any]) -> None:
        run()
        times, out = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = run()
            times.append(time.perf_counter() - t0)
        timings.append((name, min(times), out))

    for b in backends:
        for t in NXRS_THREADS if b == "hw" else (1,):
            trainer = wl.new_nxrs(b, t)
            name = f"nxrs predict_proba ({b}, {t} thread{'s' * (t > 1)})"
            best(name, lambda tr=trainer: tr.predict_proba(x))

    def numpy_forward() -> F32Array:
        a = x
        for i, w in enumerate(weights):
            a = a @ w.T
            if i < len(weights) - 1:
                a = np.maximum(a, np.float32(0))
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    best("numpy natural (matmul, float32)", numpy_forward)
    if torch is not None:
        xt = torch.from_numpy(x)
        wt = [torch.from_numpy(w.copy()) for w in weights]
        for t in TORCH_THREADS:

            def torch_forward(t: int = t) -> F32Array:
                torch.set_num_threads(t)
                with torch.no_grad():
                    a = xt
                    for i, w in enumerate(wt):
                        a = torch.nn.functional.linear(a, w)
                        if i < len(wt) - 1:
                            a = torch.relu(a)
                    return np.asarray(torch.softmax(a, dim=1).numpy())

            best(f"torch eager no_grad ({t} thread{'s' * (t > 1)})", torch_forward)
    base = timings[0]
    print(f"(d) predict_proba on {PREDICT_ROWS:,} rows, digits 64-128-10 (initial weights)")
    w = max(len(name) for name, _, _ in timings)
    print(f"  {'':<{w}}  {'time (s)':>9}  {'rows/s':>12}  {'nxrs t / this t':>15}")
    ok = True
    for name, secs, _ in timings:
        ratio = base[1] / secs
        print(f"  {name:<{w}}  {secs:>9.4f}  {PREDICT_ROWS / secs:>12,.0f}  {ratio:>14.2f}x")
    for name, _, out in timings[1:]:
        if name.startswith("nxrs"):
            same = np.array_equal(out.view(np.uint32), base[2].view(np.uint32))
            ok &= same
            print(f"  {name}: {'BIT-IDENTICAL' if same else 'MISMATCH'} to {base[0]}")
        else:
            diff = float(np.max(np.abs(out.astype(np.float64) - base[2].astype(np.float64))))
            print(f"  {name}: max |p - nxrs p| = {diff:.3g} (information only)")
    return ok


def _none(*_: Any) -> None:
    return None


if __name__ == "__main__":
    sys.exit(main())
