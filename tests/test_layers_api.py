"""The public layer objects ``nxrs.layers`` (TRAINING.md section 15.1): their JSON
form against the definition's, the inverse, type conversion (and only that: values are the
core's to check), ``repr``, model files and the presets, run through PyTorch modules of the
same meaning."""

from __future__ import annotations

import copy
import doctest
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nxrs
import nxrs.layers as L
from nxrs import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs"

# Every class with the JSON object the definition gives it: the table of section 15.1 (its
# parameter names), "every one written out", sizes as lists ("[5]" for 1-D, pairs for 2-D), a
# pool's stride defaulting to its kernel size and PyTorch's defaults (p 0.5, momentum 0.1,
# eps 1e-5). Written by hand from TRAINING.md, not from the code.
EXPECTED: list[tuple[L.Layer, dict[str, Any]]] = [
    (L.Input(1, 40), {"type": "Input", "shape": [1, 40]}),
    (L.Input(64), {"type": "Input", "shape": [64]}),
    (L.Input(3, 32, 32), {"type": "Input", "shape": [3, 32, 32]}),
    (L.Dense(10), {"type": "Dense", "units": 10}),
    (
        L.Conv1d(25, 5, stride=2, padding=1),
        {"type": "Conv1d", "out_channels": 25, "kernel_size": [5], "stride": [2], "padding": [1]},
    ),
    (
        L.Conv1d(8, 3),
        {"type": "Conv1d", "out_channels": 8, "kernel_size": [3], "stride": [1], "padding": [0]},
    ),
    (
        L.Conv2d(16, 3, padding=1),
        {
            "type": "Conv2d",
            "out_channels": 16,
            "kernel_size": [3, 3],
            "stride": [1, 1],
            "padding": [1, 1],
        },
    ),
    (
        L.Conv2d(4, (3, 5), stride=(2, 1), padding=(0, 2)),
        {
            "type": "Conv2d",
            "out_channels": 4,
            "kernel_size": [3, 5],
            "stride": [2, 1],
            "padding": [0, 2],
        },
    ),
    (L.MaxPool1d(2), {"type": "MaxPool1d", "kernel_size": [2], "stride": [2]}),
    (L.MaxPool1d(3, stride=1), {"type": "MaxPool1d", "kernel_size": [3], "stride": [1]}),
    (L.MaxPool2d(2), {"type": "MaxPool2d", "kernel_size": [2, 2], "stride": [2, 2]}),
    (
        L.MaxPool2d((2, 3), stride=1),
        {"type": "MaxPool2d", "kernel_size": [2, 3], "stride": [1, 1]},
    ),
    (L.AvgPool1d(4), {"type": "AvgPool1d", "kernel_size": [4], "stride": [4]}),
    (L.AvgPool2d(3, stride=2), {"type": "AvgPool2d", "kernel_size": [3, 3], "stride": [2, 2]}),
    (L.Flatten(), {"type": "Flatten"}),
    (L.ReLU(), {"type": "ReLU"}),
    (L.Tanh(), {"type": "Tanh"}),
    (L.Sigmoid(), {"type": "Sigmoid"}),
    (L.Dropout(0.5), {"type": "Dropout", "p": 0.5}),
    (L.Dropout(), {"type": "Dropout", "p": 0.5}),
    (L.Dropout(p=0.2), {"type": "Dropout", "p": 0.2}),
    (L.BatchNorm1d(), {"type": "BatchNorm1d", "momentum": 0.1, "eps": 1e-5}),
    (L.BatchNorm2d(), {"type": "BatchNorm2d", "momentum": 0.1, "eps": 1e-5}),
    (
        L.BatchNorm2d(momentum=0.01, eps=1e-3),
        {"type": "BatchNorm2d", "momentum": 0.01, "eps": 1e-3},
    ),
    (L.LayerNorm(), {"type": "LayerNorm", "eps": 1e-5}),
    (L.LayerNorm(eps=1e-6), {"type": "LayerNorm", "eps": 1e-6}),
]

CLASSES = [
    "Input",
    "Dense",
    "Conv1d",
    "Conv2d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "Flatten",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Dropout",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
]


def test_every_class_of_the_definition_is_covered() -> None:
    assert {type(layer).__name__ for layer, _ in EXPECTED} == set(CLASSES)
    assert all(isinstance(getattr(L, name), type) for name in CLASSES)
    assert set(CLASSES) <= set(L.__all__)


