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

RENAMED = ("distributed", "gate", "inspection", "manager", "rundir", "sweeps")


def test_every_module_is_underscored_or_named_public_in_the_package_docstring() -> None:
    assert nxrs.__doc__ is not None
    public = set(re.findall(r"``nxrs\.(\w+)``", nxrs.__doc__.split("public modules are")[1]))
    modules = {m.name for m in pkgutil.iter_modules(nxrs.__path__)}
    assert public == {name for name in modules if not name.startswith("_")}, modules
    assert {"data", "sklearn", "interop", "softf32", "cli"} <= public


@pytest.mark.parametrize("old", RENAMED)
def test_an_old_module_name_is_the_module_itself(old: str) -> None:
    # In a fresh interpreter: the old name imports (by `import` and `from ... import`) as the one
    # module object, which keeps its own name and spec.
    code = (
        "import importlib, sys\n"
        f"old = importlib.import_module('nxrs.{old}')\n"
        f"new = sys.modules['nxrs._{old}']\n"
        "assert old is new, (old, new)\n"
        f"assert new.__name__ == new.__spec__.name == 'nxrs._{old}', new.__spec__\n"
        f"from nxrs.{old} import __doc__ as doc\n"
        "assert doc == new.__doc__\n"
        "import nxrs\n"
        f"assert nxrs.{old} is new\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_importing_nxrs_does_not_import_the_old_names_or_ray() -> None:
    old = {f"nxrs.{m}" for m in RENAMED}
    code = f"import sys, nxrs\nloaded = [m for m in sys.modules if m in {old!r} or m == 'ray']\n"
    code += "assert not loaded, loaded\n"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_submodule_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__("nxrs.no_such_module")
