"""Saves that do not stop training (``fit(async_save=True)``, ``nxrs train --async-save``;
``docs/RUNS.md``, "Saves in the background"): the same bits as synchronous saves, one save in
flight, a checkpoint counted only once durable, failures and signals as with synchronous saves.

The writer is made slow, blocked or failing through the seam ``nxrs._runs.async_save._before_write``
(called in the writer thread before each background write)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs._runs import async_save as _async_save
from nxrs._runs.transcript import entry_digest

LAYERS = [16, 32, 4]
EPOCHS = 3
EVERY = 10  # 25 steps an epoch (200 samples, batch 8): saves at 10, 20, ..., 70, final 75


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 16)).astype(np.float32)
    return x, np.argmax(x[:, :4], axis=1).astype(np.int64)


@pytest.fixture(autouse=True)
def no_seam() -> Iterator[None]:
    yield
    _async_save._before_write = None


def trainer() -> nxrs.Trainer:
    return nxrs.Trainer(layers=LAYERS, batch_size=8, lr=0.01, seed=5)


def fit(directory: Path, data: tuple[np.ndarray, np.ndarray], **kw: Any) -> nxrs.Trainer:
    t = trainer()
    kw.setdefault("every", EVERY)
    t.fit(*data, epochs=EPOCHS, checkpoint=directory, keep="all", progress=False, **kw)
    return t


def checkpoints(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("step-*.nxck"))}


def transcript(directory: Path) -> list[dict[str, Any]]:
    lines = (directory / "nxrs-transcript.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def digests(directory: Path) -> list[tuple[int, str | None, str]]:
    return [(e["step"], e["checkpoint"], e["state_digest"]) for e in transcript(directory)]


def check_chain(directory: Path) -> None:
    previous = None
    for i, entry in enumerate(transcript(directory)):
        assert entry["entry"] == i
        assert entry["prev"] == (None if previous is None else previous["digest"])
        assert entry["digest"] == entry_digest(entry)
        previous = entry


def manifest(directory: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((directory / "nxrs-run.json").read_text())
    return document


def test_fit_async_gives_the_same_bits(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    straight = trainer()
    straight.fit(*data, epochs=EPOCHS, progress=False)
    sync = fit(tmp_path / "sync", data)
    background = fit(tmp_path / "async", data, async_save=True)
    assert sync.state_hash() == background.state_hash() == straight.state_hash()
    files = checkpoints(tmp_path / "sync")
    assert list(files) == [f"step-{s:012d}.nxck" for s in [10, 20, 30, 40, 50, 60, 70, 75]]
    assert checkpoints(tmp_path / "async") == files  # every checkpoint, byte for byte
    assert digests(tmp_path / "async") == digests(tmp_path / "sync")
    check_chain(tmp_path / "async")
    progress = manifest(tmp_path / "async")["progress"]
    assert (progress["step"], progress["checkpoint"]) == (75, "step-000000000075.nxck")
    assert nxrs.verify(tmp_path / "async", *data, segments="all").ok


def test_nxrs_train_async_gives_the_same_bits(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(250, 16)).astype(np.float32)
    np.savez(tmp_path / "data.npz", X=x, y=np.argmax(x[:, :4], axis=1).astype(np.int64))
    outputs = {}
    for name, extra in [("sync", []), ("async", ["--async-save"])]:
        argv = [sys.executable, "-m", "nxrs", "train", "--data", str(tmp_path / "data.npz")]
        argv += ["--layers", "16,32,4", "--batch-size", "8", "--epochs", "3", "--json"]
        argv += ["--ckpt-dir", str(tmp_path / name), "--every", "7", "--keep", "all"]
        run = subprocess.run(
            [*argv, *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        outputs[name] = json.loads(run.stdout)
    assert outputs["async"]["state_hash"] == outputs["sync"]["state_hash"]
    assert checkpoints(tmp_path / "async") == checkpoints(tmp_path / "sync")
    assert len(checkpoints(tmp_path / "sync")) == 11  # 75 steps: 7, 14, ..., 70, and 75
    assert digests(tmp_path / "async") == digests(tmp_path / "sync")
    assert manifest(tmp_path / "async")["command"][-1] == "--async-save"


def test_a_save_point_waits_for_the_save_in_flight(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """Each background write takes 0.3 s, far longer than 10 steps: the writes never overlap
    (each starts after the previous ended), none is skipped, training went on while each was
    in flight, and the checkpoints are counted in order."""
    t = trainer()
    writes: list[tuple[int, float, int]] = []

    def slow(path: Path) -> None:
        step = int(path.stem.split("-")[1])
        start = time.monotonic()
        # Training goes on while the copy is written (a save that stopped it would wait here
        # for ever: the timeout fails the test instead).
        while t.steps <= step and time.monotonic() - start < 10:
            time.sleep(0.005)
        time.sleep(0.3)
        writes.append((step, start, t.steps))

    _async_save._before_write = slow
    directory = tmp_path / "run"
    t.fit(*data, epochs=EPOCHS, checkpoint=directory, every=EVERY, keep="all", async_save=True)
    assert [w[0] for w in writes] == [10, 20, 30, 40, 50, 60, 70]
    assert all(step < steps_then for step, _, steps_then in writes)
    for (_, first, _), (_, second, _) in zip(writes, writes[1:]):
        assert second >= first + 0.3  # the next write began after the previous one ended
    steps = [e["step"] for e in transcript(directory)]
    assert steps == [0, 10, 20, 30, 40, 50, 60, 70, 75]
    check_chain(directory)
    kinds = [e["event"] for e in manifest(directory)["events"]]
    assert "save-failed" not in kinds


KILLED_CHILD = """
import sys, threading, pathlib
import numpy as np
import nxrs
from nxrs._runs import async_save as _async_save

