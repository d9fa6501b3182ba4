"""Interop of residual blocks, GELU and layers without biases (docs/TRAINING.md section 15.7):
``to_torch``, ``from_torch``, ``to_onnx`` and safetensors for models with nested ``Residual``
blocks. The tensor names and their depth-first numbering come from the section's text; other
runtimes' outputs are compared to ``predict_proba`` within float32 tolerance, the tensors that
cross bit for bit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import nxrs
import nxrs.interop
from nxrs._interop.weights import _numbered
from nxrs.layers import (
    GELU,
    BatchNorm1d,
    Conv1d,
    Dense,
    Dropout,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    ReLU,
    Residual,
    Tanh,
)

torch = pytest.importorskip("torch")
nn = torch.nn

#: Nested residual blocks with GELU, Dropout and layers without biases (dense), and a residual
#: over convolutions with BatchNorm in its branch (conv1d). Their tensors, depth first:
#: gamma1 W2 b2 W3 W4 b4 gamma5 beta5 W6 b6, and W1 b1 gamma2 beta2 W3 b3 gamma4 W5.
MODELS: dict[str, list[Layer]] = {
    "dense": [
        Input(8),
        Residual(
            [
                LayerNorm(bias=False),
                Dense(16),
                GELU(),
                Residual([Dense(16, bias=False), ReLU(), Dropout(0.2)]),
                Dense(8),
            ]
        ),
        LayerNorm(),
        Tanh(),
        Dense(3),
    ],
    "conv1d": [
        Input(2, 12),
        Conv1d(4, 3, padding=1),
        Residual([BatchNorm1d(), GELU(), Conv1d(4, 3, padding=1)]),
        LayerNorm(bias=False),
        Flatten(),
        Dense(3, bias=False),
    ],
}
PARAMETERS = {
    "dense": ["gamma1", "W2", "b2", "W3", "W4", "b4", "gamma5", "beta5", "W6", "b6"],
    "conv1d": ["W1", "b1", "gamma2", "beta2", "W3", "b3", "gamma4", "W5"],
}
CONFIG: dict[str, Any] = {"batch_size": 8, "lr": 0.01, "seed": 5}
RTOL, ATOL = 1e-4, 1e-5


def samples(name: str, n: int = 48) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    shape = tuple(MODELS[name][0].to_dict()["shape"])
    rng = np.random.default_rng(11)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, 3, n)


def trained(name: str) -> nxrs.Trainer:
    t = nxrs.Trainer(layers=MODELS[name], **CONFIG)
    t.fit(*samples(name), epochs=2)
    return t


def input_shape(name: str) -> tuple[int, ...]:
    return tuple(MODELS[name][0].to_dict()["shape"])


def bits(t: nxrs.Trainer) -> dict[str, list[int]]:
    """The parameters and running statistics (no optimiser slots) as bit patterns."""
    slots = {f"{m}{name}" for name in t.state_dict() for m in "mv"}
    return {
        k: v.view(np.uint32).ravel().tolist() for k, v in t.state_dict().items() if k not in slots
    }


def softmax(z: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    e = np.exp(z - z.max(axis=1, keepdims=True), dtype=np.float64)
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


def test_layers_are_numbered_depth_first() -> None:
    # Section 15.7's example: the Residual at 1, LayerNorm at 2, Dense at 3, ReLU at 4; the
    # tensors gamma1 beta1 W2 b2.
    t = nxrs.Trainer(layers=[Input(8), Residual([LayerNorm(), Dense(8)]), ReLU()])
    (residual, relu) = _numbered(t.config["layers"])
    assert (residual.position, residual.n, residual.tensors()) == (1, 0, [])
    assert [(i.position, i.n, i.tensors()) for i in residual.branch] == [
        (2, 1, ["gamma1", "beta1"]),
        (3, 2, ["W2", "b2"]),
    ]
    assert (relu.position, relu.n, relu.tensors(), relu.branch) == (4, 2, [], [])
    for name, model in MODELS.items():
        state = nxrs.Trainer(layers=model).state_dict()
        assert [k for k in state if not k.startswith(("m", "v"))] == PARAMETERS[name]

        def names(items: list[Any]) -> list[str]:
            return [t for i in items for t in [*i.tensors(), *names(i.branch)]]

        assert names(_numbered(nxrs.Trainer(layers=model).config["layers"])) == PARAMETERS[name]


def test_to_torch_modules() -> None:
    from nxrs._interop.torch_residual import Residual as TorchResidual

    module = nxrs.Trainer(layers=MODELS["dense"], **CONFIG).to_torch()
    assert [type(m).__name__ for m in module] == ["Residual", "LayerNorm", "Tanh", "Linear"]
    block = module[0]
    assert type(block) is TorchResidual
    kinds = [type(m).__name__ for m in block.branch]
    assert kinds == ["LayerNorm", "Linear", "GELU", "Residual", "Linear"]
    assert block.branch[0].bias is None and block.branch[0].weight is not None
    assert block.branch[1].bias is not None
    assert block.branch[2].approximate == "none"
    inner = block.branch[3].branch
    assert [type(m).__name__ for m in inner] == ["Linear", "ReLU", "Dropout"]
    assert inner[0].bias is None
    assert module[1].bias is not None
    # The class has one importable name: a whole module pickles and loads again.
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert type(again[0]) is TorchResidual


@pytest.mark.parametrize("name", MODELS)
def test_to_torch_in_eval_mode_computes_predict_proba(name: str) -> None:
    t = trained(name)
    x, _ = samples(name, 32)
    expected = t.predict_proba(x)
    with torch.no_grad():
        logits = t.to_torch().eval()(torch.from_numpy(x)).numpy()
        probabilities = t.to_torch(softmax=True).eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(probabilities, expected, rtol=RTOL, atol=ATOL)
    assert (logits.argmax(axis=1) == t.predict(x)).all()


@pytest.mark.parametrize("name", MODELS)
def test_from_torch_of_to_torch_gives_the_same_bits(name: str) -> None:
    t = trained(name)
    back = nxrs.Trainer.from_torch(t.to_torch(), input_shape=input_shape(name), **CONFIG)
    assert back.config["layers"] == t.config["layers"]
    assert bits(back) == bits(t)
    assert back.steps == 0
    x, _ = samples(name, 8)
    assert back.predict_proba(x).tobytes() == t.predict_proba(x).tobytes()


def test_from_torch_takes_a_torch_model_with_blocks_bit_for_bit() -> None:
    from nxrs._interop.torch_residual import Residual as TorchResidual

    torch.manual_seed(1)
    model = nn.Sequential(
        TorchResidual(nn.LayerNorm(6, bias=False), nn.Linear(6, 6), nn.GELU()),
        nn.Linear(6, 4, bias=False),
        nn.Linear(4, 3),
    ).eval()
    with torch.no_grad():
        model[0].branch[0].weight.uniform_(0.5, 1.5)
    t = nxrs.Trainer.from_torch(model, input_shape=6)
    assert t.config["layers"][1:3] == [
        {
            "type": "Residual",
            "layers": [
                {"type": "LayerNorm", "eps": float(np.float32(1e-5)), "bias": False},
                {"type": "Dense", "units": 6},
                {"type": "GELU"},
            ],
        },
        {"type": "Dense", "units": 4, "bias": False},
    ]
    torch_tensors = {
        "gamma1": model[0].branch[0].weight,
        "W2": model[0].branch[1].weight,
        "b2": model[0].branch[1].bias,
        "W3": model[1].weight,
        "W4": model[2].weight,
        "b4": model[2].bias,
    }
    expected = {
        k: v.detach().numpy().view(np.uint32).ravel().tolist() for k, v in torch_tensors.items()
    }
    assert bits(t) == expected
    x = np.random.default_rng(2).standard_normal((20, 6)).astype(np.float32)
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(t.predict_proba(x), softmax(logits), rtol=RTOL, atol=ATOL)


class OwnBlock(nn.Module):
    """A residual block of a user's own class: the same computation, not nxrs's module."""

    def __init__(self) -> None:
        super().__init__()
        self.branch = nn.Sequential(nn.Linear(4, 4))

    def forward(self, x: Any) -> Any:
        return x + self.branch(x)


@pytest.mark.parametrize(
    ("build", "module", "why"),
    [
        (lambda: [OwnBlock(), nn.Linear(4, 2)], "0 (OwnBlock", "nxrs has no layer for <class"),
        (
            lambda: [residual(nn.Linear(4, 4), nn.GELU(approximate="tanh")), nn.Linear(4, 2)],
            "0.branch.1 (GELU",
            "approximate='tanh'; nxrs's GELU is the exact form",
        ),
        (
            lambda: [residual(residual(nn.Conv1d(1, 1, 1, bias=False)))],
            "0.branch.0.branch.0 (Conv1d",
            "it has no bias",
        ),
    ],
)
def test_from_torch_refuses_blocks_it_cannot_represent(build: Any, module: str, why: str) -> None:
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(nn.Sequential(*build()), input_shape=4)
    text = str(err.value)
    assert text.startswith(f"module {module}"), text
    assert f") cannot be represented: {why}" in text, text


def residual(*modules: Any) -> Any:
    from nxrs._interop.torch_residual import Residual as TorchResidual

    return TorchResidual(*modules)


def test_own_residual_classes_are_named_in_the_refusal() -> None:
    with pytest.raises(nxrs.ConfigError, match="residual block is taken as to_torch writes"):
        nxrs.Trainer.from_torch(nn.Sequential(OwnBlock(), nn.Linear(4, 2)), input_shape=4)


def test_from_torch_hints_at_input_shape_for_blocks() -> None:
    model = nn.Sequential(residual(nn.Linear(4, 4, bias=False), nn.GELU()), nn.Linear(4, 2))
    with pytest.raises(nxrs.ConfigError, match="give input_shape="):
        nxrs.Trainer.from_torch(model)


def test_an_odd_count_of_parameters_starts_a_run(tmp_path: Path) -> None:
    """One tensor (W1 alone), and W1 b1 W2 (three): the core reads the parameters in the
    state's order, not as (W, b) pairs."""
    for layers in (
        [Input(4), Dense(3, bias=False)],
        [Input(4), Dense(5), GELU(), Dense(3, bias=False)],
    ):
        t = nxrs.Trainer(layers=layers, seed=7)
        back = nxrs.Trainer.from_torch(t.to_torch(), input_shape=4)
        assert bits(back) == bits(t)
        t.save_safetensors(tmp_path / "w.safetensors")
        again = nxrs.Trainer.from_safetensors(tmp_path / "w.safetensors")
        assert bits(again) == bits(t)


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def run_onnx(path: Path, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: npt.NDArray[np.float32] = session.run(None, {"input": x})[0]
    return out


@pytest.mark.parametrize("name", MODELS)
def test_onnx_export_computes_predict_proba(name: str, tmp_path: Path) -> None:
    t = trained(name)
    x, _ = samples(name, 32)
    expected = t.predict_proba(x)
    t.to_onnx(tmp_path / "p.onnx")
    t.to_onnx(tmp_path / "z.onnx", softmax=False)
    np.testing.assert_allclose(run_onnx(tmp_path / "p.onnx", x), expected, rtol=RTOL, atol=ATOL)
    logits = run_onnx(tmp_path / "z.onnx", x)
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)
    assert (logits.argmax(axis=1) == t.predict(x)).all()


