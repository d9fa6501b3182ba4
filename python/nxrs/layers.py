"""Layer objects: a model as a list of layers (TRAINING.md section 15), PyTorch's names and
meanings, channels first.

>>> from nxrs.layers import Input, Conv1d, ReLU, Flatten, Dense
>>> model = [Input(1, 40), Conv1d(25, 5, stride=2, padding=1), ReLU(), Flatten(), Dense(10)]
>>> model[1]
Conv1d(25, 5, stride=2, padding=1)
>>> model[1].to_dict()
{'type': 'Conv1d', 'out_channels': 25, 'kernel_size': [5], 'stride': [2], 'padding': [1]}
>>> from_dicts(to_dicts(model)) == model
True

A layer is immutable, compares and hashes by value, and its ``repr`` is the call that builds
it. ``to_dict`` gives its JSON form (section 15.1: the type and every parameter written out,
sizes as lists), which ``--model FILE.json``, ``load_model`` and a checkpoint's configuration
use; ``from_dict`` is the inverse.

These classes only convert types: an argument of the wrong type (a string, a bool, a float
where a size belongs) is a ``nxrs.ConfigError`` naming the layer and the argument, and a size is
anything ``operator.index`` accepts (numpy's integers too), as for every count nxrs takes. The
values themselves (a kernel of at least 1, ``p`` in ``[0, 1)``, a padding smaller than its
kernel, the shapes fitting together) are checked in one place, the Rust core, when a trainer is
built from the list. Floats are kept as given; the core rounds them to binary32.

``preset(name)`` gives the models ``nxrs train --model NAME`` knows (``PRESETS``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown, count
from nxrs._util.strict_json import read_strict_json

__all__ = [
    "GELU",
    "PRESETS",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "Dense",
    "Dropout",
    "Flatten",
    "Input",
    "Layer",
    "LayerNorm",
    "MaxPool1d",
    "MaxPool2d",
    "ReLU",
    "Residual",
    "Sigmoid",
    "Tanh",
    "from_dict",
    "from_dicts",
    "load_model",
    "preset",
    "to_dicts",
]

#: A kernel size, stride or padding: an int for every dimension, or one int per dimension
#: (a pair for the 2-D layers).
Size = Union[int, Sequence[int]]


def _int(where: str, name: str, value: object) -> int:
    """A size: the count rule of ``nxrs._util.checks`` (no lower bound: the core checks values),
    within what a layer's JSON form holds (a size is below 2**64)."""
    n = count(f"{where}: {name}", value, minimum=None)
    if abs(n) >= 2**64:
        raise ConfigError(f"{where}: {name} = {_shown(n)} is too large (a size is below 2**64)")
    return n


def _sizes(where: str, name: str, value: object, dims: int) -> tuple[int, ...]:
    """``value`` as ``dims`` ints: one int for every dimension, or a list or tuple of ``dims``."""
    if isinstance(value, (tuple, list)):
        if len(value) != dims:
            what = "an int or a pair of ints" if dims == 2 else "an int (or a list of one)"
            raise ConfigError(f"{where}: {name} = {_shown(value)} must be {what}")
        return tuple(_int(where, f"{name}[{i}]", v) for i, v in enumerate(value))
    return (_int(where, name, value),) * dims


def _real(where: str, name: str, value: object) -> float:
    """A real number (int or float, numpy's included; not a bool) as a Python float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ConfigError(
            f"{where}: {name} = {_shown(value)} must be a number, not {type(value).__name__}"
        )
    try:
        return float(value)
    except OverflowError:  # an int beyond binary64
        raise ConfigError(f"{where}: {name} = {_shown(value)} is too large") from None


def _size_repr(sizes: tuple[int, ...]) -> str:
    """A size as written in a call: one int when every dimension has it."""
    return str(sizes[0]) if len(set(sizes)) == 1 else repr(sizes)


def _init(layer: Layer, **values: object) -> None:
    """Sets a frozen layer's fields (``__init__`` only)."""
    for name, value in values.items():
        object.__setattr__(layer, name, value)


