"""Interop of sequence models (docs/TRAINING.md section 15.8): ``to_torch`` of a GPT and of
models acting per token, ``from_torch`` of what it writes, and safetensors. The tensor names and
their depth-first numbering come from the section's text; torch's outputs are compared to
``predict_proba`` within float32 tolerance, the tensors that cross bit for bit."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import nxrs
from nxrs.layers import (
    GELU,
    CausalSelfAttention,
    Dense,
    Embedding,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    PositionalEmbedding,
    Tanh,
    TiedHead,
    gpt,
)

torch = pytest.importorskip("torch")
nn = torch.nn

VOCAB, T = 11, 8
#: A GPT; a model with Dense and LayerNorm with biases acting per token and labels per token;
#: a classifier of whole sequences (Flatten, then Dense).
MODELS: dict[str, list[Layer]] = {
    "gpt": gpt(VOCAB, context=T, layers=2, heads=2, width=16),
    "per_token": [
        Input(T),
        Embedding(VOCAB, 8),
        PositionalEmbedding(T + 2, 8),
        Dense(8),
        LayerNorm(),
        CausalSelfAttention(4),
        GELU(),
        Dense(5),
    ],
    "classifier": [
        Input(T),
        Embedding(VOCAB, 6),
        LayerNorm(),
        Dense(4),
        Tanh(),
        Flatten(),
        Dense(3),
    ],
}
#: The state's parameters of the GPT (section 15.8's names, numbered depth first as 15.7 says):
#: E1 P2, per layer gamma Wqkv Wo (LayerNorm, attention) and gamma W W (LayerNorm, MLP), gamma.
GPT_PARAMETERS = [
    "E1",
    "P2",
    "gamma3",
    "Wqkv4",
    "Wo4",
    "gamma5",
    "W6",
    "W7",
    "gamma8",
    "Wqkv9",
    "Wo9",
    "gamma10",
    "W11",
    "W12",
    "gamma13",
]
CONFIG: dict[str, Any] = {"optimizer": "adamw", "weight_decay": 0.1, "batch_size": 4, "seed": 1}
RTOL, ATOL = 1e-4, 1e-5


def samples(name: str, n: int = 16) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    rng = np.random.default_rng(3)
    x = rng.integers(0, VOCAB, (n, T))
    classes = {"gpt": (VOCAB, (n, T)), "per_token": (5, (n, T)), "classifier": (3, (n,))}
    k, shape = classes[name]
    return x, rng.integers(0, k, shape)


def trained(name: str) -> nxrs.Trainer:
    t = nxrs.Trainer(layers=MODELS[name], **CONFIG)
    t.train_steps(*samples(name), 12)
    return t


def bits(t: nxrs.Trainer) -> dict[str, list[int]]:
    """The parameters (no optimiser slots) as bit patterns."""
    slots = {f"{m}{name}" for name in t.state_dict() for m in "mv"}
    return {
        k: v.view(np.uint32).ravel().tolist() for k, v in t.state_dict().items() if k not in slots
    }


def softmax(z: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    e = np.exp(z - z.max(axis=-1, keepdims=True), dtype=np.float64)
    out: npt.NDArray[np.float64] = e / e.sum(axis=-1, keepdims=True)
    return out


def run(module: Any, x: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    with torch.no_grad():
        out: npt.NDArray[np.float32] = module.eval()(torch.from_numpy(x)).numpy()
    return out


def test_gpt_state_names() -> None:
    state = nxrs.Trainer(layers=MODELS["gpt"]).state_dict()
    assert [k for k in state if not k.startswith(("m", "v"))] == GPT_PARAMETERS


def test_the_documented_nanogpt_names_are_the_state_names() -> None:
    """docs/interop.md's table of gpt's tensors (nxrs, shape, nanoGPT), read from the document
    and spelled out for two blocks: every parameter of the state, each once, of its shape."""
    import re

    text = (Path(__file__).parent.parent / "docs" / "interop.md").read_text()
    rows = re.findall(r"^  \| `([A-Za-z]+)(\{?[0-9+kL]*\}?)` \| `([^`]+)` \|", text, re.M)
    assert len(rows) == 9, rows
    sizes = {"vocab": VOCAB, "context": T, "width": 16, "3 width": 48, "4 width": 64}
    documented = {}
    for i in range(2):
        for name, number, shape in rows:
            # "1", "{3+k}", "{3+5L}": a sum of numbers, k = 5i and multiples of L = 2
            terms = number.strip("{}").split("+")
            n = sum(
                5 * i if t == "k" else int(t[:-1]) * 2 if t.endswith("L") else int(t) for t in terms
            )
            dims = tuple(sizes[d] for d in shape.split(" x "))
            documented[f"{name}{n}"] = dims
    state = nxrs.Trainer(layers=MODELS["gpt"]).state_dict()
    assert documented == {name: state[name].shape for name in GPT_PARAMETERS}


def test_to_torch_modules_of_a_gpt() -> None:
    from nxrs._interop import torch_sequence as sequence
    from nxrs._interop.torch_residual import Residual

    t = nxrs.Trainer(layers=MODELS["gpt"], **CONFIG)
    module = t.to_torch()
    kinds = [type(m) for m in module]
    assert kinds == [
        nn.Embedding,
        sequence.PositionalEmbedding,
        Residual,
        Residual,
        Residual,
        Residual,
        nn.LayerNorm,
        sequence.TiedHead,
    ]
    attention = module[2].branch[1]
    assert type(attention) is sequence.CausalSelfAttention and attention.heads == 2
    assert attention.c_attn.bias is None and attention.c_proj.bias is None
    # LayerNorm on a sequence normalises each token's width, not the whole sample.
    assert module[6].normalized_shape == (16,) and module[2].branch[0].normalized_shape == (16,)
    state = t.state_dict()
    for tensor, name in [
        (module[0].weight, "E1"),
        (module[1].weight, "P2"),
        (attention.c_attn.weight, "Wqkv4"),
        (attention.c_proj.weight, "Wo4"),
        (module[5].branch[3].weight, "W12"),
    ]:
        assert tensor.detach().numpy().tobytes() == state[name].tobytes(), name


def test_the_head_is_tied_to_the_embedding_in_torch() -> None:
    module = nxrs.Trainer(layers=MODELS["gpt"], **CONFIG).to_torch()
    assert module[-1].weight is module[0].weight
    # One parameter for both ends: the table counted once, and a gradient through the head
    # reaches the embedding's table.
    assert sum(p is module[0].weight for p in module.parameters()) == 1
    x, y = samples("gpt", 4)
    x = x % 5  # tokens 5 .. VOCAB-1 unread
    logits = module(torch.from_numpy(x))
    nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), torch.from_numpy(y).reshape(-1)
    ).backward()
    assert bool(module[0].weight.grad[5:].abs().sum() > 0)  # only the head reads these rows
    # A whole-model pickle keeps the classes and the tie.
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert again[-1].weight is again[0].weight
    assert [type(m) for m in again] == [type(m) for m in module]
    np.testing.assert_array_equal(run(again, x), run(module, x))


@pytest.mark.parametrize("name", MODELS)
def test_to_torch_computes_predict_proba(name: str) -> None:
    t = trained(name)
    x, _ = samples(name, 24)
    expected = t.predict_proba(x)
    logits = run(t.to_torch(), x)
    probabilities = run(t.to_torch(softmax=True), x)
    assert logits.shape == expected.shape
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(probabilities, expected, rtol=RTOL, atol=ATOL)
    assert (logits.argmax(axis=-1) == t.predict(x)).all()


def test_attention_module_against_the_sections_formula() -> None:
    """The torch module against section 15.8's steps written out in float64: queries, keys
    and values the column blocks of x Wqkvᵀ, head a in columns a*h.., scores scaled by
    1/sqrt(h) over the positions j <= i."""
    from nxrs._interop.torch_sequence import CausalSelfAttention as TorchAttention

    rng = np.random.default_rng(4)
    heads, width = 3, 12
    h = width // heads
    module = TorchAttention(width, heads)
    wqkv = rng.standard_normal((3 * width, width)).astype(np.float32)
    wo = rng.standard_normal((width, width)).astype(np.float32)
    with torch.no_grad():
        module.c_attn.weight.copy_(torch.from_numpy(wqkv))
        module.c_proj.weight.copy_(torch.from_numpy(wo))
    x = rng.standard_normal((2, 5, width)).astype(np.float32)
    expected = np.zeros(x.shape)
    for s in range(len(x)):
        qkv = x[s].astype(np.float64) @ wqkv.T
        o = np.zeros((5, width))
        for a in range(heads):
            cols = slice(a * h, a * h + h)
            q, k, v = (qkv[:, part * width :][:, cols] for part in range(3))
            for i in range(5):
                scores = (q[i] @ k[: i + 1].T) / np.sqrt(h)
                p = np.exp(scores - scores.max())
                o[i, cols] = (p / p.sum()) @ v[: i + 1]
        expected[s] = o @ wo.T
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_from_torch_of_to_torch_gives_the_same_bits(name: str) -> None:
    t = trained(name)
    back = nxrs.Trainer.from_torch(t.to_torch(), input_shape=T, **CONFIG)

    def without_init(layers: list[Any]) -> list[Any]:
        """The layers without their initialisation settings, which a torch module does not
        carry (the weights are the module's)."""
        return [
            {"type": "Residual", "layers": without_init(d["layers"])}
            if d["type"] == "Residual"
            else {k: v for k, v in d.items() if k not in ("std", "proj_std")}
            for d in layers
        ]

    assert back.config["layers"] == without_init(t.config["layers"])
    assert bits(back) == bits(t)
    assert back.steps == 0
    x, _ = samples(name, 8)
    assert back.predict_proba(x).tobytes() == t.predict_proba(x).tobytes()


def test_from_torch_refuses_a_head_of_its_own() -> None:
    from nxrs._interop.torch_sequence import TiedHead

    module = nxrs.Trainer(layers=MODELS["gpt"]).to_torch()
    module[-1] = TiedHead(nn.Parameter(module[0].weight.detach().clone()))
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(module, input_shape=T)
    text = str(err.value)
    assert text.startswith("module 7 (TiedHead()) cannot be represented: its weight is not"), text


@pytest.mark.parametrize(
    ("change", "module", "why"),
    [
        (
            lambda m: m.__setitem__(0, nn.Embedding(VOCAB, 16, padding_idx=0)),
            "0 (Embedding",
            "padding_idx=0",
        ),
        (
            lambda m: setattr(m[2].branch[1], "c_proj", nn.Linear(16, 16)),
            "2.branch.1 (CausalSelfAttention",
            "its projections have biases",
        ),
    ],
)
def test_from_torch_refuses_sequence_modules_it_cannot_represent(
    change: Any, module: str, why: str
) -> None:
    model = nxrs.Trainer(layers=MODELS["gpt"]).to_torch()
    change(model)
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(model, input_shape=T)
    text = str(err.value)
    assert text.startswith(f"module {module}"), text
    assert f") cannot be represented: {why}" in text, text


def test_from_torch_names_a_layernorm_over_more_than_a_tokens_width() -> None:
    model = nxrs.Trainer(layers=MODELS["gpt"]).to_torch()
    model[2].branch[0] = nn.LayerNorm((T, 16), bias=False)
    with pytest.raises(nxrs.ConfigError) as err:
        nxrs.Trainer.from_torch(model, input_shape=T)
    assert str(err.value) == (
        f"module 2.branch.0 ({model[2].branch[0]!r}) cannot be represented: it normalises over "
        f"the shape ({T}, 16), and each token here has the shape (16,); nxrs's LayerNorm "
        "normalises over each token's width (PyTorch's LayerNorm((16,)))"
    )


class OwnAttention(nn.Module):
    """nanoGPT's attention of a user's own class: not one of nxrs's modules."""

    def forward(self, x: Any) -> Any:
        return x


def test_own_attention_classes_are_refused_by_name() -> None:
    model = nxrs.Trainer(layers=MODELS["gpt"]).to_torch()
    model[2].branch[1] = OwnAttention()
    with pytest.raises(nxrs.ConfigError, match="causal self-attention and tied heads, of the"):
        nxrs.Trainer.from_torch(model, input_shape=T)


def test_from_torch_hints_at_input_shape_for_sequences() -> None:
    with pytest.raises(nxrs.ConfigError, match=r"\(T,\) for T token ids"):
        nxrs.Trainer.from_torch(nxrs.Trainer(layers=MODELS["gpt"]).to_torch())


safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_safetensors_round_trip_of_a_gpt(tmp_path: Path) -> None:
    from safetensors import safe_open

    t = trained("gpt")
    t.save_safetensors(tmp_path / "m.safetensors")
    t.save_safetensors(tmp_path / "all.safetensors", moments=True)
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        assert json.loads(f.metadata()["layers"]) == t.config["layers"]
        assert sorted(f.keys()) == sorted(GPT_PARAMETERS)
    with safe_open(str(tmp_path / "all.safetensors"), framework="np") as f:
        assert sorted(f.keys()) == sorted(t.state_dict())
        for key in f.keys():  # noqa: SIM118 (safe_open is no mapping)
            assert f.get_tensor(key).tobytes() == t.state_dict()[key].tobytes(), key
    for file in ("m", "all"):
        back = nxrs.Trainer.from_safetensors(tmp_path / f"{file}.safetensors", **CONFIG)
        assert back.config["layers"] == t.config["layers"]
        assert bits(back) == bits(t)


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def run_onnx(path: Path, x: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: npt.NDArray[np.float32] = session.run(None, {"input": x})[0]
    return out


@pytest.mark.parametrize("name", MODELS)
def test_onnx_export_computes_predict_proba(name: str, tmp_path: Path) -> None:
    t = trained(name)
    x, _ = samples(name, 24)
    expected = t.predict_proba(x)
    t.to_onnx(tmp_path / "p.onnx")
    t.to_onnx(tmp_path / "z.onnx", softmax=False)
    probabilities = run_onnx(tmp_path / "p.onnx", x)
    assert probabilities.shape == expected.shape
    np.testing.assert_allclose(probabilities, expected, rtol=RTOL, atol=ATOL)
    logits = run_onnx(tmp_path / "z.onnx", x)
    np.testing.assert_allclose(softmax(logits), expected, rtol=RTOL, atol=ATOL)
    assert (logits.argmax(axis=-1) == t.predict(x)).all()


def test_onnx_graph_of_a_sequence_model(tmp_path: Path) -> None:
    model = [Input(T), Embedding(VOCAB, 4), PositionalEmbedding(T, 4), CausalSelfAttention(2)]
    nxrs.Trainer(layers=[*model, TiedHead()]).to_onnx(tmp_path / "m.onnx")
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    dims = [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", T, VOCAB]
    ops = [node.op_type for node in graph.node]
    assert ops[:3] == ["Gather", "Slice", "Add"]
    assert ops[-3:] == [
        "Transpose",
        "MatMul",
        "Softmax",
    ]  # the tied head: x Eᵀ, no table of its own
    assert list(graph.node[-3].input) == ["E1"]
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    assert sorted(k for k in initializers if k[0] in "EPW") == ["E1", "P2", "Wo3", "Wqkv3"]
    # c = 1 / sqrt(f32(2)), and the mask: 0 on and below the diagonal, -inf above it.
    assert initializers["scale2"] == np.float32(1) / np.sqrt(np.float32(2))
    mask = initializers["causal_mask"]
    assert mask.shape == (T, T)
    assert (mask[np.tril_indices(T)] == 0).all() and (mask[np.triu_indices(T, 1)] == -np.inf).all()
