"""Every ``nxrs train`` and ``nxrs sweep`` flag that changes a run, run as a user runs it (a
subprocess) and checked by its effect: the state hash and test accuracy the independent
reference (tests/reference/general_ref.py) computes for that configuration, the files the flag
makes, what it says. Each test also checks on the reference alone that the flag changes the
result for this data, so a flag that is parsed and then ignored fails."""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from sweep_support import killing_first_checkpointed

import nxrs

gr: ModuleType = importlib.import_module("reference.general_ref")

#: 50 samples of 6 features k/8 (exact in binary32), 3 classes; 6-8-3, batch 8.
RNG = np.random.default_rng(24)
X = (RNG.integers(-8, 9, (50, 6)) / 8).astype(np.float32)
Y = RNG.integers(0, 3, 50).astype(np.int64)
LAYERS = [6, 8, 3]
BATCH = 8


def reference(
    x: np.ndarray[Any, Any],
    y: np.ndarray[Any, Any],
    epochs: int,
    *,
    test_size: float = 0.2,
    split_seed: int = 0,
    **config: Any,
) -> tuple[str, float]:
    """The reference's run on section 12's split of ``(x, y)``: its state hash and accuracy
    on the test part."""
    train, test = gr.split(len(x), test_size, split_seed)
    config = {"layers": LAYERS, "batch_size": BATCH, **config}
    t = gr.Trainer(**config)
    t.fit_epochs(x[train], y[train], epochs)
    _, accuracy = t.evaluate(x[test], y[test])
    return t.state_hash_hex(), accuracy


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flags") / "data.npz"
    np.savez(path, X=X, y=Y)
    return path


