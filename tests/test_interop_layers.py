"""Interop of layer models (docs/TRAINING.md section 15): ``to_torch``,
``from_torch(..., input_shape=)``, ``to_onnx`` and safetensors for models of ``nxrs.layers``,
every layer type covered across 1-D, 2-D and dense models with BatchNorm running statistics that
training has moved. Other runtimes' arithmetic is not nxrs's: their outputs are compared to
``predict_proba`` within float32 tolerance; the weights and statistics that cross are compared
bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import nxrs
from nxrs.layers import (
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
    Sigmoid,
    Tanh,
)

torch = pytest.importorskip("torch")
nn = torch.nn

#: Models covering every layer type (Input's shape is the samples').
MODELS: dict[str, list[Layer]] = {
    "conv1d": [
        Input(2, 20),
        Conv1d(4, 3, stride=2, padding=1),
        BatchNorm1d(),
        ReLU(),
        MaxPool1d(2),
        Conv1d(3, 3),
        Tanh(),
        LayerNorm(),
        AvgPool1d(2, stride=1),
        Flatten(),
        Dropout(0.2),
        Dense(5),
        Sigmoid(),
        Dense(3),
    ],
    "conv2d": [
        Input(1, 8, 8),
        Conv2d(4, 3, padding=1),
        BatchNorm2d(momentum=0.2),
        ReLU(),
        MaxPool2d(2),
        Conv2d(3, (3, 2), stride=(1, 2)),
        AvgPool2d(2),
        LayerNorm(eps=1e-3),
        Flatten(),
        Dense(6),
        BatchNorm1d(eps=1e-4),
        Tanh(),
        Dropout(),
        Dense(3),
    ],
    "dense": [
        Input(6),
        Dense(5),
        LayerNorm(),
        Sigmoid(),
        Dense(4),
        BatchNorm1d(momentum=0.5),
        ReLU(),
        Dense(3),
    ],
}
CONFIG: dict[str, Any] = {"batch_size": 8, "lr": 0.01, "seed": 3}
RTOL, ATOL = 1e-4, 1e-5


def samples(name: str, n: int = 40) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    shape = tuple(MODELS[name][0].to_dict()["shape"])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    return x, rng.integers(0, 3, n)


def trained(name: str) -> nxrs.Trainer:
    """The model after two epochs (its running statistics moved away from 0 and 1)."""
    t = nxrs.Trainer(layers=MODELS[name], **CONFIG)
    t.fit(*samples(name), epochs=2)
    state = t.state_dict()
    for key in state:
        if key.startswith("mean"):
            assert np.all(state[key] != 0), key
        if key.startswith("var"):
            assert np.all(state[key] != 1), key
    return t


def input_shape(name: str) -> tuple[int, ...]:
    return tuple(MODELS[name][0].to_dict()["shape"])


def weights(t: nxrs.Trainer) -> dict[str, list[int]]:
    """The parameters and running statistics (no optimiser slots) as bit patterns."""
    return {
        k: v.view(np.uint32).ravel().tolist()
        for k, v in t.state_dict().items()
        if not (k[0] in "mv" and k[1:2] in ("W", "b", "g"))
    }


def softmax(z: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    e = np.exp(z - z.max(axis=1, keepdims=True), dtype=np.float64)
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_to_torch_in_eval_mode_computes_predict_proba(name: str) -> None:
    t = trained(name)
    x, _ = samples(name, 16)
    expected = t.predict_proba(x)
    with torch.no_grad():
        probabilities = t.to_torch(softmax=True).eval()(torch.from_numpy(x)).numpy()
        logits = t.to_torch().eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(probabilities, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)


def test_to_torch_modules_and_settings() -> None:
    t = nxrs.Trainer(layers=MODELS["conv2d"], **CONFIG)
    module = t.to_torch()
    kinds = [type(m).__name__ for m in module]
    assert kinds == [
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
        "MaxPool2d",
        "Conv2d",
        "AvgPool2d",
        "LayerNorm",
        "Flatten",
        "Linear",
        "BatchNorm1d",
        "Tanh",
        "Dropout",
        "Linear",
    ]
    assert module.training  # torch's default: .eval() is nxrs's evaluation mode
    conv, norm, layer_norm, dropout = module[4], module[1], module[6], module[11]
    assert (conv.kernel_size, conv.stride, conv.padding) == ((3, 2), (1, 2), (0, 0))
    assert norm.momentum == np.float32(0.2) and norm.eps == np.float32(1e-5)
    assert layer_norm.normalized_shape == (3, 1, 1) and layer_norm.eps == np.float32(1e-3)
    assert dropout.p == 0.5


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("with_softmax", [False, True])
def test_from_torch_of_to_torch_gives_the_same_bits(name: str, with_softmax: bool) -> None:
    t = trained(name)
    back = nxrs.Trainer.from_torch(
        t.to_torch(softmax=with_softmax), input_shape=input_shape(name), **CONFIG
    )
    assert back.config["layers"] == t.config["layers"]
    assert weights(back) == weights(t)
    assert back.steps == 0
    slots = [v for k, v in back.state_dict().items() if k not in weights(back)]
    assert slots and not any(v.any() for v in slots)
    x, _ = samples(name, 8)
    assert back.predict_proba(x).tobytes() == t.predict_proba(x).tobytes()


def torch_model() -> Any:
    """A model built in torch alone, every module type from_torch takes, random weights and
    running statistics."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 0)),
        nn.BatchNorm2d(3, momentum=0.25, eps=1e-4),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2, stride=1),
        nn.AvgPool2d((1, 2)),
        nn.LayerNorm((3, 4, 1)),
        nn.Tanh(),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(12, 4),
        nn.BatchNorm1d(4),
        nn.Sigmoid(),
        nn.Linear(4, 3),
        nn.Softmax(dim=-1),
    )
    with torch.no_grad():
        for m in model:
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    return model.eval()