@pytest.mark.parametrize("layer, expected", EXPECTED, ids=repr)
def test_to_dict_is_the_definitions_json_object(layer: L.Layer, expected: dict[str, Any]) -> None:
    d = layer.to_dict()
    assert d == expected
    # The types too: ints stay ints, floats are Python floats, sizes are lists.
    assert json.loads(json.dumps(d)) == d
    for key, value in d.items():
        assert type(value) is type(expected[key]), key
        if isinstance(value, list):
            assert all(type(v) is int for v in value), key


@pytest.mark.parametrize("layer, expected", EXPECTED, ids=repr)
def test_from_dict_inverts_to_dict(layer: L.Layer, expected: dict[str, Any]) -> None:
    assert L.from_dict(expected) == layer
    assert L.from_dict(json.loads(json.dumps(layer.to_dict()))) == layer
    assert hash(L.from_dict(expected)) == hash(layer)


def test_the_json_examples_of_the_definition() -> None:
    # The objects TRAINING.md section 15.1 writes out literally, read from the document itself.
    text = (DOCS / "TRAINING.md").read_text()
    section = text.split("### 15.1")[1].split("### 15.2")[0]
    examples = [json.loads(m) for m in re.findall(r"`(\{\"type\".*?\})`", section)]
    assert len(examples) == 3, examples
    for example in examples:
        assert L.from_dict(example).to_dict() == example
    assert examples == [
        L.Conv1d(25, 5, stride=2, padding=1).to_dict(),
        L.Input(1, 40).to_dict(),
        L.Dropout(0.5).to_dict(),
    ]


def test_from_dict_reads_what_the_core_writes() -> None:
    # rust/nxrs-core/src/layers/json.rs, `to_json`: floats as the binary64 value of their
    # binary32 bits, every size a list. The values read back are the same binary32 numbers.
    core = {
        "type": "BatchNorm1d",
        "momentum": float(np.float32(0.1)),
        "eps": float(np.float32(1e-5)),
    }
    layer = L.from_dict(core)
    assert isinstance(layer, L.BatchNorm1d)
    assert np.float32(layer.momentum) == np.float32(0.1)
    assert np.float32(layer.eps) == np.float32(1e-5)
    assert layer.to_dict() == core
    assert L.from_dict({"type": "LayerNorm", "eps": float(np.float32(1e-5))}).to_dict()["eps"] == (
        float(np.float32(1e-5))
    )


def test_from_dict_takes_ints_for_sizes_defaults_and_nulls() -> None:
    assert L.from_dict({"type": "Conv2d", "out_channels": 2, "kernel_size": 3}) == L.Conv2d(2, 3)
    assert L.from_dict({"type": "Conv1d", "out_channels": 2, "kernel_size": 3, "stride": 2}) == (
        L.Conv1d(2, [3], stride=(2,))
    )
    assert L.from_dict({"type": "AvgPool2d", "kernel_size": [2, 3], "stride": None}) == (
        L.AvgPool2d((2, 3), stride=(2, 3))
    )
    assert L.from_dict({"type": "Dropout"}) == L.Dropout(0.5)
    assert L.from_dict({"type": "Dropout", "p": 0}) == L.Dropout(0.0)
    assert L.from_dict({"type": "BatchNorm2d", "eps": 1e-3}) == L.BatchNorm2d(0.1, 1e-3)


def test_int_or_pair() -> None:
    assert L.Conv2d(3, 5) == L.Conv2d(3, (5, 5)) == L.Conv2d(3, [5, 5])
    assert L.Conv2d(3, 5).kernel_size == (5, 5)
    assert L.Conv2d(3, (5, 2), stride=2).stride == (2, 2)
    assert L.Conv2d(3, (5, 2)) != L.Conv2d(3, (2, 5))
    assert L.Conv1d(3, 5) == L.Conv1d(3, (5,)) == L.Conv1d(3, [5])
    assert L.Conv1d(3, 5).kernel_size == (5,)  # as torch.nn.Conv1d keeps it
    assert L.MaxPool2d((1, 2)).kernel_size == (1, 2)


