"""Layer models through the Python API (docs/TRAINING.md section 15): ``Trainer``
built from ``nxrs.layers`` objects trains to exactly the independent numpy reference's bits
(``tests/reference/layers_ref.py``, written from the text alone) on both backends and any
thread count; shaped or flat inputs; checkpoints that resume mid-epoch to the uninterrupted
run's bits; the configuration's JSON form; refusals with clear errors."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.layers import (
    GELU,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    LayerNorm,
    MaxPool1d,
    MaxPool2d,
    ReLU,
    Residual,
    Sigmoid,
    Tanh,
)

layers_ref = importlib.import_module("reference.layers_ref")

#: Small models of every layer type (few cells, so softf32 and the reference stay quick).
MODELS: dict[str, list[nxrs.layers.Layer]] = {
    "conv1d": [
        Input(2, 11),
        Conv1d(3, 3, stride=2, padding=1),
        ReLU(),
        MaxPool1d(2, stride=1),
        Flatten(),
        Dropout(0.25),
        Dense(4),
    ],
    # A convolution's pass takes over the ReLU and the max pooling above it, Dense's the ReLU
    # above it, max pooling's the ReLU's derivative below it (docs/TRAINING.md section 15.3).
    "conv2d_pool": [
        Input(2, 5, 6),
        Conv2d(3, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Conv2d(2, 2),
        ReLU(),
        Flatten(),
        Dense(5),
        ReLU(),
        Dense(4),
    ],
    "conv2d_bn": [
        Input(1, 6, 5),
        Conv2d(3, (3, 2), padding=1),
        BatchNorm2d(),
        Tanh(),
        AvgPool2d(2),
        Flatten(),
        Dense(4),
    ],
    "dense_norms": [
        Input(7),
        Dense(6),
        BatchNorm1d(momentum=0.3),
        Sigmoid(),
        Dense(5),
        LayerNorm(),
        ReLU(),
        Dense(4),
    ],
    # Pre-norm blocks as a transformer's (section 15.7): nested residuals, GELU, layers without
    # biases, dropout inside a branch (masks at its depth-first position).
    "residual_blocks": [
        Input(6),
        Dense(8),
        Residual([LayerNorm(bias=False), Dense(16, bias=False), GELU(), Dense(8, bias=False)]),
        Residual(
            [
                LayerNorm(),
                Dense(8),
                GELU(),
                Dropout(0.25),
                Residual([LayerNorm(eps=1e-3, bias=False), Dense(8, bias=False), Tanh()]),
            ]
        ),
        LayerNorm(bias=False),
        Dense(4, bias=False),
    ],
    "residual_conv": [
        Input(2, 7),
        Residual([Conv1d(2, 3, padding=1), GELU()]),
        Flatten(),
        Dense(4),
    ],
}

SETTINGS: dict[str, Any] = {"batch_size": 5, "lr": 0.01, "seed": 3, "grad_block": 3}
N = 13
STEPS = 7


def data(model: list[nxrs.layers.Layer], n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic samples (exact binary32 values) of the model's input shape, labels 0..3."""
    shape = model[0].shape  # type: ignore[attr-defined]
    cells = int(np.prod(shape))
    i = np.arange(n * cells)
    x = ((((i * 7) % 11) - 5) / 4).astype(np.float32).reshape(n, *shape)
    return x, np.arange(n) * 5 % 4


def reference_hashes(model: list[nxrs.layers.Layer], steps: int, **settings: Any) -> list[str]:
    ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(model), **settings)
    x, y = data(model)
    hashes = []
    for _ in range(steps):
        ref.train_steps(x.reshape(len(x), -1), y, 1)
        hashes.append(ref.state_hash_hex())
    return hashes


def hashes(trainer: nxrs.Trainer, x: np.ndarray, y: np.ndarray, steps: int) -> list[str]:
    out = []
    for _ in range(steps):
        trainer.train_steps(x, y, 1)
        out.append(f"{trainer.state_hash():016x}")
    return out


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    name = request.param
    return name, reference_hashes(MODELS[name], STEPS, **SETTINGS)