def nxrs_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def train(data: Path, *args: str | Path, epochs: int = 2) -> dict[str, Any]:
    """``nxrs train --json`` on ``data`` (6-8-3, batch 8) with ``args``; its summary."""
    proc = nxrs_cli(
        "train", "--data", data, "--layers", "6,8,3", "--batch-size", str(BATCH),
        "--epochs", str(epochs), "--json", *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    summary["stderr"] = proc.stderr
    return summary


def check(summary: dict[str, Any], expected: tuple[str, float]) -> None:
    assert (summary["state_hash"], summary["test_accuracy"]) == expected


# --- nxrs train -------------------------------------------------------------------------------


def test_train_test_size(data: Path) -> None:
    expected = reference(X, Y, 2, test_size=0.5)
    assert expected != reference(X, Y, 2)
    check(train(data, "--test-size", "0.5"), expected)


def test_train_math_seed(data: Path) -> None:
    expected = reference(X, Y, 2, math="seed")
    assert expected != reference(X, Y, 2, math="ieee")
    check(train(data, "--math", "seed"), expected)
    check(train(data, "--math", "ieee"), reference(X, Y, 2, math="ieee"))


@pytest.mark.parametrize(("optimizer", "lr"), [("sgd", "0.05"), ("adamw", "0.01")])
def test_train_optimizer(data: Path, optimizer: str, lr: str) -> None:
    expected = reference(X, Y, 2, optimizer=optimizer, lr=float(lr))
    assert expected != reference(X, Y, 2, optimizer="adam", lr=float(lr))
    check(train(data, "--optimizer", optimizer, "--lr", lr), expected)


def test_train_threads(data: Path) -> None:
    """--threads sets the threads (two different counts, so not both the machine's default)
    and changes no bit."""
    expected = reference(X, Y, 2)
    for threads in (1, 3):
        summary = train(data, "--threads", str(threads))
        assert summary["threads"] == threads
        check(summary, expected)


def test_train_resume_and_no_resume(data: Path, tmp_path: Path) -> None:
    def events() -> list[str]:
        manifest = json.loads((tmp_path / "nxrs-run.json").read_text())
        return [e["event"] for e in manifest["events"]]

    check(train(data, "--ckpt-dir", tmp_path, epochs=1), reference(X, Y, 1))
    # --resume (the default, here explicit): continues from the checkpoint of epoch 1.
    resumed = train(data, "--ckpt-dir", tmp_path, "--resume", epochs=2)
    check(resumed, reference(X, Y, 2))
    assert "resuming" in resumed["stderr"] and "from step-000000000005.nxck" in resumed["stderr"]
    assert events() == ["start", "complete", "resume", "complete"]
    # --no-resume: the run is moved aside and trained from the beginning.
    restarted = train(data, "--ckpt-dir", tmp_path, "--no-resume", epochs=3)
    check(restarted, reference(X, Y, 3))
    assert "moved the previous run" in restarted["stderr"]
    assert "resuming" not in restarted["stderr"]
    assert events() == ["start", "complete"]
    (aside,) = (tmp_path / "previous").iterdir()
    assert sorted(p.name for p in aside.glob("*.nxck")) == [
        "step-000000000005.nxck",
        "step-000000000010.nxck",
    ]
    assert [e.step for e in nxrs.CheckpointManager(tmp_path).list()] == [15]


def test_train_plot(data: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    png = tmp_path / "curves.png"
    summary = train(data, "--plot", png)
    check(summary, reference(X, Y, 2))
    assert summary["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


# --- nxrs sweep -------------------------------------------------------------------------------


def sweep_cli(
    ray_cluster: Any, directory: Path, *args: str | Path
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``nxrs sweep --json`` on the session's Ray cluster; the process and its records."""
    address = ray_cluster.get_runtime_context().gcs_address
    proc = subprocess.run(
        [sys.executable, "-m", "nxrs", "sweep", "--dir", str(directory), "--json",
         "--ray-address", address, *map(str, args)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    # The whole of stdout is the records: what Ray's driver prints of a killed worker
    # ("(raylet) A worker died ...") goes to stderr.
    return proc, json.loads(proc.stdout) if proc.stdout.strip() else []


def checkpoint_steps(record: dict[str, Any]) -> list[int]:
    return [e.step for e in nxrs.CheckpointManager(record["run_dir"]).list()]


def test_sweep_target_split_seed_and_test_size(ray_cluster: Any, tmp_path: Path) -> None:
    """A CSV whose label column is not the last (--target), another split (--split-seed,
    --test-size); the default --every-seconds (30 s) saves only the final checkpoint."""
    path = tmp_path / "data.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["a", "label", "b", "c", "d", "e", "f"])
        for row, label in zip(X.tolist(), Y.tolist()):
            writer.writerow([row[0], label, *row[1:]])
    proc, records = sweep_cli(
        ray_cluster, tmp_path / "s", "--data", path, "--target", "label", "--split-seed", "5",
        "--test-size", "0.3", "--epochs", "2", "--grid", "hidden=8", "--grid", "batch_size=8",
        "--grid", "seed=0,1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for record, seed in zip(records, (0, 1)):
        expected = reference(X, Y, 2, test_size=0.3, split_seed=5, seed=seed)
        assert (record["state_hash"], record["val_accuracy"]) == expected
        assert record["config"]["layers"] == LAYERS
        assert checkpoint_steps(record) == [record["steps"]]
    assert len(records) == 2
    assert reference(X, Y, 2, test_size=0.3, split_seed=0) != reference(
        X, Y, 2, test_size=0.3, split_seed=5
    )
    assert reference(X, Y, 2, split_seed=5) != reference(X, Y, 2, test_size=0.3, split_seed=5)


def test_sweep_every_seconds(ray_cluster: Any, tmp_path: Path, data: Path) -> None:
    """A period shorter than an epoch: a checkpoint at every step boundary (each epoch's end,
    as the validation split makes every chunk end there), the newest three kept."""
    proc, (record,) = sweep_cli(
        ray_cluster, tmp_path / "s", "--data", data, "--epochs", "4", "--every-seconds",
        "0.000001", "--grid", "hidden=8", "--grid", "batch_size=8",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (record["state_hash"], record["val_accuracy"]) == reference(X, Y, 4)
    assert checkpoint_steps(record) == [10, 15, 20]


@pytest.mark.parametrize("retries", [0, 1])
def test_sweep_max_retries(ray_cluster: Any, tmp_path: Path, data: Path, retries: int) -> None:
    """The task's process is killed after its first checkpoint (softf32 and a checkpoint every
    step make the run last): with --max-retries 0 the configuration fails, with 1 it is retried
    and resumes from its checkpoint to the reference's end."""
    root = tmp_path / "s"
    with killing_first_checkpointed(root):
        proc, (record,) = sweep_cli(
            ray_cluster, root, "--data", data, "--epochs", "20", "--every", "1",
            "--max-retries", str(retries), "--grid", "hidden=8", "--grid", "batch_size=8",
            "--grid", "backend=soft",
        )  # fmt: skip
    if retries == 0:
        assert proc.returncode == 1
        assert record["error"] is not None and record["state_hash"] is None
    else:
        assert proc.returncode == 0, proc.stderr
        assert record["error"] is None and record["resumed_from_step"] >= 1
        assert (record["state_hash"], record["val_accuracy"]) == reference(X, Y, 20)
