"""``nxrs train`` and the command line's conventions: --help, --version, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.cli import main

GOLDEN: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "golden" / "general.json").read_text()
)


def nxrs_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args], capture_output=True, text=True, timeout=300
    )


def test_train_json_on_digits_is_the_references_run(tmp_path: Path) -> None:
    """Two epochs of the default run: the reference's hash after epoch 2, a checkpoint."""
    proc = nxrs_cli("train", "--epochs", "2", "--json", "--ckpt-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    epoch2 = GOLDEN["digits"]["per_epoch"][1]
    assert summary["state_hash"] == epoch2["state_hash"]
    assert len(summary["state_hash"]) == 16 and int(summary["state_hash"], 16) >= 0
    assert summary["test_accuracy"] == epoch2["test_accuracy"]
    assert summary["epochs"] == 2 and summary["steps"] == 2 * 45
    assert 0 < summary["train_accuracy"] <= 1
    assert summary["checkpoint"] == str(nxrs.CheckpointManager(tmp_path).path_for(90))
    assert nxrs.Trainer.load(summary["checkpoint"]).state_hash() == int(epoch2["state_hash"], 16)
    # Resumed: two more epochs from the checkpoint give the reference's epoch 4.
    more = nxrs_cli("train", "--epochs", "4", "--json", "--ckpt-dir", str(tmp_path))
    assert json.loads(more.stdout)["state_hash"] == GOLDEN["digits"]["per_epoch"][3]["state_hash"]


@pytest.mark.parametrize("backend", ["soft", "hw"])
def test_every_backend_trains_the_references_run(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--backend changes the speed, not a bit: one epoch ends on the reference's hash."""
    if backend == "hw" and nxrs.Trainer(layers=[1, 1]).backend != "hw":
        pytest.skip("the hardware backend is not available on this machine")
    assert main(["train", "--epochs", "1", "--json", "--backend", backend]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == backend
    assert summary["state_hash"] == GOLDEN["digits"]["per_epoch"][0]["state_hash"]


def test_train_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--epochs", "1", "--hidden", "16"]) == 0
    out = capsys.readouterr().out
    assert "layers [64, 16, 10]" in out and "test accuracy" in out and "state hash" in out


def test_train_npz_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    np.savez(tmp_path / "d.npz", X=x, y=y)
    header = "a,label,b,c\n"
    rows = "".join(f"{r[0]},{lab},{r[1]},{r[2]}\n" for r, lab in zip(x.tolist(), y.tolist()))
    (tmp_path / "d.csv").write_text(header + rows)
    results = []
    for data in (
        ["--data", str(tmp_path / "d.npz")],
        ["--data", str(tmp_path / "d.csv"), "--target", "label"],
    ):
        assert main(["train", *data, "--epochs", "3", "--batch-size", "4", "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    assert results[0]["layers"] == [3, 128, 2] == results[1]["layers"]
    assert results[0]["steps"] == 3 * 8


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["train", "--epochs", "x"], ["train", "--every", "5"], ["nope"], []):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--data", "missing.npz"], "no such file"),
        (["train", "--layers", "64,a,10"], "comma-separated integers"),
        (["train", "--layers", "63,10"], "samples have 64 features, the model takes 63"),
        (["train", "--lr", "-1"], "lr = -1.0"),
    ],
)
def test_failures_exit_1_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--epochs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("nxrs train: ")


def test_help_and_version() -> None:
    for args in (["--help"], ["train", "--help"], ["gate", "--help"], ["inspect", "--help"]):
        proc = nxrs_cli(*args)
        assert proc.returncode == 0 and "usage: nxrs" in proc.stdout
    assert "--ckpt-dir" in nxrs_cli("train", "--help").stdout
    version = nxrs_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"nxrs {nxrs.__version__}"


def test_plot_without_matplotlib_is_a_clear_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    assert main(["train", "--epochs", "1", "--hidden", "8", "--plot", str(tmp_path / "c.png")]) == 1
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install" in err and err.count("\n") == 1
