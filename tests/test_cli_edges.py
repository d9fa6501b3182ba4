"""The command line at its edges: hostile data files, malformed options, diverged
runs, warnings, labels, empty paths, the data file's fingerprint and the plan after a resume.
Every CLI check runs a real ``python -m nxrs`` process: exit status, ONE line on stderr, no
traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs

HOSTILE = Path(__file__).resolve().parent / "hostile_data"
EXPECTED: dict[str, str] = json.loads((HOSTILE / "expected.json").read_text())
#: The smallest run: a 2-unit hidden layer, one epoch.
TINY = ("--epochs", "1", "--hidden", "2", "--batch-size", "4")


def nxrs_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # In a fresh working directory: a command that took '' or a relative path for the current
    # directory (as the code before these tests did) writes there, never into the checkout.
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [sys.executable, "-m", "nxrs", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=cwd,
        )


def one_line_error(proc: subprocess.CompletedProcess[str], statuses: Any, fragment: str) -> None:
    statuses = statuses if isinstance(statuses, tuple) else (statuses,)
    assert proc.returncode in statuses, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nxrs") and fragment in proc.stderr, proc.stderr


def write_csv(path: Path, x: np.ndarray, labels: list[str]) -> Path:
    rows = "".join(
        ",".join([*(repr(float(v)) for v in row), lab]) + "\n" for row, lab in zip(x, labels)
    )
    names = ",".join(f"f{k}" for k in range(x.shape[1]))
    path.write_text(f"{names},label\n{rows}")
    return path


def small_x(n: int = 12, features: int = 3) -> np.ndarray:
    return (np.arange(n * features, dtype=np.float32).reshape(n, features) % 7) / 4


# --- the hostile corpus (items 2, 11, 13, 14) -------------------------------------------------


def test_corpus_is_what_its_script_writes(tmp_path: Path) -> None:
    """The committed files are the generator's (run it into a fresh folder and compare)."""
    script = HOSTILE / "make_corpus.py"
    copy = tmp_path / "make_corpus.py"
    copy.write_text(script.read_text())
    subprocess.run([sys.executable, str(copy)], check=True, timeout=120)
    assert json.loads((tmp_path / "expected.json").read_text()) == EXPECTED
    for name in EXPECTED:
        made, committed = (tmp_path / name).read_bytes(), (HOSTILE / name).read_bytes()
        if name.endswith(".npz") and made[:2] == b"PK":
            assert len(made) == len(committed), name  # zip archives differ in their timestamps
        else:
            assert made == committed, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_file_is_refused_by_train(name: str, tmp_path: Path) -> None:
    proc = nxrs_cli("train", "--data", str(HOSTILE / name), "--ckpt-dir", str(tmp_path), *TINY)
    one_line_error(proc, (1, 2), EXPECTED[name])
    assert not list(tmp_path.iterdir())  # refused before the run directory was touched


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_file_is_refused_by_sweep(name: str, tmp_path: Path) -> None:
    proc = nxrs_cli(
        "sweep", "--data", str(HOSTILE / name), "--dir", str(tmp_path / "s"), "--epochs", "1",
        "--grid", "hidden=2",
    )  # fmt: skip
    one_line_error(proc, (1, 2), EXPECTED[name])
    assert not (tmp_path / "s").exists()


def test_longer_y_is_refused_by_the_python_api_too() -> None:
    """The same rule as the files': fit refuses labels that are not one per sample."""
    x = small_x(10)
    with pytest.raises(nxrs.InputError):
        nxrs.Trainer(layers=[3, 2, 2]).fit(x, np.array([0, 1] * 10), epochs=1, progress=False)


# --- item 5: --plot's matplotlib is checked before anything is trained --------------------------


def test_plot_without_matplotlib_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "site" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is not installed')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path / "site"), *filter(None, [env.get("PYTHONPATH")])]
    )
    run = tmp_path / "run"
    proc = nxrs_cli(
        "train", *TINY, "--json", "--plot", str(tmp_path / "c.png"), "--ckpt-dir", str(run),
        env=env,
    )  # fmt: skip
    one_line_error(proc, 1, "--plot needs matplotlib")
    assert proc.stdout == "" and not run.exists()  # no run started, none thrown away


