"""Every vector path of the hardware backend gives the definition's bits.

The hardware backend's matrix products run on the widest path the CPU has (AVX-512, AVX2, or the
portable one); the environment variable NXRS_ISA picks another, read once per process. Each test
therefore runs in a child process with NXRS_ISA set: the golden runs (written by the independent
numpy reference) and wide models, whose products have edge tiles and chains longer than a cache
block, must give the same bits on every path this CPU has as softf32. A path the CPU lacks is
skipped here, saying so; an unknown or unavailable NXRS_ISA makes the hardware backend
unavailable, with the reason.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
general_ref = importlib.import_module("reference.general_ref")

ROOT = Path(__file__).resolve().parent.parent
GUARDED = platform.machine().lower() in ("x86_64", "amd64", "aarch64", "arm64")
ISAS = ("avx512", "avx2", "portable")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux), empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def has(isa: str) -> bool:
    """Whether this CPU has the path's instructions (read from the CPU, not from nxrs)."""
    flags = cpu_flags()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return {
        "avx512": x86 and "avx512f" in flags,
        "avx2": x86 and "avx2" in flags,
        "portable": True,
    }[isa]


def child(isa: str, script: str) -> subprocess.CompletedProcess[str]:
    """Runs `script` in a child process whose NXRS_ISA is `isa`."""
    env = dict(os.environ, NXRS_ISA=isa)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


# Layer widths and batches past every tile edge (6 x 16, 8 x 32, 4 x 8) and a chain of 300
# inputs (longer than a cache block of 256 steps); a subnormal input and a row of zeros.
WIDE = [
    {"layers": [300, 37, 70, 13], "batch_size": 45, "grad_block": None},
    {"layers": [19, 257, 5], "batch_size": 64, "grad_block": 23},
]
ROWS, STEPS = 150, 5


def wide_data(layers: list[int]) -> tuple[Any, Any]:
    rng = np.random.default_rng(20)
    x = rng.standard_normal((ROWS, layers[0])).astype(np.float32)
    x[3, 4] = np.float32(1e-41)
    x[7, :] *= np.float32(0)
    return x, rng.integers(0, layers[-1], ROWS)


WIDE_SCRIPT = f"""
    import json
    import sys
    sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
    import numpy as np
    import nxrs
    from test_isa import WIDE, STEPS, wide_data

    out = {{"isa": nxrs.hardware_isa(), "runs": []}}
    for config in WIDE:
        x, y = wide_data(config["layers"])
        runs = {{}}
        for backend, threads in [("soft", 1), ("hw", 1), ("hw", 3)]:
            t = nxrs.Trainer(**config, backend=backend, threads=threads)
            t.train_steps(x, y, STEPS)
            p = t.predict_proba(x[:40]).view(np.uint32).tolist()
            runs[f"{{backend}}{{threads}}"] = [f"{{t.state_hash():016x}}", p]
        out["runs"].append(runs)
    print(json.dumps(out))
"""


@pytest.mark.skipif(not GUARDED, reason="no hardware backend on this architecture")
@pytest.mark.parametrize("isa", ISAS)
def test_every_path_gives_the_references_bits_on_wide_models(isa: str) -> None:
    """hw on the path (1 and 3 threads) and soft end where the independent numpy reference
    (tests/reference/general_ref.py, written from TRAINING.md) ends, and predict alike."""
    if not has(isa):
        pytest.skip(f"this CPU has no {isa}")
    run = child(isa, WIDE_SCRIPT)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["isa"] == isa
    for config, runs in zip(WIDE, out["runs"], strict=True):
        reference = general_ref.Trainer(**config)
        x, y = wide_data(config["layers"])
        reference.train_steps(x, y, STEPS)
        want = f"{reference.state_hash():016x}"
        assert runs["soft1"][0] == want, f"soft differs from the reference on {config}"
        assert runs["hw1"] == runs["soft1"], f"{isa} {config}: hw differs from soft"
        assert runs["hw3"] == runs["soft1"], f"{isa} {config}: 3 threads differ from soft"


@pytest.mark.skipif(not GUARDED, reason="no hardware backend on this architecture")
@pytest.mark.parametrize("isa", ISAS)
def test_every_path_reproduces_the_golden_runs(isa: str) -> None:
    """test_general.py's golden runs (the reference's hashes, step by step, and the digits run)
    on the hardware backend only, with NXRS_ISA set."""
    if not has(isa):
        pytest.skip(f"this CPU has no {isa}")
    tests = ROOT / "tests" / "test_general.py"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "hw", str(tests)],
        env=dict(os.environ, NXRS_ISA=isa),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1], run.stdout


def test_the_path_in_use_is_named() -> None:
    isa = nxrs.hardware_isa()
    if not GUARDED:
        assert isa is None
        return
    chosen = os.environ.get("NXRS_ISA")
    widest = next(name for name in ISAS if has(name))
    assert isa == (chosen or widest)


@pytest.mark.skipif(not GUARDED, reason="no hardware backend on this architecture")
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sse9", 'NXRS_ISA="sse9" is not one of avx512, avx2, portable'),
        ("avx512", "NXRS_ISA=avx512 asks for instructions this CPU does not have"),
    ],
)
def test_an_unknown_or_missing_path_makes_hw_unavailable(value: str, message: str) -> None:
    if value == "avx512" and has("avx512"):
        pytest.skip("this CPU has AVX-512")
    script = """
        import warnings
        import nxrs
        assert nxrs.hardware_isa() is None
        try:
            nxrs.Trainer(backend="hw")
        except nxrs.ConfigError as e:
            print("hw:", e)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = nxrs.Trainer(layers=[3, 2])
        print("auto:", t.backend, " | ".join(str(w.message) for w in caught))
    """
    run = child(value, script)
    assert run.returncode == 0, run.stderr
    hw, auto = run.stdout.splitlines()
    assert "backend='hw' is not available: " in hw, hw
    assert message in hw, hw
    assert auto.startswith(f"auto: soft {message}"), auto
    assert "backend='auto' computes with softf32" in auto, auto
