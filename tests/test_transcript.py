"""Run transcripts (python/nxrs/_transcript.py, docs/RUNS.md): what fit writes into a run
directory for nxrs verify, checked against an independent reading of the format (the chain is
recomputed here with hashlib, the data digests by the reference of docs/TRAINING.md section 16).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
import nxrs._rundir

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
    status = nxrs._rundir.run_status(run)
    assert status["transcript"] == {
        "entries": 3,
        "last_step": 6,
        "last_state_digest": t.state_digest(),
        "error": None,
    }
    (run / "nxrs-transcript.jsonl").write_bytes(b"[1]\n")
    assert "line 1 is not a JSON object" in nxrs._rundir.run_status(run)["transcript"]["error"]


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
