"""The examples in the package's docstrings run and give what they show."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import nxrs
import nxrs._runs.checkpoints
import nxrs.cli._common
import nxrs.cli._grid
import nxrs.data
import nxrs.data._text
import nxrs.softf32


@pytest.mark.parametrize(
    "module",
    [
        nxrs,
        nxrs.data,
        nxrs.data._text,
        nxrs.softf32,
        nxrs._runs.checkpoints,
        nxrs.cli._common,
        nxrs.cli._grid,
    ],
    ids=lambda m: m.__name__,
)
def test_docstring_examples(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