@dataclass(frozen=True, init=False, repr=False)
class Layer:
    """A layer of a model: the base class of every layer object. ``to_dict()`` gives its JSON
    form (section 15.1); ``from_dict`` builds a layer from it."""

    def __init__(self) -> None:
        """A layer without parameters."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of section 15.1: ``"type"`` and every parameter, sizes as lists."""
        d: dict[str, Any] = {"type": type(self).__name__}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            d[field.name] = list(value) if isinstance(value, tuple) else value
        return d

    def _json_form(self) -> dict[str, Any]:
        """How ``nxrs._util.files.json_text`` writes a layer (a sweep's configuration): its JSON
        object."""
        return self.to_dict()

    def _arguments(self) -> list[str]:
        """The arguments of the call that builds this layer, defaults left out."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._arguments())})"

    @classmethod
    def _from_params(cls, params: dict[str, Any]) -> Layer:
        """The layer of a JSON object's parameters (the object without ``"type"``)."""
        try:
            inspect.signature(cls).bind(**params)
        except TypeError as err:  # a parameter missing or unknown
            raise ConfigError(f"{cls.__name__}: {err}") from None
        return cls(**params)


@dataclass(frozen=True, init=False, repr=False)
class Input(Layer):
    """The first layer of every model: the shape of one sample, 1 to 3 sizes (features,
    ``(channels, length)`` or ``(channels, height, width)``).

    >>> Input(1, 8, 8)
    Input(1, 8, 8)
    >>> Input(1, 8, 8).to_dict()
    {'type': 'Input', 'shape': [1, 8, 8]}
    """

    shape: tuple[int, ...]

    def __init__(self, *shape: int) -> None:
        _init(self, shape=tuple(_int("Input", f"shape[{i}]", n) for i, n in enumerate(shape)))

    def _arguments(self) -> list[str]:
        return [str(n) for n in self.shape]

    @classmethod
    def _from_params(cls, params: dict[str, Any]) -> Layer:
        shape = params.get("shape")
        unknown = [k for k in params if k != "shape"]
        if unknown:
            raise ConfigError(f"Input: unknown parameter {unknown[0]!r}")
        if not isinstance(shape, (list, tuple)):
            raise ConfigError(f"Input: shape (a list of sizes) is required, got {_shown(shape)}")
        return cls(*shape)


@dataclass(frozen=True, init=False, repr=False)
class Dense(Layer):
    """A fully connected layer (PyTorch's ``Linear``): input ``(n)``, output ``(units)``;
    ``bias=False`` leaves out ``b`` (section 15.7).

    >>> Dense(10).to_dict()
    {'type': 'Dense', 'units': 10}
    >>> Dense(10, bias=False).to_dict()
    {'type': 'Dense', 'units': 10, 'bias': False}
    """

    units: int
    bias: bool

    def __init__(self, units: int, bias: bool = True) -> None:
        _init(self, units=_int("Dense", "units", units), bias=_bool("Dense", "bias", bias))

    def to_dict(self) -> dict[str, Any]:
        return _without_bias(super().to_dict())

    def _arguments(self) -> list[str]:
        return [str(self.units)] + ([] if self.bias else ["bias=False"])


def _bool(where: str, name: str, value: object) -> bool:
    """A true/false argument (a numpy bool too); anything else is a ``ConfigError``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ConfigError(f"{where}: {name} must be True or False, got {_shown(value)}")


def _without_bias(d: dict[str, Any]) -> dict[str, Any]:
    """A layer object with ``"bias"`` only when it is false: the form of every model from before
    the parameter existed is unchanged (so are its configuration's digests)."""
    if d.get("bias", False) is True:
        del d["bias"]
    return d


@dataclass(frozen=True, init=False, repr=False)
class _Conv(Layer):
    """A convolution over ``_dims`` spatial dimensions (``Conv1d``, ``Conv2d``)."""

    _dims: ClassVar[int]
    out_channels: int
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]

    def __init__(
        self, out_channels: int, kernel_size: Size, stride: Size = 1, padding: Size = 0
    ) -> None:
        where, d = type(self).__name__, self._dims
        _init(
            self,
            out_channels=_int(where, "out_channels", out_channels),
            kernel_size=_sizes(where, "kernel_size", kernel_size, d),
            stride=_sizes(where, "stride", stride, d),
            padding=_sizes(where, "padding", padding, d),
        )

    def _arguments(self) -> list[str]:
        args = [str(self.out_channels), _size_repr(self.kernel_size)]
        if self.stride != (1,) * self._dims:
            args.append(f"stride={_size_repr(self.stride)}")
        if self.padding != (0,) * self._dims:
            args.append(f"padding={_size_repr(self.padding)}")
        return args


