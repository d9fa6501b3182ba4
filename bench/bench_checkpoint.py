"""Checkpoint save/load timing: nxrs NXCK v2 vs safetensors, numpy, torch and raw file I/O.

Run from the repository root (as root, to also get cold-cache read numbers)::

    python bench/bench_checkpoint.py           # ~100 MB and ~1 GB of state, best of 3
    python bench/bench_checkpoint.py --quick   # ~100 MB only, one timed run per row

One process, one trainer per size, the same tensors for every format: the trainer takes one Adam
step (so the moments are not all zero), then ``Trainer.state_dict()`` gives the float32 arrays
that safetensors, numpy, torch and the raw write store. Every save is timed from nothing on disk
(the previous output is removed and ``os.sync()`` run beforehand, untimed) to the call's return;
"+fsync" rows then ``fsync`` the file(s) and the directory, as ``Trainer.save`` does itself
(temporary file, fsync, rename, directory fsync). Reads are timed with a warm page cache and, when
``/proc/sys/vm/drop_caches`` is writable, cold (``sync; echo 3 > drop_caches`` before every run).
Each row runs once untimed before its timed runs (a VM may back fresh memory lazily: the first
touch of memory, page cache included, can cost several times a later one). What each read row
does with the tensors is in its name: "copy" ends with private numpy arrays (``np.array`` of each
view), "touch" reads one 4-byte word of every 4 KiB page of the zero-copy views (faults every page
in, copies nothing). MB/s is the tensor bytes (the same for every row) over the time; 1 MB = 10**6
bytes. The peak memory of one ``Trainer.load`` (and of safetensors' ``load_file``) is measured in a
fresh interpreter: ``getrusage``'s ``ru_maxrss`` after the load minus before it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from _machine import cpu_model

import nxrs
from nxrs._util.files import fsync_path

F32Array = npt.NDArray[np.float32]
StateDict = dict[str, F32Array]

MB = 1e6
PAGE = 4096
DROP_CACHES = Path("/proc/sys/vm/drop_caches")

# Layer sizes: 3 x params (weights, Adam m, Adam v) x 4 bytes.
SIZES_100MB = [1024, 4096, 1024]  # 8,393,728 params -> 100.7 MB
SIZES_1GB = [4096, 10240, 4096]  # 83,900,416 params -> 1006.8 MB

GOALS = (
    "goals: durable save >= 90% of raw write+fsync throughput, and faster than\n"
    "  safetensors+fsync and torch.save+fsync; nxrs.open(verify=False) + first tensor element of\n"
    "  the 1 GB file < 1 ms; full verification (CRC-32C of every tensor) >= 5 GB/s;\n"
    "  Trainer.load warm <= 0.6x safetensors load_file and <= 1.5x a raw read + the CRC-32C of\n"
    "  the same bytes (open(verify=True)), cold <= 1.1x a raw read; peak memory of Trainer.load\n"
    "  <= 1.1x the state's bytes above a fresh process's baseline"
)

# A fresh interpreter: the peak resident memory (getrusage's ru_maxrss, KiB on Linux, bytes on
# macOS) before and after one load, printed as two numbers of bytes.
PEAK_CHILD = """
import os, resource, sys
# Linux starts a process's getrusage peak at the high-water mark of the process it was forked
# from (and keeps it across exec): measure in a child of this small interpreter, not of the
# large process that started it.
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
scale = 1 if sys.platform == "darwin" else 1024
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
import numpy, nxrs
kind, path = sys.argv[1:3]
if kind == "safetensors":
    import safetensors.numpy as st
    load = lambda: st.load_file(path)
else:
    load = lambda: nxrs.Trainer.load(path)
before = peak()
state = load()
print(before, peak())
"""


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def drop_caches() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``; False when not permitted."""
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError:
        return False
    return True


