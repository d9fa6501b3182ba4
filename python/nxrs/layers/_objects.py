"""The layer objects of section 15 (one class per layer, PyTorch's names and meanings), the
base class ``Layer`` that registers them by name, and the argument checks they share."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown, count

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

    #: Every layer class by its JSON ``"type"`` (its name), as it is defined: what ``from_dict``
    #: reads (the classes whose names start with ``_`` are bases, not layers).
    _TYPES: ClassVar[dict[str, type[Layer]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            Layer._TYPES[cls.__name__] = cls

    def __init__(self) -> None:
        """A layer without parameters."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of section 15.1: ``"type"`` and every parameter, sizes as lists (an
        optional parameter left unset, ``None``, is not written)."""
        d: dict[str, Any] = {"type": type(self).__name__}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
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
    """A fully connected layer (PyTorch's ``Linear``): input ``(n)``, output ``(units)``, or
    each token of a ``(T, n)`` sequence to ``(T, units)``; ``bias=False`` leaves out ``b``
    (section 15.7); ``std`` draws ``W`` from ``N(0, std)`` (section 15.8).

    >>> Dense(10).to_dict()
    {'type': 'Dense', 'units': 10}
    >>> Dense(10, bias=False, std=0.02).to_dict()
    {'type': 'Dense', 'units': 10, 'bias': False, 'std': 0.02}
    """

    units: int
    bias: bool
    std: float | None

    def __init__(self, units: int, bias: bool = True, std: float | None = None) -> None:
        _init(
            self,
            units=_int("Dense", "units", units),
            bias=_bool("Dense", "bias", bias),
            std=_optional_real("Dense", "std", std),
        )

    def to_dict(self) -> dict[str, Any]:
        return _without_bias(super().to_dict())

    def _arguments(self) -> list[str]:
        return [str(self.units)] + ([] if self.bias else ["bias=False"]) + _keyword("std", self.std)


def _optional_real(where: str, name: str, value: object) -> float | None:
    """``None`` (not given), or a real number as ``_real`` reads it."""
    return None if value is None else _real(where, name, value)


def _keyword(name: str, value: object) -> list[str]:
    """``name=value`` for a ``repr``, nothing for an unset (``None``) value."""
    return [] if value is None else [f"{name}={value!r}"]


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