def test_from_torch_takes_a_torch_model_bit_for_bit() -> None:
    model = torch_model()
    t = nxrs.Trainer.from_torch(model, input_shape=(2, 9, 5))
    assert t.config["layers"][1] == {
        "type": "Conv2d",
        "out_channels": 3,
        "kernel_size": [3, 2],
        "stride": [2, 1],
        "padding": [1, 0],
    }
    assert [layer["type"] for layer in t.config["layers"]] == [
        "Input",
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
        "MaxPool2d",
        "AvgPool2d",
        "LayerNorm",
        "Tanh",
        "Flatten",
        "Dropout",
        "Dense",
        "BatchNorm1d",
        "Sigmoid",
        "Dense",
    ]
    torch_names = {"weight": ("W", "gamma"), "bias": ("b", "beta")}
    expected: dict[str, list[int]] = {}
    n = 0
    for m in model:
        if not hasattr(m, "weight"):
            continue
        n += 1
        norm = not isinstance(m, (nn.Linear, nn.Conv2d))
        for attr, names in torch_names.items():
            expected[f"{names[norm]}{n}"] = getattr(m, attr).detach().numpy().view(np.uint32)
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            expected[f"mean{n}"] = m.running_mean.numpy().view(np.uint32)
            expected[f"var{n}"] = m.running_var.numpy().view(np.uint32)
    assert weights(t) == {k: v.ravel().tolist() for k, v in expected.items()}
    x = np.random.default_rng(1).standard_normal((10, 2, 9, 5)).astype(np.float32)
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(t.predict_proba(x), reference, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("build", "shape", "module", "why"),
    [
        (
            lambda: [nn.Conv1d(1, 2, 3), nn.GELU(approximate="tanh")],
            (1, 12),
            "1 (GELU",
            "approximate='tanh'; nxrs's GELU is the exact form",
        ),
        (lambda: [nn.Conv1d(1, 2, 3, dilation=2)], (1, 12), "0 (Conv1d", "dilation=(2,); nxrs's"),
        (lambda: [nn.Conv1d(2, 2, 3, groups=2)], (2, 12), "0 (Conv1d", "groups=2; nxrs's"),
        (lambda: [nn.Conv1d(1, 2, 3, bias=False)], (1, 12), "0 (Conv1d", "it has no bias"),
        (
            lambda: [nn.Conv1d(1, 2, 3, padding=1, padding_mode="reflect")],
            (1, 12),
            "0 (Conv1d",
            "padding_mode='reflect'; nxrs pads with zeros",
        ),
        (lambda: [nn.Conv2d(1, 2, 3, padding="same")], (1, 6, 6), "0 (Conv2d", "padding='same'"),
        (lambda: [nn.MaxPool1d(2, padding=1)], (1, 12), "0 (MaxPool1d", "padding=1; nxrs's"),
        (lambda: [nn.MaxPool2d(2, ceil_mode=True)], (1, 6, 6), "0 (MaxPool2d", "ceil_mode=True"),
        (lambda: [nn.MaxPool1d(2, dilation=2)], (1, 12), "0 (MaxPool1d", "dilation=2; nxrs's"),
        (lambda: [nn.MaxPool1d(2, return_indices=True)], (1, 12), "0 (MaxPool1d", "return_"),
        (lambda: [nn.AvgPool1d(2, padding=1)], (1, 12), "0 (AvgPool1d", "padding=(1,); nxrs's"),
        (lambda: [nn.AvgPool2d(2, divisor_override=3)], (1, 6, 6), "0 (AvgPool2d", "divisor_"),
        (lambda: [nn.Flatten(start_dim=2)], (1, 12), "0 (Flatten", "nxrs's Flatten flattens"),
        (
            lambda: [nn.LayerNorm(12, elementwise_affine=False)],
            12,
            "0 (LayerNorm",
            "it has no elementwise weight; nxrs's LayerNorm has one",
        ),
        (lambda: [nn.BatchNorm1d(12, affine=False)], 12, "0 (BatchNorm1d", "affine=False; "),
        (
            lambda: [nn.BatchNorm2d(1, track_running_stats=False)],
            (1, 6, 6),
            "0 (BatchNorm2d",
            "track_running_stats=False; ",
        ),
        (lambda: [nn.BatchNorm1d(12, momentum=None)], 12, "0 (BatchNorm1d", "momentum=None (a"),
        (lambda: [nn.Linear(12, 2), nn.Dropout1d()], 12, "1 (Dropout1d", "nxrs has no layer"),
    ],
)
def test_from_torch_refuses_what_nxrs_cannot_represent(
    build: Any, shape: Any, module: str, why: str
) -> None:
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(nn.Sequential(*build()), input_shape=shape)
    text = str(err.value)
    assert text.startswith(f"module {module}"), text
    assert f") cannot be represented: {why}" in text, text


