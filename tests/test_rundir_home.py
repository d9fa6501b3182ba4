"""One home for each fact of the run directory and the command line.

The manifest is made, updated and read by one class (``nxrs._runs.manifest.RunManifest``); the run
directory lists checkpoints by the manager's naming; every atomic write of the package (the
manifest, a sweep's results) fsyncs the file and its directory; the library loads no
command-line code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_fit import X, Y, small

import nxrs
from nxrs import _sweeps as sweeps
from nxrs._runs.directory import RunDirectory
from nxrs._runs.manifest import MANIFEST_SCHEMA, RunManifest, event
from nxrs.cli.status import run_status


def test_a_manifest_written_by_its_class_reads_back_with_every_key(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    trainer = small()
    manifest = RunManifest.new(run, trainer.config, "0123456789abcdef", 40)
    source = {"fingerprint": "fedcba9876543210", "samples": 50, "test_size": 0.2, "split_seed": 0}
    manifest.begin(epochs=3, steps_per_epoch=5, command=["nxrs", "train"], source=source)
    manifest.add_event(event("start", trainer, resume=True))
    manifest.checkpointed(trainer, tmp_path / "step-000000000000.nxck")
    manifest.record(event("stop", trainer, reason="SIGTERM", saved=True), state="stopped")

    read = RunManifest.read(run)
    assert read is not None
    assert read.document == manifest.document
    assert MANIFEST_SCHEMA(read.document, "manifest") is None
    # Every key of docs/RUNS.md's manifest, with the values given.
    assert set(read.document) == {
        "format", "nxrs_version", "started", "updated", "state", "config", "data", "plan",
        "progress", "events", "command", "cwd", "keep",
    }  # fmt: skip
    assert read.document["keep"] == 3  # begin's default, CheckpointManager's
    assert read.document["format"] == "nxrs-run/1"
    assert read.document["state"] == "stopped"
    assert read.document["data"] == {"fingerprint": "0123456789abcdef", "samples": 40,
                                     "file": source}  # fmt: skip
    assert read.document["plan"] == {"epochs": 3, "steps_per_epoch": 5, "steps": 15}
    assert read.document["command"] == ["nxrs", "train"]
    assert read.document["cwd"] == os.getcwd()
    assert read.document["progress"]["checkpoint"] == "step-000000000000.nxck"
    assert [e["event"] for e in read.document["events"]] == ["start", "stop"]
    assert read.describe_end() == "stopped (SIGTERM)"


def test_fit_writes_the_manifest_its_class_makes(tmp_path: Path) -> None:
    """fit's manifest has exactly the keys RunManifest makes (one writer, not two)."""
    small().fit(X, Y, epochs=1, checkpoint=tmp_path / "fit")
    by_fit = RunDirectory(tmp_path / "fit").read_manifest()
    made = RunManifest.new(RunDirectory(tmp_path / "made"), small().config, "0" * 16, len(X))
    made.begin(epochs=1, steps_per_epoch=1, command=None, source=None)
    assert by_fit is not None
    assert list(by_fit) == list(made.document)


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_plan_counts_the_cores_steps_per_epoch(tmp_path: Path, drop_last: bool) -> None:
    # 60 samples, batches of 8: 8 steps an epoch (7 full and a short one), 7 with drop_last.
    t = small(drop_last=drop_last)
    t.fit(X, Y, epochs=2, checkpoint=tmp_path)
    manifest = RunDirectory(tmp_path).read_manifest()
    assert manifest is not None
    assert manifest["plan"]["steps_per_epoch"] * 2 == t.steps == manifest["plan"]["steps"]


ODD_NAMES = [
    "step-000000000007.nxck",
    "step-1000000000000.nxck",  # a 13-digit step: the name path_for(10**12) gives
    "step-7.nxck",  # not zero-padded: not a checkpoint
    "step-0000000000007.nxck",  # 13 digits for step 7: not the name path_for(7) gives
    "step-\u0669\u0669\u0669\u0669\u0669\u0669\u0669\u0669\u0669\u0669\u0669\u0669.nxck",
    "step-000000000008.nxck.tmp",
    "other-000000000009.nxck",
]


def test_status_lists_the_checkpoints_the_manager_lists(tmp_path: Path) -> None:
    for name in ODD_NAMES:
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "step-000000000010.nxck").mkdir()  # a directory is no checkpoint
    os.symlink(tmp_path / ODD_NAMES[0], tmp_path / "step-000000000011.nxck")  # nor a link
    listed = [e.path.name for e in nxrs.CheckpointManager(tmp_path).list()]
    assert listed == ["step-000000000007.nxck", "step-1000000000000.nxck"]
    status = run_status(tmp_path)
    assert sorted(c["file"] for c in status["checkpoints"]) == sorted(listed)


def _fsync_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Records every os.fsync (with what the descriptor names) and os.replace, in order."""
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        calls.append(("replace", os.fspath(dst)))
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_sweeps_results_are_written_with_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = sweeps.SweepResults(
        [{"index": 0, "config": {"lr": 0.1}, **dict.fromkeys(sweeps.RESULT_FIELDS[1:])}]
    )
    calls = _fsync_log(monkeypatch)
    sweeps._write(results, tmp_path)
    root = os.path.realpath(tmp_path)
    for name in (sweeps.JSON_NAME, sweeps.CSV_NAME):
        target = os.path.join(root, name)
        renamed = calls.index(("replace", os.path.join(str(tmp_path), name)))
        # The file's content is durable before the rename, the rename after it.
        assert any(
            op == "fsync" and Path(path).name.startswith(f".{name}.tmp.")
            for op, path in calls[:renamed]
        ), (name, calls)
        assert ("fsync", root) in calls[renamed + 1 :], (name, calls)
        assert Path(target).is_file()
    assert Path(root, sweeps.CSV_NAME).read_text().startswith("lr,index,")


def test_the_library_loads_no_command_line_code() -> None:
    """``import nxrs`` (and the run directory, sweeps, data modules) never import the command
    line: argparse and ``nxrs.cli`` load only with the ``nxrs`` command."""
    code = (
        "import sys, nxrs, nxrs._sweeps, nxrs._runs.directory, nxrs.data, nxrs._runs.checkpoints\n"
        "print(sorted(m for m in sys.modules if m == 'argparse' or m.startswith('nxrs.cli')"
        " or m == 'nxrs.training'))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"


def test_every_command_has_its_module() -> None:
    import nxrs.cli

    parser = nxrs.cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert sorted(commands) == [
        "diff",
        "gate",
        "inspect",
        "sample",
        "status",
        "sweep",
        "train",
        "verify",
    ]
    for name, sub in commands.items():
        module = sys.modules[f"nxrs.cli.{name}"]
        assert sub.get_default("run").__module__ == module.__name__