class Conv1d(_Conv):
    """A 1-D convolution (PyTorch's ``Conv1d``, the input channels taken from the layer
    before): input ``(C, L)``, output ``(out_channels, L')``. ``kernel_size``, ``stride`` and
    ``padding`` are ints (or lists of one int); they are kept as 1-tuples, as PyTorch does.

    >>> Conv1d(25, 5, stride=2, padding=1)
    Conv1d(25, 5, stride=2, padding=1)
    >>> Conv1d(25, 5).kernel_size
    (5,)
    """

    _dims = 1


class Conv2d(_Conv):
    """A 2-D convolution (PyTorch's ``Conv2d``, the input channels taken from the layer
    before): input ``(C, H, W)``, output ``(out_channels, H', W')``. ``kernel_size``,
    ``stride`` and ``padding`` are an int (both dimensions) or a pair ``(height, width)``.

    >>> Conv2d(16, 3, padding=1)
    Conv2d(16, 3, padding=1)
    >>> Conv2d(16, (3, 5), stride=2).to_dict()["kernel_size"], Conv2d(16, 3, stride=2).stride
    ([3, 5], (2, 2))
    """

    _dims = 2


@dataclass(frozen=True, init=False, repr=False)
class _Pool(Layer):
    """A pooling layer over ``_dims`` spatial dimensions; the stride defaults to the kernel."""

    _dims: ClassVar[int]
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]

    def __init__(self, kernel_size: Size, stride: Size | None = None) -> None:
        where, d = type(self).__name__, self._dims
        kernel = _sizes(where, "kernel_size", kernel_size, d)
        _init(
            self,
            kernel_size=kernel,
            stride=kernel if stride is None else _sizes(where, "stride", stride, d),
        )

    def _arguments(self) -> list[str]:
        args = [_size_repr(self.kernel_size)]
        if self.stride != self.kernel_size:
            args.append(f"stride={_size_repr(self.stride)}")
        return args


class MaxPool1d(_Pool):
    """1-D max pooling (PyTorch's ``MaxPool1d``): input ``(C, L)``, output ``(C, L')``; the
    stride defaults to the kernel size.

    >>> MaxPool1d(2).to_dict()
    {'type': 'MaxPool1d', 'kernel_size': [2], 'stride': [2]}
    """

    _dims = 1


class MaxPool2d(_Pool):
    """2-D max pooling (PyTorch's ``MaxPool2d``): input ``(C, H, W)``, output ``(C, H', W')``;
    sizes an int or a pair, the stride defaulting to the kernel size.

    >>> MaxPool2d(2) == MaxPool2d((2, 2), stride=2)
    True
    """

    _dims = 2


class AvgPool1d(_Pool):
    """1-D average pooling (PyTorch's ``AvgPool1d``): input ``(C, L)``, output ``(C, L')``; the
    stride defaults to the kernel size.

    >>> AvgPool1d(3, stride=1)
    AvgPool1d(3, stride=1)
    """

    _dims = 1


class AvgPool2d(_Pool):
    """2-D average pooling (PyTorch's ``AvgPool2d``): input ``(C, H, W)``, output
    ``(C, H', W')``; sizes an int or a pair, the stride defaulting to the kernel size.

    >>> AvgPool2d((2, 1)).to_dict()
    {'type': 'AvgPool2d', 'kernel_size': [2, 1], 'stride': [2, 1]}
    """

    _dims = 2


