"""Run directories: the manifest, the lock, SIGTERM/SIGINT in fit, --every-seconds, restarts,
failed saves and ``nxrs status`` (the kill-and-restart harnesses are in test_chaos.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_fit import X, Y, small

import nxrs
from nxrs._runs.directory import RunDirectory
from nxrs._runs.errors import (
    MANIFEST_NAME,
    CheckpointSaveError,
    RunLockedError,
    RunStopped,
    SaveFailedWarning,
)
from nxrs._train import fit as _fit
from nxrs.cli import main
from nxrs.cli.status import run_status


def manifest(directory: Path) -> dict[str, Any]:
    document = RunDirectory(directory).read_manifest()
    assert document is not None
    return document


def test_the_manifest_records_the_run(tmp_path: Path) -> None:
    t = small()
    t.fit(X, Y, epochs=2, checkpoint=tmp_path, every=5)
    m = manifest(tmp_path)
    assert m["format"] == "nxrs-run/1" and m["nxrs_version"] == nxrs.__version__
    assert m["config"] == json.loads(json.dumps(t.config))
    assert m["data"] == {"fingerprint": t._dataset(X, Y).fingerprint, "samples": 60}
    assert m["plan"] == {"epochs": 2, "steps_per_epoch": 8, "steps": 16}
    assert m["progress"]["step"] == 16 and m["progress"]["checkpoint"] == "step-000000000016.nxck"
    assert m["state"] == "complete" and m["started"] <= m["updated"]
    assert [e["event"] for e in m["events"]] == ["start", "complete"]
    assert m["events"][0]["pid"] == os.getpid()
    # Resumed with a longer plan: one more resume, the previous end named.
    again = small()
    again.fit(X, Y, epochs=4, checkpoint=tmp_path)
    m = manifest(tmp_path)
    assert [e["event"] for e in m["events"]] == ["start", "complete", "resume", "complete"]
    resume = m["events"][2]
    assert (resume["step"], resume["checkpoint"]) == (16, "step-000000000016.nxck")
    assert resume["previous_end"] == "complete"
    assert m["plan"]["steps"] == 32 and m["progress"]["step"] == 32
    straight = small()
    straight.fit(X, Y, epochs=4)
    assert again.state_hash() == straight.state_hash()


def test_another_runs_manifest_is_refused_even_without_checkpoints(tmp_path: Path) -> None:
    small().fit(X, Y, epochs=1, checkpoint=tmp_path)
    for entry in nxrs.CheckpointManager(tmp_path).list():
        entry.path.unlink()
    other = X.copy()
    other[0, 0] += 1
    with pytest.raises(nxrs.MismatchError, match="other data"):
        small().fit(other, Y, epochs=1, checkpoint=tmp_path)
    with pytest.raises(nxrs.MismatchError, match=r"another configuration \(differs in lr\)"):
        nxrs.Trainer(layers=[4, 8, 3], batch_size=8, lr=0.02).fit(X, Y, 1, checkpoint=tmp_path)
    assert [e["event"] for e in manifest(tmp_path)["events"]] == ["start", "complete"]


def test_restart_moves_the_old_run_aside(tmp_path: Path) -> None:
    small().fit(X, Y, epochs=1, checkpoint=tmp_path)
    old = sorted(p.name for p in tmp_path.glob("step-*.nxck"))
    t = small(seed=3)
    t.fit(X, Y, epochs=1, checkpoint=tmp_path, resume=False)
    (aside,) = (tmp_path / "previous").iterdir()
    assert sorted(p.name for p in aside.glob("step-*.nxck")) == old
    assert json.loads((aside / MANIFEST_NAME).read_text())["config"]["seed"] == 0
    m = manifest(tmp_path)
    assert m["config"]["seed"] == 3
    assert m["events"][0]["moved_aside"] == f"previous/{aside.name}"


def test_a_locked_directory_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    holder = RunDirectory(tmp_path)
    holder.acquire()
    try:
        t = small()
        with pytest.raises(RunLockedError, match=f"in use by process {os.getpid()} "):
            t.fit(X, Y, epochs=1, checkpoint=tmp_path)
        assert t.steps == 0 and not (tmp_path / MANIFEST_NAME).exists()
        assert RunDirectory(tmp_path).holder() is not None
    finally:
        holder.release()
    assert RunDirectory(tmp_path).holder() is None
    small().fit(X, Y, epochs=1, checkpoint=tmp_path)


def signal_soon(delay: float, signum: int) -> threading.Timer:
    timer = threading.Timer(delay, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


class SignallingManager(nxrs.CheckpointManager):
    """Sends itself SIGINT at the start of every save: a second signal while stopping."""

    def save(self, trainer: nxrs.Trainer, step: int, metadata: Any = None) -> Path:
        os.kill(os.getpid(), signal.SIGINT)
        return super().save(trainer, step, metadata)


def test_sigterm_in_fit_saves_the_step_reached_and_restores_the_handlers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM, then a second signal (SIGINT) during the save: one stop, one good checkpoint."""
    from nxrs.data import load_digits

    x, y = load_digits()
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    t = nxrs.Trainer(layers=[64, 32, 10])
    timer = signal_soon(0.5, signal.SIGTERM)
    try:
        with pytest.raises(RunStopped) as info:
            t.fit(x, y, epochs=1000, checkpoint=SignallingManager(tmp_path))
    finally:
        timer.join()
    assert "already stopping" in capfd.readouterr().err
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    stopped = info.value
    assert isinstance(stopped, KeyboardInterrupt) and stopped.signal == signal.SIGTERM
    assert 0 < stopped.step == t.steps
    assert stopped.checkpoint == nxrs.CheckpointManager(tmp_path).path_for(t.steps)
    assert nxrs.Trainer.load(stopped.checkpoint).state_hash() == t.state_hash()
    m = manifest(tmp_path)
    assert m["state"] == "stopped"
    assert (m["events"][-1]["event"], m["events"][-1]["reason"]) == ("stop", "SIGTERM")
    assert m["events"][-1]["step"] == t.steps


