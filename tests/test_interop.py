"""Models leaving nxrs and coming in: checkpoint bytes, weights, safetensors, ONNX, PyTorch.

Weights must cross every boundary bit for bit (compared as u32 patterns). Predictions of
onnxruntime and torch are compared with nxrs's within ``PROBABILITY_TOLERANCE`` (those runtimes
reorder and fuse the sums) and must pick the same class on every sample of the digits test
split. The test extra installs torch (CI runs these tests); without it they skip, saying so.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file, save_file

import nxrs
from nxrs.data import load_digits, split
from nxrs.interop import ONNX_OPSET

gr = importlib.import_module("reference.general_ref")

#: The largest difference allowed between a probability computed by onnxruntime or torch and
#: nxrs's: float32 sums of up to 128 products in another order, then exp, differ from the exact
#: order's by a few units in the last place (about 1e-7 here); 1e-5 leaves room for other
#: CPUs' kernels.
PROBABILITY_TOLERANCE = 1e-5

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None,
    reason="torch is not installed (the test extra has it); pip install 'nxrs[torch]' to run "
    "the PyTorch interop tests",
)


def u32(a: Any) -> list[int]:
    values: list[int] = np.ascontiguousarray(a, np.float32).reshape(-1).view(np.uint32).tolist()
    return values


def params(trainer: nxrs.Trainer) -> dict[str, list[int]]:
    """The bits of every parameter tensor (W1 b1 W2 b2 ...)."""
    return {k: u32(v) for k, v in trainer.state_dict().items() if k[0] in "Wb"}


@pytest.fixture(scope="module")
def digits() -> dict[str, Any]:
    """A 64-128-10 model trained 3 epochs on the CLI's digits training split, and its test
    split (``nxrs train``'s: TRAINING.md section 12)."""
    x, y = load_digits()
    train, test = split(len(x), 0.2, 0)
    trainer = nxrs.Trainer(layers=[64, 128, 10])
    trainer.fit(x[train], y[train], epochs=3, progress=False)
    return {"trainer": trainer, "x": x[test], "y": y[test]}


def small(**config: Any) -> nxrs.Trainer:
    x = np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32)
    y = np.arange(20) % 3
    trainer = nxrs.Trainer(layers=[5, 4, 3, 3], batch_size=4, **config)
    trainer.fit(x, y if config.get("loss") != "mse" else x[:, :3], epochs=2, progress=False)
    return trainer


# --------------------------------------------------------------- checkpoint bytes


def test_bytes_round_trip_the_whole_state() -> None:
    t = small()
    data = t.to_bytes()
    assert data[:4] == b"NXCK"
    back = nxrs.Trainer.from_bytes(data, backend="soft")
    assert back.state_hash() == t.state_hash() and back.config == t.config
    assert back.backend == "soft"
    assert back.to_bytes() == data
    with pytest.raises(nxrs.BadMagicError):
        nxrs.Trainer.from_bytes(b"not a checkpoint")
    with pytest.raises(nxrs.LengthError):
        nxrs.Trainer.from_bytes(data[:-1])
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(nxrs.ChecksumError):
        nxrs.Trainer.from_bytes(bytes(flipped))


# --------------------------------------------------------------- from_weights


