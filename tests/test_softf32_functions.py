"""nxrs.softf32.exp, .log, .normal_cdf (Φ) and .normal_pdf against mpmath: correctly rounded
binary32 on a few thousand inputs, the hard cases (inputs whose value lies closest to a rounding
boundary) and the specials.

The exhaustive check over all 2^32 inputs is in Rust (``tests/exhaustive_functions.rs``)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import mpmath
import numpy as np
import numpy.typing as npt
import pytest

from nxrs import softf32

HARD_CASES = (
    Path(__file__).resolve().parent.parent
    / "rust"
    / "nxrs-core"
    / "tests"
    / "data"
    / "function_hard_cases.txt"
)
DEFAULT_NAN = 0xFFC00000
MP_FUNCTIONS: dict[str, Callable[[mpmath.mpf], mpmath.mpf]] = {
    "exp": mpmath.exp,
    "log": mpmath.log,
    "normal_cdf": mpmath.ncdf,
    "normal_pdf": mpmath.npdf,
}
OURS: dict[str, Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]]] = {
    "exp": softf32.exp,
    "log": softf32.log,
    "normal_cdf": softf32.normal_cdf,
    "normal_pdf": softf32.normal_pdf,
}
#: The Python names of the hard-case file's ops (the Rust methods' names).
PYTHON_NAMES = {"exp": "exp", "ln": "log", "normal_cdf": "normal_cdf", "normal_pdf": "normal_pdf"}


def correctly_rounded(op: str, bits: int) -> int:
    """The binary32 bits of ``op(x)`` rounded to nearest even, from mpmath at 160 bits (failing
    rather than guessing if that were too close to a rounding boundary to decide)."""
    x = np.uint32(bits).view(np.float32)
    with mpmath.workprec(160):
        v = MP_FUNCTIONS[op](mpmath.mpf(float(x)))
        if v == 0:
            return 0
        a = abs(v)
        _, e = mpmath.frexp(a)
        quantum = mpmath.ldexp(1, max(int(e) - 24, -149))
        n = a / quantum
        whole = int(mpmath.floor(n))
        frac = n - whole
        assert abs(frac - mpmath.mpf(0.5)) > mpmath.ldexp(n, -140), (op, hex(bits))
        whole += int(frac > 0.5)
        rounded = whole * quantum
        if rounded >= mpmath.ldexp(1, 128):
            result = 0x7F800000
        else:
            result = int(np.float32(float(rounded)).view(np.uint32))
        return result | (0x80000000 if v < 0 else 0)


def ours(op: str, bits: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    out: npt.NDArray[np.uint32] = OURS[op](bits.view(np.float32)).view(np.uint32)
    return out


def check_against_mpmath(op: str, bits: npt.NDArray[np.uint32]) -> None:
    got = ours(op, bits)
    wrong = [
        (hex(int(x)), hex(int(g)), hex(want))
        for x, g in zip(bits, got)
        if int(g) != (want := correctly_rounded(op, int(x)))
    ]
    assert not wrong, wrong[:10]


def f32_bits(values: npt.ArrayLike) -> npt.NDArray[np.uint32]:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_exp_random_inputs_match_mpmath() -> None:
    rng = np.random.default_rng(0xE4B)
    spread = f32_bits(rng.uniform(-104.0, 89.0, 1500))
    small = f32_bits(rng.uniform(-1.0, 1.0, 500) * 2.0 ** rng.integers(-26, 0, 500))
    check_against_mpmath("exp", np.concatenate([spread, small]))


def test_log_random_inputs_match_mpmath() -> None:
    rng = np.random.default_rng(0x106)
    anywhere = rng.integers(1, 0x7F800000, 1500, dtype=np.uint32)
    near_one = (0x3F800000 + rng.integers(-(1 << 16), 1 << 16, 500)).astype(np.uint32)
    check_against_mpmath("log", np.concatenate([anywhere, near_one]))


def test_normal_cdf_random_inputs_match_mpmath() -> None:
    rng = np.random.default_rng(0xCDF)
    spread = f32_bits(rng.uniform(-14.2, 5.5, 1500))
    small = f32_bits(rng.uniform(-1.0, 1.0, 500) * 2.0 ** rng.integers(-26, 0, 500))
    check_against_mpmath("normal_cdf", np.concatenate([spread, small]))


def test_normal_pdf_random_inputs_match_mpmath() -> None:
    rng = np.random.default_rng(0x9DF)
    spread = f32_bits(rng.uniform(-14.4, 14.4, 1500))
    small = f32_bits(rng.uniform(-1.0, 1.0, 500) * 2.0 ** rng.integers(-26, 0, 500))
    check_against_mpmath("normal_pdf", np.concatenate([spread, small]))


def hard_cases() -> list[tuple[str, int, int]]:
    cases = []
    for line in HARD_CASES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            op, x, want = line.split()
            cases.append((PYTHON_NAMES[op], int(x, 16), int(want, 16)))
    return cases


@pytest.mark.parametrize(
    ("op", "at_least"), [("exp", 50), ("log", 50), ("normal_cdf", 50), ("normal_pdf", 50)]
)
def test_hard_cases_match_mpmath(op: str, at_least: int) -> None:
    """The inputs whose binary64 oracle result lies within 64 ulps of a binary32 rounding
    boundary, found by the exhaustive Rust check: mpmath agrees with the listed result, and
    softf32 with both."""
    cases = [(x, want) for o, x, want in hard_cases() if o == op]
    assert len(cases) >= at_least
    for x, want in cases:
        assert correctly_rounded(op, x) == want, (op, hex(x))
    bits = np.array([x for x, _ in cases], dtype=np.uint32)
    assert ours(op, bits).tolist() == [want for _, want in cases]


@pytest.mark.parametrize(
    ("op", "x", "want"),
    [
        ("exp", 0x00000000, 0x3F800000),  # exp(+0) = 1
        ("exp", 0x80000000, 0x3F800000),  # exp(-0) = 1
        ("exp", 0x7F800000, 0x7F800000),  # exp(inf) = inf
        ("exp", 0xFF800000, 0x00000000),  # exp(-inf) = +0
        ("exp", 0x7F800001, 0x7FC00001),  # a signalling NaN comes back quieted
        ("exp", 0xFFC00000, 0xFFC00000),
        ("exp", 0x42B17217, 0x7F7FFF84),  # the largest x with a finite e^x
        ("exp", 0x42B17218, 0x7F800000),  # overflow
        ("exp", 0xC2AEAC50, 0x007FFFE6),  # just below 2^-126: a subnormal
        ("exp", 0xC2CFF1B4, 0x00000001),  # the last x above half the smallest subnormal
        ("exp", 0xC2CFF1B5, 0x00000000),  # underflow to +0
        ("exp", 0x00000001, 0x3F800000),  # subnormal x
        ("log", 0x00000000, 0xFF800000),  # log(+0) = -inf
        ("log", 0x80000000, 0xFF800000),  # log(-0) = -inf
        ("log", 0x7F800000, 0x7F800000),  # log(inf) = inf
        ("log", 0xFF800000, DEFAULT_NAN),  # log(-inf) is invalid
        ("log", 0xBF800000, DEFAULT_NAN),  # log(-1) is invalid
        ("log", 0x80000001, DEFAULT_NAN),  # log of a negative subnormal too
        ("log", 0x3F800000, 0x00000000),  # log(1) = +0
        ("log", 0x7F800001, 0x7FC00001),
        ("log", 0x00000001, 0xC2CE8ED0),  # log(2^-149)
        ("log", 0x7F7FFFFF, 0x42B17218),  # log(FLT_MAX)
        ("log", 0x3F7FFFFF, 0xB3800000),  # log(1 - 2^-24)
        ("normal_cdf", 0x00000000, 0x3F000000),  # normal_cdf(+0) = 1/2
        ("normal_cdf", 0x80000000, 0x3F000000),  # normal_cdf(-0) = 1/2
        ("normal_cdf", 0x7F800000, 0x3F800000),  # normal_cdf(inf) = 1
        ("normal_cdf", 0xFF800000, 0x00000000),  # normal_cdf(-inf) = +0
        ("normal_cdf", 0x7F800001, 0x7FC00001),
        ("normal_cdf", 0xFFC00000, 0xFFC00000),
        ("normal_cdf", 0xC162B914, 0x00000001),  # the last x above half the smallest subnormal
        ("normal_cdf", 0xC162B915, 0x00000000),  # rounds to +0
        ("normal_cdf", 0xC1500000, 0x00429C2A),  # normal_cdf(-13): a subnormal
        ("normal_cdf", 0x40AD7080, 0x3F7FFFFF),  # the last x below 1 - 2^-25
        ("normal_cdf", 0x40AD7081, 0x3F800000),  # rounds to 1
        ("normal_cdf", 0xB3000000, 0x3F000000),  # normal_cdf(-2^-25) = 1/2, rounded
        ("normal_pdf", 0x00000000, 0x3ECC422A),  # 1/sqrt(2 pi)
        ("normal_pdf", 0x80000001, 0x3ECC422A),
        ("normal_pdf", 0x7F800000, 0x00000000),  # normal_pdf(+-inf) = +0
        ("normal_pdf", 0xFF800000, 0x00000000),
        ("normal_pdf", 0xFF800001, 0xFFC00001),
        ("normal_pdf", 0x4165B3D2, 0x00000001),  # the last x above half the smallest subnormal
        ("normal_pdf", 0xC165B3D3, 0x00000000),  # rounds to +0
    ],
)
def test_specials(op: str, x: int, want: int) -> None:
    assert int(ours(op, np.array([x], dtype=np.uint32))[0]) == want
    finite_nonzero = 0 < x & 0x7FFFFFFF < 0x7F800000
    if finite_nonzero and not (op == "log" and x >= 0x80000000):
        assert correctly_rounded(op, x) == want


def test_broadcasting_and_scalars() -> None:
    assert softf32.exp(0.0).dtype == np.float32
    x = np.array([[0.5], [2.0]], dtype=np.float32)
    assert softf32.log(x).shape == (2, 1)
    with pytest.raises(TypeError):
        softf32.exp(np.array([1.0]))  # float64 is refused, as for every softf32 function
