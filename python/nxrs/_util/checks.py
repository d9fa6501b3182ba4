"""The one rule for the counts and durations nxrs's Python code takes from a user.

A count (``epochs``, ``every``, ``workers``, ``keep``, a checkpoint's ``step``, the scikit-learn
estimators' ``max_iter``, ``batch_size`` and ``hidden_layer_sizes``, a sweep's ``max_retries``,
...) is anything ``operator.index`` accepts: ``int`` and every ``numbers.Integral`` that
implements ``__index__`` (numpy's integers, 0-d integer arrays), except ``bool`` and
``numpy.bool_``: a flag is never a count. A float is refused even when it holds an integer
(``2.0``): a count computed in floating point is a mistake upstream, and truncating ``2.7`` to
``2`` would hide it. A refused value is a ``ConfigError`` (a ``ValueError`` too) naming the
parameter and the value. The Rust bindings apply the same rule to ``Trainer(...)``'s counts.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from nxrs._nxrs import ConfigError

__all__ = ["count", "flag", "is_count", "optional_count", "save_points", "seconds"]


def _shown(value: object) -> str:
    """``value``'s repr, clipped: a message names the value, never floods the terminal. An
    integer too long to show is named by its size (Python refuses to write one of more than
    4,300 digits, with a hint about ``sys.set_int_max_str_digits`` that is no help here)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**60:
        digits = abs(value).bit_length() * 30103 // 100000 + 1  # log10(2) = 0.30103
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    try:
        text = repr(value)
    except ValueError:  # a container of such an integer
        return f"a {type(value).__name__} holding an integer too long to show"
    return text if len(text) <= 60 else text[:57] + "..."


def count(name: str, value: object, minimum: int | None = 0) -> int:
    """``value`` as an ``int``, checked by the count rule and to be at least ``minimum`` (None:
    no lower bound); ``ConfigError`` otherwise.

    >>> import numpy as np
    >>> count("epochs", np.int64(3), minimum=1)
    3
    >>> count("epochs", 2.0)
    Traceback (most recent call last):
    ...
    nxrs.ConfigError: epochs = 2.0 must be an int (a count), not float
    """
    if isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} = {value!r} must be an int (a count), not a bool")
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError(
            f"{name} = {_shown(value)} must be an int (a count), not {type(value).__name__}"
        ) from None
    if minimum is not None and n < minimum:
        raise ConfigError(f"{name} = {_shown(n)} must be at least {minimum}")
    return n


def is_count(value: object, minimum: int | None = 0) -> bool:
    """Whether ``count`` accepts ``value`` (the run manifest's schema checks its JSON counts
    with it)."""
    try:
        count("value", value, minimum)
    except ConfigError:
        return False
    return True


def optional_count(name: str, value: object, minimum: int | None = 0) -> int | None:
    """``count``, or None for None (a count that is not set)."""
    return None if value is None else count(name, value, minimum)


def keep_count(value: object) -> int | None:
    """How many checkpoints a run directory keeps: a count of at least 1, or ``"all"`` (None:
    never prune); ``ConfigError`` otherwise.

    >>> keep_count(3), keep_count("all")
    (3, None)
    """
    if isinstance(value, str):
        if value == "all":
            return None
        raise ConfigError(f"keep = {_shown(value)} must be a count of at least 1 or 'all'")
    return count("keep", value, minimum=1)


def seconds(name: str, value: object) -> float | None:
    """``value``, a duration in seconds, as a float: None, or a real number (an int or a
    float, numpy's included; not a bool) greater than 0 (``math.inf``: never);
    ``ConfigError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ConfigError(
            f"{name} = {_shown(value)} must be a number of seconds, not {type(value).__name__}"
        )
    try:
        duration = float(value)
    except (TypeError, ValueError, OverflowError):  # a complex number, an int beyond floats
        duration = math.nan
    if not duration > 0:
        raise ConfigError(f"{name} = {_shown(value)} must be a positive number of seconds")
    return duration


def save_points(
    every: object, every_seconds: object, *, checkpointed: bool
) -> tuple[int | None, float | None]:
    """``every`` (a count of steps, at least 1) and ``every_seconds`` (a duration), the periodic
    checkpoints of ``fit`` and ``nxrs.sweep``, checked: either needs a run that is
    ``checkpointed`` (a checkpoint directory or manager). ``ConfigError`` otherwise. (``nxrs
    train`` and ``nxrs sweep`` apply this rule to ``--every`` and ``--every-seconds`` as usage
    errors.)"""
    checked = optional_count("every", every, minimum=1), seconds("every_seconds", every_seconds)
    if checked != (None, None) and not checkpointed:
        raise ConfigError("every and every_seconds need a checkpoint (a directory or a manager)")
    return checked


def flag(name: str, value: object) -> bool:
    """``value``, a yes/no setting, as a ``bool``: ``True``/``False`` (numpy's too); anything
    else is a ``ConfigError`` (a string such as ``"False"`` would otherwise read as yes)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} = {_shown(value)} must be True or False")
    return bool(value)
