"""``nxrs.Trainer`` is a Python class over the compiled ``nxrs._nxrs._Trainer``:
every way of getting a trainer gives an ``nxrs.Trainer``, old pickles still load, the extension
imports nothing from the package, and the chunked loop's result has named fields."""

from __future__ import annotations

import ast
import copy
import pickle
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

import nxrs
from nxrs._runs.checkpoints import CheckpointManager
from nxrs.sklearn import ExactMLPClassifier

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "nxrs"
#: The package under test, where its compiled module is (the installed wheel in CI).
INSTALLED = Path(nxrs.__file__).resolve().parent
X, Y = nxrs.seed_dataset(samples=12)


def trained() -> nxrs.Trainer:
    t = nxrs.Trainer(layers=[6, 5, 4], batch_size=3, seed=2)
    t.train_steps(X, Y, 5)  # inside an epoch
    return t


# --- every trainer is an nxrs.Trainer --------------------------------------------------------


def _torch_round_trip(t: nxrs.Trainer) -> nxrs.Trainer:
    pytest.importorskip("torch")
    return nxrs.Trainer.from_torch(t.to_torch())


def _safetensors_round_trip(t: nxrs.Trainer, tmp: Path) -> nxrs.Trainer:
    pytest.importorskip("safetensors")
    t.save_safetensors(tmp / "w.safetensors")
    return nxrs.Trainer.from_safetensors(tmp / "w.safetensors")


def _manager(t: nxrs.Trainer, tmp: Path) -> nxrs.Trainer:
    manager = CheckpointManager(tmp / "run")
    manager.save(t, t.steps)
    loaded = manager.load_latest()
    assert loaded is not None
    return loaded


def _sklearn(_: nxrs.Trainer, __: Path) -> nxrs.Trainer:
    estimator = ExactMLPClassifier(hidden_layer_sizes=(5,), max_iter=2, batch_size=4)
    estimator.fit(X, Y)
    unpickled = pickle.loads(pickle.dumps(estimator))
    assert isinstance(estimator.trainer_, nxrs.Trainer)
    return unpickled.trainer_


def _checkpoint(t: nxrs.Trainer, tmp: Path) -> nxrs.Trainer:
    t.save(tmp / "t.nxck")
    with nxrs.open(tmp / "t.nxck", verify=False) as ck:
        return ck.to_trainer()


CONSTRUCTORS: dict[str, Callable[[nxrs.Trainer, Path], nxrs.Trainer]] = {
    "Trainer()": lambda t, _: nxrs.Trainer(layers=t.sizes),
    "seed_model": lambda _, __: nxrs.Trainer.seed_model(3),
    "load": lambda t, tmp: (t.save(tmp / "t.nxck"), nxrs.Trainer.load(tmp / "t.nxck"))[1],
    "from_bytes": lambda t, _: nxrs.Trainer.from_bytes(t.to_bytes()),
    "from_weights": lambda t, _: nxrs.Trainer.from_weights(nxrs.interop.weights(t)),
    "from_torch": lambda t, _: _torch_round_trip(t),
    "from_safetensors": _safetensors_round_trip,
    "Checkpoint.to_trainer": _checkpoint,
    "copy": lambda t, _: copy.copy(t),
    "deepcopy": lambda t, _: copy.deepcopy(t),
    "pickle": lambda t, _: pickle.loads(pickle.dumps(t)),
    "CheckpointManager.load_latest": _manager,
    "sklearn": _sklearn,
}


@pytest.mark.parametrize("make", CONSTRUCTORS.values(), ids=CONSTRUCTORS.keys())
def test_every_way_of_getting_a_trainer_gives_an_nxrs_trainer(
    make: Callable[[nxrs.Trainer, Path], nxrs.Trainer], tmp_path: Path
) -> None:
    made = make(trained(), tmp_path)
    assert type(made) is nxrs.Trainer
    assert isinstance(made, nxrs.Trainer)
    made.train_steps(X, Y, 1)  # a working trainer, not only a well-named object


def test_the_public_classes_keep_their_names() -> None:
    # Pickles name the class by these: those of the previous release too.
    for cls, name in ((nxrs.Trainer, "Trainer"), (nxrs.Checkpoint, "Checkpoint")):
        assert (cls.__module__, cls.__qualname__, cls.__name__) == ("nxrs", name, name)
        assert getattr(nxrs, name) is cls


def test_a_pickle_made_by_the_previous_release_loads_bit_for_bit() -> None:
    # Made by nxrs 0.1.0 (``nxrs.Trainer`` was the compiled class):
    # Trainer(layers=[6, 5, 4], batch_size=3, optimizer="adamw", seed=7), train_steps on
    # seed_dataset() for 5 steps, pickle protocol 4. Its hash and counters were printed by
    # that release; the file references ``nxrs.Trainer.from_bytes``.
    data = (ROOT / "tests" / "golden" / "trainer-v0.1.0-old-release.pickle").read_bytes()
    assert b"\x8c\x04nxrs\x94\x8c\x07Trainer\x94\x93\x94\x8c\nfrom_bytes" in data
    t = pickle.loads(data)
    assert type(t) is nxrs.Trainer
    assert t.state_hash() == 0xFBC636301F207421
    assert (t.steps, t.epoch, t.batch) == (5, 1, 2)
    assert t.config["optimizer"] == "adamw" and t.sizes == [6, 5, 4]