def test_onnx_nodes_of_blocks(tmp_path: Path) -> None:
    nxrs.Trainer(layers=MODELS["dense"]).to_onnx(tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert model.opset_import[0].version == nxrs.interop.ONNX_LAYERS_OPSET
    nodes = [(node.op_type, list(node.input)) for node in model.graph.node]
    assert nodes == [
        ("LayerNormalization", ["input", "gamma1"]),  # no B: bias=False
        ("Gemm", ["h2", "W2", "b2"]),
        ("Div", ["h3", "sqrt2"]),  # GELU: x * (0.5 * (1 + erf(x / sqrt(2))))
        ("Erf", ["h4_scaled"]),
        ("Add", ["h4_erf", "one"]),
        ("Mul", ["h4_plus1", "half"]),
        ("Mul", ["h3", "h4_phi"]),
        ("Gemm", ["h4", "W3"]),  # no C: bias=False
        ("Relu", ["h6"]),
        ("Add", ["h4", "h7"]),  # the inner Residual (5): its input plus its branch's output
        ("Gemm", ["h5", "W4", "b4"]),
        ("Add", ["input", "h9"]),  # the outer Residual (1)
        ("LayerNormalization", ["h1", "gamma5", "beta5"]),
        ("Tanh", ["h10"]),
        ("Gemm", ["h11", "W6", "b6"]),
        ("Softmax", ["logits"]),
    ]
    constants = {
        i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer if "_" not in i.name
    }
    assert constants["sqrt2"] == np.float32(np.sqrt(2)) and constants["half"] == 0.5
    assert sorted(k for k in constants if k[-1].isdigit() and k != "sqrt2") == sorted(
        PARAMETERS["dense"]
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
        assert sorted(f.keys()) == sorted(bits(t))
    with safe_open(str(tmp_path / "all.safetensors"), framework="np") as f:
        assert sorted(f.keys()) == sorted(t.state_dict())
        for key in f.keys():  # noqa: SIM118 (safe_open is no mapping)
            assert f.get_tensor(key).tobytes() == t.state_dict()[key].tobytes(), key
    for file in ("m", "all"):
        back = nxrs.Trainer.from_safetensors(tmp_path / f"{file}.safetensors", **CONFIG)
        assert back.config["layers"] == t.config["layers"]
        assert bits(back) == bits(t)
