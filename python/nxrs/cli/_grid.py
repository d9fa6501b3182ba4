"""``nxrs sweep --grid KEY=V1,V2 ...``: the grid's syntax (``parse_grid``) and its
configurations (``expand_grid``), which ``nxrs.sweep`` then trains."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["expand_grid", "parse_grid"]


def _scalar(text: str) -> Any:
    """A grid value: JSON (numbers, ``true``, ``null``, quoted strings), Python's ``True``,
    ``False`` and ``None``, or else the text itself (``adam``)."""
    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_grid(specs: Sequence[str]) -> dict[str, list[Any]]:
    """``nxrs sweep``'s grid syntax, one axis per spec: ``KEY=V1,V2,...`` (scalars: numbers,
    booleans, ``none``, words), or ``KEY=[V1, V2, ...]``, a JSON array, for values that are
    lists themselves. A key given twice, an empty key or no value is a ``ValueError``.

    >>> parse_grid(["lr=0.001,0.01", "hidden=[[64], [128, 64]]", "optimizer=adam"])
    {'lr': [0.001, 0.01], 'hidden': [[64], [128, 64]], 'optimizer': ['adam']}
    """
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ValueError(f"grid axis {spec!r}: KEY=V1,V2,... or KEY=[JSON values] expected")
        if key in grid:
            raise ValueError(f"grid axis {key!r} is given twice")
        if values.lstrip().startswith("["):
            try:
                parsed = json.loads(values)
            except ValueError as err:
                raise ValueError(f"grid axis {spec!r}: not a JSON array: {err}") from err
            if not isinstance(parsed, list) or not parsed:
                raise ValueError(f"grid axis {spec!r}: a non-empty JSON array expected")
            grid[key] = parsed
        else:
            grid[key] = [_scalar(v.strip()) for v in values.split(",")]
    return grid


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last axis varying fastest.

    >>> expand_grid({"lr": [0.1, 0.2], "seed": [0, 1]})
    [{'lr': 0.1, 'seed': 0}, {'lr': 0.1, 'seed': 1}, {'lr': 0.2, 'seed': 0}, {'lr': 0.2, 'seed': 1}]
    """
    configs: list[dict[str, Any]] = [{}]
    for key, values in grid.items():
        configs = [{**config, key: value} for config in configs for value in values]
    return configs
