"""``nxrs train`` and the command line's conventions: --help, --version, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.cli import build_parser, main

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
    for argv in (["train", "--epochs", "x"], ["train", "--every", "5"], ["nope"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("nxrs") and ": error: " in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--data", "missing.npz"], "no such file"),
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
    for args in (["--help"], ["train", "--help"], ["gate", "--help"], ["inspect", "--help"],
                 ["status", "--help"]):  # fmt: skip
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


def subcommands() -> list[str]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(commands.choices)


def test_nxrs_alone_prints_the_command_list_and_exits_2() -> None:
    proc = nxrs_cli()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert subcommands() and all(f"    {name} " in proc.stdout for name in subcommands())
    assert "examples:" in proc.stdout


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_has_a_description_and_examples(command: str) -> None:
    proc = nxrs_cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    usage, description = proc.stdout.split("\n\n")[:2]
    assert usage.startswith(f"usage: nxrs {command}")
    assert len(description.split()) >= 10, description  # a sentence, not the options list
    examples = proc.stdout.split("examples:\n", 1)[1].split("\n\n")[0]
    assert f"  nxrs {command}" in examples


def one_line_error(proc: subprocess.CompletedProcess[str], status: int, fragment: str) -> None:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nxrs") and fragment in proc.stderr, proc.stderr


def test_user_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "MISSING")
    one_line_error(nxrs_cli("gate", "--workdir", missing), 2, "no such directory")
    one_line_error(nxrs_cli("inspect", missing), 1, "FileNotFoundError")
    one_line_error(nxrs_cli("inspect", str(tmp_path)), 1, "Error")
    corrupt = tmp_path / "corrupt.nxck"
    corrupt.write_bytes(b"NXCK" + bytes(200))
    one_line_error(nxrs_cli("inspect", str(corrupt), "--json"), 1, "Error: ")
    one_line_error(nxrs_cli("status", missing), 1, "no such directory")
    one_line_error(nxrs_cli("frobnicate"), 2, "invalid choice")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("a,b,label\n1,2,0\n3,4\n", "data row 2 has 2 fields, the header has 3"),
        ("a,b,label\n1,x,0\n", "not a numeric table"),
        ("a,b,label\n", "a header row and at least one data row"),
        (b"\xff\xfe\x00binary", "not a CSV text file"),
    ],
)
def test_bad_csv_is_one_line(tmp_path: Path, content: str | bytes, fragment: str) -> None:
    data = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        data.write_bytes(content)
    else:
        data.write_text(content)
    one_line_error(nxrs_cli("train", "--data", str(data), "--epochs", "1"), 1, fragment)


def test_inspect_json(tmp_path: Path) -> None:
    """The JSON agrees with the trainer that wrote the file and with the file's own bytes (a
    CRC-32C computed bit by bit by the tests, not by nxrs)."""
    from test_manager import crc32c

    x, y = nxrs.seed_dataset()
    t = nxrs.Trainer(seed=1, lr=0.01)
    t.train_until(x, y, epoch=3)
    path = tmp_path / "run.nxck"
    t.save(path, metadata={"who": "test"})
    proc = nxrs_cli("inspect", str(path), "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    content = path.read_bytes()
    assert summary["file"] == str(path) and summary["bytes"] == len(content)
    assert summary["format"] == 2 and summary["problems"] == 0
    assert summary["config"]["sizes"] == [6, 10, 4] and summary["config"]["lr_bits"] == 0x3C23D70A
    assert summary["scalars"]["epoch"] == 3 and summary["metadata"] == {"who": "test"}
    state = t.state_dict()
    assert [row["name"] for row in summary["tensors"]] == list(state)
    for row in summary["tensors"]:
        array = state[row["name"]]
        data = content[row["offset"] : row["offset"] + row["nbytes"]]
        assert row["shape"] == list(array.shape) and data == array.astype("<f4").tobytes()
        assert row["crc32c"] == crc32c(data) and row["checksum"] == "ok"
    # A flipped bit in the last tensor: reported as BAD with --verify, exit 1.
    damaged = bytearray(content)
    damaged[-1] ^= 1
    path.write_bytes(damaged)
    proc = nxrs_cli("inspect", str(path), "--json", "--verify")
    summary = json.loads(proc.stdout)
    assert proc.returncode == 1 and summary["problems"] == 1
    assert [r["checksum"] for r in summary["tensors"]] == ["ok"] * 11 + ["BAD"]
    # A v1 file: no checksums.
    t.save(path, format="v1")
    summary = json.loads(nxrs_cli("inspect", str(path), "--json").stdout)
    assert summary["format"] == 1 and summary["config"] == {"sizes": [6, 10, 4]}
    assert {r["checksum"] for r in summary["tensors"]} == {"none"}
