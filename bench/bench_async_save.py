"""Saves that do not stop training ``fit(async_save=True)`` against synchronous
saves on a ~1 GB state.

Run from the repository root::

    python bench/bench_async_save.py            # 4096-10240-4096 MLP, Adam: ~1 GB of state
    python bench/bench_async_save.py --quick    # 1024-4096-1024: ~100 MB

The state: an MLP with Adam, three tensors a parameter (weights, m, v), 4 bytes each
(4096-10240-4096: 83,900,416 parameters, 1006.8 MB). Three measurements:

1. **Training time blocked per checkpoint.** The same ``fit`` (batch 1, ``every`` steps, the
   default ``keep=3``) with synchronous and with background saves; the training thread's time
   inside the run directory's save calls (``Session.save``, ``poll``, ``settle``: the copy or
   the write, the pruning, the transcript's state digest, the manifest) is summed and divided by
   the checkpoints saved. Each periodic save is followed by ``every`` steps, longer than a
   background write, so an async save point never waits for the previous one. The final save
   (synchronous in both) is left out.
2. **Throughput of the background writer**: ``_Snapshot.save`` (what the writer thread runs: the
   crash-safe writer with the CRC-32Cs, fsync, rename, directory fsync) against a raw
   ``write`` + ``fsync`` of the same number of bytes from memory into a new file, best of 3,
   with nothing else running; MB/s of the file's bytes.
3. **Peak memory during an async save**, in a fresh child process: VmHWM (``/proc/self/status``)
   after a trainer's first steps (its working memory allocated) and after a ``fit`` with one
   background save; the growth against the state's bytes (goal: one copy, ratio <= ~1.05).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import nxrs
from nxrs._train import session as _session
from nxrs._util.files import fsync_path

MB = 1e6
SIZES = {"1GB": [4096, 10240, 4096], "100MB": [1024, 4096, 1024]}


def state_bytes(layers: list[int]) -> int:
    params = sum(a * b + b for a, b in zip(layers, layers[1:]))
    return 3 * 4 * params


def data(layers: list[int], n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, layers[0])).astype(np.float32)
    return x, rng.integers(0, layers[-1], size=n).astype(np.int64)


@contextmanager
def blocked_time() -> Iterator[dict[str, list[float]]]:
    """The training thread's times in ``Session.save``/``poll``/``settle`` (outermost calls
    only: ``save`` calls ``settle``), by method, the final save left out."""
    spent: dict[str, list[float]] = {}
    depth = [0]
    originals = {name: getattr(_session.Session, name) for name in ("save", "poll", "settle")}

    def timed(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any) -> Any:
            depth[0] += 1
            start = time.perf_counter()
            try:
                return original(self, *args)
            finally:
                depth[0] -= 1
                if depth[0] == 0 and not (name == "save" and args == (True,)):
                    spent.setdefault(name, []).append(time.perf_counter() - start)

        return call

    for name, original in originals.items():
        setattr(_session.Session, name, timed(name, original))
    try:
        yield spent
    finally:
        for name, original in originals.items():
            setattr(_session.Session, name, original)


def blocked_per_checkpoint(
    layers: list[int], every: int, saves: int, async_save: bool
) -> dict[str, list[float]]:
    # One epoch of batches of one: periodic saves at every, 2 every, ..., saves x every, then
    # every - 1 more steps before the final save (left out), so the last write has its time too.
    x, y = data(layers, every * (saves + 1) - 1)
    with tempfile.TemporaryDirectory(dir=".") as directory, blocked_time() as spent:
        t = nxrs.Trainer(layers=layers, batch_size=1, lr=1e-4, seed=0)
        t.fit(x, y, epochs=1, checkpoint=directory, every=every, async_save=async_save,
              progress=False)  # fmt: skip
    return spent


def writer_throughput(layers: list[int], runs: int = 3) -> tuple[float, float, int]:
    t = nxrs.Trainer(layers=layers, batch_size=1, lr=1e-4, seed=0)
    x, y = data(layers, 4)
    t.train_steps(x, y, 1)
    snapshot = t._snapshot()
    del t
    best_writer = best_raw = float("inf")
    with tempfile.TemporaryDirectory(dir=".") as directory:
        path = Path(directory) / "step.nxck"
        snapshot.save(path, metadata=[])
        size = path.stat().st_size
        payload = np.ones(size, dtype=np.uint8)  # the raw write's bytes, in memory
        for _ in range(runs + 1):  # the first of each untimed (fresh page cache)
            for kind in ("writer", "raw"):
                for p in Path(directory).iterdir():
                    p.unlink()
                os.sync()
                start = time.perf_counter()
                if kind == "writer":
                    snapshot.save(path, metadata=[("data_fingerprint", "0" * 16)])
                else:
                    raw = Path(directory) / "raw.bin"
                    with open(raw, "wb") as f:
                        f.write(memoryview(payload))
                        f.flush()
                        os.fsync(f.fileno())
                    fsync_path(directory)
                seconds = time.perf_counter() - start
                if _ > 0:
                    if kind == "writer":
                        best_writer = min(best_writer, seconds)
                    else:
                        best_raw = min(best_raw, seconds)
    return size / best_writer / MB, size / best_raw / MB, size


PEAK_CHILD = """
import sys, tempfile, numpy as np, nxrs
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
layers = [int(v) for v in sys.argv[1].split(",")]
rng = np.random.default_rng(0)
x = rng.normal(size=(8, layers[0])).astype(np.float32)
y = rng.integers(0, layers[-1], size=8).astype(np.int64)
t = nxrs.Trainer(layers=layers, batch_size=1, lr=1e-4, seed=0)
t.train_steps(x, y, 2)  # the working memory allocated, as in any fit after its first steps
t.evaluate(x, y)
before, resident = status("VmHWM"), status("VmRSS")
with tempfile.TemporaryDirectory(dir=".") as d:
    t.fit(x, y, epochs=1, checkpoint=d, every=2, async_save=sys.argv[2] == "1",
          keep="all", progress=False)