@pytest.mark.parametrize("backend", ["soft", "hw"])
@pytest.mark.parametrize("threads", [1, 2])
def test_training_matches_the_reference(
    model: tuple[str, list[str]], backend: str, threads: int
) -> None:
    name, expected = model
    layers = MODELS[name]
    t = nxrs.Trainer(layers=layers, backend=backend, threads=threads, **SETTINGS)
    x, y = data(layers)
    assert hashes(t, x, y, STEPS) == expected


def test_shaped_and_flat_inputs_are_the_same_samples() -> None:
    layers = MODELS["conv2d_bn"]
    x, y = data(layers)
    shaped = nxrs.Trainer(layers=layers, **SETTINGS)
    flat = nxrs.Trainer(layers=layers, **SETTINGS)
    assert hashes(shaped, x, y, 3) == hashes(flat, x.reshape(N, -1), y, 3)
    assert np.array_equal(shaped.predict_proba(x), flat.predict_proba(x.reshape(N, -1)))
    with pytest.raises(nxrs.InputError, match=r"samples have shape \[6, 1, 5\]"):
        shaped.predict(x.reshape(N, 6, 1, 5))


def test_prediction_is_the_references_evaluation_mode() -> None:
    layers = MODELS["conv2d_bn"]
    x, y = data(layers)
    ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(layers), **SETTINGS)
    t = nxrs.Trainer(layers=layers, **SETTINGS)
    ref.train_steps(x.reshape(N, -1), y, 4)
    t.train_steps(x, y, 4)
    assert np.array_equal(
        t.predict_proba(x).view(np.uint32), ref.predict_proba(x.reshape(N, -1)).view(np.uint32)
    )
    loss, accuracy = t.evaluate(x, y)
    ref_loss, ref_accuracy = ref.evaluate(x.reshape(N, -1), y)
    assert np.float32(loss).view(np.uint32) == np.float32(ref_loss).view(np.uint32)
    assert accuracy == ref_accuracy


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_checkpoint_mid_epoch_resumes_to_the_same_bits(tmp_path: Path, name: str) -> None:
    layers = MODELS[name]
    x, y = data(layers)
    whole = nxrs.Trainer(layers=layers, **SETTINGS)
    whole.train_steps(x, y, STEPS)
    first = nxrs.Trainer(layers=layers, **SETTINGS)
    first.train_steps(x, y, 4)  # mid-epoch: 3 batches of 5 per epoch of 13
    first.save(tmp_path / "mid.nxck")
    resumed = nxrs.Trainer.load(tmp_path / "mid.nxck")
    assert resumed.config == first.config
    resumed.train_steps(x, y, STEPS - 4)
    assert resumed.state_hash() == whole.state_hash()
    assert resumed.to_bytes() == whole.to_bytes()


def test_the_configuration_holds_the_layers_json_form() -> None:
    t = nxrs.Trainer(layers=MODELS["conv1d"], **SETTINGS)
    layers = t.config["layers"]
    assert layers[1] == {
        "type": "Conv1d",
        "out_channels": 3,
        "kernel_size": [3],
        "stride": [2],
        "padding": [1],
    }
    assert t.config["init"] == "torch"
    again = nxrs.Trainer(**t.config)
    assert again.state_hash() == t.state_hash()
    assert nxrs.layers.from_dicts(layers) == MODELS["conv1d"]
    names = list(t.state_dict())
    assert names[:4] == ["W1", "b1", "W2", "b2"]


