"""Trainer.fit, predict, evaluate: history, validation, checkpoints and resume (in a fresh
process), Ctrl-C, MismatchError on other data or configuration, and the input rules."""

from __future__ import annotations

import _thread
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nxrs


def blobs(n: int = 60, features: int = 4, classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic, learnable classification data."""
    y = np.arange(n, dtype=np.int64) % classes
    x = ((np.arange(n * features).reshape(n, features) * 7) % 11 - 5).astype(np.float32) / 8
    x[:, 0] += y.astype(np.float32)
    return x, y


X, Y = blobs()


def small(**kw: Any) -> nxrs.Trainer:
    return nxrs.Trainer(layers=[4, 8, 3], batch_size=8, lr=0.01, **kw)


def run_child(code: str) -> Any:
    """Runs ``code`` in a fresh interpreter; returns the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fit_history_predict_evaluate() -> None:
    t = small()
    history = t.fit(X, Y, epochs=5, validation_data=(X[:20], Y[:20]))
    assert history.epoch == [1, 2, 3, 4, 5] and history.steps == 5 * 8 == t.steps
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert (t.epoch, t.batch) == (5, 0)
    loss, accuracy = t.evaluate(X[:20], Y[:20])
    assert (loss, accuracy) == (
        history.history["val_loss"][-1],
        history.history["val_accuracy"][-1],
    )
    proba = t.predict_proba(X)
    assert proba.dtype == np.float32 and proba.shape == (60, 3)
    predicted = t.predict(X)
    assert predicted.dtype == np.int64 and predicted.tolist() == proba.argmax(axis=1).tolist()
    assert t.evaluate(X, Y)[1] == float(np.mean(predicted == Y))
    with pytest.warns(nxrs.NothingToTrainWarning):  # already complete: nothing happens
        assert t.fit(X, Y, epochs=3).epoch == []


def test_fit_epochs_is_the_final_count_after_a_mid_epoch_stop() -> None:
    straight = small()
    straight.fit(X, Y, epochs=4)
    t = small()
    t.train_steps(X, Y, 13)  # epoch 1, batch 5
    history = t.fit(X, Y, epochs=4)
    assert history.epoch == [2, 3, 4] and t.state_hash() == straight.state_hash()


def test_regression_fit() -> None:
    x = X
    target = (x[:, :2] * np.float32(0.5)).astype(np.float32)
    t = nxrs.Trainer(layers=[4, 8, 2], loss="mse", lr=0.01, batch_size=8)
    history = t.fit(x, target, epochs=10)
    assert (
        "accuracy" not in history.history
        and history.history["loss"][-1] < history.history["loss"][0]
    )
    loss, accuracy = t.evaluate(x, target)
    assert accuracy is None and loss > 0
    assert t.predict(x).shape == (60, 2)
    one = nxrs.Trainer(layers=[4, 3, 1], loss="mse", batch_size=8)
    one.fit(x, x[:, 0].astype(np.float64), epochs=1)  # (N,) float64 targets when n_out is 1


def test_checkpoints_and_resume_in_a_fresh_process(tmp_path: Path) -> None:
    straight = small()
    straight.fit(X, Y, epochs=6)
    first = small()
    history = first.fit(X, Y, epochs=2, checkpoint=tmp_path, every=5)
    assert history.checkpoint == nxrs.CheckpointManager(tmp_path).path_for(16)
    steps = sorted(e.step for e in nxrs.CheckpointManager(tmp_path).list())
    assert steps == [10, 15, 16]  # every 5 steps and at the end; the manager keeps 3
    with nxrs.open(history.checkpoint) as ck:
        assert ck.metadata["nxrs_version"] == nxrs.__version__
        assert ck.metadata["data_fingerprint"] == first._dataset(X, Y).fingerprint
        assert ck.scalars["step"] == 16
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import nxrs
from test_fit import X, Y, small
t = small()
t.fit(X, Y, epochs=6, checkpoint={str(tmp_path)!r})
print(json.dumps([t.state_hash(), t.steps]))
"""
    assert run_child(code) == [straight.state_hash(), straight.steps]


def test_resume_on_other_data_or_configuration_is_a_mismatch(tmp_path: Path) -> None:
    small().fit(X, Y, epochs=1, checkpoint=tmp_path)
    other_data = X.copy()
    other_data[0, 0] += 1
    for trainer, x in [(small(), other_data), (small(seed=3), X)]:
        before = trainer.state_hash()
        with pytest.raises(nxrs.MismatchError, match="resume=False"):
            trainer.fit(x, Y, epochs=2, checkpoint=tmp_path)
        assert trainer.state_hash() == before and trainer.steps == 0
    fresh = small(seed=3)
    fresh.fit(X, Y, epochs=1, checkpoint=tmp_path / "other", resume=False)
    t = small(seed=3)
    t.fit(X, Y, epochs=2, checkpoint=tmp_path, resume=False)  # trains from its own state
    assert t.epoch == 2


def test_checkpoint_without_fingerprint_is_not_resumed(tmp_path: Path) -> None:
    manager = nxrs.CheckpointManager(tmp_path)
    manager.save(small(), step=1)
    with pytest.raises(nxrs.MismatchError, match="no data fingerprint"):
        small().fit(X, Y, epochs=1, checkpoint=manager)


def test_ctrl_c_saves_at_a_step_boundary_and_reraises(tmp_path: Path) -> None:
    from nxrs.data import load_digits

    x, y = load_digits()
    t = nxrs.Trainer(layers=[64, 32, 10])
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            t.fit(x, y, epochs=1000, checkpoint=tmp_path)
    finally:
        timer.cancel()
    assert 0 < t.steps < 1000 * 57
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest is not None and latest.step == t.steps
    resumed = nxrs.Trainer.load(latest.path)
    assert resumed.state_hash() == t.state_hash()
    straight = nxrs.Trainer(layers=[64, 32, 10])
    straight.train_steps(x, y, t.steps + 3)
    resumed.train_steps(x, y, 3)
    assert resumed.state_hash() == straight.state_hash()


def test_progress_bar_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    small().fit(X, Y, epochs=2, progress=True)
    err = capsys.readouterr().err
    assert "16/16" in err and "epoch=2/2" in err and "samples/s" in err
    small().fit(X, Y, epochs=2)  # stderr is not a terminal here: no bar
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- input rules

BAD_INPUTS: list[tuple[str, Any, Any, str]] = [
    ("wrong number of features", X[:, :3], Y, "samples have 3 features, the model takes 4"),
    ("NaN feature", np.where(np.arange(240).reshape(60, 4) == 9, np.nan, X), Y, "is NaN"),
    ("infinite feature", np.where(np.arange(240).reshape(60, 4) == 9, np.inf, X), Y, "is inf"),
    ("float labels", X, Y.astype(np.float32), "labels must have an integer dtype"),
    ("label = n_out", X, np.where(Y == 2, 3, Y), "label 3 of sample 2 is outside 0..3"),
    ("negative label", X, Y - 1, "label -1 of sample 0"),
    ("2-D labels", X, Y[:, None], r"y must have 1 dimension\(s\)"),
    ("different lengths", X, Y[:-1], "240 feature values are not 59 samples"),
    ("empty data", X[:0], Y[:0], "0 samples of 4 features"),
    ("int features", X.astype(np.int32), Y, "x must be float32"),
    ("float16 features", X.astype(np.float16), Y, "got dtype float16"),
]


@pytest.mark.parametrize(
    ("x", "y", "match"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_input_rules_change_nothing(x: Any, y: Any, match: str, tmp_path: Path) -> None:
    t = small()
    t.fit(X, Y, epochs=1)
    before = (t.state_hash(), t.steps)
    with pytest.raises(nxrs.InputError, match=match):
        t.fit(x, y, epochs=3, checkpoint=tmp_path)
    with pytest.raises(nxrs.InputError, match=match):
        t.evaluate(x, y)
    with pytest.raises(nxrs.InputError, match=match):
        t.fit(X, Y, epochs=3, validation_data=(x, y))
    assert (t.state_hash(), t.steps) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.zeros((2, 5), np.float32), "the model takes 4"),
        (np.full((2, 4), np.nan, np.float32), "is NaN"),
        (X[:0], "0 samples"),
        (X.astype(np.int64), "x must be float32"),
    ],
)
def test_predict_input_rules(x: Any, match: str) -> None:
    t = small()
    before = t.state_hash()
    for predict in (t.predict, t.predict_proba):
        with pytest.raises(nxrs.InputError, match=match):
            predict(x)
    assert t.state_hash() == before


@pytest.mark.parametrize(
    ("y", "match"),
    [
        (np.zeros((60, 3), np.float32), r"targets have 3 values per sample, the model has 2"),
        (np.zeros(60, np.float32), r"y must have 2 dimension\(s\)"),
        (np.zeros((59, 2), np.float32), "not 59 samples"),
        (np.zeros((60, 2), np.int64), "y must be float32"),
        (np.full((60, 2), np.inf, np.float32), "targets must be finite"),
    ],
)
def test_regression_target_rules(y: Any, match: str) -> None:
    t = nxrs.Trainer(layers=[4, 3, 2], loss="mse")
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match=match):
        t.fit(X, y, epochs=1)
    assert t.state_hash() == before


def test_float64_features_are_rounded_by_numpy() -> None:
    a, b = small(), small()
    x64 = X.astype(np.float64) + 1 / 3
    a.fit(x64, Y, epochs=1)
    b.fit(x64.astype(np.float32), Y, epochs=1)
    assert a.state_hash() == b.state_hash()


# ---------------------------------------------------------------- the constructor


def test_constructor_families() -> None:
    general = nxrs.Trainer(layers=[3, 2])
    c = general.config
    assert (c["math"], c["init"], c["seed"], c["optimizer"], c["batch_size"], c["shuffle"]) == (
        "ieee", "he", 0, "adam", 32, True,
    )  # fmt: skip
    assert c["lr"] == float(np.float32(0.001)) and c["weight_decay"] == 0.0
    assert nxrs.Trainer(layers=[3, 2], optimizer="adamw").config["weight_decay"] == float(
        np.float32(0.01)
    )
    seed = nxrs.Trainer(seed=2, sizes=[2, 3, 2], lr=0.05)
    assert seed.config["math"] == "seed" and seed.config["layers"] == [2, 3, 2]
    assert seed.config["seed"] == 2 and seed.config["batch_size"] == 1
    assert nxrs.Trainer.seed_model().config == nxrs.Trainer().config
    with pytest.raises(nxrs.ConfigError, match="not both"):
        nxrs.Trainer(layers=[3, 2], sizes=[3, 2])
    for kwargs, match in [
        ({"loss": "hinge"}, "loss"),
        ({"schedule": "linear"}, "total_steps"),
        ({"schedule": "cosine"}, "takes total_steps"),
        ({"schedule": "exponential"}, "not known"),
        ({"batch_size": 0}, "batch_size = 0"),
        ({"momentum": 0.5}, "momentum"),
        ({"optimizer": "sgd", "momentum": 1.0}, "momentum"),
        ({"clip_norm": -1.0}, "clip_norm"),
    ]:
        with pytest.raises(nxrs.ConfigError, match=match):
            nxrs.Trainer(layers=[3, 2], **kwargs)


# ---------------------------------------------------------------- resume as a property

CONFIGS = st.fixed_dictionaries(
    {
        "layers": st.sampled_from([[4, 3], [4, 5, 3], [4, 3, 4, 3]]),
        "loss": st.sampled_from(["cross_entropy", "mse"]),
        "math": st.sampled_from(["seed", "ieee"]),
        "batch_size": st.integers(1, 7),
        "shuffle": st.booleans(),
        "optimizer": st.sampled_from(["adam", "adamw", "sgd"]),
        "schedule": st.sampled_from(["constant", "linear", "step"]),
        "seed": st.integers(-(2**63), 2**63 - 1),
    }
)


def config_kwargs(c: dict[str, Any]) -> dict[str, Any]:
    kw = dict(c, lr=0.01)
    if c["schedule"] == "linear":
        kw["total_steps"] = 20
    if c["schedule"] == "step":
        kw.update(step_size=3, gamma=0.5)
    if c["optimizer"] == "sgd":
        kw["momentum"] = 0.5
    return kw


def property_data(loss: str, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = blobs(n=13, features=4, classes=n_out)
    if loss == "mse":
        return x, np.tile(x[:, :1], (1, n_out))
    return x, y


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=CONFIGS, total=st.integers(1, 30), data=st.data())
def test_resume_in_a_fresh_process_is_exact(
    config: dict[str, Any], total: int, data: st.DataObject, tmp_path: Path
) -> None:
    kw = config_kwargs(config)
    x, y = property_data(config["loss"], config["layers"][-1])
    straight = nxrs.Trainer(**kw)
    straight.train_steps(x, y, total)
    stop = data.draw(st.integers(0, total))
    first = nxrs.Trainer(**kw)
    first.train_steps(x, y, stop)
    path = tmp_path / f"stop-{stop}.nxck"
    first.save(path)
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import nxrs
from test_fit import property_data
t = nxrs.Trainer.load({str(path)!r})
x, y = property_data({config["loss"]!r}, {config["layers"][-1]})
t.train_steps(x, y, {total - stop})
print(json.dumps(t.state_hash()))
"""
    assert run_child(code) == straight.state_hash()