def test_from_weights_starts_the_reference_run_from_those_weights() -> None:
    rng = np.random.default_rng(1)
    weights = [
        (rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=4).astype(np.float32)),
        (rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)),
    ]
    x = rng.normal(size=(24, 5)).astype(np.float32)
    y = np.arange(24) % 3
    t = nxrs.Trainer.from_weights(weights, seed=9, batch_size=5, optimizer="adamw")
    ref = gr.Trainer(layers=[5, 4, 3], seed=9, batch_size=5, optimizer="adamw")
    ref.W = [w.copy() for w, _ in weights]
    ref.b = [b.copy() for _, b in weights]
    assert t.sizes == [5, 4, 3] and t.steps == 0 and t.state_hash() == ref.state_hash()
    t.fit(x, y, epochs=2, progress=False)
    ref.fit_epochs(x, y, 2)
    assert t.state_hash() == ref.state_hash()


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([], "empty"),
        ([(np.zeros((2, 3), np.float32),)], "not a pair"),
        ([(np.zeros(3, np.float32), np.zeros(3, np.float32))], "2 dimensions"),
        ([(np.zeros((2, 3), np.float32), np.zeros(3, np.float32))], r"b1 has shape \[3\]"),
        (
            [(np.zeros((2, 3), np.float32), np.zeros(2, np.float32))] * 2,
            r"W2 has shape \[2, 3\], the model \[3, 2, 2\] needs \[2, 2\]",
        ),
        ([(np.full((2, 3), np.nan, np.float32), np.zeros(2, np.float32))], "W1 value 0"),
        ([(np.zeros((2, 3), np.float32), np.array([0, np.inf]))], "b1 value 1"),
        ([(np.zeros((2, 3), np.float16), np.zeros(2, np.float32))], "float16"),
    ],
)
def test_from_weights_refuses_weights_that_make_no_model(weights: Any, message: str) -> None:
    with pytest.raises(nxrs.InputError, match=message):
        nxrs.Trainer.from_weights(weights)


def test_from_weights_takes_the_sizes_from_the_shapes() -> None:
    w = [(np.zeros((2, 3), np.float32), np.zeros(2, np.float32))]
    with pytest.raises(TypeError, match="shapes"):
        nxrs.Trainer.from_weights(w, layers=[3, 2])
    with pytest.raises(nxrs.ConfigError, match="lr"):
        nxrs.Trainer.from_weights(w, lr=-1.0)


# --------------------------------------------------------------- safetensors


def test_safetensors_round_trip_is_bit_exact(tmp_path: Path) -> None:
    t = small(optimizer="sgd", momentum=0.5)
    path = tmp_path / "model.safetensors"
    t.save_safetensors(path)
    tensors = load_file(str(path))
    state = t.state_dict()
    assert sorted(tensors) == ["W1", "W2", "W3", "b1", "b2", "b3"]
    for name, tensor in tensors.items():
        assert tensor.dtype == np.float32 and tensor.shape == state[name].shape
        assert u32(tensor) == u32(state[name])
    back = nxrs.Trainer.from_safetensors(path, batch_size=4)
    assert params(back) == params(t) and back.steps == 0 and back.sizes == [5, 4, 3, 3]
    assert back.predict_proba(np.eye(5, dtype=np.float32)).tobytes() == (
        t.predict_proba(np.eye(5, dtype=np.float32)).tobytes()
    )


finite_f32 = st.integers(0, 2**32 - 1).filter(lambda bits: bits & 0x7F800000 != 0x7F800000)


@st.composite
def weight_sets(draw: st.DrawFn) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random layer sizes and every kind of finite binary32 (zeros of both signs, subnormals,
    the largest values) as weights."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=2, max_size=4))

    def tensor(*shape: int) -> np.ndarray:
        bits = draw(
            st.lists(finite_f32, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))
        )
        return np.array(bits, dtype=np.uint32).view(np.float32).reshape(shape)

    return [(tensor(o, i), tensor(o)) for i, o in zip(sizes, sizes[1:])]


@settings(max_examples=30, deadline=None)
@given(weight_sets())
def test_weights_cross_every_boundary_bit_for_bit(
    weights: list[tuple[np.ndarray, np.ndarray]],
) -> None:
    t = nxrs.Trainer.from_weights(weights)
    expected = {
        f"{k}{layer}": u32(v) for layer, pair in enumerate(weights, 1) for k, v in zip("Wb", pair)
    }
    assert params(t) == expected
    assert params(nxrs.Trainer.from_bytes(t.to_bytes())) == expected
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "w.safetensors"
        t.save_safetensors(path)
        assert params(nxrs.Trainer.from_safetensors(path)) == expected
        t.to_onnx(Path(directory) / "w.onnx")
        model = onnx.load(str(Path(directory) / "w.onnx"))
    stored = {i.name: u32(onnx.numpy_helper.to_array(i)) for i in model.graph.initializer}
    for layer, (w, b) in enumerate(weights, 1):
        assert stored[f"W{layer}T"] == u32(w.T) and stored[f"b{layer}"] == u32(b)


