"""The torch module ``to_torch`` makes of a ``Residual`` layer (section 15.7), which torch has
no module for. Its own module, imported once torch is known to be installed, so that the class
has one importable name (``torch.save`` of a whole model pickles it by name) and ``from_torch``
recognises it by identity."""

from __future__ import annotations

import importlib
from typing import Any

# torch is optional, and its types are not checked here: mypy would analyse all of torch.
_nn: Any = importlib.import_module("torch.nn")


class Residual(_nn.Module):  # type: ignore[misc]
    """``x + branch(x)``: nxrs's ``Residual(layers)``, ``branch`` the ``torch.nn.Sequential`` of
    its layers' modules."""

    def __init__(self, *modules: Any) -> None:
        super().__init__()
        self.branch = _nn.Sequential(*modules)

    def forward(self, x: Any) -> Any:
        return x + self.branch(x)
