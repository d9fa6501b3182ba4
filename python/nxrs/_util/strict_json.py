"""Reading a JSON file strictly (a model file, ``nxrs.layers.load_model``): a key given twice,
``NaN`` or ``Infinity``, an integer too long to be a size and nesting too deep are refused
with a ``ConfigError`` naming the file, where Python's reader would take them silently or fail
with a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._util.checks import _shown

__all__ = ["read_strict_json"]


class _NotAModel(Exception):
    """JSON that is well formed but refused (raised inside ``json.loads``, whose own errors are
    ``ValueError``s saying the text is not JSON)."""


def _not_json(constant: str) -> None:
    """``json.loads``'s hook for ``NaN`` and ``Infinity``, which JSON does not have."""
    raise ValueError(f"{constant} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s hook for objects: a key given twice is refused (JSON parsers disagree on
    which one counts; Python's would silently keep the last)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _NotAModel(f"the key {_shown(key)} is given twice in one object")
        seen.add(key)
    return dict(pairs)


#: Longest integer a model file may write: far beyond any size (sizes are below 2**64, 20
#: digits), and short enough for Python to convert and show (it refuses over 4,300 digits).
_MAX_DIGITS = 100


def _integer(text: str) -> int:
    """``json.loads``'s hook for integers: their digits bounded (``_MAX_DIGITS``)."""
    digits = len(text.lstrip("-"))
    if digits > _MAX_DIGITS:
        raise _NotAModel(f"an integer of {digits} digits is larger than any size")
    return int(text)


def read_strict_json(path: str | os.PathLike[str], what: str) -> Any:
    """The JSON document in the file ``path``, read strictly: a file that is not JSON is a
    ``ConfigError`` saying so, one that is JSON but cannot be ``what`` (``"a model file"``: a
    key given twice, an integer of more than 100 digits, nesting deeper than Python's
    recursion limit) one saying that; a file that cannot be read, an ``OSError``."""
    raw = Path(path).read_bytes()
    try:
        return json.loads(
            raw.decode("utf-8"),
            parse_constant=_not_json,
            parse_int=_integer,
            object_pairs_hook=_unique_keys,
        )
    except _NotAModel as err:
        raise ConfigError(f"{path}: not {what}: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not {what}: its JSON is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigError(f"{path}: not a JSON file: {err}") from None