def test_checkpoints_from_nxrs_open_are_nxrs_checkpoints(tmp_path: Path) -> None:
    t = trained()
    t.save(tmp_path / "t.nxck")
    with nxrs.open(tmp_path / "t.nxck") as ck:
        assert type(ck) is nxrs.Checkpoint
        assert isinstance(ck, Mapping)
        assert ck.to_trainer().state_hash() == t.state_hash()


# --- the extension imports nothing from the package ------------------------------------------


def test_the_bindings_import_nothing_from_the_package() -> None:
    sources = (ROOT / "rust" / "nxrs-py" / "src").rglob("*.rs")
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in sources
        for line in path.read_text().splitlines()
        if re.search(r"""import\w*\(\s*(py\s*,\s*)?"nxrs""", line)
    ]
    assert found == []


def test_the_stub_of_the_extension_imports_nothing_from_the_package() -> None:
    tree = ast.parse((PACKAGE / "_nxrs.pyi").read_text())
    imported = [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nxrs"
    ]
    imported += [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] == "nxrs"
    ]
    assert imported == []


# The compiled module alone (the package's __init__ not run), each of its classes used: which
# nxrs modules got imported. Calls the methods the compiled class has, whatever they are.
ALONE = r"""
import os, sys, tempfile, types
package = types.ModuleType("nxrs")
package.__path__ = [sys.argv[1]]
sys.modules["nxrs"] = package
import nxrs._nxrs as ext
cls = getattr(ext, "_Trainer", None) or ext.Trainer
x, y = ext.seed_dataset()
t = cls(layers=[6, 5, 4], batch_size=4)
t.train_until(x, y, 1)
t.step(x[0], y[0])
t.predict(x)
t.evaluate(x, y)
chunk = t._run(t._dataset(x, y), 3)
path = os.path.join(tempfile.mkdtemp(), "t.nxck")
t.save(path)
cls.load(path)
ck = (getattr(ext, "_Checkpoint", None) or ext.open)(path)
getattr(ck, "to_trainer", lambda: cls._from_checkpoint(ck))()
for name in ("fit", "to_torch", "to_onnx", "save_safetensors", "__reduce__", "__copy__"):
    method = getattr(t, name, None)
    if method is not None:
        try:
            method(x, y, 2) if name == "fit" else method(os.path.join(os.path.dirname(path), "m"))
        except Exception:
            pass
print(" ".join(sorted(m for m in sys.modules if m == "nxrs" or m.startswith("nxrs."))))
"""


def test_the_compiled_module_alone_imports_nothing_from_the_package() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ALONE, str(INSTALLED)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["nxrs", "nxrs._nxrs"], done.stderr[-2000:]


# --- the chunked loop's result ---------------------------------------------------------------


def test_run_returns_a_run_chunk_with_named_fields() -> None:
    t = nxrs.Trainer(layers=[6, 5, 4], batch_size=4, seed=3)
    twin = copy.copy(t)
    chunk = t._run(t._dataset(X, Y), 2)
    # The same steps through another path: train_steps gives each step's loss.
    losses = twin.train_steps(X, Y, 6)
    assert chunk.steps == 6 and chunk.last_loss == losses[-1]
    assert [e.epoch for e in chunk.epochs] == [0, 1]
    assert [e.samples for e in chunk.epochs] == [12, 12]
    assert all(e.whole for e in chunk.epochs)
    for end, epoch_losses in zip(chunk.epochs, (losses[:3], losses[3:])):
        # TRAINING.md: the mean of the epoch's step losses, summed in order in binary32.
        total = np.float32(0)
        for loss in epoch_losses:
            total = np.float32(total + np.float32(loss))
        assert np.float32(end.loss) == np.float32(total / np.float32(3))
        assert end.accuracy is not None and 0 <= end.accuracy <= 1
    assert "RunChunk(epochs=[EpochEnd(epoch=0," in repr(chunk)


def test_a_run_chunk_is_built_by_its_field_names() -> None:
    from nxrs._nxrs import RunChunk

    t = nxrs.Trainer(layers=[6, 5, 4], batch_size=12)
    ended = t._run(t._dataset(X, Y), 1).epochs
    chunk = RunChunk(epochs=ended, steps=1, last_loss=None)
    assert (chunk.epochs, chunk.steps, chunk.last_loss) == (ended, 1, None)
    # Compared by value: a chunk computed one way equals one computed another.
    assert chunk == RunChunk(epochs=list(ended), steps=1, last_loss=None)
    assert chunk != RunChunk(epochs=ended, steps=2, last_loss=None)
    assert chunk != RunChunk(epochs=[], steps=1, last_loss=None)


# --- the Python class carries the documentation ----------------------------------------------


def test_the_public_class_documents_itself() -> None:
    assert "Two families of configurations" in (nxrs.Trainer.__doc__ or "")
    assert "final epoch count" in (nxrs.Trainer.fit.__doc__ or "")
    assert "torch.nn.Sequential" in (nxrs.Trainer.to_torch.__doc__ or "")
    assert "memory-mapped" in (nxrs.Checkpoint.__doc__ or "")


def test_fit_and_the_rust_loops_share_one_chunk_length() -> None:
    # One authority for how long the GIL stays released: the extension's; fit reads it.
    from nxrs import _fit, _nxrs

    assert _fit._CHUNK_SECONDS == _nxrs._CHUNK_SECONDS == 0.1
