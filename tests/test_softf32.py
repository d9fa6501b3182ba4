"""nxrs.softf32 against numpy float32 (x86 SSE arithmetic), bit for bit, and the seed's own
functions against the independent numpy reference."""

from __future__ import annotations

import platform
from types import ModuleType

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nxrs import softf32

# Every bit pattern is a float32; the edges are drawn on purpose so each class shows up often.
EDGES = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x00800001,
    0x3F800000, 0xBF800000, 0x3F800001, 0x4B800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
    0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x33800000, 0x34000000,
]  # fmt: skip
bit_patterns = st.one_of(st.sampled_from(EDGES), st.integers(0, 2**32 - 1))
arrays = hnp.arrays(np.uint32, st.integers(1, 64), elements=bit_patterns)


def as_f32(bits: npt.NDArray[np.uint32]) -> npt.NDArray[np.float32]:
    return bits.view(np.float32)


#: The default NaN of x86 SSE and softf32 (an invalid operation's result), and the quiet bit.
DEFAULT_NAN = 0xFFC00000
QUIET = 0x00400000
#: numpy's scalar float32 arithmetic runs on the host's FPU; only x86's NaN rules are softf32's
#: (an ARM CPU's default NaN is 0x7FC00000 and it prefers signalling NaN operands).
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def x86_nan(*operands: npt.NDArray[np.float32]) -> npt.NDArray[np.uint32]:
    """The bits of an operation's NaN result by the rule softf32 documents (x86 SSE's): the
    first NaN operand, quieted; the default NaN when no operand is a NaN (an invalid
    operation)."""
    ops = np.broadcast_arrays(*operands)
    out = np.full(ops[0].shape, DEFAULT_NAN, dtype=np.uint32)
    for op in reversed(ops):
        out = np.where(np.isnan(op), op.view(np.uint32) | np.uint32(QUIET), out)
    return out


def assert_same_bits(
    got: npt.NDArray[np.float32],
    want: npt.NDArray[np.float32],
    *operands: npt.NDArray[np.float32],
) -> None:
    """Bit-identical, NaN payloads included: ``want`` (numpy) says which results are NaN and
    every other bit, and a NaN's bits are the documented rule applied to ``operands`` (numpy's
    own NaN bits are not a reference: its SIMD loops may hand the operands to the CPU in either
    order, and another CPU has other NaN rules)."""
    assert got.dtype == np.float32 and got.shape == want.shape
    g = got.view(np.uint32)
    w = np.where(np.isnan(want), x86_nan(*operands), want.view(np.uint32))
    bad = g != w
    assert not bad.any(), [(hex(a), hex(b)) for a, b in zip(g[bad][:5], w[bad][:5])]


def pairs(n: int) -> st.SearchStrategy[tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]]:
    element = hnp.arrays(np.uint32, n, elements=bit_patterns)
    return st.tuples(element, element)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64).flatmap(pairs))
def test_binary_ops_match_numpy(ab: tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]) -> None:
    a, b = as_f32(ab[0]), as_f32(ab[1])
    with np.errstate(all="ignore"):
        for ours, theirs in [
            (softf32.add, np.add),
            (softf32.sub, np.subtract),
            (softf32.mul, np.multiply),
            (softf32.div, np.divide),
        ]:
            assert_same_bits(ours(a, b), theirs(a, b), a, b)


@settings(max_examples=300, deadline=None)
@given(arrays)
def test_unary_ops_match_numpy(bits: npt.NDArray[np.uint32]) -> None:
    a = as_f32(bits)
    with np.errstate(all="ignore"):
        assert_same_bits(softf32.sqrt(a), np.sqrt(a), a)
    assert np.array_equal(softf32.neg(a).view(np.uint32), bits ^ np.uint32(0x80000000))
    assert np.array_equal(softf32.abs(a).view(np.uint32), bits & np.uint32(0x7FFFFFFF))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64).flatmap(pairs))
def test_comparisons_match_numpy(ab: tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]) -> None:
    a, b = as_f32(ab[0]), as_f32(ab[1])
    assert np.array_equal(softf32.eq(a, b), a == b)
    assert np.array_equal(softf32.lt(a, b), a < b)
    assert np.array_equal(softf32.le(a, b), a <= b)