def test_batch_norm_state_names_and_running_statistics() -> None:
    t = nxrs.Trainer(layers=MODELS["dense_norms"], **SETTINGS)
    names = list(t.state_dict())
    assert names[:6] == ["W1", "b1", "gamma2", "beta2", "W3", "b3"]
    assert names[-2:] == ["mean2", "var2"]
    state = t.state_dict()
    assert np.array_equal(state["var2"], np.ones(6, np.float32))
    x, y = data(MODELS["dense_norms"])
    t.train_steps(x, y, 1)
    assert not np.array_equal(t.state_dict()["mean2"], np.zeros(6, np.float32))


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([Input(1, 9), Conv1d(2, 3, padding=3), Flatten(), Dense(2)], "padding 3 must be smaller"),
        ([Input(1, 2), Conv1d(2, 5), Flatten(), Dense(2)], "longer than its padded input"),
        ([Input(1, 9), Conv1d(2, 3)], "must be flat"),
        ([Input(1, 9), Dense(3)], "put Flatten"),
        ([Dense(3)], "starts with Input"),
        ([Input(4), Dropout(1.0), Dense(2)], "p must be in"),
        ([Input(4), Conv2d(2, 3), Flatten(), Dense(2)], "channels, height, width"),
        (
            [Input(4), Residual([Dense(3)]), Dense(2)],
            r"layer 1 \(Residual\): a residual branch must keep its input's shape \[4\], but "
            r"gives \[3\]",
        ),
        ([Input(4), Residual([]), Dense(2)], "needs at least one layer"),
        ([Input(4), Residual([GELU(), Input(4)]), Dense(2)], r"layer 3 \(Input\): only the first"),
        ([Input(4), Residual([Dense(4), Residual([Dropout(2.0)])])], r"layer 4 \(Dropout\)"),
    ],
)
def test_bad_layer_lists_are_config_errors(layers: list[Any], message: str) -> None:
    with pytest.raises(nxrs.ConfigError, match=message):
        nxrs.Trainer(layers=layers)


def test_residual_layers_are_numbered_depth_first() -> None:
    """Section 15.7's example: the Residual at 1, LayerNorm at 2, Dense at 3, the ReLU at 4;
    tensors numbered over the layers with tensors in that order, without a bias's tensor where
    a layer has none."""
    layers = [Input(8), Residual([LayerNorm(), Dense(8)]), ReLU(), Dense(2, bias=False)]
    t = nxrs.Trainer(layers=layers, **SETTINGS)
    assert list(t.state_dict())[:5] == ["gamma1", "beta1", "W2", "b2", "W3"]
    assert "b3" not in t.state_dict() and "mb3" not in t.state_dict()
    assert t.config["layers"][1] == {
        "type": "Residual",
        "layers": [
            {"type": "LayerNorm", "eps": pytest.approx(1e-5)},
            {"type": "Dense", "units": 8},
        ],
    }
    assert t.config["layers"][3] == {"type": "Dense", "units": 2, "bias": False}


def test_bias_key_absent_keeps_earlier_configurations() -> None:
    """``bias=True`` is written as nothing, so a model from before the key existed has the same
    configuration (and so config digest) whether built with the default or ``bias=True``."""
    default = nxrs.Trainer(layers=[Input(4), Dense(3), LayerNorm(), Dense(2)], **SETTINGS)
    explicit = nxrs.Trainer(
        layers=[Input(4), Dense(3, bias=True), LayerNorm(bias=True), Dense(2, bias=True)],
        **SETTINGS,
    )
    assert default.config_digest() == explicit.config_digest()
    assert "bias" not in json.dumps(default.config["layers"])


def test_init_rules() -> None:
    with pytest.raises(nxrs.ConfigError, match='init = "seed"'):
        nxrs.Trainer(layers=MODELS["conv1d"], init="seed")
    with pytest.raises(nxrs.ConfigError, match='init = "torch"'):
        nxrs.Trainer(layers=[4, 3], init="torch")
    assert nxrs.Trainer(layers=[4, 3]).config["init"] == "he"


def test_integer_lists_and_their_layer_objects_give_the_same_bits() -> None:
    x, y = data([Input(6)])
    sizes = nxrs.Trainer(layers=[6, 8, 4], **SETTINGS)
    objects = nxrs.Trainer(layers=[Input(6), Dense(8), ReLU(), Dense(4)], init="he", **SETTINGS)
    assert hashes(sizes, x, y, 5) == hashes(objects, x, y, 5)


