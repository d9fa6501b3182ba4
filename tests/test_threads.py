"""Threads change no bit: training, evaluation and prediction on 1, 2, 3 and 4 threads (under both
backends) end in the same full state and give the same numbers, on work big enough that every
phase of a step (samples, weight rows, optimiser cells) is split among the threads; and the
setting is validated like every other."""

from __future__ import annotations

import os
import platform
import signal
import time

import numpy as np
import pytest

import nxrs


def data(n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return rng.random((n, 64), dtype=np.float32), rng.integers(0, 10, n)


GUARDED = platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")


@pytest.mark.parametrize(
    "backend",
    [
        "soft",
        pytest.param("hw", marks=pytest.mark.skipif(not GUARDED, reason="no hardware backend")),
    ],
)
def test_every_thread_count_gives_the_same_bits(backend: str) -> None:
    x, y = data()
    results = {}
    for threads in (1, 2, 3, 4):
        t = nxrs.Trainer(
            # A block of 128 samples of a 38k-parameter model: big enough for the samples, the
            # weight rows and the optimiser cells to be shared among 4 threads (at least 2^15
            # multiply-adds a part).
            layers=[64, 512, 10],
            batch_size=128,
            backend=backend,
            threads=threads,
        )
        assert t.threads == threads
        history = t.fit(x, y, epochs=2, progress=False)
        proba = t.predict_proba(x)
        results[threads] = (
            t.state_hash(),
            history.history["loss"],
            t.evaluate(x, y),
            proba.view(np.uint32).tobytes(),
        )
    assert len(set(map(repr, results.values()))) == 1, results


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_trains_without_the_parents_worker_threads() -> None:
    # A fork copies only the calling thread: the child must not wait for the parent's workers
    # (it would hang), and must still give the same bits.
    x, y = data()
    t = nxrs.Trainer(layers=[64, 512, 10], batch_size=128, threads=2)
    t.fit(x, y, epochs=1, progress=False)  # the workers exist and have run jobs
    before = str(t.state_hash())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: train one more epoch, report the hash, leave at once
        code = 1
        try:
            t.fit(x, y, epochs=2, progress=False)  # `epochs` is the epoch to reach
            os.write(write, str(t.state_hash()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 60
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung (waiting for worker threads it does not have)")
        time.sleep(0.01)
    status = waited[1]
    with os.fdopen(read) as pipe:
        child_hash = pipe.read()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    t.fit(x, y, epochs=2, progress=False)
    assert child_hash == str(t.state_hash()) != before


def test_resuming_on_another_thread_count_gives_the_same_bits() -> None:
    x, y = data(120)
    whole = nxrs.Trainer(layers=[64, 32, 10], batch_size=16, threads=1)
    whole.fit(x, y, epochs=3, progress=False)
    part = nxrs.Trainer(layers=[64, 32, 10], batch_size=16, threads=4)
    part.fit(x, y, epochs=1, progress=False)
    part.threads = 2
    part.fit(x, y, epochs=3, progress=False)
    assert part.state_hash() == whole.state_hash()


def test_the_default_is_the_available_cores_and_bad_counts_are_config_errors() -> None:
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert nxrs.Trainer(layers=[3, 2]).threads == expected
    t = nxrs.Trainer(layers=[3, 2], threads=2)
    for bad in (0, -1, 1025, 2**70):
        with pytest.raises(nxrs.ConfigError, match="threads"):
            nxrs.Trainer(layers=[3, 2], threads=bad)
        with pytest.raises(nxrs.ConfigError, match="threads"):
            t.threads = bad
    assert t.threads == 2
    assert "threads" not in t.config