def test_from_torch_layer_models_end_in_a_softmax_over_the_last_dimension() -> None:
    model = nn.Sequential(nn.Linear(12, 2), nn.Softmax(dim=0))
    with pytest.raises(nxrs.ConfigError, match=r"module 1: Softmax\(dim=0\)"):
        nxrs.Trainer.from_torch(model, input_shape=12)


def test_from_torch_needs_the_input_shape_of_a_layer_model() -> None:
    model = nn.Sequential(nn.Conv1d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(20, 2))
    with pytest.raises(nxrs.ConfigError, match=r"module 0 \(Conv1d.*give input_shape="):
        nxrs.Trainer.from_torch(model)
    t = nxrs.Trainer.from_torch(model, input_shape=(1, 12))
    assert t.config["layers"][0] == {"type": "Input", "shape": [1, 12]}
    # Modules of no layer model get no such hint.
    with pytest.raises(nxrs.ConfigError, match="SiLU") as err:
        nxrs.Trainer.from_torch(nn.Sequential(nn.Linear(3, 2), nn.SiLU()))
    assert "input_shape" not in str(err.value)


def test_from_torch_shapes_that_do_not_fit() -> None:
    conv = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(20, 2))
    with pytest.raises(nxrs.InputError, match=r"W1 has shape \[2, 1, 3\], the model needs"):
        nxrs.Trainer.from_torch(conv, input_shape=(2, 12))
    with pytest.raises(nxrs.ConfigError, match=r"layer 2.*Dense"):
        nxrs.Trainer.from_torch(
            nn.Sequential(nn.Conv1d(1, 2, 3), nn.Linear(10, 2)), input_shape=(1, 12)
        )
    with pytest.raises(TypeError, match="layers"):
        nxrs.Trainer.from_torch(conv, input_shape=(1, 12), layers=[12, 2])


