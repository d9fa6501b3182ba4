"""The one progress bar: tqdm on stderr, over ``fit``'s steps or ``verify``'s segments."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(progress: bool | None, total: int, unit: str, initial: int = 0) -> Any:
    """A tqdm bar over ``total`` ``unit``s (``initial`` done already) when asked (``True``),
    or by default (None) when stderr is a terminal; None for no bar."""
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit=unit, file=sys.stderr, dynamic_ncols=True)