class Flatten(Layer):
    """A sample's cells in row-major order as one vector: output ``(prod(shape))``.

    >>> Flatten().to_dict()
    {'type': 'Flatten'}
    """


class ReLU(Layer):
    """``max(x, 0)`` per cell (section 15.2).

    >>> ReLU()
    ReLU()
    """


class Tanh(Layer):
    """The hyperbolic tangent per cell (section 15.2).

    >>> Tanh().to_dict()
    {'type': 'Tanh'}
    """


class Sigmoid(Layer):
    """The logistic function per cell (section 15.2).

    >>> Sigmoid().to_dict()
    {'type': 'Sigmoid'}
    """


@dataclass(frozen=True, init=False, repr=False)
class Dropout(Layer):
    """Dropout (PyTorch's ``Dropout``): in training, each cell is dropped with probability ``p``
    (a mask from the run's seed, section 15.5) and the rest scaled by ``1 / (1 - p)``; the
    identity in evaluation.

    >>> Dropout(p=0.2)
    Dropout(p=0.2)
    >>> Dropout().to_dict()
    {'type': 'Dropout', 'p': 0.5}
    """

    p: float

    def __init__(self, p: float = 0.5) -> None:
        _init(self, p=_real("Dropout", "p", p))

    def _arguments(self) -> list[str]:
        return [] if self.p == 0.5 else [f"p={self.p!r}"]


@dataclass(frozen=True, init=False, repr=False)
class _BatchNorm(Layer):
    """Batch normalisation per channel (``BatchNorm1d``, ``BatchNorm2d``)."""

    momentum: float
    eps: float

    def __init__(self, momentum: float = 0.1, eps: float = 1e-5) -> None:
        where = type(self).__name__
        _init(self, momentum=_real(where, "momentum", momentum), eps=_real(where, "eps", eps))

    def _arguments(self) -> list[str]:
        args = [] if self.momentum == 0.1 else [f"momentum={self.momentum!r}"]
        return args if self.eps == 1e-5 else [*args, f"eps={self.eps!r}"]


class BatchNorm1d(_BatchNorm):
    """Batch normalisation (PyTorch's ``BatchNorm1d``, with its affine parameters and running
    statistics): input ``(C)`` or ``(C, L)``, statistics per channel (section 15.2).

    >>> BatchNorm1d().to_dict()
    {'type': 'BatchNorm1d', 'momentum': 0.1, 'eps': 1e-05}
    """


class BatchNorm2d(_BatchNorm):
    """Batch normalisation (PyTorch's ``BatchNorm2d``): input ``(C, H, W)``, statistics per
    channel over the samples and positions (section 15.2).

    >>> BatchNorm2d(momentum=0.01)
    BatchNorm2d(momentum=0.01)
    """


@dataclass(frozen=True, init=False, repr=False)
class LayerNorm(Layer):
    """Layer normalisation over all of a sample's cells, with ``gamma`` and ``beta`` of the
    input's shape (PyTorch's ``LayerNorm(shape)``, the shape taken from the layer before);
    ``bias=False`` leaves out ``beta`` (section 15.7).

    >>> LayerNorm(eps=1e-6).to_dict()
    {'type': 'LayerNorm', 'eps': 1e-06}
    >>> LayerNorm(bias=False)
    LayerNorm(bias=False)
    """

    eps: float
    bias: bool

    def __init__(self, eps: float = 1e-5, bias: bool = True) -> None:
        _init(
            self,
            eps=_real("LayerNorm", "eps", eps),
            bias=_bool("LayerNorm", "bias", bias),
        )

    def to_dict(self) -> dict[str, Any]:
        return _without_bias(super().to_dict())

    def _arguments(self) -> list[str]:
        return ([] if self.eps == 1e-5 else [f"eps={self.eps!r}"]) + (
            [] if self.bias else ["bias=False"]
        )