# --- item 8: malformed and out-of-range option values are usage errors ---------------------------


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--layers", "64,x,10"], "--layers"),
        (["--layers", ""], "--layers"),
        (["--layers", "4,,3"], "--layers"),
        (["--layers", "4,8,3,"], "--layers"),
        (["--layers", "4.0,8,3"], "--layers"),
        (["--layers", "64"], "--layers"),
        (["--layers", "64,0,10"], "--layers"),
        (["--hidden", "x"], "--hidden"),
        (["--hidden", "8,"], "--hidden"),
        (["--hidden", ""], "--hidden"),
        (["--hidden", "-8"], "--hidden"),
        (["--epochs", "0"], "--epochs"),
        (["--epochs", "-3"], "--epochs"),
        (["--epochs", "1.5"], "--epochs"),
        (["--batch-size", "0"], "--batch-size"),
        (["--threads", "0"], "--threads"),
        (["--every", "0", "--ckpt-dir", "run"], "--every"),
        (["--ckpt-dir", ""], "--ckpt-dir"),
        (["--plot", ""], "--plot"),
        (["--data", ""], "--data"),
        (["--task", "cluster"], "--task"),
    ],
)
def test_train_option_values_are_usage_errors(argv: list[str], option: str) -> None:
    proc = nxrs_cli("train", *argv)
    one_line_error(proc, 2, f"argument {option}")


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--epochs", "0"], "--epochs"),
        (["--epochs", "x"], "--epochs"),
        (["--every", "0"], "--every"),
        (["--max-retries", "-1"], "--max-retries"),
        (["--dir", ""], "--dir"),
        (["--task", "x"], "--task"),
    ],
)
def test_sweep_option_values_are_usage_errors(argv: list[str], option: str) -> None:
    proc = nxrs_cli("sweep", "--dir", "unused", "--grid", "lr=0.1", *argv)
    one_line_error(proc, 2, f"argument {option}")


@pytest.mark.parametrize("command", [["status", ""], ["inspect", ""], ["gate", "--workdir", ""]])
def test_empty_paths_are_usage_errors(command: list[str]) -> None:
    """Item 15: an empty path is not the current directory."""
    one_line_error(nxrs_cli(*command), 2, "an empty path")


# --- item 9: a diverged run -----------------------------------------------------------------------


def test_diverged_run_is_strict_json_with_its_own_exit_status(tmp_path: Path) -> None:
    proc = nxrs_cli(
        "train", "--epochs", "1", "--hidden", "8", "--optimizer", "sgd", "--lr", "1e30", "--json"
    )
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.count("\n") == 1 and "nxrs train: warning: the run diverged" in proc.stderr

    def no_constant(name: str) -> None:
        raise AssertionError(f"bare {name} in the JSON output")

    summary = json.loads(proc.stdout, parse_constant=no_constant)
    assert summary["diverged"] is True and summary["train_loss"] is None
    # The status is documented where the others are.
    root = Path(__file__).resolve().parent.parent
    assert "**6**" in (root / "docs" / "quickstart.md").read_text()
    assert "| 6 |" in (root / "docs" / "RUNS.md").read_text()
    assert "\n  6    the run diverged" in nxrs_cli("train", "--help").stdout


def test_a_finite_run_says_it_did_not_diverge() -> None:
    proc = nxrs_cli("train", *TINY, "--json", "--data", "digits")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["diverged"] is False


# --- item 11: where a bad value is --------------------------------------------------------------


def test_bad_value_is_named_by_its_file_row_not_its_place_after_the_split(tmp_path: Path) -> None:
    """Row 37 of 40 (line 38 after the header): however the split shuffles the rows."""
    x = small_x(40)
    labels = [str(k % 2) for k in range(40)]
    x[36, 1] = np.nan
    path = write_csv(tmp_path / "d.csv", x, labels)
    one_line_error(nxrs_cli("train", "--data", str(path), *TINY), 1, "line 38 (data row 37)")
    np.savez(tmp_path / "d.npz", X=x, y=np.array(labels, dtype=np.int64))
    one_line_error(nxrs_cli("train", "--data", str(tmp_path / "d.npz"), *TINY), 1, "X[36, 1]")


# --- item 12: warnings are one line each, once per file ----------------------------------------


def test_corrupt_checkpoint_warning_is_one_line_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = nxrs_cli("train", *TINY, "--ckpt-dir", str(run))
    assert first.returncode == 0, first.stderr
    bad = run / "step-000000999999.nxck"
    bad.write_bytes(b"NXCK" + bytes(100))
    proc = nxrs_cli("train", *TINY, "--ckpt-dir", str(run))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    warned = [line for line in lines if bad.name in line]
    assert len(warned) == 1 and warned[0].startswith("nxrs train: warning: "), proc.stderr
    assert all(line.startswith("nxrs train: ") for line in lines), proc.stderr


# --- item 13: one label rule, --task ------------------------------------------------------------


