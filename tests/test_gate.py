"""The gate end to end, and its expectations against the reference's fixture."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nxrs
from nxrs._audit import gate as gate


def test_gate_command_is_green(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nxrs", "gate", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("NX-F32-TRAIN-CKPT verdict=GREEN passes=6/6")
    assert sum(line.startswith(" [PASS] T") for line in lines) == 6
    # The seed's numbers: its T1 hash and its 1404-byte checkpoint.
    assert "final state hash=37947003673214337" in proc.stdout
    assert "saved 1404 bytes" in proc.stdout
    assert (tmp_path / "nx_train.ckpt").stat().st_size == 1404


def test_gate_is_red_when_the_reference_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    golden = gate.expected()
    wrong = json.loads(json.dumps(golden))
    wrong["seed_hash"]["800"] += 1
    monkeypatch.setattr(gate, "expected", lambda: wrong)
    out = io.StringIO()
    assert gate.run_gate(out) is False
    assert "[FAIL] T1" in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "NX-F32-TRAIN-CKPT verdict=RED passes=5/6"


def test_gate_expectations_are_the_references(golden: dict[str, Any]) -> None:
    shipped = gate.expected()
    for epoch in ("400", "800"):
        assert shipped["seed_hash"][epoch] == golden["epochs"][epoch]["seed_hash"]  # type: ignore[index]
        assert shipped["state_hash"][epoch] == golden["epochs"][epoch]["state_hash"]  # type: ignore[index]
    assert shipped["v1_len"] == golden["epochs"]["800"]["v1_len"]


def test_version_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nxrs", "--version"], capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == f"nxrs {nxrs.__version__}"
