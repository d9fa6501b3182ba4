"""The names modules had before the package said which modules are public (``nxrs.rundir``,
``nxrs.gate``, ...): ``install`` makes each import as the underscored module it now is."""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, cast

PACKAGE = "nxrs"

if TYPE_CHECKING:
    from importlib.abc import Loader


class _RenamedModules:
    """Modules that were public under these names before the package said which modules are
    public: ``import nxrs.rundir`` (and ``from nxrs.gate import run_gate``, ...) still works, and
    gives the module itself (one object: patching it patches the module), imported only when
    asked for (``nxrs._distributed`` imports Ray). A finder and loader by protocol (importing
    ``importlib.abc`` for its base classes would cost every ``import nxrs`` 30 ms)."""

    RENAMED = ("distributed", "gate", "inspection", "manager", "rundir", "sweeps")

    def find_spec(self, name: str, path: object, target: object = None) -> ModuleSpec | None:
        package, _, short = name.rpartition(".")
        if package != PACKAGE or short not in self.RENAMED:
            return None
        return ModuleSpec(name, cast("Loader", self))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(f"{PACKAGE}._{spec.name.rpartition('.')[2]}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the old name's spec; it keeps its own.
        module.__spec__ = module.__spec__.loader_state if module.__spec__ else None


def attribute(name: str) -> ModuleType:
    """``nxrs.<old name>`` read as an attribute (``import nxrs; nxrs.rundir``), which worked when
    the package imported the module under that name."""
    if name in _RenamedModules.RENAMED:
        return importlib.import_module(f"{PACKAGE}.{name}")
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


def install() -> None:
    """Makes the old names importable (once per process)."""
    if not any(isinstance(finder, _RenamedModules) for finder in sys.meta_path):
        sys.meta_path.append(_RenamedModules())
