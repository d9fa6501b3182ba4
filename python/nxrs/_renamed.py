"""The names modules had before: ``install`` makes each import as the module (or modules) that
now hold its contents.

Two moves made old names: the package saying which modules are public (``nxrs.rundir``,
``nxrs.gate``, ... became underscored), and the package's layout in layers of subpackages
(``nxrs._fit`` became ``nxrs._train.fit``, ``nxrs._rundir`` was split by job into
``nxrs._runs.directory``, ``.manifest``, ...; ``docs/ARCHITECTURE.md``)."""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

PACKAGE = "nxrs"

if TYPE_CHECKING:
    from importlib.abc import Loader

#: The run directory module, split by job (its ``run_status`` is ``nxrs status``'s, in
#: ``nxrs.cli.status``); it re-exported the file writers and the stop flag.
_RUNDIR = ("_runs.directory", "_runs.manifest", "_runs.errors", "_util.files", "_util.signals")

#: Each old name (after ``nxrs.``) and the modules now holding what it held (after ``nxrs.``).
#: One module: the old name gives that module itself (one object: patching it patches the
#: module). Several (a module split by job): the old name gives a module whose attributes are
#: theirs, looked up in this order, so every name it had (a pickled class's too) still resolves.
RENAMED: dict[str, tuple[str, ...]] = {
    # Public until the package said which modules are public (also ``nxrs.<name>`` attributes).
    "distributed": ("_train.distributed",),
    "gate": ("_audit.gate",),
    "inspection": ("_audit.inspection",),
    "manager": ("_runs.checkpoints",),
    "rundir": _RUNDIR,
    "sweeps": ("_sweeps",),
    # The modules of the flat layout, now in the layers' subpackages.
    "_checks": ("_util.checks",),
    "_config": ("_util.config",),
    "_files": ("_util.files",),
    "_signals": ("_util.signals",),
    "_store": ("_storage.store",),
    "_store_s3": ("_storage.s3",),
    "_store_gcs": ("_storage.gcs",),
    "_store_azure": ("_storage.azure",),
    "_rundir": _RUNDIR,
    "_lease": ("_runs.lease",),
    "_transcript": ("_runs.transcript",),
    "_manager": ("_runs.checkpoints",),
    "_object_checkpoints": ("_runs.object_checkpoints",),
    "_async_save": ("_runs.async_save",),
    "_fit": ("_train.fit",),
    "_distributed": ("_train.distributed",),
    "_replay": ("_audit.replay",),
    "_verify": ("_audit.verify", "_audit.verify_replays", "_audit.verify_records"),
    "_diff": ("_audit.diff",),
    "_inspection": ("_audit.inspection",),
    "_gate": ("_audit.gate",),
}

#: The old names that were public modules, which ``import nxrs; nxrs.<name>`` also gives.
_ATTRIBUTES = ("distributed", "gate", "inspection", "manager", "rundir", "sweeps")


class _RenamedModules:
    """Modules under their old names: ``import nxrs._fit`` (and ``from nxrs.gate import
    run_gate``, ...) still works, imported only when asked for (``nxrs._train.distributed``
    imports Ray). A finder and loader by protocol (importing ``importlib.abc`` for its base
    classes would cost every ``import nxrs`` 30 ms)."""

    def find_spec(self, name: str, path: object, target: object = None) -> ModuleSpec | None:
        package, _, short = name.rpartition(".")
        if package != PACKAGE or short not in RENAMED:
            return None
        return ModuleSpec(name, cast("Loader", self))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        homes = RENAMED[spec.name.rpartition(".")[2]]
        if len(homes) > 1:
            return _Combined(spec.name, [f"{PACKAGE}.{home}" for home in homes])
        module = importlib.import_module(f"{PACKAGE}.{homes[0]}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        if isinstance(module, _Combined):
            return
        # The import system gave the module the old name's spec; it keeps its own.
        module.__spec__ = module.__spec__.loader_state if module.__spec__ else None


class _Combined(ModuleType):
    """An old module split by job: its attributes are those of the modules now holding them."""

    def __init__(self, name: str, homes: list[str]) -> None:
        super().__init__(name, f"Moved: {', '.join(homes)}.")
        self._homes = [importlib.import_module(home) for home in homes]

    def __getattr__(self, name: str) -> Any:
        for home in self._homes:
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for home in self._homes for n in dir(home)})


def attribute(name: str) -> ModuleType:
    """``nxrs.<old name>`` read as an attribute (``import nxrs; nxrs.rundir``), which worked when
    the package imported the module under that name."""
    if name in _ATTRIBUTES:
        return importlib.import_module(f"{PACKAGE}.{name}")
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


def install() -> None:
    """Makes the old names importable (once per process)."""
    if not any(isinstance(finder, _RenamedModules) for finder in sys.meta_path):
        sys.meta_path.append(_RenamedModules())
