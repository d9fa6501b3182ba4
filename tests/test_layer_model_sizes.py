"""Layer models of any sizes, as a user trains them: random valid models (every layer type,
residual branches nested or not, outputs larger or smaller than inputs, any number of layers
between) train with ``fit``, predict and evaluate without a panic, the hardware backend giving
softf32's bits; and ``nxrs train`` and ``nxrs sweep`` train a model whose output has more cells
than its input.

The output shapes here follow docs/TRAINING.md section 15.1's rule (``floor((n + 2q - k) / s) +
1``), written from the text, so that every model drawn is one the definition accepts."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nxrs
from nxrs.cli import main
from nxrs.layers import (
    GELU,
    AvgPool1d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    MaxPool1d,
    MaxPool2d,
    ReLU,
    Residual,
    Sigmoid,
    Tanh,
)

Shape = tuple[int, ...]

needs_hw = pytest.mark.skipif(
    nxrs.hardware_isa() is None, reason="the hardware backend is unavailable on this machine"
)


def out_len(n: int, k: int, s: int, q: int) -> int:
    """Section 15.1: positions along a dimension of size ``n``."""
    return (n + 2 * q - k) // s + 1


@st.composite
def window(draw: st.DrawFn, n: int, padded: bool) -> tuple[int, int, int]:
    """A kernel, stride and padding (0 unless ``padded``) that section 15.1 accepts over ``n``."""
    q = draw(st.integers(0, 2)) if padded else 0
    k = draw(st.integers(q + 1, n + 2 * q))
    return k, draw(st.integers(1, 3)), q


def pointwise() -> st.SearchStrategy[Layer]:
    p = st.sampled_from([0.0, 0.25, 0.5, 0.9])
    return st.one_of(
        st.sampled_from([ReLU(), Tanh(), Sigmoid(), GELU(), LayerNorm(), LayerNorm(bias=False)]),
        p.map(lambda p: Dropout(p)),
    )


@st.composite
def branch_on(draw: st.DrawFn, shape: Shape, depth: int = 0) -> list[Layer]:
    """A residual branch that keeps ``shape``: pointwise layers, Dense of the same width on a
    flat input, and (not too deep) nested Residuals."""
    layers: list[Layer] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["pointwise", "dense", "residual"]))
        if kind == "dense" and len(shape) == 1:
            layers.append(Dense(shape[0], bias=draw(st.booleans())))
        elif kind == "residual" and depth < 2:
            layers.append(Residual(draw(branch_on(shape, depth + 1))))
        else:
            layers.append(draw(pointwise()))
    return layers


@st.composite
def layer_on(draw: st.DrawFn, shape: Shape) -> tuple[Layer, Shape]:
    """A layer that takes ``shape``, and its output shape."""
    kind = draw(st.sampled_from(["pointwise", "dense", "window", "norm", "flatten", "residual"]))
    if kind == "pointwise":
        return draw(pointwise()), shape
    if kind == "residual":
        return Residual(draw(branch_on(shape))), shape
    if kind == "norm" and len(shape) <= 2:
        return BatchNorm1d(), shape
    if kind == "norm":
        return BatchNorm2d(), shape
    if len(shape) == 1:  # dense, window and flatten on a flat input: Dense
        units = draw(st.integers(1, 12))
        return Dense(units, bias=draw(st.booleans())), (units,)
    if kind in ("dense", "flatten"):
        return Flatten(), (math.prod(shape),)
    conv = draw(st.booleans())
    windows = [draw(window(n, padded=conv)) for n in shape[1:]]
    kernel, stride, padding = ([w[i] for w in windows] for i in range(3))
    sizes = tuple(out_len(n, *w[:2], w[2]) for n, w in zip(shape[1:], windows))
    one = len(shape) == 2
    if conv:
        out = draw(st.integers(1, 4))
        cls = Conv1d if one else Conv2d
        return cls(out, kernel, stride=stride, padding=padding), (out, *sizes)
    pools = (MaxPool1d, AvgPool1d) if one else (MaxPool2d, AvgPool2d)
    return draw(st.sampled_from(pools))(kernel, stride=stride), (shape[0], *sizes)


@st.composite
def models(draw: st.DrawFn) -> tuple[list[Layer], int]:
    """A valid model (every layer type, 0 to 5 layers before the last Dense) and its outputs."""
    rank = draw(st.integers(1, 3))
    # Features, or a few channels of a few positions.
    sizes = (
        [st.integers(1, 6)] if rank == 1 else [st.integers(1, 3)] + [st.integers(1, 7)] * (rank - 1)
    )
    shape: Shape = tuple(draw(size) for size in sizes)
    layers: list[Layer] = [Input(*shape)]
    for _ in range(draw(st.integers(0, 5))):
        layer, shape = draw(layer_on(shape))
        layers.append(layer)
    if len(shape) > 1:
        layers.append(Flatten())
    outputs = draw(st.integers(2, 12))
    layers.append(Dense(outputs))
    return layers, outputs


def bits(value: float | None) -> bytes | None:
    return None if value is None else struct.pack("<d", value)


@needs_hw
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    models(),
    st.sampled_from(["cross_entropy", "mse"]),
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(0, 2**32),
)
def test_random_layer_models_train_predict_and_evaluate_alike_on_both_backends(
    model: tuple[list[Layer], int], loss: str, samples: int, batch_size: int, seed: int
) -> None:
    layers, outputs = model
    rng = np.random.default_rng(seed)
    features = math.prod(layers[0].to_dict()["shape"])
    x = rng.normal(size=(samples, features)).astype(np.float32)
    y: Any = (
        rng.integers(0, outputs, size=samples)
        if loss == "cross_entropy"
        else rng.normal(size=(samples, outputs)).astype(np.float32)
    )
    ends = {}
    for backend, threads in (("soft", 1), ("hw", 2)):
        t = nxrs.Trainer(
            layers=layers, loss=loss, batch_size=batch_size, seed=seed, backend=backend,
            threads=threads,
        )  # fmt: skip
        history = t.fit(x, y, 2, progress=False)
        ends[backend] = (
            t.steps,
            t.state_digest(),
            [bits(v) for v in history.history["loss"]],
            t.predict_proba(x).tobytes(),
            tuple(bits(v) for v in t.evaluate(x, y)),
        )
    assert ends["soft"][0] == 2 * math.ceil(samples / batch_size)
    assert ends["soft"] == ends["hw"]


# --- the command line


#: Two features, three classes: the output (3 cells) has more cells than the input (2).
WIDER = [Input(2), Dense(8), ReLU(), Dense(3)]


@pytest.fixture
def wider(tmp_path: Path) -> tuple[Path, Path]:
    """The model file and a data file of 60 samples for it."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=x, y=np.arange(60) % 3)
    (tmp_path / "m.json").write_text(json.dumps(nxrs.layers.to_dicts(WIDER)))
    return tmp_path / "m.json", tmp_path / "d.npz"


def test_nxrs_train_a_model_whose_output_is_wider_than_its_input(
    wider: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    model, data = wider
    argv = ["train", "--model", str(model), "--data", str(data), "--epochs", "2",
            "--batch-size", "8", "--json"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2 * math.ceil(48 / 8)  # 48 training samples (test size 0.2)


def test_nxrs_sweep_a_model_whose_output_is_wider_than_its_input(
    ray_cluster: Any,
    wider: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, data = wider
    argv = ["sweep", "--model", str(model), "--data", str(data), "--dir", str(tmp_path / "s"),
            "--epochs", "1", "--grid", "lr=0.01,0.003", "--json"]  # fmt: skip
    assert main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["config"]["lr"] for r in records] == [0.01, 0.003]
    assert all(r["config"]["layers"] == nxrs.layers.to_dicts(WIDER) for r in records)
    assert all(r["steps"] == math.ceil(48 / 32) for r in records)