def test_a_pools_stride_defaults_to_its_kernel() -> None:
    for cls in (L.MaxPool1d, L.AvgPool1d):
        assert cls(3).stride == (3,)
        assert cls(3) == cls(3, stride=3) == cls(3, stride=None)
        assert cls(3) != cls(3, stride=1)
    for cls2 in (L.MaxPool2d, L.AvgPool2d):
        assert cls2((2, 3)).stride == (2, 3)
        assert cls2((2, 3)) == cls2((2, 3), stride=(2, 3))
        assert cls2(2).to_dict()["stride"] == [2, 2]


def test_equality_and_hashing_by_type_and_value() -> None:
    assert L.MaxPool1d(2) != L.AvgPool1d(2)
    assert L.ReLU() != L.Tanh() and L.BatchNorm1d() != L.BatchNorm2d()
    assert L.Conv1d(2, 3) != L.Conv2d(2, 3)
    assert len({L.ReLU(), L.ReLU(), L.Dense(3), L.Dense(3), L.Dense(4)}) == 3
    assert L.Dropout(np.float32(0.25)) == L.Dropout(0.25)
    layer = L.Conv1d(2, 3)
    with pytest.raises(AttributeError):
        layer.out_channels = 5  # type: ignore[misc]


@pytest.mark.parametrize("layer", [x for x, _ in EXPECTED], ids=repr)
def test_pickle_and_copy_keep_the_layer(layer: L.Layer) -> None:
    # Ray and multiprocessing send layers by pickle; a frozen layer must survive it.
    assert pickle.loads(pickle.dumps(layer)) == layer
    assert copy.deepcopy(layer) == layer and copy.copy(layer) == layer


@pytest.mark.parametrize("layer", [x for x, _ in EXPECTED], ids=repr)
def test_repr_rebuilds_the_layer(layer: L.Layer) -> None:
    namespace = {name: getattr(L, name) for name in CLASSES}
    assert eval(repr(layer), namespace) == layer


def test_repr_is_the_pytorch_style_call() -> None:
    assert repr(L.Conv1d(25, 5, stride=2, padding=1)) == "Conv1d(25, 5, stride=2, padding=1)"
    assert repr(L.Conv2d(16, 3, padding=1)) == "Conv2d(16, 3, padding=1)"
    assert repr(L.Conv2d(16, (3, 5))) == "Conv2d(16, (3, 5))"
    assert repr(L.Input(1, 8, 8)) == "Input(1, 8, 8)"
    assert repr(L.MaxPool2d(2)) == "MaxPool2d(2)"
    assert repr(L.AvgPool1d(3, stride=1)) == "AvgPool1d(3, stride=1)"
    assert repr(L.Dropout(0.2)) == "Dropout(p=0.2)"
    assert repr(L.BatchNorm1d(eps=1e-3)) == "BatchNorm1d(eps=0.001)"
    assert repr([L.ReLU(), L.Flatten()]) == "[ReLU(), Flatten()]"


sizes = st.integers(min_value=0, max_value=2**40)
pairs = st.one_of(sizes, st.tuples(sizes, sizes))
reals = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def layers(draw: st.DrawFn) -> L.Layer:
    kind = draw(st.sampled_from(CLASSES))
    cls = getattr(L, kind)
    if kind == "Input":
        return L.Input(*draw(st.lists(sizes, min_size=1, max_size=3)))
    if kind == "Dense":
        return L.Dense(draw(sizes))
    if kind in ("Conv1d", "Conv2d"):
        size = sizes if kind == "Conv1d" else pairs
        return cls(draw(sizes), draw(size), stride=draw(size), padding=draw(size))  # type: ignore[no-any-return]
    if "Pool" in kind:
        size = sizes if kind.endswith("1d") else pairs
        return cls(draw(size), stride=draw(st.one_of(st.none(), size)))  # type: ignore[no-any-return]
    if kind == "Dropout":
        return L.Dropout(draw(reals))
    if kind.startswith("BatchNorm"):
        return cls(momentum=draw(reals), eps=draw(reals))  # type: ignore[no-any-return]
    if kind == "LayerNorm":
        return L.LayerNorm(eps=draw(reals))
    return cls()  # type: ignore[no-any-return]


@given(st.lists(layers(), max_size=8))
def test_round_trips_through_json_and_repr(model: list[L.Layer]) -> None:
    text = json.dumps(L.to_dicts(model))
    assert L.from_dicts(json.loads(text)) == model
    namespace = {name: getattr(L, name) for name in CLASSES}
    assert [eval(repr(layer), namespace) for layer in model] == model


