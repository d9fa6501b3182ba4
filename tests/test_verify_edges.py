"""``nxrs verify`` at its edges, each through the command line and ``nxrs.verify``:

- a run being trained: verified as one state, the checkpoints it prunes meanwhile skipped and
  said so (never a crash or a failure), its holder named;
- a run killed between saving a checkpoint and recording it: an unclean end, not tampering;
- reordered or decreasing transcript entries: the chain's failure, and every other check still
  run and reported;
- a checkpoint the transcript lists that the directory lacks: named, counted, and a failure
  when the run keeps every checkpoint (as its manifest records);
- what the command says: a fit run's data (``--data FILE``), a checkpoint file given for a run
  directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_verify import CHECKPOINTS, EVERY, X, Y, cli_run, data_file, fit_run, name_of, train

import nxrs
import nxrs._audit.verify
import nxrs._audit.verify_records
import nxrs._audit.verify_replays
from nxrs._runs.directory import RunDirectory
from nxrs._runs.errors import MANIFEST_NAME
from nxrs._runs.transcript import TRANSCRIPT_NAME, canonical, entry_digest
from nxrs.cli import main

__all__ = ["cli_run", "data_file"]  # fixtures shared with test_verify


@pytest.fixture
def run(cli_run: Path, tmp_path: Path) -> Path:
    """A copy of the CLI run (every checkpoint kept) to change."""
    return Path(shutil.copytree(cli_run, tmp_path / "run"))


@pytest.fixture(scope="module")
def pruned_cli_run(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI run keeping only its newest 3 checkpoints."""
    directory = tmp_path_factory.mktemp("pruned") / "run"
    train(data_file, directory, "--keep", "3")
    return directory


def copy_of(run: Path, directory: Path) -> Path:
    return Path(shutil.copytree(run, directory))


def cli_json(argv: list[str], capsys: Any, status: int) -> tuple[dict[str, Any], list[str]]:
    """``nxrs verify ... --json``: its exit status checked, its report and stderr lines."""
    assert main([*argv, "--json"]) == status
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err.splitlines()


def entries_of(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / TRANSCRIPT_NAME).read_text().splitlines()]


def write_entries(directory: Path, entries: list[dict[str, Any]]) -> None:
    (directory / TRANSCRIPT_NAME).write_bytes(b"".join(canonical(e) + b"\n" for e in entries))


# --- a run being trained


def prune_after_listing(monkeypatch: pytest.MonkeyPatch, victim: str) -> None:
    """The process training the run deletes ``victim`` just after verify listed the files."""
    listed = nxrs._audit.verify_records.list_checkpoints

    def listing(directory: Path, *args: Any) -> Any:
        files = listed(directory, *args)
        (directory / victim).unlink(missing_ok=True)
        return files

    monkeypatch.setattr(nxrs._audit.verify_records, "list_checkpoints", listing)