@settings(max_examples=300, deadline=None)
@given(arrays)
def test_truncation_matches_numpy_where_defined(bits: npt.NDArray[np.uint32]) -> None:
    a = as_f32(bits)
    got = softf32.to_i32(a)
    with np.errstate(invalid="ignore"):  # signalling NaNs raise "invalid" when widened
        in_range = np.isfinite(a) & (np.abs(a.astype(np.float64)) < 2.0**31)
    assert np.array_equal(got[in_range], np.trunc(a[in_range]).astype(np.int32))
    # NaN and out of range: x86's "integer indefinite".
    assert (got[~in_range] == np.iinfo(np.int32).min).all()
    nearest = softf32.to_i32(a, "nearest")
    assert np.array_equal(nearest[in_range], np.rint(a[in_range]).astype(np.int32))


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.int64, st.integers(1, 64)))
def test_from_int_matches_numpy(ints: npt.NDArray[np.int64]) -> None:
    assert np.array_equal(
        softf32.from_int(ints).view(np.uint32), ints.astype(np.float32).view(np.uint32)
    )
    small = ints.astype(np.int32)
    assert np.array_equal(
        softf32.from_int(small).view(np.uint32), small.astype(np.float32).view(np.uint32)
    )


def test_broadcasting_and_scalars() -> None:
    out = softf32.add(np.arange(3, dtype=np.float32), np.float32(0.5))
    assert out.tolist() == [0.5, 1.5, 2.5]
    scalar = softf32.sqrt(np.float32(4))
    assert scalar.shape == () and scalar.dtype == np.float32 and scalar == 2
    assert softf32.mul(np.ones((2, 3), np.float32), np.ones(3, np.float32)).shape == (2, 3)


def test_rejects_other_dtypes() -> None:
    with pytest.raises(TypeError, match="float32"):
        softf32.add(np.ones(2), np.ones(2, np.float32))
    with pytest.raises(TypeError, match="int32 or int64"):
        softf32.from_int(np.ones(2, np.uint64))


# The seed's own functions against the independent reference, bit for bit (NaN payloads too).
# Inputs cover the ranges training sees (exp of non-positive logit differences, log of
# probabilities, sqrt of second moments) and arbitrary bit patterns, NaNs and infinities
# included. The reference's NaNs are the host FPU's (one payload flows through each function,
# or x86's default NaN): off x86 only finite inputs are compared.
def assert_seed_functions_match(a: npt.NDArray[np.float32], seed_ref: ModuleType) -> None:
    with np.errstate(all="ignore"):
        for ours, theirs in [
            (softf32.seed_sqrt, seed_ref.seed_sqrt),
            (softf32.seed_exp, seed_ref.seed_exp),
            (softf32.seed_log, seed_ref.seed_log),
        ]:
            want = np.array([theirs(x) for x in a], dtype=np.float32).view(np.uint32)
            got = ours(a).view(np.uint32)
            bad = got != want
            assert not bad.any(), [
                (theirs.__name__, hex(x), hex(g), hex(w))
                for x, g, w in zip(a.view(np.uint32)[bad][:5], got[bad][:5], want[bad][:5])
            ]
        le = softf32.seed_le(a, a[::-1])
        assert le.tolist() == [seed_ref.seed_le(x, y) for x, y in zip(a, a[::-1])]


@settings(max_examples=200, deadline=None)
@given(bits=hnp.arrays(np.uint32, st.integers(1, 16), elements=bit_patterns))
def test_seed_functions_match_reference(bits: npt.NDArray[np.uint32], seed_ref: ModuleType) -> None:
    a = as_f32(bits)
    assert_seed_functions_match(a if X86 else a[np.isfinite(a)], seed_ref)


def test_seed_functions_on_nans_and_infinities(seed_ref: ModuleType) -> None:
    """Every NaN and infinity of EDGES (and NaNs of both signs with payloads), each time."""
    if not X86:
        pytest.skip("the reference's NaN bits are the host FPU's, and this host is not x86")
    special = [b for b in EDGES if (b & 0x7F800000) == 0x7F800000]
    special += [0x7F812345, 0xFF812345, 0x7FD23456, 0xFFD23456, 0x7FFFFFFF, 0xFFFFFFFF]
    a = as_f32(np.array(special, dtype=np.uint32))
    assert np.isnan(a).sum() >= 8 and np.isinf(a).sum() == 2
    assert_seed_functions_match(a, seed_ref)


@pytest.mark.parametrize("lo,hi", [(-90.0, 0.0), (1e-30, 1.0), (0.0, 1e-3)])
def test_seed_functions_on_training_ranges(lo: float, hi: float, seed_ref: ModuleType) -> None:
    assert_seed_functions_match(np.linspace(lo, hi, 2001, dtype=np.float32), seed_ref)