@dataclass(frozen=True, init=False, repr=False)
class GELU(Layer):
    """The exact GELU, ``x * Phi(x)`` with the correctly rounded normal distribution function
    (PyTorch's ``GELU()``, not its tanh approximation; section 15.7).

    >>> GELU().to_dict()
    {'type': 'GELU'}
    """


@dataclass(frozen=True, init=False, repr=False)
class Residual(Layer):
    """``x + f(x)``: the nested list of layers ``f`` applied to the input, its output added to
    it (a transformer's or ResNet's skip connection; section 15.7). ``f`` must keep the input's
    shape; Residuals nest.

    >>> block = Residual([LayerNorm(), Dense(16), GELU(), Dense(16)])
    >>> block
    Residual([LayerNorm(), Dense(16), GELU(), Dense(16)])
    >>> block.to_dict()["layers"][2]
    {'type': 'GELU'}
    >>> from_dict(block.to_dict()) == block
    True
    """

    layers: tuple[Layer, ...]

    def __init__(self, layers: Iterable[Layer]) -> None:
        if isinstance(layers, (str, bytes, Mapping)) or not isinstance(layers, Iterable):
            raise ConfigError(f"Residual: layers must be a list of layers, got {_shown(layers)}")
        items = tuple(layers)
        for i, layer in enumerate(items):
            if not isinstance(layer, Layer):
                raise ConfigError(
                    f"Residual: layers[{i}] = {_shown(layer)} is not a layer object "
                    f"(nxrs.layers), but {type(layer).__name__}"
                )
        _init(self, layers=items)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "Residual", "layers": [layer.to_dict() for layer in self.layers]}

    def _arguments(self) -> list[str]:
        return [f"[{', '.join(repr(layer) for layer in self.layers)}]"]

    @classmethod
    def _from_params(cls, params: dict[str, Any]) -> Layer:
        unknown = [k for k in params if k != "layers"]
        if unknown:
            raise ConfigError(f"Residual: unknown parameter {unknown[0]!r}")
        items = params.get("layers")
        if not isinstance(items, (list, tuple)):
            raise ConfigError(
                f"Residual: layers (a list of layer objects) is required, got {_shown(items)}"
            )
        try:
            return cls(from_dicts(items))
        except ConfigError as err:
            raise ConfigError(f"Residual: {err}") from None


_TYPES: dict[str, type[Layer]] = {
    cls.__name__: cls
    for cls in (
        Input,
        Dense,
        Conv1d,
        Conv2d,
        MaxPool1d,
        MaxPool2d,
        AvgPool1d,
        AvgPool2d,
        Flatten,
        ReLU,
        Tanh,
        Sigmoid,
        GELU,
        Dropout,
        BatchNorm1d,
        BatchNorm2d,
        LayerNorm,
        Residual,
    )
}


def from_dict(d: Mapping[str, Any]) -> Layer:
    """The layer of a JSON object (section 15.1): what ``Layer.to_dict`` and the core write,
    an int accepted for any size, an absent (or null) parameter taking its default.

    >>> from_dict({"type": "MaxPool2d", "kernel_size": 2})
    MaxPool2d(2)
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f'a layer is an object with a "type", got {_shown(d)}')
    kind = d.get("type")
    if not isinstance(kind, str):
        raise ConfigError(f'a layer object needs "type" (a layer\'s name), got {_shown(dict(d))}')
    cls = _TYPES.get(kind)
    if cls is None:
        raise ConfigError(f"unknown layer type {_shown(kind)} (known: {', '.join(_TYPES)})")
    return cls._from_params({k: v for k, v in d.items() if k != "type" and v is not None})


def to_dicts(layers: Iterable[Layer]) -> list[dict[str, Any]]:
    """The JSON form of a list of layers.

    >>> to_dicts([Input(3), Dense(2)])
    [{'type': 'Input', 'shape': [3]}, {'type': 'Dense', 'units': 2}]
    """
    out = []
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise ConfigError(
                f"layer {i} = {_shown(layer)} is not a layer object (nxrs.layers), "
                f"but {type(layer).__name__}"
            )
        out.append(layer.to_dict())
    return out


def from_dicts(items: Sequence[Mapping[str, Any]]) -> list[Layer]:
    """The layers of a list of JSON objects; an error names the layer's position (from 0)."""
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"a model is a list of layer objects, got {_shown(items)}")
    layers = []
    for i, item in enumerate(items):
        try:
            layers.append(from_dict(item))
        except ConfigError as err:
            raise ConfigError(f"layer {i}: {err}") from None
    return layers