def block(path):
    if path.name == "step-000000000020.nxck":
        pathlib.Path(sys.argv[2]).joinpath("blocked").write_text("")
        threading.Event().wait()  # the write never happens: the process is killed meanwhile

_async_save._before_write = block
rng = np.random.default_rng(3)
x = rng.normal(size=(200, 16)).astype(np.float32)
y = np.argmax(x[:, :4], axis=1).astype(np.int64)
t = nxrs.Trainer(layers=[16, 32, 4], batch_size=8, lr=0.01, seed=5)
t.fit(x, y, epochs=3, checkpoint=sys.argv[1], every=10, keep="all", async_save=True,
      progress=False)
"""


def test_a_kill_before_the_write_loses_only_that_checkpoint(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    directory = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, str(directory), str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "blocked").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # training goes on to the next save point, which waits
    finally:
        child.kill()
        child.communicate()
    assert list(checkpoints(directory)) == ["step-000000000010.nxck"]
    assert [e["step"] for e in transcript(directory)] == [0, 10]
    assert manifest(directory)["progress"]["step"] == 10
    resumed = fit(directory, data, async_save=True)
    straight = trainer()
    straight.fit(*data, epochs=EPOCHS, progress=False)
    assert resumed.state_hash() == straight.state_hash()
    assert [e["step"] for e in transcript(directory)] == [0, 10, 20, 30, 40, 50, 60, 70, 75]
    check_chain(directory)
    assert nxrs.verify(directory, *data, segments="all").ok


def test_a_failed_background_write_is_reported_and_training_goes_on(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    def fail(path: Path) -> None:
        if path.name == "step-000000000020.nxck":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    _async_save._before_write = fail
    directory = tmp_path / "run"
    with pytest.warns(nxrs.SaveFailedWarning, match="checkpoint of step 20 could not be saved"):
        t = fit(directory, data, async_save=True)
    assert t.steps == 75
    assert "step-000000000020.nxck" not in checkpoints(directory)
    assert [e["step"] for e in transcript(directory)] == [0, 10, 30, 40, 50, 60, 70, 75]
    document = manifest(directory)
    failed = [e for e in document["events"] if e["event"] == "save-failed"]
    assert [(e["step"], e["error"].split(":")[0]) for e in failed] == [(20, "OSError")]
    assert document["state"] == "complete"
    check_chain(directory)


def test_a_failed_final_save_raises(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final save waits for the one in flight and is itself synchronous."""
    real = nxrs.CheckpointManager.save

    def fail_final(
        self: nxrs.CheckpointManager, trainer: nxrs.Trainer, step: int, **kw: Any
    ) -> Path:
        if step == 75:
            raise OSError(errno.EIO, "injected")
        return real(self, trainer, step, **kw)

    monkeypatch.setattr(nxrs.CheckpointManager, "save", fail_final)
    _async_save._before_write = lambda path: time.sleep(0.2)
    directory = tmp_path / "run"
    with pytest.raises(nxrs.CheckpointSaveError, match="step 75 could not be saved"):
        fit(directory, data, async_save=True)
    assert list(checkpoints(directory))[-1] == "step-000000000070.nxck"
    assert [e["step"] for e in transcript(directory)][-1] == 70
    assert manifest(directory)["state"] == "failed"


STOPPED_CHILD = """
import sys, time, pathlib
import numpy as np
import nxrs
from nxrs._runs import async_save as _async_save
from nxrs._runs.errors import RunStopped

def slow(path):
    if path.name == "step-000000000010.nxck":
        pathlib.Path(sys.argv[2]).joinpath("in-flight").write_text("")
        time.sleep(1.5)

_async_save._before_write = slow
rng = np.random.default_rng(3)
x = rng.normal(size=(200, 16)).astype(np.float32)
y = np.argmax(x[:, :4], axis=1).astype(np.int64)
t = nxrs.Trainer(layers=[16, 32, 4], batch_size=8, lr=0.01, seed=5)
try:
    t.fit(x, y, epochs=3, checkpoint=sys.argv[1], every=10, keep="all", async_save=True,
          progress=False)
except RunStopped as stopped:
    print(stopped.step, stopped.checkpoint.name)
    sys.exit(128 + stopped.signal)
"""


