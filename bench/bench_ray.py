"""Data-parallel training and sweeps on Ray vs one process (steps/s, communication, ratios).

Run from the repository root (needs ``pip install '.[ray]'``)::

    python bench/bench_ray.py            # 3 timed steps per row
    python bench/bench_ray.py --steps 1  # quicker

(1) Data parallel: a 784-512-512-10 MLP on a synthetic 60,000 x 784 set (uniform [0, 1)
features, 10 classes, fixed seed), batch 1024 cut into gradient blocks of 128 (8 per batch),
the "hw" backend; the same number of optimiser steps from the same fresh state by
``Trainer._run`` in this process (what ``fit`` does), then by ``fit``'s Ray engine with 1 and 2
workers on a local cluster. Per Ray step: the bytes moved between the driver and the workers
(the parameters to each worker, one gradient sum per block back), and the seconds of the step
beyond the slowest worker's computing (sending, serialising, waiting: the communication
overhead); and Ray's whole cost at one worker, its step time minus the single process's (the
same arithmetic plus Ray). The three final full-state hashes must be equal (exit status 1
otherwise).

(2) Sweep: 8 small configurations (64-h-10 on a synthetic 4,000 x 64 set, 5 epochs, batch 32,
h in 128 256, lr in 1e-3 3e-3, seed 0 1) trained one after another in this process, then by
``nxrs.sweep`` on the same local cluster; the results must be the same hashes.

The cluster has as many CPUs as this machine, and starting it is not timed. Ray runs its
workers at niceness 15: on a machine busy with other work they get less CPU than the driver.
Other processes on the machine skew the absolute figures: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_model

import nxrs
from nxrs._sweeps import train_config
from nxrs._train import distributed as distributed

LAYERS = [784, 512, 512, 10]
BATCH, BLOCK = 1024, 128


def data_parallel(steps: int) -> bool:
    rng = np.random.default_rng(0)
    x = rng.random((60_000, 784), dtype=np.float32)
    y = rng.integers(0, 10, 60_000)

    def trainer() -> nxrs.Trainer:
        return nxrs.Trainer(layers=LAYERS, batch_size=BATCH, grad_block=BLOCK, backend="hw")

    local = trainer()
    data = local._dataset(x, y)
    start = time.perf_counter()
    local._run(data, epochs=1, max_steps=steps)
    local_step = (time.perf_counter() - start) / steps
    params = sum(a.nbytes for a in distributed._parameters(local))
    print(f"(1) {'-'.join(map(str, LAYERS))}, 60,000 x 784, batch {BATCH}, grad_block {BLOCK}, hw")
    print(f"    parameters: {params / 1e6:.2f} MB; {steps} steps per row")
    print(f"    single process   {1 / local_step:7.3f} steps/s  ({local_step:6.2f} s/step)")
    hashes = {local.state_hash()}
    one_step = local_step
    for workers in (1, 2):
        t = trainer()
        d = t._dataset(x, y)
        engine = distributed.RayEngine(t, x, y, d.fingerprint, workers, None)
        try:
            engine.start()  # not timed
            start = time.perf_counter()
            waits = []
            for _ in range(steps):
                engine.run(d, epochs=1, max_steps=1)
                waits.append(engine.last_step_seconds - engine.last_step_compute_seconds)
            step = (time.perf_counter() - start) / steps
        finally:
            engine.close()
        hashes.add(t.state_hash())
        if workers == 1:
            one_step = step
        moved = engine.last_step_bytes
        print(
            f"    Ray, {workers} worker{'s' if workers > 1 else ' '}  {1 / step:7.3f} steps/s  "
            f"({step:6.2f} s/step, {local_step / step:4.2f}x the single process); "
            f"{moved / 1e6:6.1f} MB moved per step, {moved / workers / 1e6:5.1f} MB per worker, "
            f"{sum(waits) / steps:.3f} s/step beyond the slowest worker's computing"
        )
    print(
        f"    Ray's cost at 1 worker (its step - the single process's): "
        f"{one_step - local_step:+.3f} s/step ({(one_step - local_step) / local_step:+.1%})"
    )
    same = len(hashes) == 1
    print(f"    final full-state hashes {'all equal' if same else 'DIFFER'}: "
          + ", ".join(f"{h:016x}" for h in sorted(hashes)))  # fmt: skip
    return same


def sweep_rows() -> bool:
    rng = np.random.default_rng(1)
    x = rng.random((4_000, 64), dtype=np.float32)
    y = rng.integers(0, 10, 4_000)
    configs: list[dict[str, Any]] = [
        {"layers": [64, h, 10], "lr": lr, "seed": s, "backend": "hw"}
        for h in (128, 256)
        for lr in (1e-3, 3e-3)
        for s in (0, 1)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        serial = [
            train_config(c, 5, x, y, None, Path(tmp, "serial", str(k)), None, None)["state_hash"]
            for k, c in enumerate(configs)
        ]
        serial_s = time.perf_counter() - start
        start = time.perf_counter()
        results = nxrs.sweep(configs, x, y, epochs=5, directory=Path(tmp, "ray"))
        ray_s = time.perf_counter() - start
    same = serial == [r["state_hash"] for r in results]
    print(f"(2) sweep of {len(configs)} configurations (64-h-10, 4,000 x 64, 5 epochs)")
    print(f"    serial, one process  {serial_s:6.2f} s")
    print(f"    nxrs.sweep on Ray    {ray_s:6.2f} s  ({serial_s / ray_s:4.2f}x)")
    print(f"    hashes {'equal' if same else 'DIFFER'} to the serial runs'")
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (default 3)")
    args = parser.parse_args()
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"nxrs {nxrs.__version__}, {python}, {cpu_model()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    ok = data_parallel(args.steps) and sweep_rows()
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
