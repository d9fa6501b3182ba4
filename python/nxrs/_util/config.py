"""The configuration schema as Python uses it: small helpers over ``nxrs.config_schema()``,
the core's one table of settings (name, type, accepted names, default in each family, range,
description). The scikit-learn estimators and the command line take their choices and defaults
from here, and ``config_diff`` is the core's one comparison of two configurations."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, Literal

from nxrs._nxrs import _config_differences, config_schema

Family = Literal["general", "seed_model"]


@cache
def _rows() -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in config_schema()}


def setting(name: str) -> dict[str, Any]:
    """The schema's row of the setting ``name`` (KeyError if there is none)."""
    return dict(_rows()[name])


def default(name: str, family: Family = "general") -> Any:
    """The default of ``name`` in ``family`` ("general": ``Trainer(layers=...)``,
    "seed_model": the seed program's model)."""
    return _rows()[name]["default"][family]


def choices(name: str) -> list[str]:
    """The names a setting accepts (``optimizer``: ``["adam", "adamw", "sgd"]``)."""
    names: list[str] | None = _rows()[name]["choices"]
    if names is None:
        raise KeyError(f"{name} is not a setting that takes a name")
    return list(names)


def config_diff(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The keys in which two configuration dicts differ, the schema's settings in their order
    first (floats compared by their binary32 bits), then any other key, sorted; a key only one
    holds differs."""
    return _config_differences(dict(mine), dict(theirs))
