"""Run transcripts (python/nxrs/_transcript.py, docs/RUNS.md): what fit writes into a run
directory for nxrs verify, checked against an independent reading of the format (the chain is
recomputed here with hashlib, the data digests by the reference of docs/TRAINING.md section 16).
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
import nxrs._runs.transcript
import nxrs.cli.status
from nxrs.cli import main

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
gr = importlib.import_module("reference.general_ref")
nxck_edit = importlib.import_module("nxck_edit")

X, Y = gr.case_data(24, 5, 3, "cross_entropy")
XV, YV = gr.case_data(6, 5, 3, "cross_entropy")
SETTINGS: dict[str, Any] = dict(layers=[5, 6, 3], batch_size=4, lr=0.01, seed=2)
#: 6 steps per epoch.


def entries(directory: Path) -> list[dict[str, Any]]:
    lines = (directory / "nxrs-transcript.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def check_chain(found: list[dict[str, Any]]) -> None:
    """The chain as docs/RUNS.md defines it, recomputed here."""
    previous = None
    for i, entry in enumerate(found):
        body = {k: v for k, v in entry.items() if k != "digest"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        assert entry["digest"] == hashlib.sha256(text.encode()).hexdigest()
        assert entry["entry"] == i and entry["prev"] == previous
        previous = entry["digest"]
    steps = [e["step"] for e in found]
    assert steps == sorted(set(steps))


def fit(directory: Path, epochs: int, **kw: Any) -> nxrs.Trainer:
    t = nxrs.Trainer(**SETTINGS)
    t.fit(X, Y, epochs, checkpoint=directory, every=3, progress=False, **kw)
    return t


def test_one_entry_per_checkpoint_chained_with_the_states_and_the_data(tmp_path: Path) -> None:
    run = tmp_path / "run"
    t = fit(run, 2, keep="all", validation_data=(XV, YV))
    found = entries(run)
    check_chain(found)
    # The start, then steps 3, 6, 9, 12 (every=3 over 2 epochs of 6 steps).
    assert [(e["event"], e["step"]) for e in found] == [("start", 0)] + [
        ("checkpoint", s) for s in (3, 6, 9, 12)
    ]
    assert found[0]["state_digest"] == nxrs.Trainer(**SETTINGS).state_digest()
    for e in found[1:]:
        saved = nxrs.Trainer.load(run / e["checkpoint"])
        assert (e["step"], e["epoch"], e["batch"]) == (saved.steps, saved.epoch, saved.batch)
        assert e["state_digest"] == saved.state_digest()
        assert e["config_digest"] == gr.config_digest(nxck_edit.config_record(saved.to_bytes()))
    assert found[-1]["state_digest"] == t.state_digest()
    train, val = gr.data_part_digest(X, Y, 3), gr.data_part_digest(XV, YV, 3)
    for e in found:
        assert e["data"] == {"train": train, "validation": val, "test": None}
        assert e["data_digest"] == gr.data_digest(train, val)
        assert e["nxrs_version"] == nxrs.__version__


def test_pruned_checkpoints_keep_their_entries(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 3, keep=2)
    found = entries(run)
    check_chain(found)
    assert [e["step"] for e in found] == [0, 3, 6, 9, 12, 15, 18]
    assert sorted(p.name for p in run.glob("*.nxck")) == [e["checkpoint"] for e in found[-2:]]


def test_keep_all_keeps_every_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 3, keep="all")
    assert len(list(run.glob("*.nxck"))) == 6


def test_a_checkpoint_saved_just_before_a_kill_gets_its_entry_on_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 1, keep="all")
    path = run / "nxrs-transcript.jsonl"
    lines = path.read_text().splitlines()
    # Killed after the checkpoint of step 6 was durable, before its entry was written.
    path.write_text("\n".join(lines[:-1]) + "\n")
    resumed = fit(run, 2, keep="all")
    found = entries(run)
    check_chain(found)
    assert [e["step"] for e in found] == [0, 3, 6, 9, 12]
    assert (
        found[2]["state_digest"] == nxrs.Trainer.load(run / found[2]["checkpoint"]).state_digest()
    )
    straight = fit(tmp_path / "straight", 2, keep="all")
    assert [e["state_digest"] for e in entries(tmp_path / "straight")] == [
        e["state_digest"] for e in found
    ]
    assert resumed.state_digest() == straight.state_digest()


def test_a_run_resumed_from_an_older_checkpoint_adds_no_entry_twice(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 1, keep="all")
    (run / "step-000000000006.nxck").write_bytes(b"damaged")  # the newest: resume from 3
    with pytest.warns(nxrs.CorruptCheckpointWarning):
        fit(run, 2, keep="all")
    found = entries(run)
    check_chain(found)
    assert [e["step"] for e in found] == [0, 3, 6, 9, 12]


def test_restart_moves_the_transcript_aside_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 1)
    old = (run / "nxrs-transcript.jsonl").read_bytes()
    fit(run, 1, resume=False)
    (aside,) = (run / "previous").iterdir()
    assert (aside / "nxrs-transcript.jsonl").read_bytes() == old
    assert [e["step"] for e in entries(run)] == [0, 3, 6]
    path = run / "nxrs-transcript.jsonl"
    path.write_bytes(path.read_bytes() + b"{not json\n")

    def files() -> list[tuple[str, bytes]]:  # the lock file records its holder: not compared
        return sorted((p.name, p.read_bytes()) for p in run.glob("[!.]*") if p.is_file())

    before = files()
    with pytest.raises(nxrs.MismatchError, match=r"line 4 is not JSON.*transcript is damaged"):
        fit(run, 2)
    assert files() == before


@pytest.mark.parametrize("keep", [0, -1, "some", 2.0, True])
def test_keep_is_a_count_or_all(tmp_path: Path, keep: Any) -> None:
    with pytest.raises(nxrs.ConfigError, match="keep"):
        nxrs.Trainer(**SETTINGS).fit(X, Y, 1, checkpoint=tmp_path, keep=keep)
    with pytest.raises(nxrs.ConfigError, match="keep"):
        nxrs.CheckpointManager(tmp_path, keep=keep)


def test_keep_belongs_to_a_manager_given_as_the_checkpoint(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path, keep=5)
    with pytest.raises(nxrs.ConfigError, match="CheckpointManager's own setting"):
        nxrs.Trainer(**SETTINGS).fit(X, Y, 1, checkpoint=manager, keep=2)


def test_the_command_line_records_the_train_and_test_splits(tmp_path: Path) -> None:
    data = tmp_path / "d.npz"
    x, y = gr.case_data(40, 6, 3, "cross_entropy")
    np.savez(data, X=x, y=y)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "nxrs", "train", "--data", str(data), "--epochs", "2"]
    command += ["--layers", "6,5,3", "--batch-size", "8", "--ckpt-dir", str(run), "--json"]
    subprocess.run([*command, "--every", "2", "--keep", "all"], check=True, capture_output=True)
    found = entries(run)
    check_chain(found)
    train_idx, test_idx = gr.split(40, 0.2, 0)
    train = gr.data_part_digest(x[train_idx], y[train_idx], 3)
    test = gr.data_part_digest(x[test_idx], y[test_idx], 3)
    assert found[-1]["data"] == {"train": train, "validation": None, "test": test}
    assert found[-1]["data_digest"] == gr.data_digest(train, None, test)
    assert len(list(run.glob("*.nxck"))) == len(found) - 1
    usage = subprocess.run([*command[:-3], "--keep", "2"], capture_output=True, text=True)
    assert usage.returncode == 2 and "--keep needs --ckpt-dir" in usage.stderr
    bad = subprocess.run([*command, "--keep", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--keep" in bad.stderr


def test_a_killed_writers_temporary_transcript_is_swept(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 1)
    stray = run / ".nxrs-transcript.jsonl.tmp.12345"
    stray.write_bytes(b"half an entry")
    fit(run, 2)
    assert not stray.exists()
    check_chain(entries(run))


def test_status_shows_the_transcript(tmp_path: Path) -> None:
    run = tmp_path / "run"
    t = fit(run, 1)
    status = nxrs.cli.status.run_status(run)
    assert status["transcript"] == {
        "entries": 3,
        "last_step": 6,
        "last_state_digest": t.state_digest(),
        "torn_bytes": 0,
        "error": None,
    }
    (run / "nxrs-transcript.jsonl").write_bytes(b"[1]\n")
    assert "line 1 is not a JSON object" in nxrs.cli.status.run_status(run)["transcript"]["error"]


def test_inspect_verify_prints_the_digest_the_transcript_records(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fit(run, 1)
    last = entries(run)[-1]
    shown = subprocess.run(
        [sys.executable, "-m", "nxrs", "inspect", str(run / last["checkpoint"]), "--verify"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"state digest {last['state_digest']}" in shown.stdout
    assert (
        "state digest"
        not in subprocess.run(
            [sys.executable, "-m", "nxrs", "inspect", str(run / last["checkpoint"])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


# ---------------------------------------------------------------------- appends and full disks


class Disk:
    """Python's writes (``os.write``, ``os.pwrite``) to the files whose names begin with
    ``names`` (their temporary files included), counted in ``written``; while ``full``, they
    fail as on a full disk: a call moves half its bytes (a disk that fills midway), the next
    raises ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        self.names, self.full, self.written = names, False, 0
        self._short: set[int] = set()
        real_write, real_pwrite = os.write, os.pwrite

        def write(fd: int, data: Any) -> int:
            return self._move(fd, data, lambda piece: real_write(fd, piece))

        def pwrite(fd: int, data: Any, offset: int) -> int:
            return self._move(fd, data, lambda piece: real_pwrite(fd, piece, offset))

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "pwrite", pwrite)

    def _target(self, fd: int) -> bool:
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False
        return name.lstrip(".").startswith(self.names)

    def _move(self, fd: int, data: Any, move: Any) -> int:
        if not self._target(fd):
            return int(move(data))
        view = memoryview(data)
        if self.full:
            if fd in self._short or len(view) < 2:
                self._short.discard(fd)
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            self._short.add(fd)
            view = view[: len(view) // 2]
        done = int(move(view))
        self.written += done
        return done


class FillingManager(nxrs.CheckpointManager):
    """Saves every checkpoint; the disk is full for the other files of ``disk`` from the
    save of a step in ``full_at`` until the save of a step not in it."""

    def __init__(self, directory: Path, disk: Disk, full_at: set[int]) -> None:
        super().__init__(directory, keep="all")
        self.disk, self.full_at = disk, full_at

    def save(self, trainer: nxrs.Trainer, step: int, metadata: Any = None) -> Path:
        self.disk.full = step in self.full_at
        return super().save(trainer, step, metadata)


def straight_entries(tmp_path: Path) -> list[tuple[int, str]]:
    """The steps and state digests of an uninterrupted run's transcript (2 epochs)."""
    run = tmp_path / "straight"
    fit(run, 2, keep="all")
    return [(e["step"], e["state_digest"]) for e in entries(run)]


def test_each_entry_is_written_once_by_an_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    disk = Disk(monkeypatch, "nxrs-transcript")
    fit(run, 4, keep="all")
    path = run / "nxrs-transcript.jsonl"
    found = entries(run)
    check_chain(found)
    assert len(found) == 9
    # Every byte of the file written once: never the earlier entries again.
    assert disk.written == path.stat().st_size


def test_entries_that_cannot_be_written_are_kept_and_written_at_the_next_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    manager = FillingManager(run, Disk(monkeypatch, "nxrs-transcript"), full_at={6, 9})
    with pytest.warns(nxrs.SaveFailedWarning) as caught:
        nxrs.Trainer(**SETTINGS).fit(X, Y, 2, checkpoint=manager, every=3, progress=False)
    lacking = [str(w.message).split(" lacks ")[1].split(" (")[0] for w in caught]
    assert lacking == ["its entry of step 6", "2 entries, steps 6 to 9"]
    found = entries(run)  # each line whole: a write that failed part-way was cut back
    check_chain(found)
    assert [(e["step"], e["state_digest"]) for e in found] == straight_entries(tmp_path)
    status = nxrs.cli.status.run_status(run)
    assert status["ok"] and status["records_missing"] == []


def test_a_run_that_ends_with_its_transcript_unwritten_fails_and_a_rerun_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    disk = Disk(monkeypatch, "nxrs-transcript")
    manager = FillingManager(run, disk, full_at={9, 12})
    t = nxrs.Trainer(**SETTINGS)
    with (
        pytest.warns(nxrs.SaveFailedWarning),
        pytest.raises(nxrs.RecordSaveError, match=r"lacks 2 entries, steps 9 to 12") as raised,
    ):
        t.fit(X, Y, 2, checkpoint=manager, every=3, progress=False)
    assert isinstance(raised.value, nxrs.CheckpointSaveError)
    assert t.steps == 12 and (run / "step-000000000012.nxck").is_file()
    assert [e["step"] for e in entries(run)] == [0, 3, 6]
    manifest = json.loads((run / "nxrs-run.json").read_text())
    assert manifest["state"] == "failed"
    assert [e["event"] for e in manifest["events"][-2:]] == ["complete", "save-failed"]
    assert "lacks 2 entries" in manifest["events"][-1]["error"]
    # nxrs status says so, and exits 1.
    status = nxrs.cli.status.run_status(run)
    assert not status["ok"]
    assert status["records_missing"] == [
        "the transcript has no entry for step-000000000012.nxck (its last entry is of step 6)"
    ]
    assert main(["status", str(run)]) == 1
    assert "PROBLEM: the transcript has no entry for step-000000000012.nxck" in (
        capsys.readouterr().out
    )
    # Once the disk has room, the same call resumes the run and records the checkpoints its
    # transcript lacks: the run verifies.
    disk.full = False
    with pytest.warns(nxrs.NothingToTrainWarning):
        nxrs.Trainer(**SETTINGS).fit(X, Y, 2, checkpoint=run, keep="all", progress=False)
    found = entries(run)
    check_chain(found)
    assert [(e["step"], e["state_digest"]) for e in found] == straight_entries(tmp_path)
    assert nxrs.cli.status.run_status(run)["ok"]
    assert nxrs.verify(run, X, Y, segments="all").ok


def test_a_run_that_ends_with_its_manifest_unwritten_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    manager = FillingManager(run, Disk(monkeypatch, "nxrs-run.json"), full_at={12})
    with (
        pytest.warns(nxrs.SaveFailedWarning, match="run manifest .* was not updated"),
        pytest.raises(
            nxrs.RecordSaveError,
            match=r"manifest .* does not record the run's end \(state complete, step 12\)",
        ),
    ):
        nxrs.Trainer(**SETTINGS).fit(X, Y, 2, checkpoint=manager, every=3, progress=False)
    manifest = json.loads((run / "nxrs-run.json").read_text())
    assert manifest["state"] == "running" and manifest["progress"]["step"] == 9
    assert nxrs.cli.status.run_status(run)["records_missing"] == [
        "the manifest does not record step-000000000012.nxck (its newest checkpoint: "
        "step-000000000009.nxck)"
    ]


@pytest.mark.parametrize("kept", [40, -1], ids=["cut-mid-line", "no-newline"])
def test_a_torn_last_line_is_no_entry_and_the_next_append_cuts_it_off(
    tmp_path: Path, kept: int
) -> None:
    run = tmp_path / "run"
    fit(run, 1, keep="all")
    path = run / "nxrs-transcript.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    # Killed while appending the entry of step 6: its line written in part.
    torn = lines[-1][:kept]
    path.write_bytes(b"".join(lines[:-1]) + torn)
    reader = nxrs._runs.transcript.Transcript(run)
    assert [e["step"] for e in reader.read()] == [0, 3]
    assert reader.torn == len(torn)
    assert nxrs.cli.status.run_status(run)["transcript"]["torn_bytes"] == len(torn)
    fit(run, 2, keep="all")  # resumes from step 6, whose entry it adds first
    found = entries(run)
    check_chain(found)
    assert [(e["step"], e["state_digest"]) for e in found] == straight_entries(tmp_path)