def test_integer_valued_float_labels_are_classes_in_every_format(tmp_path: Path) -> None:
    x = small_x(12)
    y = np.array([0.0, 1.0, 2.0] * 4)
    np.savez(tmp_path / "d.npz", X=x, y=y)
    write_csv(tmp_path / "d.csv", x, [repr(float(v)) for v in y])
    layers = []
    for name in ("d.npz", "d.csv"):
        proc = nxrs_cli("train", "--data", str(tmp_path / name), *TINY, "--json")
        assert proc.returncode == 0, proc.stderr
        layers.append(json.loads(proc.stdout)["layers"])
    assert layers == [[3, 2, 3], [3, 2, 3]]


def test_task_overrides_the_label_rule(tmp_path: Path) -> None:
    x = small_x(12)
    path = write_csv(tmp_path / "d.csv", x, [str(k % 3) for k in range(11)] + ["1.5"])
    one_line_error(nxrs_cli("train", "--data", str(path), *TINY), 1, "line 13 (data row 12)")
    regress = nxrs_cli("train", "--data", str(path), *TINY, "--json", "--task", "regress")
    assert regress.returncode == 0, regress.stderr
    summary = json.loads(regress.stdout)
    assert summary["layers"] == [3, 2, 1] and summary["train_accuracy"] is None
    one_line_error(
        nxrs_cli("train", "--data", str(path), *TINY, "--task", "classify"), 1, "data row 12"
    )
    ints = write_csv(tmp_path / "i.csv", x, [str(k % 3) for k in range(12)])
    as_targets = nxrs_cli("train", "--data", str(ints), *TINY, "--json", "--task", "regress")
    assert json.loads(as_targets.stdout)["layers"] == [3, 2, 1], as_targets.stderr


# --- item 14: one class -------------------------------------------------------------------------


def test_fit_refuses_a_one_output_classifier() -> None:
    x = small_x(6)
    t = nxrs.Trainer(layers=[3, 2, 1])
    with pytest.raises(nxrs.ConfigError, match="at least two outputs"):
        t.fit(x, np.zeros(6, np.int64), epochs=1, progress=False)
    assert t.steps == 0


# --- item 15: --target where there is no column ------------------------------------------------


@pytest.mark.parametrize("data", ["digits", "x.npz"])
def test_target_is_refused_without_a_csv(data: str, tmp_path: Path) -> None:
    if data.endswith(".npz"):
        np.savez(tmp_path / data, X=small_x(), y=np.arange(12) % 2)
        data = str(tmp_path / data)
    proc = nxrs_cli("train", "--data", data, "--target", "label", *TINY)
    one_line_error(proc, 1, "applies to a .csv file only")


# --- item 16: the whole file and the split are the run's data -----------------------------------


def test_an_edited_test_row_is_refused_on_resume(tmp_path: Path) -> None:
    from reference.general_ref import split as reference_split

    x = small_x(20)
    labels = [str(k % 2) for k in range(20)]
    path = write_csv(tmp_path / "d.csv", x, labels)
    run = tmp_path / "run"
    args = ("train", "--data", str(path), "--ckpt-dir", str(run), "--hidden", "2")
    assert nxrs_cli(*args, "--epochs", "1").returncode == 0
    _, test = reference_split(20, 0.2, 0)
    x[test[0], 0] += 1
    write_csv(path, x, labels)
    proc = nxrs_cli(*args, "--epochs", "2")
    one_line_error(proc, 3, "another data file or split")
    # A run directory of an older nxrs (no data.file in its manifest) resumes on its training
    # split's fingerprint, as it did, and records the whole file's from then on.
    manifest_path = run / "nxrs-run.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["data"]["file"]
    manifest_path.write_text(json.dumps(manifest))
    assert nxrs_cli(*args, "--epochs", "2").returncode == 0
    assert json.loads(manifest_path.read_text())["data"]["file"]["samples"] == 20


# --- item 19: a resume with fewer epochs than done ----------------------------------------------


def test_status_never_shows_more_than_the_whole_plan(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert nxrs_cli("train", *TINY[2:], "--epochs", "2", "--ckpt-dir", str(run)).returncode == 0
    again = nxrs_cli("train", *TINY[2:], "--epochs", "1", "--ckpt-dir", str(run))
    assert again.returncode == 0, again.stderr
    assert "nothing to train" in again.stderr
    text = nxrs_cli("status", str(run)).stdout
    assert "200.0%" not in text and "past the plan" in text, text
    status = json.loads(nxrs_cli("status", str(run), "--json").stdout)
    assert status["percent"] == 100.0 and status["beyond_plan"] is True
