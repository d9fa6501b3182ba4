"""MNIST-1D as a built-in data set: ``nxrs.data.load_mnist1d``, ``load("mnist1d")``,
its own split (``train_test``) and ``nxrs train --data mnist1d`` (TRAINING.md section 12).

The data's meaning is checked against the ``mnist1d`` package's own ``make_dataset`` run here
with the package's default arguments and rounded to binary32 by Python's ``array`` module (a C
cast per value), not by numpy. The tests that need the package skip without it, unless the
``CI`` environment variable is set: there they fail (CI installs the test extra, which has it).
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.data import load, load_mnist1d, own_split, train_test

# The bytes of the four arrays, as one digest: printed by a fresh process.
DIGEST = """
import hashlib
from nxrs.data import load_mnist1d
(xa, ya), (xb, yb) = load_mnist1d()
h = hashlib.sha256()
for a in (xa, ya, xb, yb):
    h.update(a.tobytes())
print(h.hexdigest())
"""


def digest(*arrays: np.ndarray[Any, Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def nxrs_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args], capture_output=True, text=True, timeout=300
    )


# `python -m nxrs ARGS` with the named modules hidden (an import of them fails as if they were
# not installed): sys.modules[name] = None is what the import system reads as "not there".
HIDDEN = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["nxrs", *sys.argv[2:]]
runpy.run_module("nxrs", run_name="__main__")
"""


def nxrs_cli_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m nxrs ARGS`` with ``modules`` (comma-separated) hidden."""
    return run_python(HIDDEN, modules, *args)


@pytest.fixture(scope="module")
def package() -> ModuleType:
    """``mnist1d.data``: a skip with the reason when the extra is missing, a failure on CI."""
    try:
        import mnist1d.data as m1d  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI installs the test extra, which has mnist1d: {err}")
        pytest.skip("the mnist1d extra is not installed (pip install '.[mnist1d]')")
    return m1d


@pytest.fixture(scope="module")
def data(package: ModuleType) -> Any:
    return load_mnist1d()


def test_shapes_dtypes_labels_and_the_papers_split(data: Any) -> None:
    (x_train, y_train), (x_test, y_test) = data
    assert x_train.shape == (4000, 40) and x_test.shape == (1000, 40)
    assert y_train.shape == (4000,) and y_test.shape == (1000,)
    for a in (x_train, x_test):
        assert a.dtype == np.float32 and a.flags.c_contiguous and np.isfinite(a).all()
    for y in (y_train, y_test):
        assert y.dtype == np.int64 and y.min() == 0 and y.max() == 9
    # make_dataset draws 500 signals of each digit and shuffles them into the two parts.
    assert np.bincount(np.concatenate([y_train, y_test])).tolist() == [500] * 10
    assert np.bincount(y_train).min() > 350 and np.bincount(y_test).min() > 70
    # The signals are centred and scaled as a whole (mean 0, std 1 over all 5,000 x 40 values).
    whole = np.concatenate([x_train, x_test]).astype(np.float64)
    assert abs(whole.mean()) < 1e-6 and abs(whole.std() - 1) < 1e-6


def test_the_packages_own_data_rounded_to_binary32(package: ModuleType, data: Any) -> None:
    """Bit for bit the package's ``make_dataset`` with its default arguments (seed 42), each
    float64 rounded to the nearest binary32 by a C cast (Python's ``array('f')``)."""
    d = package.make_dataset(package.get_dataset_args())
    (x_train, y_train), (x_test, y_test) = data
    for ours, key in ((x_train, "x"), (x_test, "x_test")):
        theirs = np.asarray(d[key])
        assert theirs.dtype == np.float64 and theirs.shape == ours.shape
        assert ours.tobytes() == array.array("f", theirs.ravel().tolist()).tobytes()
    assert y_train.tolist() == np.asarray(d["y"]).tolist()
    assert y_test.tolist() == np.asarray(d["y_test"]).tolist()


def test_same_bytes_on_every_call_and_in_every_process(data: Any) -> None:
    """The package seeds numpy's global generator itself: what the caller drew before does not
    matter, and two fresh processes print the digest of the same bytes."""
    np.random.seed(12345)
    np.random.rand(1000)
    (xa, ya), (xb, yb) = load_mnist1d()
    (x_train, y_train), (x_test, y_test) = data
    expected = digest(x_train, y_train, x_test, y_test)
    assert digest(xa, ya, xb, yb) == expected
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda _: run_python(DIGEST), range(2)))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == expected


def test_the_callers_random_states_are_restored(package: ModuleType) -> None:
    """make_dataset seeds np.random and random (42): the caller's streams go on as if nothing
    had drawn from them."""
    np.random.seed(7)
    random.seed(7)
    expected = (np.random.rand(3).tolist(), random.random())
    np.random.seed(7)
    random.seed(7)
    load_mnist1d()
    assert (np.random.rand(3).tolist(), random.random()) == expected


