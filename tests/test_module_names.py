"""Which modules are public: the package's docstring names them, every other
module is underscored, and the names of modules that were public before still import as the
modules they are now."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys

import pytest

import nxrs

#: The names of modules that were public before the package said which modules are public, and
#: where their contents are now.
RENAMED = {
    "distributed": "nxrs._train.distributed",
    "gate": "nxrs._audit.gate",
    "inspection": "nxrs._audit.inspection",
    "manager": "nxrs._runs.checkpoints",
    "sweeps": "nxrs._sweeps",
}

#: Modules of the flat layout, moved whole into the layers' subpackages.
MOVED = {
    "_checks": "nxrs._util.checks",
    "_config": "nxrs._util.config",
    "_files": "nxrs._util.files",
    "_signals": "nxrs._util.signals",
    "_store": "nxrs._storage.store",
    "_store_s3": "nxrs._storage.s3",
    "_store_gcs": "nxrs._storage.gcs",
    "_store_azure": "nxrs._storage.azure",
    "_lease": "nxrs._runs.lease",
    "_transcript": "nxrs._runs.transcript",
    "_manager": "nxrs._runs.checkpoints",
    "_object_checkpoints": "nxrs._runs.object_checkpoints",
    "_async_save": "nxrs._runs.async_save",
    "_fit": "nxrs._train.fit",
    "_distributed": "nxrs._train.distributed",
    "_replay": "nxrs._audit.replay",
    "_diff": "nxrs._audit.diff",
    "_inspection": "nxrs._audit.inspection",
    "_gate": "nxrs._audit.gate",
}

#: Modules split by job: the old name gives a module whose attributes are the new modules'
#: (the names it had, a pickled class's too): (old name, one of its names, where it is now).
SPLIT = [
    ("rundir", "RunDirectory", "nxrs._runs.directory"),
    ("_rundir", "RunDirectory", "nxrs._runs.directory"),
    ("_rundir", "RunManifest", "nxrs._runs.manifest"),
    ("_rundir", "RunLockedError", "nxrs._runs.errors"),
    ("_rundir", "json_text", "nxrs._util.files"),
    ("_verify", "verify", "nxrs._audit.verify"),
    ("_verify", "VerifyReport", "nxrs._audit.verify"),
    ("_verify", "SegmentResult", "nxrs._audit.verify_replays"),
]


def test_every_module_is_underscored_or_named_public_in_the_package_docstring() -> None:
    assert nxrs.__doc__ is not None
    public = set(re.findall(r"``nxrs\.(\w+)``", nxrs.__doc__.split("public modules are")[1]))
    modules = {m.name for m in pkgutil.iter_modules(nxrs.__path__)}
    assert public == {name for name in modules if not name.startswith("_")}, modules
    assert {"data", "sklearn", "interop", "softf32", "cli"} <= public


@pytest.mark.parametrize(("old", "new"), [*RENAMED.items(), *MOVED.items()])
def test_an_old_module_name_is_the_module_itself(old: str, new: str) -> None:
    # In a fresh interpreter: the old name imports (by `import` and `from ... import`) as the one
    # module object, which keeps its own name and spec.
    code = (
        "import importlib, sys\n"
        f"old = importlib.import_module('nxrs.{old}')\n"
        f"new = sys.modules['{new}']\n"
        "assert old is new, (old, new)\n"
        f"assert new.__name__ == new.__spec__.name == '{new}', new.__spec__\n"
        f"from nxrs.{old} import __doc__ as doc\n"
        "assert doc == new.__doc__\n"
        "import nxrs\n"
    )
    if not old.startswith("_"):
        code += f"assert nxrs.{old} is new\n"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(("old", "name", "new"), SPLIT)
def test_a_split_module_name_gives_the_names_it_had(old: str, name: str, new: str) -> None:
    code = (
        "import importlib\n"
        f"old = importlib.import_module('nxrs.{old}')\n"
        f"from nxrs.{old} import {name}\n"
        f"assert {name} is importlib.import_module('{new}').{name}\n"
        f"assert getattr(old, {name!r}) is {name}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_nxrs_does_not_import_the_old_names_or_ray() -> None:
    old = {f"nxrs.{m}" for m in [*RENAMED, *MOVED, *(s[0] for s in SPLIT)]}
    code = f"import sys, nxrs\nloaded = [m for m in sys.modules if m in {old!r} or m == 'ray']\n"
    code += "assert not loaded, loaded\n"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_submodule_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__("nxrs.no_such_module")


@pytest.mark.parametrize(
    ("old", "make"),
    [
        ("nxrs._fit", "nxrs.History(epoch=[1], history={'loss': [0.5]}, steps=3)"),
        ("nxrs._rundir", "nxrs.RunLockedError('held by process 1')"),
        ("nxrs._verify", "nxrs.SegmentResult(0, 1, 0, 2, None, None, 2, 0.5, 'ok', None)"),
        ("nxrs._manager", "nxrs.CheckpointEntry(3, __import__('pathlib').Path('step.nxck'))"),
    ],
)
def test_a_pickle_naming_an_old_module_unpickles(old: str, make: str) -> None:
    """A pickle written before the layout (its classes named by their modules then) loads."""
    code = (
        "import pickle, nxrs\n"
        f"obj = {make}\n"
        "data = pickle.dumps(obj, protocol=0)\n"
        "new = (type(obj).__module__ + '\\n').encode()\n"
        "assert new in data, data\n"
        f"old = data.replace(new, {(old + chr(10))!r}.encode())\n"
        "back = pickle.loads(old)\n"
        "assert type(back) is type(obj) and repr(back) == repr(obj), (back, obj)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