def test_outside_the_main_thread_no_handler_is_installed(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            small().fit(X, Y, epochs=1, checkpoint=tmp_path)
        except BaseException as err:  # pragma: no cover (reported below)
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == [] and manifest(tmp_path)["state"] == "complete"


def test_every_seconds_checkpoints_at_the_first_step_boundary_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time-based saves by a clock the test drives, not the wall clock: one "second" per step
    taken. The step boundaries are the epoch ends, 8 steps apart (validation data ends every
    chunk there, and chunks get all the time they want)."""
    monkeypatch.setattr(_fit, "_CHUNK_SECONDS", 3600.0)

    def saves(period: float) -> list[int]:
        t = small()
        monkeypatch.setattr(_fit, "_clock", lambda: float(t.steps))
        manager = nxrs.CheckpointManager(tmp_path / f"every-{period}", keep=1000)
        t.fit(X, Y, epochs=6, validation_data=(X, Y), checkpoint=manager, every_seconds=period)
        assert t.steps == 48
        return [e.step for e in manager.list()]

    # The first boundary at least `period` after the previous save (never before), then the end.
    assert saves(12) == [16, 32, 48]
    assert saves(20) == [24, 48]
    assert saves(8) == [8, 16, 24, 32, 40, 48]
    assert saves(100) == [48]
    with pytest.raises(nxrs.ConfigError, match="every_seconds = 0 must be a positive number"):
        small().fit(X, Y, epochs=1, checkpoint=tmp_path / "x", every_seconds=0)


class FailingManager(nxrs.CheckpointManager):
    """Fails the saves whose (0-based) number is in ``failing``, like a full disk."""

    def __init__(self, directory: Path, failing: set[int]) -> None:
        super().__init__(directory)
        self.failing = failing
        self.calls = 0

    def save(self, trainer: nxrs.Trainer, step: int, metadata: Any = None) -> Path:
        self.calls += 1
        if self.calls - 1 in self.failing:
            raise OSError(28, "No space left on device")
        return super().save(trainer, step, metadata)


def test_a_failed_periodic_save_is_reported_and_retried(tmp_path: Path) -> None:
    manager = FailingManager(tmp_path, failing={1})
    t = small()
    with pytest.warns(SaveFailedWarning, match=r"step 10 could not be saved.*still step 5"):
        t.fit(X, Y, epochs=2, checkpoint=manager, every=5)
    assert [e.step for e in manager.list()] == [5, 15, 16]
    events = [e["event"] for e in manifest(tmp_path)["events"]]
    assert events == ["start", "save-failed", "complete"]
    straight = small()
    straight.fit(X, Y, epochs=2)
    assert t.state_hash() == straight.state_hash()


def test_a_failed_final_save_raises_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    manager = FailingManager(tmp_path, failing={3})  # steps 5, 10, 15 saved; 16 fails
    with pytest.raises(CheckpointSaveError, match=r"step 16 could not be saved.*still step 15"):
        small().fit(X, Y, epochs=2, checkpoint=manager, every=5)
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest is not None and latest.step == 15
    assert manifest(tmp_path)["state"] == "failed"
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_status_in_text_and_json_and_a_damaged_newest_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small().fit(X, Y, epochs=1, checkpoint=tmp_path, every=5)
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "progress step 8 of 8 (100.0% of the plan), epoch 1 of 1" in out
    assert "step-000000000008.nxck  step 8  valid" in out and "lock free" in out
    assert "start" in out and "complete" in out and "layers [4, 8, 3]" in out
    assert main(["status", str(tmp_path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["ok"] and status["resume_step"] == 8 and status["percent"] == 100.0
    assert status["manifest"]["state"] == "complete"
    newest = nxrs.CheckpointManager(tmp_path).path_for(8)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1
    newest.write_bytes(bytes(data))
    assert main(["status", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and "a resume starts from step-000000000005.nxck" in out
    assert run_status(tmp_path)["resume_step"] == 5
    assert main(["status", str(tmp_path / "missing")]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_train_exit_statuses_and_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["train", "--epochs", "1", "--hidden", "8", "--ckpt-dir", str(tmp_path)]
    assert main([*base, "--every-seconds", "0.5"]) == 0
    assert "starting" not in capsys.readouterr().err
    assert main([*base, "--seed", "2"]) == 3
    err = capsys.readouterr().err
    assert "another configuration" in err and "--restart" in err
    assert main([*base, "--seed", "2", "--restart"]) == 0
    assert "moved the previous run" in capsys.readouterr().err
    assert main([*base, "--seed", "2"]) == 0
    assert "resuming" in capsys.readouterr().err
    holder = RunDirectory(tmp_path)
    holder.acquire()
    try:
        assert main([*base, "--seed", "2"]) == 4
        assert "in use by process" in capsys.readouterr().err
    finally:
        holder.release()
    with pytest.raises(SystemExit) as info:
        main(["train", "--every-seconds", "1"])
    assert info.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for status in ("130", "143", "  3 ", "  4 ", "  5 ", "--every-seconds", "--restart"):
        assert status in text, status


def test_ctrl_c_stops_nxrs_train_without_a_run_directory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: without --ckpt-dir the CLI's handler swallowed SIGINT and fit never read the flag,
    # so Ctrl-C did nothing and the run went on to its last epoch.
    timer = signal_soon(1.0, signal.SIGINT)
    try:
        start = time.monotonic()
        status = main(["train", "--epochs", "2000", "--hidden", "8", "--backend", "soft"])
        elapsed = time.monotonic() - start
    finally:
        timer.cancel()
    err = capsys.readouterr().err
    assert status == 130, err
    assert elapsed < 30, elapsed
    assert "stopped by SIGINT" in err and "no checkpoint configured" in err, err
    assert "resume" not in err, err
