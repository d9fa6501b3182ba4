"""The README's Python examples run as written, in order, in a fresh directory."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 3


def test_the_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block runs in the namespace the blocks before it left, as a reader would type them."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for k, block in enumerate(python_blocks()):
        if "nxrs.sweep(" in block and importlib.util.find_spec("ray") is None:
            print(f"README.md python block {k} skipped: the ray extra is not installed")
            continue
        exec(compile(block, f"README.md python block {k}", "exec"), namespace)
    assert any(name.endswith(".nxck") for name in os.listdir(tmp_path))
