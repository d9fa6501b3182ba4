"""Small edges: strict JSON and a diverged status for sweeps, ``nxrs sweep --json``'s
stdout holding the JSON alone when a Ray worker dies, a sweep's grid counts, a sweep's label
errors naming the file's row, and the stubs' count types. CLI checks run a real
``python -m nxrs`` process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sweep_support import killing_first_checkpointed

import nxrs
from nxrs.cli._grid import expand_grid

ROOT = Path(__file__).resolve().parent.parent

#: 50 samples of 6 features k/8 (exact in binary32), 3 classes.
RNG = np.random.default_rng(24)
X = (RNG.integers(-8, 9, (50, 6)) / 8).astype(np.float32)
Y = RNG.integers(0, 3, 50).astype(np.int64)


def nxrs_cli(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [sys.executable, "-m", "nxrs", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )


def strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: Python's bare NaN/Infinity/-Infinity fail."""

    def no_constant(name: str) -> None:
        raise AssertionError(f"bare {name} in the JSON: {text[:200]}")

    return json.loads(text, parse_constant=no_constant)


def one_line_error(proc: subprocess.CompletedProcess[str], status: int, fragment: str) -> None:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nxrs") and fragment in proc.stderr, proc.stderr


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.npz"
    np.savez(path, X=X, y=Y)
    return path


def sweep_cli(
    ray_cluster: Any, directory: Path, *args: str | Path
) -> subprocess.CompletedProcess[str]:
    address = ray_cluster.get_runtime_context().gcs_address
    return nxrs_cli(
        "sweep", "--dir", directory, "--json", "--ray-address", address, *args, timeout=600
    )


# --- 1. strict JSON everywhere, and a diverged sweep's exit status --------------------------------


def test_json_text_is_strict() -> None:
    """The one serialiser: non-finite floats at any depth become null."""
    from nxrs._util.files import json_text

    document = {"a": [math.nan, math.inf, 1.5], "b": {"c": (-math.inf,)}, "d": "NaN"}
    assert json_text(document) == '{"a": [null, null, 1.5], "b": {"c": [null]}, "d": "NaN"}'


def test_diverged_sweep_is_strict_json_with_exit_6(
    ray_cluster: Any, tmp_path: Path, data: Path
) -> None:
    """Configuration 0 diverges (sgd at lr 1e30), 1 does not: sweep.json, sweep --json and the
    run manifests are strict JSON (null for the losses), each record says whether it diverged,
    the exit status is 6 and one warning line names the diverged configuration."""
    root = tmp_path / "s"
    proc = sweep_cli(
        ray_cluster, root, "--data", data, "--epochs", "1", "--grid", "hidden=8",
        "--grid", "optimizer=sgd", "--grid", "lr=1e30,0.01",
    )  # fmt: skip
    assert proc.returncode == 6, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "configuration 0" in warnings[0], proc.stderr
    assert "Traceback" not in proc.stderr
    printed = strict_json(proc.stdout)
    written = strict_json((root / "sweep.json").read_text())
    for records in (printed, written):
        assert [r["diverged"] for r in records] == [True, False]
        assert records[0]["train_loss"] is None and records[0]["val_loss"] is None
        assert math.isfinite(records[1]["train_loss"])
    for manifest in root.glob("run-*/nxrs-run.json"):
        strict_json(manifest.read_text())
    header = (root / "sweep.csv").read_text().splitlines()[0]
    assert header.endswith(",error,diverged")
    # Documented with the other statuses.
    assert "6 every configuration trained but one or more diverged" in nxrs_cli(
        "sweep", "--help"
    ).stdout.replace("\n", " ")
    assert "`nxrs sweep` exits 6" in (ROOT / "docs" / "cli.md").read_text()


# --- 2. stdout holds the JSON alone when a worker dies --------------------------------------------


