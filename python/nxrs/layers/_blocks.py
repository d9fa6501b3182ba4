"""Layers made of layers: ``Residual`` (section 15.7), a block written as data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown
from nxrs.layers._json import from_dicts
from nxrs.layers._objects import Layer, _init


@dataclass(frozen=True, init=False, repr=False)
class Residual(Layer):
    """``x + f(x)``: the nested list of layers ``f`` applied to the input, its output added to
    it (a transformer's or ResNet's skip connection; section 15.7). ``f`` must keep the input's
    shape; Residuals nest.

    >>> from nxrs.layers import Dense, GELU, LayerNorm, from_dict
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
