"""The JSON form of layer lists (section 15.1): layers to and from their objects, and model
files."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown
from nxrs._util.strict_json import read_strict_json
from nxrs.layers._objects import Layer


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
    cls = Layer._TYPES.get(kind)
    if cls is None:
        raise ConfigError(f"unknown layer type {_shown(kind)} (known: {', '.join(Layer._TYPES)})")
    return cls._from_params({k: v for k, v in d.items() if k != "type" and v is not None})


def to_dicts(layers: Iterable[Layer]) -> list[dict[str, Any]]:
    """The JSON form of a list of layers.

    >>> from nxrs.layers import Dense, Input
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