def test_safetensors_moments_and_metadata(tmp_path: Path) -> None:
    t = small()
    path = tmp_path / "with-moments.safetensors"
    t.save_safetensors(path, moments=True)
    tensors = load_file(str(path))
    assert {k: u32(v) for k, v in tensors.items()} == {k: u32(v) for k, v in t.state_dict().items()}
    assert {"mW1", "vW1", "mb3", "vb3"} <= set(tensors)
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        metadata = f.metadata()
    assert metadata["format"] == "nxrs" and metadata["layers"] == "[5, 4, 3, 3]"
    assert metadata["loss"] == "cross_entropy" and metadata["nxrs_version"] == nxrs.__version__
    # The moments are not restored: the optimiser starts fresh (weights only).
    back = nxrs.Trainer.from_safetensors(path, batch_size=4)
    assert params(back) == params(t)
    assert not back.state_dict()["mW1"].any() and back.b1t == 1.0


def test_from_safetensors_errors(tmp_path: Path) -> None:
    w = np.zeros((2, 3), np.float32)
    b = np.zeros(2, np.float32)
    cases = {
        "extra": ({"W1": w, "b1": b, "bias": b}, "'bias' is not an nxrs parameter"),
        "missing": ({"W1": w, "b1": b, "W2": np.zeros((2, 2), np.float32)}, "W1 b1 W2"),
        "gap": ({"W1": w, "b1": b, "W3": w, "b3": b}, "are not W1 b1 ... WL bL"),
        "empty": ({"mW1": w}, r"\(none\)"),
    }
    for name, (tensors, message) in cases.items():
        save_file(tensors, str(tmp_path / name))
        with pytest.raises(nxrs.InputError, match=message):
            nxrs.Trainer.from_safetensors(tmp_path / name)
    (tmp_path / "junk").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(nxrs.CheckpointError, match="not a readable safetensors file"):
        nxrs.Trainer.from_safetensors(tmp_path / "junk")
    with pytest.raises(FileNotFoundError):
        nxrs.Trainer.from_safetensors(tmp_path / "absent")


# --------------------------------------------------------------- ONNX


def test_onnx_export_agrees_with_nxrs_on_the_digits_test_split(
    digits: dict[str, Any], tmp_path: Path
) -> None:
    t, x = digits["trainer"], digits["x"]
    path = tmp_path / "digits.onnx"
    t.to_onnx(path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", ONNX_OPSET)]
    assert {n.op_type for n in model.graph.node} == {"MatMul", "Add", "Relu", "Softmax"}
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    state = t.state_dict()
    for k in (1, 2):
        assert u32(initializers[f"W{k}T"]) == u32(state[f"W{k}"].T)
        assert u32(initializers[f"b{k}"]) == u32(state[f"b{k}"])
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(["probabilities"], {"input": x})
    exact = t.predict_proba(x)
    assert np.abs(probabilities - exact).max() <= PROBABILITY_TOLERANCE
    assert probabilities.argmax(axis=1).tolist() == t.predict(x).tolist()
    assert (t.predict(x) == digits["y"]).mean() > 0.9  # a model worth exporting

    t.to_onnx(path, softmax=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"input": x})
    assert logits.argmax(axis=1).tolist() == t.predict(x).tolist()


def test_onnx_regression_outputs(tmp_path: Path) -> None:
    t = small(loss="mse")
    t.to_onnx(tmp_path / "r.onnx")
    session = onnxruntime.InferenceSession(
        str(tmp_path / "r.onnx"), providers=["CPUExecutionProvider"]
    )
    x = np.random.default_rng(3).normal(size=(7, 5)).astype(np.float32)
    (outputs,) = session.run(["outputs"], {"input": x})
    assert np.abs(outputs - t.predict(x)).max() <= PROBABILITY_TOLERANCE
    with pytest.raises(nxrs.ConfigError, match="cross-entropy"):
        t.to_onnx(tmp_path / "s.onnx", softmax=True)
    assert not (tmp_path / "s.onnx").exists()