def test_sweep_json_stdout_is_pure_when_a_worker_dies(
    ray_cluster: Any, tmp_path: Path, data: Path
) -> None:
    """Ray's driver printed "(raylet) A worker died ..." on stdout before the records: the
    whole of stdout must be the JSON document."""
    root = tmp_path / "s"
    with killing_first_checkpointed(root):
        proc = sweep_cli(
            ray_cluster, root, "--data", data, "--epochs", "20", "--every", "1",
            "--max-retries", "1", "--grid", "hidden=8", "--grid", "batch_size=8",
            "--grid", "backend=soft",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (record,) = strict_json(proc.stdout)
    assert record["error"] is None and record["resumed_from_step"] >= 1


# --- 3. a grid's counts: one rule, before any task ------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("epochs", 0), ("epochs", -1), ("epochs", True), ("epochs", 2.0), ("batch_size", 0)],
)
def test_sweep_refuses_a_bad_grid_count(tmp_path: Path, key: str, value: Any) -> None:
    """Refused on the driver before Ray is asked for anything (an unreachable address would
    fail otherwise), naming the key."""
    x, y = nxrs.seed_dataset()
    configs = expand_grid({key: [1, value]})
    with pytest.raises(nxrs.ConfigError, match=f"configuration 1.*{key} = "):
        nxrs.sweep(configs, x, y, epochs=1, directory=tmp_path, ray_address="127.0.0.1:9")
    assert list(tmp_path.iterdir()) == []


def test_cli_sweep_refuses_grid_epochs_0(tmp_path: Path, data: Path) -> None:
    proc = nxrs_cli("sweep", "--dir", tmp_path / "s", "--data", data, "--grid", "epochs=1,0")
    one_line_error(proc, 1, "epochs = 0 must be at least 1")


# --- 4. a label the model cannot take: the file's row ---------------------------------------------


def labels_with_one_2(row: int) -> np.ndarray:
    y = Y % 2
    y[row] = 2
    return y


@pytest.mark.parametrize("row", [5, 10])
def test_cli_sweep_label_error_names_the_file_row(tmp_path: Path, row: int) -> None:
    """A 2-output model, one label 2 at file row ``row`` (in the training split for one row,
    in the test split for the other): the message counts the file's rows, as nxrs train's
    does, and comes before any task."""
    path = tmp_path / "data.npz"
    np.savez(path, X=X, y=labels_with_one_2(row))
    train = nxrs_cli("train", "--data", path, "--layers", "6,8,2", "--epochs", "1")
    one_line_error(train, 1, f"of sample {row} ")
    proc = nxrs_cli(
        "sweep", "--dir", tmp_path / "s", "--data", path, "--grid", "layers=[[6, 8, 2]]",
        "--ray-address", "127.0.0.1:9",
    )  # fmt: skip
    one_line_error(proc, 1, f"of sample {row} ")
    assert "configuration 0" in proc.stderr


def test_sweep_checks_every_configuration_before_any_task(tmp_path: Path) -> None:
    """Configuration 1's model has fewer outputs than the labels' classes: an InputError
    naming it on the driver (it used to fail in its task, after the others had trained)."""
    configs = [{"layers": [6, 8, 3]}, {"layers": [6, 8, 2]}]
    with pytest.raises(nxrs.InputError, match=r"configuration 1 .*label 2 of sample"):
        nxrs.sweep(configs, X, Y, epochs=1, directory=tmp_path, ray_address="127.0.0.1:9")
    assert list(tmp_path.iterdir()) == []


# --- 5. the stubs take numpy integers where a count is taken --------------------------------------

COUNTS_SNIPPET = """\
import numpy as np
import nxrs
from nxrs._nxrs import permutation

n = np.int64(4)
t = nxrs.Trainer(layers=[np.int64(6), 8, 3], batch_size=n, seed=np.uint32(1), grad_block=n,
                 threads=np.int32(1))
nxrs.Trainer(layers=[6, 8, 3], schedule="linear", warmup_steps=n, total_steps=np.int64(9))
nxrs.Trainer(layers=[6, 8, 3], schedule="step", step_size=n, gamma=0.5)
nxrs.Trainer(sizes=np.array([6, 8, 3]))
nxrs.Trainer(layers=np.array([6, 8, 3]))
x, y = nxrs.seed_dataset(samples=np.int64(8), features=np.int64(6), classes=np.int64(3))
t.train_until(x, y, np.int64(1))
t.train_steps(x, y, np.int64(1))
t.fit(x, y, np.int64(2), every=None, workers=None)
t.threads = np.int64(1)
permutation(np.int64(0), "split", np.int64(0), np.int64(5))
nxrs.Trainer.seed_model(np.int64(1), threads=np.int64(1))
print(t.steps)
"""


def test_stubs_take_numpy_integer_counts(tmp_path: Path) -> None:
    """mypy --strict accepts numpy integers for the bindings' counts, and so does the code."""
    pytest.importorskip("mypy")
    program = tmp_path / "counts.py"
    program.write_text(COUNTS_SNIPPET)
    env = {**os.environ, "MYPYPATH": str(ROOT / "python")}
    check = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", str(program)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