def test_load_and_train_test_give_the_papers_split_back(data: Any) -> None:
    (x_train, y_train), (x_test, y_test) = data
    x, y = load("mnist1d")
    assert x.tobytes() == np.concatenate([x_train, x_test]).tobytes()
    assert y.tolist() == y_train.tolist() + y_test.tolist()
    assert own_split("mnist1d") == (4000, 1000) and own_split("digits") is None
    train, test = train_test("mnist1d", len(x), seed=99)
    assert train == list(range(4000)) and test == list(range(4000, 5000))


@pytest.mark.parametrize(
    "command", [["train"], ["sweep", "--dir", "sweep-dir", "--grid", "hidden=8"]], ids=str
)
def test_a_test_size_for_mnist1d_is_refused(command: list[str], tmp_path: Path) -> None:
    """Its split is the paper's: a test size is a ConfigError, not silently ignored; refused
    before anything is generated (the package need not even be installed) or written."""
    with pytest.raises(nxrs.ConfigError, match="own train/test split"):
        train_test("mnist1d", 5000, 0.2)
    args = [*command, "--data", "mnist1d", "--test-size", "0.3"]
    proc = subprocess.run(
        [sys.executable, "-c", HIDDEN, "mnist1d", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(
        f"nxrs {command[0]}: ConfigError: mnist1d has its own train/test split (the paper's "
        "4,000 training and 1,000 test samples)"
    )
    assert list(tmp_path.iterdir()) == []


def test_missing_package_is_one_line_and_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = nxrs_cli_without("mnist1d", "train", "--data", "mnist1d")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("nxrs train: InputError: the mnist1d data set ")
    assert "not installed: pip install 'nxrs[mnist1d]'" in proc.stderr
    monkeypatch.setitem(sys.modules, "mnist1d", None)
    with pytest.raises(nxrs.InputError, match=r"pip install 'nxrs\[mnist1d\]'") as info:
        load_mnist1d()
    assert isinstance(info.value.__cause__, ImportError)


def test_a_missing_dependency_of_the_package_is_named(package: ModuleType) -> None:
    """mnist1d's __init__ imports scipy: without it, the error names scipy."""
    proc = nxrs_cli_without("scipy", "train", "--data", "mnist1d")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot import scipy: pip install 'nxrs[mnist1d]'" in proc.stderr


def test_train_on_mnist1d_reports_the_papers_test_set(data: Any, tmp_path: Path) -> None:
    """``nxrs train --data mnist1d --json`` trains on the 4,000 training signals in the paper's
    order and tests on its 1,000: the same state and test accuracy as a Trainer fitted on
    ``load_mnist1d``'s parts, and a run manifest naming the data set's own split."""
    settings = ["--batch-size", "100", "--lr", "0.01", "--optimizer", "adam", "--seed", "3"]
    proc = nxrs_cli(
        "train", "--data", "mnist1d", "--layers", "40,16,10", "--epochs", "2", "--json",
        "--ckpt-dir", str(tmp_path), *settings,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    (x_train, y_train), (x_test, y_test) = data
    trainer = nxrs.Trainer(layers=[40, 16, 10], batch_size=100, lr=0.01, optimizer="adam", seed=3)
    trainer.fit(x_train, y_train, epochs=2, progress=False)
    test_loss, test_accuracy = trainer.evaluate(x_test, y_test)
    assert summary["steps"] == 2 * 40
    assert summary["state_hash"] == f"{trainer.state_hash():016x}"
    assert summary["test_accuracy"] == test_accuracy and summary["test_loss"] == test_loss
    assert round(test_accuracy * 1000) == test_accuracy * 1000  # of 1,000 test samples
    manifest = json.loads((tmp_path / "nxrs-run.json").read_text())
    assert manifest["data"]["file"]["split"] == "mnist1d"
    assert manifest["data"]["file"]["samples"] == 5000
    text = nxrs_cli("train", "--data", "mnist1d", "--layers", "40,16,10", "--epochs", "1")
    assert text.returncode == 0, text.stderr
    assert "mnist1d: 4000 training and 1000 test samples" in text.stdout


def test_the_same_signals_split_another_way_are_another_run(data: Any, tmp_path: Path) -> None:
    """A run directory records mnist1d's own split as its split: the same 5,000 signals from a
    file, split by --test-size, are refused (exit 3) with both splits named, and ``nxrs
    status`` names the recorded one."""
    (x_train, y_train), (x_test, y_test) = data
    npz = tmp_path / "same.npz"
    np.savez(npz, X=np.concatenate([x_train, x_test]), y=np.concatenate([y_train, y_test]))
    run = tmp_path / "run"
    common = ["--layers", "40,8,10", "--epochs", "1", "--ckpt-dir", str(run)]
    first = nxrs_cli("train", "--data", "mnist1d", *common)
    assert first.returncode == 0, first.stderr
    other = nxrs_cli("train", "--data", str(npz), *common)
    assert other.returncode == 3 and other.stderr.count("\n") == 1, other.stderr
    assert "another data file or split" in other.stderr
    assert "5000 samples, mnist1d's own split; this one:" in other.stderr
    assert "5000 samples, test size 0.2, split seed 0)" in other.stderr
    status = nxrs_cli("status", str(run))
    assert status.returncode == 0, status.stderr
    assert "5000 samples, fingerprint" in status.stdout
    assert "mnist1d's own split" in status.stdout
