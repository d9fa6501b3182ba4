"""nxrs's general trainer against tests/golden/general.json, which the independent numpy
reference (tests/reference/general_ref.py) wrote: step by step, bit for bit, through the Python
API; the digits run's golden hash and accuracy; the seed configuration through the general path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.data import load_digits, split

GOLDEN: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parent / "golden" / "general.json").read_text()
)
CASES = {case["name"]: case for case in GOLDEN["cases"]}
CONFIG_KEYS = [k for k in GOLDEN["cases"][0]["config"] if k != "layers"]


def hw_unavailable() -> str | None:
    """Why the hardware backend is not available in this process (None when it is)."""
    try:
        nxrs.Trainer(backend="hw")
    except nxrs.ConfigError as e:
        return str(e)
    return None


@pytest.fixture(params=["soft", "hw"])
def backend(request: pytest.FixtureRequest) -> str:
    """Every golden test runs under both backends; "hw" is skipped (saying why) where the
    hardware path is unavailable, which on x86_64 and aarch64 it must not be."""
    name: str = request.param
    if name == "hw" and (why := hw_unavailable()) is not None:
        pytest.skip(why)
    return name


def f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def bits(a: Any) -> list[int]:
    return [int(v) for v in np.asarray(a, dtype=np.float32).reshape(-1).view(np.uint32)]


def trainer_for(config: dict[str, Any], backend: str = "soft") -> nxrs.Trainer:
    """The case's configuration as keywords (None for what it leaves to the family default)."""
    kwargs = {k: config[k] for k in CONFIG_KEYS if config[k] is not None}
    t = nxrs.Trainer(layers=config["layers"], backend=backend, **kwargs)
    assert t.backend == backend
    return t


def case_data(n: int, n_in: int, k: int, loss: str) -> tuple[np.ndarray, np.ndarray]:
    """The fixture's data formulas (GOLDEN["data"]), in integers and binary32 divisions."""
    f = np.float32
    x = np.array(
        [[f(((s * 7 + i * 3) % 11) - 5) / f(4) for i in range(n_in)] for s in range(n)],
        dtype=np.float32,
    )
    if loss == "cross_entropy":
        return x, np.array([(s * 5) % k for s in range(n)], dtype=np.int64)
    t = np.array(
        [[f(((s * 3 + o * 5) % 7) - 3) / f(8) for o in range(k)] for s in range(n)],
        dtype=np.float32,
    )
    return x, t


def test_data_formulas_are_documented() -> None:
    assert GOLDEN["data"]["x"] == "x[s][i] = f32(((s*7 + i*3) % 11) - 5) / f32(4)"
    assert GOLDEN["data"]["labels"] == "y[s] = (s*5) % K"
    assert GOLDEN["data"]["targets"] == "t[s][o] = f32(((s*3 + o*5) % 7) - 3) / f32(8)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_step_by_step(name: str, backend: str) -> None:
    case = CASES[name]
    config = case["config"]
    t = trainer_for(config, backend)
    for key, want in case["hyper_bits"].items():
        got = t.config[key]
        assert (None if got is None else f32_bits(got)) == want, key
    assert f"{t.state_hash():016x}" == case["init_hash"]
    x, y = case_data(case["n"], config["layers"][0], config["layers"][-1], config["loss"])
    for want in case["steps"]:
        (loss,) = t.train_steps(x, y, 1)
        assert (t.steps, t.epoch, t.batch) == (want["step"], want["epoch"], want["batch"])
        assert f32_bits(loss) == want["loss_bits"], want["step"]
        assert f"{t.state_hash():016x}" == want["state_hash"], want["step"]
    final = case["final"]
    history = t.fit(x, y, epochs=t.epoch + GOLDEN["fixture_epochs"])
    assert history.epoch[-1] == final["epoch"] == t.epoch
    assert t.steps == final["step"]
    assert f"{t.state_hash():016x}" == final["state_hash"]
    state = t.state_dict()
    assert list(state) == list(final["tensors"])
    for tensor, want_bits in final["tensors"].items():
        assert bits(state[tensor]) == want_bits, tensor
    loss, accuracy = t.evaluate(x, y)
    assert f32_bits(loss) == final["eval_loss_bits"]
    assert accuracy == final["eval_accuracy"]


def test_seed_configuration_is_the_seed_model() -> None:
    """The seed model's keys through the general constructor equal Trainer.seed_model()."""
    seed = nxrs.Trainer.seed_model()
    general = nxrs.Trainer(
        layers=[6, 10, 4], math="seed", init="seed", seed=1, lr=0.01, batch_size=1, shuffle=False
    )
    assert general.config == seed.config == nxrs.Trainer().config
    x, y = nxrs.seed_dataset()
    general.fit(x, y, epochs=3)
    seed.train_until(x, y, 3)
    assert general.state_hash() == seed.state_hash()


def test_seed_goldens_through_fit(golden: dict[str, Any], backend: str) -> None:
    x, y = nxrs.seed_dataset()
    t = nxrs.Trainer.seed_model(backend=backend)
    t.fit(x, y, epochs=400)
    want = golden["epochs"]["400"]
    assert t.hash() == want["seed_hash"] and t.state_hash() == want["state_hash"]


@pytest.fixture(scope="module")
def digits_split() -> tuple[np.ndarray, ...]:
    x, y = load_digits()
    train, test = split(len(x), 0.2, 0)
    return x[train], y[train], x[test], y[test]


def test_digits_split_is_the_references(digits_split: tuple[np.ndarray, ...]) -> None:
    d = GOLDEN["digits"]
    x, _ = load_digits()
    train, test = split(len(x), d["test_size"], d["split_seed"])
    assert (len(train), len(test)) == (d["n_train"], d["n_test"])
    assert test[:10] == d["test_indices_first_10"]


def test_digits_golden(digits_split: tuple[np.ndarray, ...], backend: str) -> None:
    """64-128-10, batch 32, ieee, Adam, 20 epochs: every epoch's hash, mean step loss and test
    metrics as the reference computed them, and at least 95% test accuracy."""
    d = GOLDEN["digits"]
    x_train, y_train, x_test, y_test = digits_split
    config = d["config"]
    t = trainer_for(config, backend)
    history = t.fit(x_train, y_train, epochs=d["epochs"], validation_data=(x_test, y_test))
    assert history.epoch == [e["epoch"] for e in d["per_epoch"]]
    assert [f32_bits(v) for v in history.history["loss"]] == [
        e["mean_step_loss_bits"] for e in d["per_epoch"]
    ]
    assert [f32_bits(v) for v in history.history["val_loss"]] == [
        e["test_loss_bits"] for e in d["per_epoch"]
    ]
    assert history.history["val_accuracy"] == [e["test_accuracy"] for e in d["per_epoch"]]
    assert f"{t.state_hash():016x}" == d["final_state_hash"]
    train_loss, train_accuracy = t.evaluate(x_train, y_train)
    assert f32_bits(train_loss) == d["train_loss_bits"]
    assert train_accuracy == d["train_accuracy"]
    test_loss, test_accuracy = t.evaluate(x_test, y_test)
    assert test_accuracy == d["test_accuracy"] >= 0.95
    assert f32_bits(test_loss) == d["test_loss_bits"]
    predicted = t.predict(x_test)
    assert predicted.dtype == np.int64 and float(np.mean(predicted == y_test)) == test_accuracy