@pytest.mark.parametrize(
    ("call", "extra"),
    [
        (lambda t, p: t.to_onnx(p / "m.onnx"), "onnx"),
        (lambda t, p: t.save_safetensors(p / "m.safetensors"), "safetensors"),
        (lambda t, p: nxrs.Trainer.from_safetensors(p / "m.safetensors"), "safetensors"),
        (lambda t, p: t.to_torch(), "torch"),
        (lambda t, p: nxrs.Trainer.from_torch(None), "torch"),
    ],
)
def test_a_missing_optional_package_names_its_extra(
    call: Any, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] == extra:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, extra, None)  # makes `import <extra>` fail
    with pytest.raises(ImportError, match=rf"pip install 'nxrs\[{extra}\]'"):
        call(small(), tmp_path)


# --------------------------------------------------------------- PyTorch


@needs_torch
def test_torch_export_agrees_with_nxrs_on_the_digits_test_split(digits: dict[str, Any]) -> None:
    t, x = digits["trainer"], digits["x"]
    generator = torch.random.get_rng_state()
    module = t.to_torch(softmax=True)
    assert torch.equal(torch.random.get_rng_state(), generator)  # torch's RNG not drawn from
    kinds = [type(m).__name__ for m in module]
    assert kinds == ["Linear", "ReLU", "Linear", "Softmax"]
    state = t.state_dict()
    assert u32(module[0].weight.detach().numpy()) == u32(state["W1"])
    assert u32(module[2].bias.detach().numpy()) == u32(state["b2"])
    with torch.no_grad():
        probabilities = module(torch.from_numpy(x)).numpy()
    assert np.abs(probabilities - t.predict_proba(x)).max() <= PROBABILITY_TOLERANCE
    assert probabilities.argmax(axis=1).tolist() == t.predict(x).tolist()
    assert [type(m).__name__ for m in t.to_torch()] == ["Linear", "ReLU", "Linear"]


@needs_torch
def test_from_torch_round_trips_the_weights_and_safetensors_reads_in_torch(
    tmp_path: Path,
) -> None:
    from safetensors.torch import load_file as load_torch

    t = small()
    back = nxrs.Trainer.from_torch(t.to_torch(softmax=True), batch_size=4)
    assert params(back) == params(t) and back.sizes == t.sizes
    t.save_safetensors(tmp_path / "m.safetensors")
    tensors = load_torch(str(tmp_path / "m.safetensors"))
    assert u32(tensors["W2"].numpy()) == u32(t.state_dict()["W2"])
    single = torch.nn.Linear(3, 2)
    assert nxrs.Trainer.from_torch(single).sizes == [3, 2]


@needs_torch
@pytest.mark.parametrize(
    ("layers", "config", "error", "message"),
    [
        (lambda nn: [nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)], {}, nxrs.ConfigError, "Tanh"),
        (lambda nn: [nn.Linear(3, 2, bias=False)], {}, nxrs.ConfigError, "bias"),
        (lambda nn: [nn.Linear(3, 4), nn.Linear(4, 2)], {}, nxrs.ConfigError, "module 1"),
        (lambda nn: [nn.Linear(3, 4), nn.ReLU()], {}, nxrs.ConfigError, "end in a Linear"),
        (lambda nn: [], {}, nxrs.ConfigError, "end in a Linear"),
        (lambda nn: [nn.Linear(3, 2), nn.Softmax(dim=0)], {}, nxrs.ConfigError, "dim=0"),
        (lambda nn: [nn.Linear(3, 2), nn.Softmax(-1)], {"loss": "mse"}, nxrs.ConfigError, "mse"),
        (lambda nn: [nn.Linear(3, 4), nn.ReLU(), nn.Linear(5, 2)], {}, nxrs.InputError, "W2"),
        (lambda nn: [nn.Linear(3, 2).half()], {}, nxrs.InputError, "float16"),
    ],
)
def test_from_torch_refuses_what_nxrs_cannot_represent(
    layers: Any, config: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        nxrs.Trainer.from_torch(torch.nn.Sequential(*layers(torch.nn)), **config)


@needs_torch
def test_to_torch_softmax_needs_a_classifier() -> None:
    with pytest.raises(nxrs.ConfigError, match="cross-entropy"):
        small(loss="mse").to_torch(softmax=True)
    with pytest.raises(nxrs.ConfigError, match=r"torch\.nn\.Module"):
        nxrs.Trainer.from_torch("model.pt")
