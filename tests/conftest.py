"""Shared fixtures: the independent numpy reference and its golden values."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

# CI runs every property test with a fixed derandomised seed, so a run is reproducible; locally
# hypothesis explores new examples each run (and prints the seed of any failure).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture(scope="session")
def seed_ref() -> ModuleType:
    """tests/reference/seed_ref.py: the seed re-implemented in plain numpy float32 (no nxrs)."""
    return importlib.import_module("reference.seed_ref")


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    """tests/golden/seed.json, produced by the reference."""
    data: dict[str, Any] = json.loads((TESTS_DIR / "golden" / "seed.json").read_text())
    return data


@pytest.fixture(scope="session")
def ray_cluster() -> Any:
    """One local Ray cluster (no dashboard) for every Ray test of the session, started by the
    first test that asks for it; the tests skip, saying why, when the ``ray`` extra is not
    installed. It claims 3 logical CPUs on this 2-core machine: each data-parallel worker
    reserves one, and the tests run 3 workers."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install '.[ray]')")
    if ray.is_initialized():  # by code under test before (a docs example): not sized
        ray.shutdown()
    # address="local": a new cluster of this test run's own, whatever RAY_ADDRESS says.
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