def test_a_checkpoint_pruned_after_the_listing_is_skipped_and_said(
    pruned_cli_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    kept = sorted(p.name for p in pruned_cli_run.glob("step-*.nxck"))
    assert len(kept) == 3
    prune_after_listing(monkeypatch, kept[0])
    for way in ("api", "cli"):
        run = copy_of(pruned_cli_run, tmp_path / way)
        holder = RunDirectory(run)
        holder.acquire()  # this process plays the one training the run
        try:
            if way == "api":
                report = nxrs.verify(run, segments="all")
                assert report.ok, report.failures
                assert report.held_by is not None
                assert f"process {os.getpid()}" in report.held_by
                assert any(f"{kept[0]} deleted during verification" in n for n in report.notes)
                assert {c["file"]: c["status"] for c in report.checkpoints}[kept[0]] == "missing"
                assert all(s.status == "ok" for s in report.segments)
            else:
                document, err = cli_json(["verify", str(run), "--all"], capsys, 0)
                assert err == [] and document["ok"] is True
                assert f"process {os.getpid()}" in document["held_by"]
        finally:
            holder.release()


def test_a_checkpoint_pruned_before_its_replay_makes_its_segments_not_verifiable(
    pruned_cli_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The file check 2 read is gone when the replay starting from it begins."""
    original = nxrs._audit.verify_replays._run_job

    def pruned_first(job: Any, x: Any, y: Any) -> Any:
        if isinstance(job.base, Path):
            job.base.unlink(missing_ok=True)
        return original(job, x, y)

    monkeypatch.setattr(nxrs._audit.verify_replays, "_run_job", pruned_first)
    report = nxrs.verify(copy_of(pruned_cli_run, tmp_path / "api"), segments="all")
    assert report.ok, report.failures
    gone = [s for s in report.segments if s.replayed_from_kind == "checkpoint"]
    assert gone and all(s.status == "not-verifiable" for s in gone)
    assert all("was deleted during verification" in (s.difference or "") for s in gone)
    # Those from the run's start still replay.
    assert any(s.status == "ok" and s.replayed_from_kind == "start" for s in report.segments)
    run = copy_of(pruned_cli_run, tmp_path / "cli")
    document, err = cli_json(["verify", str(run), "--all"], capsys, 0)
    assert err == [] and document["ok"] is True
    assert {s["status"] for s in document["segments"]} == {"ok", "not-verifiable"}


def test_on_ray_a_checkpoint_pruned_before_its_replay_is_not_verifiable(
    ray_cluster: Any, pruned_cli_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on Ray tasks, which are sent the file's bytes: a file gone by then."""
    checked = nxrs._audit.verify._check_checkpoints

    def then_pruned(*args: Any) -> Any:
        found = checked(*args)
        for path in found.trusted.values():
            path.unlink()
        return found

    monkeypatch.setattr(nxrs._audit.verify, "_check_checkpoints", then_pruned)
    run = copy_of(pruned_cli_run, tmp_path / "run")
    report = nxrs.verify(run, segments="all", engine="ray", workers=2)
    assert report.ok, report.failures
    statuses = {s.replayed_from_kind: s.status for s in report.segments}
    assert statuses == {"start": "ok", "checkpoint": "not-verifiable"}


def test_verify_while_nxrs_train_trains_and_prunes(data_file: Path, tmp_path: Path) -> None:
    """A real run, checkpointing at every step and keeping 2, verified again and again as it
    trains: each time exit 0 and a report, never a traceback."""
    directory = tmp_path / "live"
    argv = [sys.executable, "-m", "nxrs", "train", "--data", str(data_file), "--layers", "8,256,3"]
    argv += ["--batch-size", "2", "--epochs", "200", "--every", "1", "--keep", "2"]
    trainer = subprocess.Popen(
        [*argv, "--ckpt-dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        held, checked = 0, 0
        deadline = time.monotonic() + 120
        while trainer.poll() is None and time.monotonic() < deadline and held < 5:
            if not (directory / TRANSCRIPT_NAME).is_file():
                time.sleep(0.05)
                continue
            verify = ["verify", str(directory), "--segments", "1", "--json"]
            done = subprocess.run(
                [sys.executable, "-m", "nxrs", *verify], capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert report["ok"] is True, report["failures"]
            checked += 1
            held += report["held_by"] is not None
        assert held >= 1, (checked, "no verification overlapped the training")
    finally:
        trainer.kill()
        trainer.wait()


# --- an unclean end

KILLED_BEFORE_RECORDING = """
import os, sys
import nxrs._train.session
from nxrs.cli import main

recorded = nxrs._train.session.Session._transcribe

def killed(self, kind, checkpoint, saved=None):
    # SIGKILL's effect at this instant: the checkpoint of step {step} saved, not recorded.
    if kind == "checkpoint" and self.trainer.steps == {step}:
        os._exit(9)
    recorded(self, kind, checkpoint, saved)

nxrs._train.session.Session._transcribe = killed
sys.exit(main(sys.argv[1:]))
"""


def train_argv(data_file: Path, directory: Path) -> list[str]:
    argv = ["train", "--data", str(data_file), "--layers", "8,16,3", "--batch-size", "8"]
    return [*argv, "--epochs", "1", "--every", "2", "--keep", "all", "--ckpt-dir", str(directory)]


def test_a_run_killed_between_a_checkpoint_and_its_entry_ended_uncleanly(
    data_file: Path, tmp_path: Path, capsys: Any
) -> None:
    directory = tmp_path / "killed"
    script = KILLED_BEFORE_RECORDING.format(step=6)
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *train_argv(data_file, directory)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert killed.returncode == 9, killed.stderr
    assert (directory / name_of(6)).is_file() and entries_of(directory)[-1]["step"] == 4

    report = nxrs.verify(directory, segments="all")
    assert report.ok, report.failures
    row = {c["file"]: c for c in report.checkpoints}[name_of(6)]
    assert (row["status"], row["entry"]) == ("unclean-end", None)
    assert any(
        n.startswith("the run ended uncleanly: checkpoint " + name_of(6)) for n in report.notes
    )
    document, err = cli_json(["verify", str(directory), "--all"], capsys, 0)
    assert err == [] and "unclean-end" in {c["status"] for c in document["checkpoints"]}

    # Not so once the manifest says the run ended cleanly: a checkpoint without an entry.
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    (directory / MANIFEST_NAME).write_text(json.dumps({**manifest, "state": "complete"}))
    expected = f"checkpoint {name_of(6)} has no transcript entry"
    assert nxrs.verify(directory, segments=0).first_failure == expected
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))

    # The resume records it, and the whole run verifies.
    assert main(train_argv(data_file, directory)) == 0
    capsys.readouterr()
    report = nxrs.verify(directory, segments="all")
    assert report.ok and {c["status"] for c in report.checkpoints} == {"ok"}


# --- reordered and decreasing entries


def test_reordered_entries_are_a_broken_chain_and_every_check_still_runs(
    run: Path, capsys: Any
) -> None:
    entries = entries_of(run)
    entries[5], entries[6] = entries[6], entries[5]  # steps 10, 12 -> 12, 10
    write_entries(run, entries)
    report = nxrs.verify(run, segments="all")
    assert not report.ok
    assert report.first_failure is not None
    assert report.first_failure.startswith("chain broken at entry 5: ")
    assert "segment 5 -> 6 (steps 12 -> 10) goes back: no replay reaches step 10 from step 12" in (
        report.failures
    )
    # Every checkpoint still matches its (moved) entry; the data and the other segments checked.
    assert {c["status"] for c in report.checkpoints} == {"ok"}
    assert report.data["parts"]["train"]["ok"] is True
    assert len(report.segments) == CHECKPOINTS
    assert [s.start for s in report.segments if s.status != "ok"] == [5]

    document, err = cli_json(["verify", str(run), "--all"], capsys, 1)
    assert document["first_failure"] == report.first_failure
    assert err == [f"nxrs verify: {report.first_failure}"]


def test_a_decreasing_step_in_a_consistent_chain_is_named(run: Path, capsys: Any) -> None:
    entries = entries_of(run)
    entries[8]["step"] = 2  # step 16 -> 2, the chain recomputed around it
    for i in range(8, len(entries)):
        entries[i]["prev"] = entries[i - 1]["digest"]
        entries[i]["digest"] = entry_digest(entries[i])
    write_entries(run, entries)
    report = nxrs.verify(run, segments="all")
    assert report.first_failure == (
        "chain broken at entry 8: its step 2 is not after the previous entry's (14)"
    )
    assert "segment 7 -> 8 (steps 14 -> 2) goes back: no replay reaches step 2 from step 14" in (
        report.failures
    )
    document, err = cli_json(["verify", str(run), "--all"], capsys, 1)
    assert document["failures"] == report.failures and len(err) == 1


# --- checkpoints listed but missing


def test_a_missing_checkpoint_of_a_run_keeping_all_fails(run: Path, capsys: Any) -> None:
    (run / name_of(10)).unlink()  # entry 5
    expected = f"checkpoint {name_of(10)} listed in entry 5 is missing"
    report = nxrs.verify(run, segments="all")
    assert report.first_failure == expected and report.failures == [expected]
    assert report.missing == 1 and report.keep == "all"
    rows = {c["file"]: c for c in report.checkpoints}
    assert rows[name_of(10)] == {"file": name_of(10), "entry": 5, "step": 10, "status": "missing"}
    assert len(report.checkpoints) == CHECKPOINTS
    assert f"checkpoints {CHECKPOINTS - 1} of {CHECKPOINTS} match their entries (1 missing)" in (
        str(report)
    )
    # Its segments replay from the entry before it: still checked.
    after = report.segments[5]
    assert (after.status, after.replayed_from) == ("ok", 4)

    document, err = cli_json(["verify", str(run), "--all"], capsys, 1)
    assert err == [f"nxrs verify: {expected}"] and document["missing"] == 1
    assert document["keep"] == "all"


def test_a_pruned_run_counts_its_missing_checkpoints_without_failing(
    pruned_cli_run: Path, capsys: Any
) -> None:
    pruned = pruned_cli_run
    report = nxrs.verify(pruned, segments="all")
    assert report.ok, report.failures
    assert report.keep == 3 and report.missing == CHECKPOINTS - 3
    assert any(f"{CHECKPOINTS - 3} of the checkpoints" in n and "keeps the newest 3" in n
               for n in report.notes)  # fmt: skip
    document, _ = cli_json(["verify", str(pruned), "--segments", "1"], capsys, 0)
    assert document["missing"] == CHECKPOINTS - 3


def manifest_keep(directory: Path) -> Any:
    return json.loads((directory / MANIFEST_NAME).read_text()).get("keep", "not recorded")


def test_the_manifest_records_the_fewest_checkpoints_any_process_kept(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    trainer = nxrs.Trainer(layers=[6, 10, 3], batch_size=6, seed=3)
    trainer.fit(X, Y, epochs=1, checkpoint=directory, every=3, keep="all")
    assert manifest_keep(directory) == "all"
    trainer.fit(X, Y, epochs=2, checkpoint=directory, every=3, keep=2)
    assert manifest_keep(directory) == 2
    trainer.fit(X, Y, epochs=3, checkpoint=directory, every=3, keep="all")
    assert manifest_keep(directory) == 2  # it pruned once: no longer every checkpoint
    assert nxrs.verify(directory, X, Y, segments="all").ok
    manager = nxrs.CheckpointManager(tmp_path / "managed", keep=4)
    nxrs.Trainer(layers=[6, 10, 3], batch_size=6).fit(X, Y, 1, checkpoint=manager)
    assert manifest_keep(tmp_path / "managed") == 4


def test_nxrs_train_records_keep(cli_run: Path, pruned_cli_run: Path) -> None:
    assert manifest_keep(cli_run) == "all" and manifest_keep(pruned_cli_run) == 3


# --- what the command says


def test_a_fit_run_is_verified_from_its_data_file(tmp_path: Path, capsys: Any) -> None:
    fit_run(tmp_path / "fit", keep="all")
    assert main(["verify", str(tmp_path / "fit")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "was trained by fit: give its data" in err[0]
    assert "--data FILE" in err[0] and "give the run's data (x, y)" not in err[0]
    data = tmp_path / "data.npz"
    np.savez(data, X=X, y=Y)
    document, err = cli_json(["verify", str(tmp_path / "fit"), "--data", str(data)], capsys, 0)
    assert err == [] and document["data"]["source"] == "file"
    assert document["data"]["parts"]["train"]["ok"] is True
    assert not document["data"]["parts"]["validation"]["checked"]
    report = nxrs.verify(tmp_path / "fit", data=data, segments="all")
    assert report.ok and report.data["source"] == "file"
    with pytest.raises(nxrs.MismatchError, match="was trained by fit: give its data"):
        nxrs.verify(tmp_path / "fit")


def test_a_checkpoint_file_is_not_a_run_directory(cli_run: Path, capsys: Any) -> None:
    checkpoint = cli_run / name_of(EVERY)
    with pytest.raises(nxrs.InputError, match="is a file, not a run directory") as raised:
        nxrs.verify(checkpoint)
    assert "nxrs inspect FILE --verify" in str(raised.value)
    assert main(["verify", str(checkpoint)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not a run directory" in err[0] and "nxrs inspect" in err[0]
    assert "no such run directory" not in err[0]