def test_from_torch_checks_the_running_statistics() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    with torch.no_grad():
        model[1].running_var[2] = float("inf")
    with pytest.raises(nxrs.InputError, match=r"var2 value 2 \(row-major\) is inf"):
        nxrs.Trainer.from_torch(model, input_shape=4)
    model[1].running_mean = model[1].running_mean.double()
    model[1].running_var = torch.ones(3, dtype=torch.float16)
    with pytest.raises(nxrs.InputError, match="float16"):
        nxrs.Trainer.from_torch(model, input_shape=4)


def test_start_from_counts_the_running_statistics() -> None:
    t = nxrs.Trainer(layers=MODELS["dense"])
    params = t._params()  # the state's parameters in order, as _start_from takes them
    ones = np.ones(4, np.float32)
    with pytest.raises(nxrs.InputError, match=r"1 running statistics tensors given.*mean4 var4"):
        t._start_from(params, [ones])
    with pytest.raises(nxrs.InputError, match=r"var4 has shape \[3\], the model needs \[4\]"):
        t._start_from(params, [ones, ones[:3]])
    t._start_from(params, [ones * 2, ones * 3])
    assert t.state_dict()["mean4"].tolist() == [2.0] * 4
    t._start_from(params)  # without: a fresh run's
    assert t.state_dict()["var4"].tolist() == [1.0] * 4


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def run_onnx(path: Path, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: npt.NDArray[np.float32] = session.run(None, {"input": x})[0]
    return out


@pytest.mark.parametrize("name", MODELS)
def test_onnx_export_computes_predict_proba(name: str, tmp_path: Path) -> None:
    t = trained(name)
    x, _ = samples(name, 16)
    expected = t.predict_proba(x)
    t.to_onnx(tmp_path / "p.onnx")
    t.to_onnx(tmp_path / "z.onnx", softmax=False)
    np.testing.assert_allclose(run_onnx(tmp_path / "p.onnx", x), expected, rtol=RTOL, atol=ATOL)
    logits = run_onnx(tmp_path / "z.onnx", x)
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)
    model = onnx.load(str(tmp_path / "p.onnx"))
    assert model.opset_import[0].version == nxrs.interop.ONNX_LAYERS_OPSET == 17
    assert [o.name for o in model.graph.output] == ["probabilities"]
    assert "Dropout" not in {node.op_type for node in model.graph.node}


def test_onnx_operators(tmp_path: Path) -> None:
    ops: set[str] = set()
    for name in MODELS:
        nxrs.Trainer(layers=MODELS[name]).to_onnx(tmp_path / f"{name}.onnx")
        ops |= {node.op_type for node in onnx.load(str(tmp_path / f"{name}.onnx")).graph.node}
    assert ops == {
        "Conv",
        "BatchNormalization",
        "Relu",
        "MaxPool",
        "Tanh",
        "LayerNormalization",
        "AveragePool",
        "Flatten",
        "Gemm",
        "Sigmoid",
        "Softmax",
    }


