"""Layer models in everything that runs them: run directories stopped by a signal
(``nxrs train --model`` and ``fit(checkpoint=...)``) and resumed end with the uninterrupted
run's bits; sweeps of layer objects (``nxrs.sweep``, ``nxrs sweep --model``) equal each
configuration trained alone; ``--model`` naming nothing is one line; the layer objects' keys in
their parameter order wherever a user reads a configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_layer_models import MODELS, SETTINGS, data

import nxrs
from nxrs._runs.errors import RunStopped
from nxrs.cli import main
from nxrs.data import load, train_test
from nxrs.layers import BatchNorm1d, Conv1d, Dense, Dropout, Flatten, Input, ReLU

# --- nxrs train --model digits-cnn, stopped by a signal and run again

#: 45 steps per epoch (1,437 training digits, batch 32); a checkpoint every 5 steps, so the
#: signal lands early in the 90 steps, whatever the machine's speed.
TRAIN = ["train", "--model", "digits-cnn", "--epochs", "2", "--threads", "1", "--json"]
STEPS = 90


def nxrs_cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "nxrs", *argv]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], bytes]:
    """The uninterrupted run's summary and its final state (``to_bytes`` of its checkpoint)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    run = subprocess.run(
        nxrs_cli([*TRAIN, "--ckpt-dir", str(directory)]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["steps"] == STEPS
    latest = nxrs.CheckpointManager(directory).latest()
    assert latest is not None and latest.step == STEPS
    return summary, nxrs.Trainer.load(latest.path).to_bytes()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_nxrs_train_with_a_layer_model_stopped_by_a_signal_resumes_to_the_same_bits(
    uninterrupted: tuple[dict[str, Any], bytes], tmp_path: Path, signum: int
) -> None:
    reference, final = uninterrupted
    argv = nxrs_cli([*TRAIN, "--ckpt-dir", str(tmp_path), "--every", "5"])
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not any(tmp_path.glob("step-*.nxck")):
            assert time.monotonic() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.005)
        first.send_signal(signum)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert f"stopped by {name} at step " in err
    stopped = int(err.split(f"stopped by {name} at step ")[1].split(";")[0])
    assert 0 < stopped < STEPS
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest is not None and latest.step == stopped
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"from step-{stopped:012d}.nxck: step {stopped}," in again.stderr
    summary = json.loads(again.stdout)
    assert summary["state_hash"] == reference["state_hash"]
    assert summary["test_accuracy"] == reference["test_accuracy"]
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest is not None and latest.step == STEPS
    assert nxrs.Trainer.load(latest.path).to_bytes() == final


# --- fit(checkpoint=...) with layer objects, stopped or failed part-way

#: Running statistics and dropout masks, both part of what a resume must restore.
FIT_MODEL = [
    Input(2, 11),
    Conv1d(3, 3, stride=2, padding=1),
    BatchNorm1d(),
    ReLU(),
    Flatten(),
    Dropout(0.25),
    Dense(4),
]
FIT_SETTINGS: dict[str, Any] = {"batch_size": 5, "lr": 0.01, "seed": 3}
FIT_EPOCHS = 4  # 3 steps per epoch of 13 samples: 12 steps


class FailingManager(nxrs.CheckpointManager):
    """At its ``nth`` save, after writing it, sends this process ``signum`` (a stop request)
    or, without one, raises: a run stopped, or one that fails, part-way."""

    def __init__(self, directory: Path, nth: int, signum: int | None) -> None:
        super().__init__(directory)
        self.nth, self.signum, self.saves = nth, signum, 0

    def save(self, trainer: nxrs.Trainer, step: int, metadata: Any = None) -> Path:
        path = super().save(trainer, step, metadata)
        self.saves += 1
        if self.saves == self.nth:
            if self.signum is None:
                raise RuntimeError("the machine went away")
            os.kill(os.getpid(), self.signum)
        return path


@pytest.mark.parametrize("signum", [signal.SIGTERM, None])
def test_fit_with_layer_objects_stopped_or_failed_resumes_to_the_same_bits(
    tmp_path: Path, signum: int | None
) -> None:
    x, y = data(FIT_MODEL)
    straight = nxrs.Trainer(layers=FIT_MODEL, **FIT_SETTINGS)
    straight.fit(x, y, epochs=FIT_EPOCHS)
    first = nxrs.Trainer(layers=FIT_MODEL, **FIT_SETTINGS)
    manager = FailingManager(tmp_path, nth=2, signum=signum)
    with pytest.raises(RunStopped if signum is not None else RuntimeError):
        first.fit(x, y, epochs=FIT_EPOCHS, checkpoint=manager, every=2)
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest is not None
    # The second save (step 4) is the newest: the stop came at the step boundary it was
    # written at; the failure ended the run there.
    assert latest.step == 4, latest
    resumed = nxrs.Trainer(layers=FIT_MODEL, **FIT_SETTINGS)
    resumed.fit(x, y, epochs=FIT_EPOCHS, checkpoint=tmp_path)
    assert resumed.steps == straight.steps == 12
    assert resumed.state_hash() == straight.state_hash()
    assert resumed.to_bytes() == straight.to_bytes()


# --- sweeps of layer models


SWEEP_MODEL = [Input(1, 12), Conv1d(4, 3, stride=2, padding=1), ReLU(), Flatten(), Dense(3)]
RNG = np.random.default_rng(5)
SX = RNG.standard_normal((60, 1, 12)).astype(np.float32)
SY = RNG.integers(0, 3, 60)