def meminfo_kb(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def touch_pages(a: npt.NDArray[Any]) -> int:
    """Reads one 32-bit word of every 4 KiB page of ``a`` (a contiguous float32 array)."""
    words = a.reshape(-1).view(np.uint32)
    return int(np.bitwise_or.reduce(words[:: PAGE // 4])) if words.size else 0


def same_bits(got: dict[str, Any], want: StateDict) -> bool:
    if set(got) != set(want):
        return False
    for name, w in want.items():
        g = np.asarray(got[name])
        if g.shape != w.shape or not np.array_equal(g.view(np.uint32), w.view(np.uint32)):
            return False
    return True


def first_touch_note() -> str:
    """Cost of touching fresh memory twice (a VM may back guest memory lazily)."""
    n = 256 * 2**20
    rates = []
    for _ in range(2):
        t0 = time.perf_counter()
        a = np.ones(n // 4, dtype=np.float32)
        rates.append(n / (time.perf_counter() - t0) / 1e9)
        del a
    reporting = Path("/sys/module/page_reporting").is_dir()
    note = f"fill of 256 MiB of fresh memory {rates[0]:.1f} GB/s, again at once {rates[1]:.1f} GB/s"
    if reporting:
        note += (
            "; free page reporting is on (freed guest memory goes back to the host within"
            " seconds and costs the first rate again when reused)"
        )
    return note


def mount_of(path: Path) -> tuple[str, str, str]:
    """(device, mount point, filesystem type) of the mount holding ``path``."""
    real = os.path.realpath(path)
    best = ("?", "/", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best[1]):
                best = (dev, mnt, fstype)
    except OSError:
        pass
    return best


def describe_dir(path: Path) -> str:
    dev, mnt, fstype = mount_of(path)
    st = os.statvfs(path)
    free_gb = st.f_bavail * st.f_frsize / 1e9
    return f"{path} on {dev} ({fstype}, mounted at {mnt}, {free_gb:.0f} GB free)"


# ---------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Op:
    """One timed operation: ``prepare()`` untimed, ``run()`` timed, ``check(result)`` once."""

    name: str
    run: Callable[[], Any]
    prepare: Callable[[], None] = lambda: None
    check: Callable[[Any], bool] | None = None
    baseline: bool = False


@dataclasses.dataclass
class Timing:
    name: str
    seconds: float
    baseline: bool
    ok: bool | None  # round-trip check (None: not checked)


def time_op(op: Op, repeats: int, cold: bool) -> Timing:
    best = float("inf")
    ok: bool | None = None
    for i in range(-1, repeats):  # run -1: untimed warm-up
        op.prepare()
        if cold:
            drop_caches()
        t0 = time.perf_counter()
        result = op.run()
        dt = time.perf_counter() - t0
        if i >= 0:
            best = min(best, dt)
        if i == repeats - 1 and op.check is not None:
            ok = op.check(result)
        del result
    return Timing(op.name, best, op.baseline, ok)


class Files:
    """The paths of one size's files, and the writers and readers of every format."""

    def __init__(self, root: Path, trainer: Any, sd: StateDict, torch: Any, st: Any) -> None:
        self.root = root
        self.trainer = trainer
        self.sd = sd
        self.torch = torch
        self.st = st
        self.nbytes = sum(a.nbytes for a in sd.values())
        self.raw_buf = np.concatenate([a.reshape(-1) for a in sd.values()])
        self.tt = {k: torch.from_numpy(v) for k, v in sd.items()} if torch is not None else {}
        self.nxck = root / "state.nxck"
        self.raw = root / "state.raw"
        self.safet = root / "state.safetensors"
        self.safet_nosync = root / "state-nosync.safetensors"
        self.npy_dir = root / "npy"
        self.npz = root / "state.npz"
        self.pt = root / "state.pt"

    def fresh(self, path: Path) -> Callable[[], None]:
        def prepare() -> None:
            remove(path)
            os.sync()

        return prepare

    # ---- saves ----

    def save_raw(self, fsync: bool) -> Callable[[], None]:
        def run() -> None:
            with open(self.raw, "wb") as f:
                f.write(memoryview(self.raw_buf).cast("B"))
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            if fsync:
                fsync_path(self.root)

        return run

    def save_nxrs(self) -> None:
        self.trainer.save(self.nxck)

    def save_safetensors(self, fsync: bool) -> Callable[[], None]:
        path = self.safet if fsync else self.safet_nosync

        def run() -> None:
            self.st.save_file(self.sd, str(path))
            if fsync:
                fsync_path(path)
                fsync_path(self.root)

        return run

    def save_npy(self) -> None:
        self.npy_dir.mkdir()
        for name, a in self.sd.items():
            with open(self.npy_dir / f"{name}.npy", "wb") as f:
                np.save(f, a)
                f.flush()
                os.fsync(f.fileno())
        fsync_path(self.npy_dir)
        fsync_path(self.root)

    def save_npz(self) -> None:
        with open(self.npz, "wb") as f:
            np.savez(f, **self.sd)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        fsync_path(self.root)

    def save_torch(self) -> None:
        with open(self.pt, "wb") as f:
            self.torch.save(self.tt, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_path(self.root)

    # ---- reads ----

    def read_raw(self) -> npt.NDArray[np.float32]:
        out = np.empty(self.nbytes // 4, dtype=np.float32)
        with open(self.raw, "rb", buffering=0) as f:
            got = f.readinto(memoryview(out).cast("B"))
        assert got == self.nbytes
        return out

    def check_raw(self, out: npt.NDArray[np.float32]) -> bool:
        return bool(np.array_equal(out.view(np.uint32), self.raw_buf.view(np.uint32)))

    def nxrs_load(self) -> Any:
        return nxrs.Trainer.load(self.nxck)

    def check_trainer(self, t: Any) -> bool:
        return bool(t.state_hash() == self.trainer.state_hash())

    def nxrs_open_copy(self) -> StateDict:
        with nxrs.open(self.nxck, verify=False) as ck:
            return {k: np.array(ck[k]) for k in ck.keys()}  # noqa: SIM118 (not a dict)

    def nxrs_open_touch(self) -> int:
        acc = 0
        with nxrs.open(self.nxck, verify=False) as ck:
            for k in ck.keys():  # noqa: SIM118 (not a dict)
                acc |= touch_pages(ck[k])
        return acc

    def nxrs_open_verify(self) -> None:
        with nxrs.open(self.nxck, verify=True):
            pass

    def safetensors_load(self) -> dict[str, Any]:
        return dict(self.st.load_file(str(self.safet)))

    def npy_mmap_copy(self) -> StateDict:
        return {k: np.array(np.load(self.npy_dir / f"{k}.npy", mmap_mode="r")) for k in self.sd}

    def npy_mmap_touch(self) -> int:
        acc = 0
        for k in self.sd:
            acc |= touch_pages(np.load(self.npy_dir / f"{k}.npy", mmap_mode="r"))
        return acc

    def npz_load(self) -> StateDict:
        with np.load(self.npz) as z:
            return {k: z[k] for k in z.files}

    def torch_load(self) -> dict[str, Any]:
        d = self.torch.load(self.pt, weights_only=True)
        return {k: v.numpy() for k, v in d.items()}

    def torch_load_mmap_copy(self) -> dict[str, Any]:
        d = self.torch.load(self.pt, weights_only=True, mmap=True)
        return {k: v.numpy().copy() for k, v in d.items()}


def save_ops(f: Files, torch_ok: bool) -> list[Op]:
    ops = [
        Op("raw: one write + fsync (ceiling)", f.save_raw(True), f.fresh(f.raw)),
        Op("raw: one write, no fsync", f.save_raw(False), f.fresh(f.raw)),
        Op(
            "nxrs Trainer.save (tmp+fsync+rename+dir fsync)",
            f.save_nxrs,
            f.fresh(f.nxck),
            None,
            True,
        ),
        Op("safetensors save_file + fsync", f.save_safetensors(True), f.fresh(f.safet)),
        Op("safetensors save_file, no fsync", f.save_safetensors(False), f.fresh(f.safet_nosync)),
        Op("numpy np.save per tensor + fsync", f.save_npy, f.fresh(f.npy_dir)),
        Op("numpy np.savez + fsync", f.save_npz, f.fresh(f.npz)),
    ]
    if torch_ok:
        ops.append(Op("torch.save + fsync", f.save_torch, f.fresh(f.pt)))
    return ops


def read_ops(f: Files, torch_ok: bool) -> list[Op]:
    ok_sd: Callable[[Any], bool] = lambda d: same_bits(d, f.sd)  # noqa: E731
    ops = [
        Op("raw: one read into a new buffer", f.read_raw, check=f.check_raw),
        Op("nxrs Trainer.load (full verify, copy)", f.nxrs_load, check=f.check_trainer),
        Op("nxrs open(verify=False) + copy all", f.nxrs_open_copy, check=ok_sd, baseline=True),
        Op("nxrs open(verify=False) + touch all", f.nxrs_open_touch),
        Op("nxrs open(verify=True) (CRC all, no copy)", f.nxrs_open_verify),
        Op("safetensors load_file", f.safetensors_load, check=ok_sd),
        Op("numpy np.load(mmap_mode='r') + copy all", f.npy_mmap_copy, check=ok_sd),
        Op("numpy np.load(mmap_mode='r') + touch all", f.npy_mmap_touch),
        Op("numpy np.load(.npz)", f.npz_load, check=ok_sd),
    ]
    if torch_ok:
        ops.append(Op("torch.load(weights_only=True)", f.torch_load, check=ok_sd))
        ops.append(Op("torch.load(mmap=True) + copy all", f.torch_load_mmap_copy, check=ok_sd))
    return ops


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def peak_memory(kind: str, path: Path) -> int:
    """Peak resident memory that loading ``path`` adds to a fresh process (bytes)."""
    out = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD, kind, str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    before, after = (int(v) for v in out.split())
    return after - before


def load_goals(warm: list[Timing], cold: list[Timing] | None, f: Files) -> None:
    """The Trainer.load goals: time ratios from the tables, peak memory in fresh processes."""

    def row(rows: list[Timing], prefix: str) -> float:
        r = find(rows, prefix)
        assert r is not None, prefix
        return r.seconds

    def verdict(ok: bool) -> str:
        return "MET" if ok else "NOT MET"

    load = row(warm, "nxrs Trainer.load")
    st_ratio = load / row(warm, "safetensors load_file")
    crc = row(warm, "nxrs open(verify=True)")
    raw_crc = load / (row(warm, "raw: one read") + crc)
    print(
        f"    Trainer.load warm = {st_ratio:.2f}x safetensors load_file (goal <= 0.6x: "
        f"{verdict(st_ratio <= 0.6)}), {raw_crc:.2f}x a raw read + CRC-32C of the bytes "
        f"(goal <= 1.5x: {verdict(raw_crc <= 1.5)})"
    )
    if cold is not None:
        ratio = row(cold, "nxrs Trainer.load") / row(cold, "raw: one read")
        print(
            f"    Trainer.load cold = {ratio:.2f}x a raw read (goal <= 1.1x: "
            f"{verdict(ratio <= 1.1)})"
        )
    nx = peak_memory("nxrs", f.nxck)
    st = peak_memory("safetensors", f.safet)
    print(
        f"    peak memory above a fresh process's baseline (getrusage ru_maxrss): Trainer.load "
        f"{nx / MB:.0f} MB = {nx / f.nbytes:.2f}x the state's {f.nbytes / MB:.0f} MB (goal <= "
        f"1.1x: {verdict(nx <= 1.1 * f.nbytes)}); safetensors load_file {st / MB:.0f} MB = "
        f"{st / f.nbytes:.2f}x"
    )


def print_table(title: str, rows: list[Timing], nbytes: int) -> None:
    base = next((r.seconds for r in rows if r.baseline), float("nan"))
    w = max(len(r.name) for r in rows) + 2
    print(f"  {title}")
    print(f"    {'operation':<{w}}  {'time (ms)':>10}  {'MB/s':>8}  {'vs nxrs':>8}  round trip")
    print(f"    {'-' * w}  {'-' * 10}  {'-' * 8}  {'-' * 8}  ----------")
    for r in rows:
        mark = " *" if r.baseline else ""
        ok = "-" if r.ok is None else ("bit-exact" if r.ok else "MISMATCH")
        print(
            f"    {r.name + mark:<{w}}  {r.seconds * 1e3:>10.1f}  {nbytes / r.seconds / MB:>8.0f}"
            f"  {r.seconds / base:>7.2f}x  {ok}"
        )


def find(rows: list[Timing], prefix: str) -> Timing | None:
    return next((r for r in rows if r.name.startswith(prefix)), None)


def latency_section(path: Path, runs: int, cold_ok: bool, cold_runs: int) -> list[str]:
    """Open-to-first-element latency and full-verify throughput of one (large) file."""
    lines: list[str] = []
    size = path.stat().st_size

    def first_element(verify: bool) -> float:
        t0 = time.perf_counter()
        ck = nxrs.open(path, verify=verify)
        v = float(ck["W1"][0, 0])
        dt = time.perf_counter() - t0
        ck.close()
        del ck
        assert v == v
        return dt

    fsync_path(path)
    first_element(False)  # warm the page cache
    warm = [first_element(False) for _ in range(runs)]
    lines.append(
        f"  nxrs.open(verify=False) + ck['W1'][0, 0], warm cache, {runs} runs: best "
        f"{min(warm) * 1e3:.3f} ms, median {statistics.median(warm) * 1e3:.3f} ms "
        f"(goal < 1 ms: {'MET' if min(warm) < 1e-3 else 'NOT MET'})"
    )
    if cold_ok:
        cold = []
        for _ in range(cold_runs):
            drop_caches()
            cold.append(first_element(False))
        lines.append(
            f"  nxrs.open(verify=False) + ck['W1'][0, 0], cold cache, {cold_runs} runs: best "
            f"{min(cold) * 1e3:.3f} ms, median {statistics.median(cold) * 1e3:.3f} ms"
        )
    vruns = max(3, runs // 10)
    warm_v = [first_element(True) for _ in range(vruns)]
    best_v = min(warm_v)
    gbs = size / best_v / 1e9
    lines.append(
        f"  nxrs.open(verify=True) + ck['W1'][0, 0], warm cache, {vruns} runs: best "
        f"{best_v * 1e3:.1f} ms = {gbs:.2f} GB/s over {size / MB:.0f} MB "
        f"(goal >= 5 GB/s: {'MET' if gbs >= 5 else 'NOT MET'})"
    )
    with nxrs.open(path, verify=False) as ck:
        ck.verify()
        ver = []
        for _ in range(vruns):
            t0 = time.perf_counter()
            ck.verify()
            ver.append(time.perf_counter() - t0)
    del ck  # the mapping must go, or drop_caches cannot evict its pages
    lines.append(
        f"  ck.verify() alone (CRC-32C of every tensor, mapping already open), warm: best "
        f"{min(ver) * 1e3:.1f} ms = {size / min(ver) / 1e9:.2f} GB/s"
    )
    if cold_ok:
        cold_v = []
        for _ in range(min(cold_runs, 3)):
            drop_caches()
            cold_v.append(first_element(True))
        lines.append(
            f"  nxrs.open(verify=True) + ck['W1'][0, 0], cold cache: best "
            f"{min(cold_v) * 1e3:.1f} ms = {size / min(cold_v) / 1e9:.2f} GB/s "
            "(disk-bound, for information)"
        )
    return lines


def diagnostics(f: Files, shm: Path | None, repeats: int) -> list[str]:
    """Where a durable save's time goes: tmpfs (no disk) saves, and the fsync alone."""
    lines: list[str] = []
    if shm is not None:
        nx_shm = shm / "state.nxck"
        raw_shm = shm / "state.raw"

        def nx_run() -> None:
            f.trainer.save(nx_shm)

        def raw_run() -> None:
            with open(raw_shm, "wb") as out:
                out.write(memoryview(f.raw_buf).cast("B"))

        def rm(p: Path) -> Callable[[], None]:
            return lambda: remove(p)

        t_nx = time_op(Op("", nx_run, rm(nx_shm)), repeats, False).seconds
        t_raw = time_op(Op("", raw_run, rm(raw_shm)), repeats, False).seconds
        remove(nx_shm)
        remove(raw_shm)
        lines.append(
            f"  to tmpfs ({shm}; no disk, fsync is a no-op): nxrs Trainer.save "
            f"{t_nx * 1e3:.1f} ms ({f.nbytes / t_nx / MB:.0f} MB/s), raw write "
            f"{t_raw * 1e3:.1f} ms ({f.nbytes / t_raw / MB:.0f} MB/s) -> serialisation + CRC + "
            f"copy overhead of nxrs = {(t_nx - t_raw) * 1e3:+.1f} ms"
        )
    # fsync alone of freshly written (dirty) data
    best_w = best_s = float("inf")
    for _ in range(repeats):
        remove(f.raw)
        os.sync()
        t0 = time.perf_counter()
        with open(f.raw, "wb") as out:
            out.write(memoryview(f.raw_buf).cast("B"))
            out.flush()
            t1 = time.perf_counter()
            os.fsync(out.fileno())
            t2 = time.perf_counter()
        best_w, best_s = min(best_w, t1 - t0), min(best_s, t2 - t1)
    lines.append(
        f"  raw write split: write() to page cache best {best_w * 1e3:.1f} ms, fsync of the "
        f"dirty {f.nbytes / MB:.0f} MB best {best_s * 1e3:.1f} ms"
    )
    return lines


def run_size(
    label: str,
    sizes: list[int],
    repeats: int,
    root: Path,
    shm: Path | None,
    torch: Any,
    st: Any,
    cold_ok: bool,
    latency: bool,
    latency_runs: int,
) -> None:
    print()
    print(f"== {label}: Trainer(seed=1, sizes={sizes}), best of {repeats} ==")
    t0 = time.perf_counter()
    trainer = nxrs.Trainer(seed=1, sizes=sizes)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, sizes[0])).astype(np.float32)
    y = np.array([sizes[-1] - 1], dtype=np.int64)
    trainer.train_until(x, y, 1)  # one Adam step: moments not all zero
    sd = trainer.state_dict()
    f = Files(root, trainer, sd, torch, st)
    words = f.raw_buf.view(np.uint32)
    pages = words[: words.size - words.size % (PAGE // 4)].reshape(-1, PAGE // 4)
    zero_pages = float(np.mean(~pages.any(axis=1)))
    print(
        f"  state: {len(sd)} tensors, {f.nbytes:,} bytes ({f.nbytes / MB:.1f} MB) of float32; "
        f"{zero_pages:.0%} of its 4 KiB pages all zero (dead ReLU rows' moments); set up in "
        f"{time.perf_counter() - t0:.1f} s (untimed)"
    )
    torch_ok = torch is not None
    saves = [time_op(op, repeats, False) for op in save_ops(f, torch_ok)]
    print(f"  nxrs file: {f.nxck.stat().st_size:,} bytes")
    print()
    print_table("saves (durable unless 'no fsync'; * = baseline of 'vs nxrs')", saves, f.nbytes)
    raw = find(saves, "raw: one write + fsync")
    nx = find(saves, "nxrs Trainer.save")
    stf = find(saves, "safetensors save_file + fsync")
    pt = find(saves, "torch.save")
    assert raw is not None and nx is not None and stf is not None
    pct = raw.seconds / nx.seconds * 100
    print(
        f"    nxrs durable save = {pct:.0f}% of raw write+fsync throughput "
        f"(goal >= 90%: {'MET' if pct >= 90 else 'NOT MET'})"
    )
    faster = nx.seconds < stf.seconds and (pt is None or nx.seconds < pt.seconds)
    print(
        f"    nxrs faster than safetensors+fsync (their time / nxrs's: "
        f"{stf.seconds / nx.seconds:.2f}x)"
        + (f" and torch.save+fsync ({pt.seconds / nx.seconds:.2f}x)" if pt else "")
        + f": {'MET' if faster else 'NOT MET'}"
    )
    print()
    # Read rows: make sure the files are on disk and not dirty.
    os.sync()
    warm = [time_op(op, repeats, False) for op in read_ops(f, torch_ok)]
    print_table("reads, WARM page cache (files just written or read)", warm, f.nbytes)
    print()
    cold: list[Timing] | None = None
    if cold_ok:
        cold = [time_op(op, repeats, True) for op in read_ops(f, torch_ok)]
        print_table(
            "reads, COLD page cache (sync; echo 3 > drop_caches before each run)", cold, f.nbytes
        )
    else:
        print("  reads, COLD page cache: not measured (cannot write /proc/sys/vm/drop_caches)")
    load_goals(warm, cold, f)
    print()
    print("  where a durable save's time goes (diagnostics):")
    for line in diagnostics(f, shm, repeats):
        print(line)
    if latency:
        print()
        print(f"  open-to-first-tensor latency and full verification ({label} file):")
        for line in latency_section(f.nxck, latency_runs, cold_ok, 5):
            print(line)
    del f, sd, trainer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="~100 MB only, one timed run per row")
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where to make the temporary benchmark directory (default: the system temp dir)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 3)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)

    torch: Any = None
    try:
        import torch as _torch

        torch = _torch
    except ImportError:
        torch = None
    st: Any
    try:
        import safetensors
        import safetensors.numpy as _st

        st = _st
        st_version = safetensors.__version__
    except ImportError:
        print("safetensors is required: pip install safetensors", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="nxrs-bench-ckpt-", dir=args.dir))
    shm_base = Path("/dev/shm")
    shm = (
        Path(tempfile.mkdtemp(prefix="nxrs-bench-ckpt-", dir=shm_base))
        if (shm_base.is_dir() and mount_of(shm_base)[2] == "tmpfs")
        else None
    )
    try:
        cached_before = meminfo_kb("Cached")
        cold_ok = drop_caches()
        cached_after = meminfo_kb("Cached")

        print("machine")
        print(f"  platform    : {platform.platform()}")
        print(f"  cpu         : {cpu_model()} ({os.cpu_count()} logical CPUs)")
        print(f"  memory      : {meminfo_kb('MemTotal') / 1e6:.1f} GB; {first_touch_note()}")
        print(f"  python      : {platform.python_implementation()} {platform.python_version()}")
        print(f"  numpy       : {np.__version__}")
        print(f"  nxrs        : {nxrs.__version__}")
        print(f"  safetensors : {st_version}")
        print(f"  torch       : {torch.__version__ if torch is not None else 'not installed'}")
        print(f"  bench dir   : {describe_dir(root)}")
        work = Path("/work")
        if work.is_dir():
            same = os.stat(work).st_dev == os.stat(root).st_dev
            print(
                f"  /work       : {describe_dir(work)}"
                f" ({'same filesystem' if same else 'a DIFFERENT filesystem'} as the bench dir)"
            )
        print(f"  tmpfs       : {shm if shm is not None else 'none (diagnostic rows skipped)'}")
        if cold_ok:
            print(
                f"  drop_caches : works (page cache {cached_before / 1e3:.0f} MB -> "
                f"{cached_after / 1e3:.0f} MB): cold-cache reads measured"
            )
        else:
            print("  drop_caches : not permitted: only warm-cache reads")
        mode = "quick, N=1" if args.quick else f"best of N={repeats}"
        print(
            f"timing: time.perf_counter, {mode} after one untimed warm-up run of each row;"
            " MB/s = tensor bytes / time, 1 MB = 1e6 B"
        )
        print("'vs nxrs' = time / time of the row marked * (> 1: nxrs faster)")
        print(
            "'round trip' = what was read is bit-identical to the trainer's state (Trainer.load:"
            " state_hash)"
        )
        print(GOALS)

        cases: list[tuple[str, list[int], bool]] = [("~100 MB", SIZES_100MB, args.quick)]
        if not args.quick:
            cases.append(("~1 GB", SIZES_1GB, True))
        for label, sizes, latency in cases:
            case_dir = root / label.strip("~").replace(" ", "")
            case_dir.mkdir()
            case_shm = None
            if shm is not None:
                case_shm = shm / case_dir.name
                case_shm.mkdir()
            try:
                run_size(
                    label,
                    sizes,
                    repeats,
                    case_dir,
                    case_shm,
                    torch,
                    st,
                    cold_ok,
                    latency,
                    10 if args.quick else 50,
                )
            finally:
                shutil.rmtree(case_dir, ignore_errors=True)
                if case_shm is not None:
                    shutil.rmtree(case_shm, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