def test_onnx_regression_outputs(tmp_path: Path) -> None:
    t = nxrs.Trainer(layers=[Input(1, 6), Conv1d(2, 3), Flatten(), Dropout(), Dense(2)], loss="mse")
    x = np.random.default_rng(2).standard_normal((5, 1, 6)).astype(np.float32)
    t.to_onnx(tmp_path / "r.onnx")
    assert [o.name for o in onnx.load(str(tmp_path / "r.onnx")).graph.output] == ["outputs"]
    np.testing.assert_allclose(
        run_onnx(tmp_path / "r.onnx", x), t.predict_proba(x), rtol=RTOL, atol=ATOL
    )


safetensors_numpy = pytest.importorskip("safetensors.numpy")


@pytest.mark.parametrize("name", MODELS)
def test_safetensors_round_trip(name: str, tmp_path: Path) -> None:
    from safetensors import safe_open

    t = trained(name)
    t.save_safetensors(tmp_path / "m.safetensors")
    t.save_safetensors(tmp_path / "all.safetensors", moments=True)
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        assert json.loads(f.metadata()["layers"]) == t.config["layers"]
        assert sorted(f.keys()) == sorted(weights(t))
    with safe_open(str(tmp_path / "all.safetensors"), framework="np") as f:
        assert sorted(f.keys()) == sorted(t.state_dict())
    for file in ("m", "all"):
        back = nxrs.Trainer.from_safetensors(tmp_path / f"{file}.safetensors", **CONFIG)
        assert back.config["layers"] == t.config["layers"]
        assert weights(back) == weights(t)
        assert back.steps == 0


def test_safetensors_layer_files_that_make_no_model(tmp_path: Path) -> None:
    t = trained("dense")
    state = {k: v for k, v in t.state_dict().items() if k in weights(t)}
    metadata = {"layers": json.dumps(t.config["layers"])}
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "extra": ({**state, "W9": state["W1"]}, "'W9' is not one of the model's"),
        "missing": ({k: v for k, v in state.items() if k != "gamma2"}, "lacks .*gamma2"),
        "half_statistics": ({k: v for k, v in state.items() if k != "var4"}, "lacks .*var4"),
        "shape": ({**state, "beta2": state["beta2"][:2]}, r"beta2 has shape \[2\]"),
    }
    for name, (tensors, message) in cases.items():
        safetensors_numpy.save_file(tensors, str(tmp_path / name), metadata=metadata)
        with pytest.raises(nxrs.InputError, match=message):
            nxrs.Trainer.from_safetensors(tmp_path / name)
    # Without the running statistics: a fresh run's.
    tensors = {k: v for k, v in state.items() if not k.startswith(("mean", "var"))}
    safetensors_numpy.save_file(tensors, str(tmp_path / "none"), metadata=metadata)
    back = nxrs.Trainer.from_safetensors(tmp_path / "none")
    assert back.state_dict()["var4"].tolist() == [1.0] * 4
    bad = {"layers": json.dumps([{"type": "Input", "shape": [6]}, {"type": "Dense"}])}
    safetensors_numpy.save_file(state, str(tmp_path / "bad"), metadata=bad)
    with pytest.raises(nxrs.InputError, match="the file's layers are not a model"):
        nxrs.Trainer.from_safetensors(tmp_path / "bad")


def test_mlp_files_keep_their_metadata(tmp_path: Path) -> None:
    from safetensors import safe_open

    t = nxrs.Trainer(layers=[3, 4, 2])
    t.save_safetensors(tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        assert f.metadata()["layers"] == "[3, 4, 2]"
        assert sorted(f.keys()) == ["W1", "W2", "b1", "b2"]


def test_to_torch_draws_nothing_from_torchs_generator() -> None:
    t = nxrs.Trainer(layers=MODELS["conv2d"], **CONFIG)
    before = torch.random.get_rng_state()
    t.to_torch()
    assert torch.equal(torch.random.get_rng_state(), before)