def solo_hash(config: dict[str, Any], x: Any, y: Any, epochs: int) -> int:
    trainer = nxrs.Trainer(**config)
    trainer.fit(x, y, epochs=epochs)
    return trainer.state_hash()


def test_a_sweep_of_layer_objects_equals_each_configuration_trained_alone(
    ray_cluster: Any, tmp_path: Path
) -> None:
    configs: list[dict[str, Any]] = [
        {"layers": SWEEP_MODEL, "lr": 0.01},
        {"layers": SWEEP_MODEL, "lr": 0.02, "seed": 1, "batch_size": 8},
        # The JSON form (a model file's, a checkpoint's) is the same model.
        {"layers": nxrs.layers.to_dicts(SWEEP_MODEL), "lr": 0.01, "seed": 2},
    ]
    results = nxrs.sweep(configs, SX, SY, epochs=2, directory=tmp_path / "sweep")
    assert [r["config"] for r in results] == configs
    for record in results:
        assert record["error"] is None, record["error"]
        assert int(record["state_hash"], 16) == solo_hash(record["config"], SX, SY, 2)
    # The files hold the layer objects as their JSON objects, keys in parameter order.
    written = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    expected = nxrs.layers.to_dicts(SWEEP_MODEL)
    assert all(w["config"]["layers"] == expected for w in written)
    assert list(written[0]["config"]["layers"][1]) == list(expected[1])
    csv_lines = (tmp_path / "sweep" / "sweep.csv").read_text().splitlines()
    assert len(csv_lines) == 4 and '""type"": ""Conv1d""' in csv_lines[1]


def test_nxrs_sweep_model_trains_a_preset_per_grid_point(
    ray_cluster: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["sweep", "--model", "digits-cnn", "--dir", str(tmp_path / "s"), "--epochs", "1",
            "--grid", "lr=0.01,0.003", "--json"]  # fmt: skip
    assert main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    x, y = load("digits")
    train_idx, _ = train_test("digits", len(x), None, 0)
    preset = nxrs.layers.preset("digits-cnn")
    for record, lr in zip(records, [0.01, 0.003]):
        # The preset's batch size (32) where the grid says nothing; its layers as JSON.
        assert record["config"] == {
            "batch_size": 32,
            "lr": lr,
            "layers": nxrs.layers.to_dicts(preset),
        }
        alone = {"layers": preset, "batch_size": 32, "lr": lr}
        assert int(record["state_hash"], 16) == solo_hash(alone, x[train_idx], y[train_idx], 1)
        assert record["steps"] == 45


def test_nxrs_sweep_model_and_a_hidden_axis_are_exclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sweep", "--model", "digits-cnn", "--dir", str(tmp_path), "--grid", "hidden=8,16"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == "nxrs sweep: --model and a hidden grid axis are exclusive\n"


# --- --model naming nothing


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_model_naming_neither_a_preset_nor_a_file_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [command, "--model", "nosuch"] + (["--dir", "s"] if command == "sweep" else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"nxrs {command}: --model 'nosuch' is neither a preset (mnist1d-cnn, digits-cnn, "
        "gpt-char) nor a file: no such file\n"
    )
    assert not (tmp_path / "s").exists()


# --- the layer objects' keys as a user reads them


def key_orders(layers: list[dict[str, Any]]) -> list[list[str]]:
    """Each layer's keys in order, a Residual's nested layers' after its own."""
    return [
        keys for layer in layers for keys in [list(layer), *key_orders(layer.get("layers", []))]
    ]


def test_configurations_show_each_layers_keys_in_parameter_order(tmp_path: Path) -> None:
    every = [layer for model in MODELS.values() for layer in model]
    assert {type(layer).__name__ for layer in every} >= {"Conv1d", "Conv2d", "BatchNorm1d",
            "MaxPool1d", "AvgPool2d", "Dropout", "LayerNorm", "Dense", "Input"}  # fmt: skip
    for name, model in MODELS.items():
        expected = key_orders(nxrs.layers.to_dicts(model))
        t = nxrs.Trainer(layers=model, **SETTINGS)
        assert key_orders(t.config["layers"]) == expected, name
        path = tmp_path / f"{name}.nxck"
        t.save(path)
        with nxrs.open(path) as ck:
            assert key_orders(ck.config["layers"]) == expected, name
        shown = subprocess.run(
            nxrs_cli(["inspect", "--json", str(path)]), capture_output=True, text=True, timeout=300
        )
        assert shown.returncode == 0, shown.stderr
        assert key_orders(json.loads(shown.stdout)["config"]["layers"]) == expected, name
        # Only what is shown: the checkpoint's configuration record keeps the core's bytes (a
        # layer's keys sorted, as the golden checkpoints hold them; layers with floats left
        # out, which serde_json and Python write differently).
        state = t.to_bytes()
        for layer in t.config["layers"]:
            if not has_float(layer):
                record = json.dumps(layer, sort_keys=True, separators=(",", ":"))
                assert record.encode() in state, (name, record)


def has_float(value: Any) -> bool:
    """Whether a JSON value holds a float anywhere (a Residual's nested layers too)."""
    if isinstance(value, dict):
        return any(has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(has_float(v) for v in value)
    return isinstance(value, float)


def test_nxrs_train_json_shows_the_layers_in_parameter_order(
    uninterrupted: tuple[dict[str, Any], bytes],
) -> None:
    summary, _ = uninterrupted
    expected = key_orders(nxrs.layers.to_dicts(nxrs.layers.preset("digits-cnn")))
    assert key_orders(summary["layers"]) == expected