print(before, resident, status("VmHWM"))
"""


def peak_growth(layers: list[int], async_save: bool) -> tuple[int, int]:
    """The growth of the peak resident memory (VmHWM) during the fit: over the previous peak,
    and over the resident memory when the fit began."""
    out = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD, ",".join(map(str, layers)), str(int(async_save))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before, resident, after = map(int, out)
    return after - before, after - resident


def arguments(
    doc: str, every: int = 6, more: Callable[[argparse.ArgumentParser], object] | None = None
) -> tuple[argparse.Namespace, list[int]]:
    """The save benchmarks' command line (``--quick``, ``--every``, default ``every``,
    ``--saves``, and what ``more`` adds) and the state's layers; prints the machine and the
    state."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if more is not None:
        more(parser)
    parser.add_argument("--quick", action="store_true", help="~100 MB of state, not ~1 GB")
    parser.add_argument(
        "--every", type=int, default=every, help=f"steps between saves (default {every})"
    )
    parser.add_argument("--saves", type=int, default=3, help="periodic saves timed (default 3)")
    args = parser.parse_args()
    layers = SIZES["100MB" if args.quick else "1GB"]
    print(f"nxrs {nxrs.__version__}, {platform.platform()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip
    print(f"state: MLP {'-'.join(map(str, layers))}, Adam: {state_bytes(layers) / MB:.1f} MB")
    return args, layers


def main() -> None:
    args, layers = arguments(__doc__)
    size = state_bytes(layers)

    sync = blocked_per_checkpoint(layers, args.every, args.saves, async_save=False)
    background = blocked_per_checkpoint(layers, args.every, args.saves, async_save=True)
    print(f"1. training blocked per checkpoint ({args.saves} periodic saves, every "
          f"{args.every} steps, keep=3):")  # fmt: skip

    def per_save(spent: dict[str, list[float]]) -> float:
        return sum(sum(times) for times in spent.values()) / args.saves

    def show(spent: dict[str, list[float]]) -> str:
        parts = ", ".join(
            f"{name} {sum(times) / args.saves * 1e3:.1f}" for name, times in sorted(spent.items())
        )
        return f"{per_save(spent) * 1e3:8.1f} ms  (per save: {parts})"

    print(f"   synchronous {show(sync)}")
    print(f"   async       {show(background)}")
    print(f"   ratio async/sync {per_save(background) / per_save(sync):.3f}")
    copies = background.get("save", [])
    if copies:
        # The first copy touches fresh memory (a page fault a page); later ones refill it.
        later = f", then {min(copies[1:]) * 1e3:.1f} ms (best)" if len(copies) > 1 else ""
        print(f"   async save points (the copy): the first {copies[0] * 1e3:.1f} ms{later}; "
              f"sync/async(later) {per_save(sync) / min(copies[1:] or copies):.1f}x")  # fmt: skip

    writer, raw, file_size = writer_throughput(layers)
    print(f"2. writing {file_size / MB:.1f} MB (best of 3): background writer {writer:,.0f} MB/s, "
          f"raw write+fsync {raw:,.0f} MB/s   ratio {writer / raw:.2f} (goal >= 0.9)")  # fmt: skip

    for kind, flag in (("async", True), ("synchronous", False)):
        growth, over_resident = peak_growth(layers, flag)
        # fmt: off
        print(f"3. {kind} saves: the peak memory (VmHWM) grows by {growth / MB:,.1f} MB "
              f"({growth / size:.2f}x the state) during the fit; the peak is "
              f"{over_resident / MB:,.1f} MB ({over_resident / size:.2f}x the state) above the "
              "resident memory when the fit began (goal for async: one copy, <= ~1.05x)")
        # fmt: on
    threads = [t.name for t in threading.enumerate() if t.name == "nxrs-async-save"]
    assert not threads, threads


if __name__ == "__main__":
    main()