def load_model(path: str | os.PathLike[str]) -> list[Layer]:
    """The layers of a model file: JSON holding a list of layer objects (section 15.1), or an
    object ``{"layers": [...]}``. A file that is not JSON or not a model (a key given twice in
    an object, an integer of more than 100 digits, nesting deeper than Python's recursion
    limit) is a ``ConfigError`` naming the file (one that cannot be read, an ``OSError``)."""
    doc = read_strict_json(path, "a model file")
    if isinstance(doc, dict):
        extra = sorted(set(doc) - {"layers"})
        if extra or "layers" not in doc:
            raise ConfigError(
                f'{path}: a model file is a list of layers or {{"layers": [...]}}, '
                f"got an object with the keys {sorted(doc)}"
            )
        doc = doc["layers"]
    if not isinstance(doc, list):
        raise ConfigError(
            f'{path}: a model file is a list of layers or {{"layers": [...]}}, got {_shown(doc)}'
        )
    try:
        return from_dicts(doc)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


_PRESETS: dict[str, tuple[Layer, ...]] = {
    # The MNIST-1D paper's ConvBase (Greydanus & Kobak): lengths 40 -> 19 -> 10 -> 5, then
    # 25 * 5 = 125 features -> 10 classes.
    "mnist1d-cnn": (
        Input(1, 40),
        Conv1d(25, 5, stride=2, padding=1),
        ReLU(),
        Conv1d(25, 3, stride=2, padding=1),
        ReLU(),
        Conv1d(25, 3, stride=2, padding=1),
        ReLU(),
        Flatten(),
        Dense(10),
    ),
    # scikit-learn's 8x8 digits: 8x8 -> 4x4 -> 2x2, 32 * 2 * 2 = 128 features -> 10 classes.
    # PyTorch (float32, Adam lr 1e-2, batch 32, 20 epochs) trained it to 0.983-0.992 test
    # accuracy on the deterministic split (section 12, seed 0) over five seeds.
    "digits-cnn": (
        Input(1, 8, 8),
        Conv2d(16, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Conv2d(32, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Flatten(),
        Dense(10),
    ),
}

#: The names ``preset`` knows (``nxrs train --model NAME``).
PRESETS: tuple[str, ...] = tuple(_PRESETS)

#: How each preset is meant to be trained: its data set and the settings ``nxrs train --model
#: NAME`` takes unless given (the MNIST-1D paper's Adam lr 1e-2, batch 100, 6,000 steps; the
#: digits net's settings found with PyTorch, above).
RECIPES: dict[str, dict[str, Any]] = {
    "mnist1d-cnn": {"data": "mnist1d", "batch_size": 100, "lr": 0.01, "epochs": 150},
    "digits-cnn": {"data": "digits", "batch_size": 32, "lr": 0.01, "epochs": 20},
}


def preset(name: str) -> list[Layer]:
    """A named model (``PRESETS``): ``"mnist1d-cnn"``, the MNIST-1D paper's ConvBase (three
    ``Conv1d`` of 25 channels, kernels 5, 3, 3, stride 2, padding 1, then ``Dense(10)``), and
    ``"digits-cnn"``, a small ``Conv2d`` net for the 8x8 digits.

    >>> preset("mnist1d-cnn")[:2]
    [Input(1, 40), Conv1d(25, 5, stride=2, padding=1)]
    """
    layers = _PRESETS.get(name) if isinstance(name, str) else None
    if layers is None:
        raise ConfigError(f"unknown model preset {_shown(name)} (known: {', '.join(PRESETS)})")
    return list(layers)
