"""The hardware-float backend: choosing it, its fallback, resuming across a backend change, and
its floating-point environment guard against a library that turned on FTZ/DAZ (x86 MXCSR) or FZ
(AArch64 FPCR). The golden runs under both backends are in test_general.py."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import nxrs

MACHINE = platform.machine().lower()
X86_64 = MACHINE in ("x86_64", "amd64")
AARCH64 = MACHINE in ("aarch64", "arm64")
GUARDED = X86_64 or AARCH64


def test_auto_is_hw_where_guarded_and_the_backend_is_settable() -> None:
    t = nxrs.Trainer(layers=[4, 8, 3])
    assert t.backend == ("hw" if GUARDED else "soft")
    t.backend = "soft"
    assert t.backend == "soft"
    t.backend = "auto"
    assert t.backend == ("hw" if GUARDED else "soft")
    with pytest.raises(nxrs.ConfigError, match=r'backend = "fast" is not one of'):
        t.backend = "fast"
    with pytest.raises(nxrs.ConfigError, match=r'backend = "fast" is not one of'):
        nxrs.Trainer(backend="fast")
    assert "backend" not in t.config
    assert nxrs.Trainer.seed_model(backend="soft").backend == "soft"


@pytest.mark.skipif(GUARDED, reason="the hardware backend is available on x86_64 and aarch64")
def test_hw_where_unguarded_is_a_config_error() -> None:
    with pytest.raises(nxrs.ConfigError, match=r"backend=.hw. is not available: .*x86_64"):
        nxrs.Trainer(backend="hw")


@pytest.mark.skipif(not GUARDED, reason="no hardware backend on this architecture")
@pytest.mark.parametrize(("first", "second"), [("soft", "hw"), ("hw", "soft")])
def test_resume_across_a_backend_change_gives_the_same_bits(
    tmp_path: Path, first: str, second: str
) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((53, 5)).astype(np.float32)
    y = rng.integers(0, 3, 53)
    kwargs = dict(layers=[5, 7, 3], batch_size=8, optimizer="adamw", clip_norm=1.0)
    whole = nxrs.Trainer(**kwargs, backend="soft")  # type: ignore[arg-type]
    whole.fit(x, y, epochs=4)
    part = nxrs.Trainer(**kwargs, backend=first)  # type: ignore[arg-type]
    part.train_steps(x, y, 11)
    part.save(tmp_path / "run.nxck")
    resumed = nxrs.Trainer.load(tmp_path / "run.nxck", backend=second)  # type: ignore[arg-type]
    assert resumed.backend == second
    resumed.fit(x, y, epochs=4)
    assert resumed.state_hash() == whole.state_hash()
    assert resumed.evaluate(x, y) == whole.evaluate(x, y)


FAULT_SCRIPT = textwrap.dedent(
    """
    import warnings
    import nxrs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = nxrs.Trainer(layers=[3, 2])
    assert t.backend == "soft", t.backend
    assert [w.category for w in caught] == [RuntimeWarning], caught
    print(caught[0].message)
    try:
        nxrs.Trainer(backend="hw")
    except nxrs.ConfigError as e:
        print(e)
    else:
        raise AssertionError("backend='hw' after a failed self-check")
    """
)


@pytest.mark.skipif(not GUARDED, reason="no hardware backend (nor self-check) on this architecture")
def test_a_self_check_disagreement_falls_back_to_soft_with_a_warning() -> None:
    """NXRS_TEST_HW_SELFCHECK_FAULT makes the self-check see a wrong bit in `0 + 0` (a stand-in
    for a CPU that disagrees with softf32), in a child process: the check runs once a process."""
    env = dict(os.environ, NXRS_TEST_HW_SELFCHECK_FAULT="1")
    out = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    case = "add(0x00000000, 0x00000000) gave 0x00000001 in hardware, 0x00000000 in softf32"
    assert out[0].startswith("the hardware self-check disagreed with softf32: " + case)
    assert out[0].endswith("backend='auto' computes with softf32 ('soft')")
    assert "backend='hw' is not available: the hardware self-check disagreed" in out[1]
    assert case in out[1]


FLUSH_LIBRARY = r"""
#if defined(__x86_64__)
#include <xmmintrin.h>
unsigned long long get_control(void) { return _mm_getcsr(); }
void set_control(unsigned long long v) { _mm_setcsr((unsigned)v); }
unsigned long long flush_bits(void) { return 0x8040; } /* FTZ (bit 15) | DAZ (bit 6) */
unsigned long long flag_bits(void) { return 0x3F; }    /* the sticky exception flags */
#elif defined(__aarch64__)
unsigned long long get_control(void) {
    unsigned long long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
void set_control(unsigned long long v) { __asm__ volatile("msr fpcr, %0" : : "r"(v)); }
unsigned long long flush_bits(void) { return 1ull << 24; } /* FZ */
unsigned long long flag_bits(void) { return 0; }
#endif
float product(float a, float b) { return a * b; }
"""


@pytest.fixture
def fast_math_library(tmp_path: Path) -> Iterator[ctypes.CDLL]:
    """A shared library built with -ffast-math (older gcc links crtfastmath.o into it, which
    turns FTZ/DAZ on when it is loaded), with helpers to read and set the control register."""
    if not GUARDED:
        reason = f"FTZ/DAZ guard test: no floating-point environment guard on {MACHINE}"
        print(reason)
        pytest.skip(reason)
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        print("FTZ/DAZ guard test: no C compiler")
        pytest.skip("FTZ/DAZ guard test: no C compiler")
    source = tmp_path / "flush.c"
    source.write_text(FLUSH_LIBRARY)
    library = tmp_path / "libflush.so"
    subprocess.run(
        [cc, "-O2", "-ffast-math", "-shared", "-fPIC", "-o", str(library), str(source)], check=True
    )
    u64 = ctypes.c_ulonglong
    lib = ctypes.CDLL(str(library))
    lib.get_control.restype = u64
    lib.set_control.argtypes = [u64]
    lib.flush_bits.restype = u64
    lib.flag_bits.restype = u64
    lib.product.restype = ctypes.c_float
    lib.product.argtypes = [ctypes.c_float, ctypes.c_float]
    flush = int(lib.flush_bits())
    at_load = int(lib.get_control())
    print(f"after loading the -ffast-math library: control register {at_load:#x}", end=" ")
    print(
        "(FTZ/DAZ on)"
        if at_load & flush == flush
        else "(FTZ/DAZ off: this gcc does not link crtfastmath.o into shared libraries)"
    )
    try:
        yield lib
    finally:
        # The interpreter ran with them off before: the rest of the session must too.
        lib.set_control(int(lib.get_control()) & ~flush)


def test_golden_hashes_under_ftz_daz_and_the_register_is_restored(
    fast_math_library: ctypes.CDLL, golden: dict[str, object]
) -> None:
    lib = fast_math_library
    flush, flags = int(lib.flush_bits()), int(lib.flag_bits())
    saved = int(lib.get_control()) & ~flush  # the environment before the library was loaded
    # Subnormal features: an mse model's output for them is w * x, a subnormal, which FTZ/DAZ
    # would turn into 0 (DAZ reads x as 0; FTZ flushes the product). Built and compared as bits:
    # numpy's own comparisons (and conversions) read subnormals as 0 under DAZ (FTZ).
    tiny_bits = [[0x000A_E398], [0x8003_4547], [0x0082_AB1E]]
    tiny = np.array(tiny_bits, dtype=np.uint32).view(np.float32)
    x, y = nxrs.seed_dataset()
    want_prediction = nxrs.Trainer(layers=[1, 1], loss="mse", seed=3, backend="soft").predict_proba(
        tiny
    )
    assert all(b & 0x7FFF_FFFF for b in want_prediction.view(np.uint32).ravel().tolist())
    try:
        lib.set_control(saved | flush)  # whether or not loading the library already did
        flushing = int(lib.get_control())
        assert flushing & flush == flush
        # The environment is really flushing: the smallest normal halved is 0, not 2^-127.
        assert lib.product(1.1754944e-38, 0.5) == 0.0
        hw = nxrs.Trainer(layers=[1, 1], loss="mse", seed=3, backend="hw")
        got = hw.predict_proba(tiny)
        after_predict = int(lib.get_control())
        t = nxrs.Trainer.seed_model(backend="hw")
        t.fit(x, y, epochs=400)
        after_fit = int(lib.get_control())
    finally:
        lib.set_control(saved)
    assert got.view(np.uint32).tolist() == want_prediction.view(np.uint32).tolist()
    epochs = golden["epochs"]
    assert isinstance(epochs, dict)
    want = epochs["400"]
    assert (t.hash(), t.state_hash()) == (want["seed_hash"], want["state_hash"])
    # The guard put back the flushing environment after each call (sticky flags aside: the
    # interpreter's own float operations may raise them).
    assert after_predict & ~flags == flushing & ~flags
    assert after_fit & ~flags == flushing & ~flags
    assert int(lib.get_control()) & ~flags == saved & ~flags


def test_no_warning_on_a_passing_self_check() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nxrs.Trainer(layers=[2, 2])