def test_sigterm_waits_for_the_save_in_flight(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_CHILD, str(directory), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "in-flight").exists():
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err
    step, name = out.split()
    assert 10 < int(step) < 75 and name == f"step-{int(step):012d}.nxck"
    assert list(checkpoints(directory)) == ["step-000000000010.nxck", name]
    assert [e["step"] for e in transcript(directory)] == [0, 10, int(step)]
    check_chain(directory)
    document = manifest(directory)
    assert document["state"] == "stopped"
    assert document["progress"]["checkpoint"] == name
    stop = document["events"][-1]
    assert (stop["event"], stop["reason"], stop["checkpoint"]) == ("stop", "SIGTERM", name)


def test_async_save_needs_a_checkpoint(data: tuple[np.ndarray, np.ndarray]) -> None:
    with pytest.raises(nxrs.ConfigError, match="async_save needs a checkpoint"):
        trainer().fit(*data, epochs=1, async_save=True)
    with pytest.raises(nxrs.ConfigError, match="async_save"):
        trainer().fit(*data, epochs=1, checkpoint="x", async_save=1)  # type: ignore[arg-type]


def test_threads_left_behind_none(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    """fit returns only once the background writer is gone (it never outlives the lock)."""
    fit(tmp_path / "run", data, async_save=True)
    assert not [t for t in threading.enumerate() if t.name == "nxrs-async-save"]


class _HeldAfterStep10(nxrs.Trainer):
    """A trainer whose chunks after step 10 return only once ``flagged`` is set: the stop is
    seen at the step boundary after the save of step 10 started, while it is still in flight."""

    __slots__ = ()
    flagged = threading.Event()

    def _run(self, *args: Any, **kw: Any) -> Any:
        chunk = super()._run(*args, **kw)
        if self.steps > EVERY:
            assert self.flagged.wait(30)
        return chunk


def test_a_stop_waits_for_the_save_in_flight_then_saves_its_step(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """The stop (here its flag, set while the save of step 10 is being written) waits for
    that save, counts it, then saves the step it stopped at: both checkpoints, in order."""
    from nxrs._util.signals import StopFlag

    stop = StopFlag()
    _HeldAfterStep10.flagged.clear()
    writes: list[int] = []

    def slow(path: Path) -> None:
        if path.name == "step-000000000010.nxck":
            deadline = time.monotonic() + 30
            while t.steps <= EVERY and time.monotonic() < deadline:
                time.sleep(0.001)  # the training thread is past the save point, held
            stop.signum = signal.SIGTERM
            _HeldAfterStep10.flagged.set()
            time.sleep(0.5)  # still in flight when the training thread sees the stop
        writes.append(int(path.stem.split("-")[1]))

    _async_save._before_write = slow
    directory = tmp_path / "run"
    t = _HeldAfterStep10(layers=LAYERS, batch_size=8, lr=0.01, seed=5)
    with pytest.raises(nxrs.RunStopped) as stopped:
        t.fit(*data, epochs=EPOCHS, checkpoint=directory, every=EVERY, async_save=True,
              progress=False, _stop=stop)  # fmt: skip
    step = stopped.value.step
    assert 10 < step <= 20 and writes == [10]
    name = f"step-{step:012d}.nxck"
    assert list(checkpoints(directory)) == ["step-000000000010.nxck", name]
    assert [e["step"] for e in transcript(directory)] == [0, 10, step]
    check_chain(directory)
    document = manifest(directory)
    assert (document["state"], document["progress"]["checkpoint"]) == ("stopped", name)


def test_an_invalid_checkpoint_met_while_pruning_is_reported_by_the_training_thread(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """The writer thread prunes; what it finds invalid is warned about in the training thread
    (warning filters are global: a thread's own warnings would escape a caller's filters)."""
    directory = tmp_path / "run"
    threads: list[str] = []

    def junk(path: Path) -> None:
        if path.name == "step-000000000020.nxck":
            (directory / "step-000000000005.nxck").write_bytes(b"junk")

    _async_save._before_write = junk
    original = nxrs.CheckpointManager._load

    def spy(self: nxrs.CheckpointManager, entry: Any, report: Any = None) -> Any:
        threads.append(threading.current_thread().name)
        return original(self, entry, report)

    t = trainer()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nxrs.CheckpointManager, "_load", spy)
        with pytest.warns(nxrs.CorruptCheckpointWarning, match="step-000000000005.nxck") as w:
            manager = nxrs.CheckpointManager(directory, keep=2)
            t.fit(*data, epochs=EPOCHS, checkpoint=manager, every=EVERY, async_save=True,
                  progress=False)  # fmt: skip
    # Every pruning from step 20 on met it: 6 in the writer thread (20, 30, ..., 70), reported
    # by the training thread, and the final save's own.
    assert len(w.list) == 7
    assert "nxrs-async-save" in threads  # pruned in the writer thread
    assert (directory / "step-000000000005.nxck").read_bytes() == b"junk"  # left in place
    assert list(checkpoints(directory))[-1] == "step-000000000075.nxck"