def nxrs_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_nxrs_train_takes_a_model_file_and_inspect_prints_its_layer_table(tmp_path: Path) -> None:
    model = [Input(1, 8, 8), Conv2d(4, 3, padding=1), ReLU(), MaxPool2d(2), Flatten(), Dense(10)]
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"layers": nxrs.layers.to_dicts(model)}))
    run = nxrs_cli(
        "train",
        "--model",
        str(path),
        "--epochs",
        "1",
        "--json",
        "--ckpt-dir",
        str(tmp_path / "run"),
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert nxrs.layers.from_dicts(summary["layers"]) == model
    assert summary["steps"] == -(-1437 // 32)  # digits' training part, batch 32: the defaults
    latest = nxrs.CheckpointManager(tmp_path / "run").latest()
    assert latest is not None
    shown = nxrs_cli("inspect", str(latest.path))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("config   layers (5 after Input)") for line in lines)
    table = [line.split() for line in lines if line.split()[:1] in (["1"], ["3"], ["5"])]
    assert table[0][:4] == ["1", "Conv2d", "1x8x8", "4x8x8"]
    assert "W1[4,1,3,3]" in table[0] and "b1[4]" in table[0]
    assert table[1][:4] == ["3", "MaxPool2d", "4x8x8", "4x4x4"]
    assert table[2][:5] == ["5", "Dense", "64", "10", "W2[10,64]"]


def test_a_residual_model_file_trains_and_inspect_indents_its_branches(tmp_path: Path) -> None:
    model = [
        Input(1, 8, 8),
        Flatten(),
        Dense(16),
        # eps exact in binary32, so the configuration's layers read back equal to these.
        Residual(
            [
                LayerNorm(eps=2**-10, bias=False),
                Dense(32, bias=False),
                GELU(),
                Dense(16, bias=False),
            ]
        ),
        Dense(10),
    ]
    path = tmp_path / "model.json"
    path.write_text(json.dumps(nxrs.layers.to_dicts(model)))
    run = nxrs_cli(
        "train", "--model", str(path), "--epochs", "1", "--json", "--ckpt-dir", str(tmp_path / "r")
    )
    assert run.returncode == 0, run.stderr
    assert nxrs.layers.from_dicts(json.loads(run.stdout)["layers"]) == model
    latest = nxrs.CheckpointManager(tmp_path / "r").latest()
    assert latest is not None
    shown = nxrs_cli("inspect", str(latest.path))
    assert shown.returncode == 0, shown.stderr
    rows = {
        line.split()[0]: line
        for line in shown.stdout.splitlines()
        if line.split() and line.split()[0].isdigit()
    }
    assert rows["3"].split()[:2] == ["3", "Residual"]
    # The branch's layers come after their Residual, one step further in.
    assert rows["4"].split()[:5] == ["4", "LayerNorm", "16", "16", "gamma2[16]"]
    assert rows["4"].index("LayerNorm") == rows["3"].index("Residual") + 2
    assert "W3[32,16]" in rows["5"] and "b3" not in rows["5"]
    assert rows["8"].split()[:2] == ["8", "Dense"]


def test_a_presets_recipe_fills_what_the_command_line_left_out() -> None:
    from nxrs.cli._common import apply_recipe

    args = argparse.Namespace(
        model="mnist1d-cnn", data="digits", batch_size=32, lr=0.001, epochs=20,
        argv=["train", "--model", "mnist1d-cnn", "--batch", "50"],
    )  # fmt: skip
    apply_recipe(args)
    assert (args.data, args.batch_size, args.lr, args.epochs) == ("mnist1d", 32, 0.01, 150)
    plain = argparse.Namespace(model=None, data="digits", lr=0.001, argv=["train"])
    apply_recipe(plain)
    assert (plain.data, plain.lr) == ("digits", 0.001)