@given(sizes, pairs, pairs, pairs)
def test_sizes_as_numpy_ints_lists_and_tuples(out: int, k: Any, s: Any, p: Any) -> None:
    def numpy(v: Any) -> Any:
        return tuple(np.int64(x) for x in v) if isinstance(v, tuple) else np.uint64(v)

    def listed(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else [v, v]

    layer = L.Conv2d(out, k, stride=s, padding=p)
    assert L.Conv2d(np.int64(out), numpy(k), stride=numpy(s), padding=numpy(p)) == layer
    assert L.Conv2d(out, listed(k), stride=listed(s), padding=listed(p)) == layer
    assert all(type(n) is int for n in (*layer.kernel_size, *layer.stride, *layer.padding))


def test_numpy_numbers_become_python_ones() -> None:
    layer = L.Conv1d(np.int32(25), np.int64(5), stride=np.uint8(2), padding=np.array(1))
    assert layer == L.Conv1d(25, 5, stride=2, padding=1)
    assert type(layer.out_channels) is int and type(layer.kernel_size[0]) is int
    assert json.dumps(layer.to_dict())  # plain JSON types
    assert type(L.Dense(np.int16(3)).units) is int
    assert L.Input(np.int64(1), np.int64(40)).shape == (1, 40)
    dropout = L.Dropout(np.float32(0.5))
    assert type(dropout.p) is float and dropout == L.Dropout()
    assert type(L.LayerNorm(eps=np.float64(1e-5)).eps) is float
    assert type(L.BatchNorm1d(momentum=1).momentum) is float  # an int is a number


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: L.Dense("10"), ["Dense", "units", "str"]),
        (lambda: L.Dense(10.0), ["Dense", "units", "float"]),
        (lambda: L.Dense(True), ["Dense", "units", "bool"]),
        (lambda: L.Dense(np.bool_(True)), ["Dense", "units", "bool"]),
        (lambda: L.Input(1, 40.0), ["Input", "shape[1]", "float"]),
        (lambda: L.Input((1, 40)), ["Input", "shape[0]", "tuple"]),
        (lambda: L.Conv1d("25", 5), ["Conv1d", "out_channels", "str"]),
        (lambda: L.Conv1d(25, 5.0), ["Conv1d", "kernel_size", "float"]),
        (lambda: L.Conv1d(25, 5, stride="2"), ["Conv1d", "stride", "str"]),
        (lambda: L.Conv1d(25, 5, padding=False), ["Conv1d", "padding", "bool"]),
        (lambda: L.Conv1d(25, (5, 5)), ["Conv1d", "kernel_size"]),
        (lambda: L.Conv2d(16, (3, 3, 3)), ["Conv2d", "kernel_size", "pair"]),
        (lambda: L.Conv2d(16, (3,)), ["Conv2d", "kernel_size", "pair"]),
        (lambda: L.Conv2d(16, "3"), ["Conv2d", "kernel_size", "str"]),
        (lambda: L.Conv2d(16, (3, 1.5)), ["Conv2d", "kernel_size[1]", "float"]),
        (lambda: L.Conv2d(16, 3, padding=(1, None)), ["Conv2d", "padding[1]", "NoneType"]),
        (lambda: L.MaxPool1d(2.0), ["MaxPool1d", "kernel_size", "float"]),
        (lambda: L.MaxPool2d(2, stride=1.0), ["MaxPool2d", "stride", "float"]),
        (lambda: L.AvgPool1d(None), ["AvgPool1d", "kernel_size", "NoneType"]),
        (lambda: L.AvgPool2d((2, "2")), ["AvgPool2d", "kernel_size[1]", "str"]),
        (lambda: L.Dropout("0.5"), ["Dropout", "p", "str"]),
        (lambda: L.Dropout(True), ["Dropout", "p", "bool"]),
        (lambda: L.Dropout(None), ["Dropout", "p", "NoneType"]),
        (lambda: L.BatchNorm1d(momentum="0.1"), ["BatchNorm1d", "momentum", "str"]),
        (lambda: L.BatchNorm2d(eps=[1e-5]), ["BatchNorm2d", "eps", "list"]),
        (lambda: L.LayerNorm(eps=False), ["LayerNorm", "eps", "bool"]),
    ],
)
def test_a_wrong_type_is_a_config_error_naming_the_layer_and_argument(
    build: Any, words: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        build()
    assert isinstance(err.value, nxrs.NxrsError) and isinstance(err.value, ValueError)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_values_are_left_to_the_core() -> None:
    # One home for every range rule: the Rust core, when a trainer is built. These are the
    # right types, so the objects take them and write them out as they are.
    assert L.Conv1d(0, 0, stride=0, padding=7).to_dict() == {
        "type": "Conv1d",
        "out_channels": 0,
        "kernel_size": [0],
        "stride": [0],
        "padding": [7],
    }
    assert L.Dense(-1).units == -1
    assert L.Dropout(1.5).p == 1.5
    assert L.BatchNorm1d(momentum=-1.0, eps=0.0).to_dict()["eps"] == 0.0
    assert L.Input().shape == ()


@pytest.mark.parametrize(
    "d, words",
    [
        ("Dense", ["object", "type"]),
        ({"units": 3}, ['needs "type"', "units"]),
        ({"type": 3}, ['needs "type"']),
        ({"type": "Linear", "units": 3}, ["unknown layer type", "Linear", "Dense"]),
        ({"type": "Conv1d", "out_channels": 3}, ["Conv1d", "kernel_size"]),
        ({"type": "Conv1d", "out_channels": 3, "kernel_size": 3, "dilation": 2}, ["dilation"]),
        ({"type": "ReLU", "inplace": True}, ["ReLU", "inplace"]),
        ({"type": "Input"}, ["Input", "shape"]),
        ({"type": "Input", "shape": 40}, ["Input", "shape"]),
        ({"type": "Input", "shape": [1, 40], "dtype": "f32"}, ["Input", "dtype"]),
        ({"type": "Dense", "units": "10"}, ["Dense", "units", "str"]),
        ({"type": "Conv2d", "out_channels": 1, "kernel_size": [3, 3, 3]}, ["kernel_size"]),
        ({"type": "Dropout", "p": "0.5"}, ["Dropout", "p", "str"]),
    ],
)
def test_from_dict_refuses_what_is_not_a_layer(d: Any, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        L.from_dict(d)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_from_dicts_names_the_position() -> None:
    with pytest.raises(ConfigError, match=r"^layer 2: Dense: units = 1\.5"):
        L.from_dicts(
            [{"type": "Input", "shape": [3]}, {"type": "ReLU"}, {"type": "Dense", "units": 1.5}]
        )
    with pytest.raises(ConfigError, match="list of layer objects"):
        L.from_dicts({"type": "Input", "shape": [3]})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"layer 1 = 64 is not a layer object"):
        L.to_dicts([L.Input(3), 64])  # type: ignore[list-item]


# The MNIST-1D paper's ConvBase (Greydanus & Kobak, "Scaling down deep learning with MNIST-1D"):
# three Conv1d of 25 channels, kernels 5, 3, 3, stride 2, padding 1, ReLU after each, then
# Linear(125, 10). Written out here independently of the preset.
CONVBASE = [
    {"type": "Input", "shape": [1, 40]},
    {"type": "Conv1d", "out_channels": 25, "kernel_size": [5], "stride": [2], "padding": [1]},
    {"type": "ReLU"},
    {"type": "Conv1d", "out_channels": 25, "kernel_size": [3], "stride": [2], "padding": [1]},
    {"type": "ReLU"},
    {"type": "Conv1d", "out_channels": 25, "kernel_size": [3], "stride": [2], "padding": [1]},
    {"type": "ReLU"},
    {"type": "Flatten"},
    {"type": "Dense", "units": 10},
]


def test_presets() -> None:
    assert L.PRESETS == ("mnist1d-cnn", "digits-cnn", "gpt-char")
    assert L.to_dicts(L.preset("gpt-char")) == L.to_dicts(L.gpt(65))
    assert L.to_dicts(L.preset("mnist1d-cnn")) == CONVBASE
    digits = L.preset("digits-cnn")
    assert digits[0] == L.Input(1, 8, 8) and digits[-1] == L.Dense(10)
    # A fresh list each time: changing one does not change the preset.
    digits.append(L.ReLU())
    assert L.preset("digits-cnn") == digits[:-1]
    for name in ("mnist-cnn", "", None, 3):
        with pytest.raises(ConfigError, match="mnist1d-cnn, digits-cnn, gpt-char"):
            L.preset(name)  # type: ignore[arg-type]


def _torch_sequential(torch: Any, model: list[L.Layer]) -> Any:
    """A torch ``nn.Sequential`` of the same meaning, from the layers' attributes (the input
    sizes inferred by torch's lazy modules)."""
    nn = torch.nn
    modules = []
    for layer in model[1:]:
        if isinstance(layer, L.Conv1d):
            modules.append(
                nn.LazyConv1d(layer.out_channels, layer.kernel_size, layer.stride, layer.padding)
            )
        elif isinstance(layer, L.Conv2d):
            modules.append(
                nn.LazyConv2d(layer.out_channels, layer.kernel_size, layer.stride, layer.padding)
            )
        elif isinstance(layer, L.MaxPool2d):
            modules.append(nn.MaxPool2d(layer.kernel_size, layer.stride))
        elif isinstance(layer, L.Dense):
            modules.append(nn.LazyLinear(layer.units))
        else:
            modules.append({"ReLU": nn.ReLU, "Flatten": nn.Flatten}[type(layer).__name__]())
    return nn.Sequential(*modules)


@pytest.mark.parametrize("name", ["mnist1d-cnn", "digits-cnn"])
def test_presets_run_as_torch_models(name: str) -> None:
    torch = pytest.importorskip("torch")
    model = L.preset(name)
    first = model[0]
    assert isinstance(first, L.Input)
    net = _torch_sequential(torch, model)
    with torch.no_grad():
        out = net(torch.zeros(7, *first.shape))
    assert tuple(out.shape) == (7, 10)
    if name == "mnist1d-cnn":
        # The paper's ConvBase written as torch modules directly: the same shapes throughout.
        nn = torch.nn
        paper = nn.Sequential(
            nn.Conv1d(1, 25, 5, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(25, 25, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(25, 25, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(125, 10),
        )
        x = torch.zeros(7, 1, 40)
        with torch.no_grad():
            ours = [tuple((x := m(x)).shape) for m in net]
            x = torch.zeros(7, 1, 40)
            theirs = [tuple((x := m(x)).shape) for m in paper]
        assert ours == theirs
        assert theirs[:5:2] == [(7, 25, 19), (7, 25, 10), (7, 25, 5)]
        assert sum(p.numel() for p in net.parameters()) == sum(
            p.numel() for p in paper.parameters()
        )


def test_load_model(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(CONVBASE))
    assert L.load_model(plain) == L.preset("mnist1d-cnn")
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"layers": L.to_dicts(L.preset("digits-cnn"))}))
    assert L.load_model(str(wrapped)) == L.preset("digits-cnn")


@pytest.mark.parametrize(
    "content, words",
    [
        (b'[{"type": "Input", "shape": [3]},', ["not a JSON file"]),
        (b"", ["not a JSON file"]),
        (b"\xff\xfe[]", ["not a JSON file"]),
        (b'[{"type": "Dropout", "p": NaN}]', ["not a JSON file", "NaN"]),
        (b'{"type": "Input", "shape": [3]}', ["list of layers", "keys"]),
        (b'{"layers": [], "lr": 0.1}', ["list of layers", "lr"]),
        (b'"mnist1d-cnn"', ["list of layers"]),
        (b"[3, 10]", ["layer 0", "object"]),
        (
            b'[{"type": "Input", "shape": [3]}, {"type": "Dense", "units": 2.5}]',
            ["layer 1", "units"],
        ),
    ],
)
def test_load_model_refuses_a_bad_file_naming_it(
    tmp_path: Path, content: bytes, words: list[str]
) -> None:
    path = tmp_path / "model.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        L.load_model(path)
    assert str(err.value).startswith(str(path)), str(err.value)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_load_model_of_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        L.load_model(tmp_path / "absent.json")


def test_the_module_is_reachable_from_the_package_and_light() -> None:
    assert nxrs.layers is L and "layers" in nxrs.__all__
    code = (
        "import sys, nxrs\n"
        "assert nxrs.layers.Conv1d\n"
        "heavy = [m for m in ('torch', 'sklearn', 'ray') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_docstring_examples() -> None:
    result = doctest.testmod(L, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
