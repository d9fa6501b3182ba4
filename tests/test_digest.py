"""SHA-256 digests (docs/TRAINING.md section 16) against the independent numpy reference.

The reference (``tests/reference/general_ref.py``, ``layers_ref.py``) trains the same runs
itself and digests its own state by the text's encoding; only the configuration record, the
checkpoint's one-line JSON (docs/FORMAT.md), is read from the file nxrs wrote, parsed here from
its bytes. Then the properties the text promises: the digest sees every bit, name, shape and
setting, and nothing else (backend, threads, the file a state was read from).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
gr = importlib.import_module("reference.general_ref")
lr = importlib.import_module("reference.layers_ref")
nxck_edit = importlib.import_module("nxck_edit")

SETTINGS: dict[str, dict[str, Any]] = {
    "adam": dict(layers=[5, 7, 3], lr=0.01, batch_size=4, seed=3),
    "sgd-momentum": dict(layers=[5, 4, 3], optimizer="sgd", momentum=0.9, lr=0.05, batch_size=3),
    "mse-seedmath": dict(layers=[5, 6, 2], loss="mse", math="seed", batch_size=2, seed=-7),
}


def record_of(trainer: nxrs.Trainer) -> str:
    """The configuration record of ``trainer``'s checkpoint bytes, parsed from them."""
    return str(nxck_edit.config_record(trainer.to_bytes()))


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_mlp_state_and_config_digests_equal_the_reference(name: str) -> None:
    keys = SETTINGS[name]
    loss = keys.get("loss", "cross_entropy")
    x, y = gr.case_data(11, keys["layers"][0], keys["layers"][-1], loss)
    trainer = nxrs.Trainer(**keys)
    ref = gr.Trainer(gr.Config.make(**keys))
    for steps in (0, 1, 6):  # the fresh state, one step, past an epoch's end
        trainer.train_steps(x, y, steps)
        ref.train_steps(x, y, steps)
        record = record_of(trainer)
        assert trainer.state_digest() == gr.state_digest(ref, record)
        assert trainer.config_digest() == gr.config_digest(record)


def test_a_layer_model_digest_equals_the_reference_with_running_statistics() -> None:
    layers = [
        nxrs.layers.Input(2, 5),
        nxrs.layers.Conv1d(3, 3, padding=1),
        nxrs.layers.BatchNorm1d(),
        nxrs.layers.ReLU(),
        nxrs.layers.Flatten(),
        nxrs.layers.Dense(3),
    ]
    settings = dict(lr=0.01, batch_size=4, seed=5)
    trainer = nxrs.Trainer(layers=layers, **settings)
    ref = lr.LayerTrainer(layers=nxrs.layers.to_dicts(layers), **settings)
    x, y = gr.case_data(9, 10, 3, "cross_entropy")
    trainer.train_steps(x, y, 4)
    ref.train_steps(x, y, 4)
    assert any(name.startswith("mean") for name in trainer.state_dict())
    assert trainer.state_digest() == gr.state_digest(ref, record_of(trainer))


@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_data_digests_equal_the_reference(loss: str) -> None:
    trainer = nxrs.Trainer(layers=[4, 5, 3], loss=loss)
    x, y = gr.case_data(9, 4, 3, loss)
    xv, yv = gr.case_data(4, 4, 3, loss)
    classes = 3 if loss == "cross_entropy" else None
    train, val = gr.data_part_digest(x, y, classes), gr.data_part_digest(xv, yv, classes)
    assert trainer._dataset(x, y).digest == train
    assert trainer.data_digest(x, y) == gr.data_digest(train)
    assert trainer.data_digest(x, y, validation_data=(xv, yv)) == gr.data_digest(train, val)
    assert trainer.data_digest(x, y, test_data=(xv, yv)) == gr.data_digest(train, None, val)


def test_the_state_digest_sees_every_bit_and_the_configuration() -> None:
    x, y = gr.case_data(8, 5, 3, "cross_entropy")
    trainer = nxrs.Trainer(layers=[5, 4, 3], batch_size=4)
    trainer.train_steps(x, y, 3)
    base = trainer.state_digest()
    for name, cell in (("W1", 19), ("vb2", 2)):  # the last cell of each
        flipped = nxck_edit.flip_tensor_bit(trainer.to_bytes(), name, cell)
        assert nxrs.Trainer.from_bytes(flipped).state_digest() != base, name
    edited = nxck_edit.edit_config(trainer.to_bytes(), lambda c: c["general"].update(seed=1))
    assert nxrs.Trainer.from_bytes(edited).state_digest() != base
    # The same tensors under another learning rate: the 64-bit state hash cannot tell them
    # apart (it covers the state alone); the digests can.
    a, b = nxrs.Trainer(layers=[5, 4, 3], lr=0.01), nxrs.Trainer(layers=[5, 4, 3], lr=0.02)
    assert a.state_hash() == b.state_hash()
    assert a.state_digest() != b.state_digest()
    assert a.config_digest() != b.config_digest()


def test_the_digest_is_the_same_on_every_backend_thread_count_and_file(tmp_path: Path) -> None:
    x, y = gr.case_data(40, 5, 3, "cross_entropy")
    digests = set()
    for backend in ("soft", "hw"):
        for threads in (1, 2):
            t = nxrs.Trainer(layers=[5, 8, 3], batch_size=8, backend=backend, threads=threads)
            t.train_steps(x, y, 7)
            digests.add(t.state_digest())
    t.save(tmp_path / "a.nxck")
    digests.add(nxrs.Trainer.load(tmp_path / "a.nxck").state_digest())
    digests.add(nxrs.Trainer.from_bytes(t.to_bytes()).state_digest())
    assert len(digests) == 1


def test_data_that_converts_alike_digests_alike_and_a_split_is_part_of_it() -> None:
    trainer = nxrs.Trainer(layers=[4, 3, 2])
    x, y = gr.case_data(6, 4, 2, "cross_entropy")
    assert trainer.data_digest(x, y) == trainer.data_digest(x.astype(np.float64), list(y))
    moved = trainer.data_digest(x[:4], y[:4], test_data=(x[4:], y[4:]))
    assert moved != trainer.data_digest(x[:5], y[:5], test_data=(x[5:], y[5:]))
    assert moved != trainer.data_digest(x[:4], y[:4], validation_data=(x[4:], y[4:]))
    changed = x.copy()
    changed[2, 1] = np.nextafter(changed[2, 1], np.float32(np.inf))
    assert trainer.data_digest(changed, y) != trainer.data_digest(x, y)
