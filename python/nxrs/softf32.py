"""softf32 over numpy arrays: IEEE 754 binary32 done with integer operations only.

Every function takes float32 arrays (or Python scalars), broadcasts them like numpy, and returns
a new array. Results are bit-identical to x86 SSE float32 arithmetic (round to nearest even,
subnormals kept), including NaN results: an operation on a NaN returns the first NaN operand,
quieted; an invalid operation (``0 * inf``, ``inf - inf``, ``sqrt(-1)``) returns the default NaN
``0xFFC00000``.

>>> import numpy as np
>>> from nxrs import softf32
>>> hex(softf32.div(np.float32(1), np.float32(3)).view(np.uint32))
'0x3eaaaaab'
>>> softf32.sqrt(np.array([2.0, -1.0], dtype=np.float32)).view(np.uint32)
array([1068827891, 4290772992], dtype=uint32)
"""

from __future__ import annotations

from typing import Literal, Union

import numpy as np
import numpy.typing as npt

from nxrs import _nxrs

Float32Like = Union[float, np.floating, npt.NDArray[np.float32]]
IntLike = Union[int, np.integer, npt.NDArray[np.integer]]
Rounding = Literal["trunc", "nearest"]

__all__ = [
    "abs",
    "add",
    "cos_pi",
    "div",
    "eq",
    "exp",
    "from_int",
    "le",
    "log",
    "lt",
    "mul",
    "neg",
    "normal_cdf",
    "normal_pdf",
    "seed_exp",
    "seed_le",
    "seed_log",
    "seed_sqrt",
    "sqrt",
    "sub",
    "to_i32",
    "to_i64",
]


def _f32(a: Float32Like) -> npt.NDArray[np.float32]:
    array = np.asarray(a)
    if array.dtype != np.float32 and not (array.ndim == 0 and isinstance(a, (int, float))):
        raise TypeError(f"softf32 takes float32 values, not {array.dtype}")
    return np.asarray(array, dtype=np.float32, order="C")


def _pair(a: Float32Like, b: Float32Like) -> tuple[npt.NDArray[np.float32], ...]:
    x, y = np.broadcast_arrays(_f32(a), _f32(b))
    return np.asarray(x, order="C"), np.asarray(y, order="C")


def add(a: Float32Like, b: Float32Like) -> npt.NDArray[np.float32]:
    """``a + b``, correctly rounded."""
    return _nxrs.f32_binary("add", *_pair(a, b))


def sub(a: Float32Like, b: Float32Like) -> npt.NDArray[np.float32]:
    """``a - b``, correctly rounded."""
    return _nxrs.f32_binary("sub", *_pair(a, b))


def mul(a: Float32Like, b: Float32Like) -> npt.NDArray[np.float32]:
    """``a * b``, correctly rounded."""
    return _nxrs.f32_binary("mul", *_pair(a, b))


def div(a: Float32Like, b: Float32Like) -> npt.NDArray[np.float32]:
    """``a / b``, correctly rounded."""
    return _nxrs.f32_binary("div", *_pair(a, b))


def sqrt(a: Float32Like) -> npt.NDArray[np.float32]:
    """The correctly rounded square root (``sqrt(-0) = -0``)."""
    return _nxrs.f32_unary("sqrt", _f32(a))


def exp(a: Float32Like) -> npt.NDArray[np.float32]:
    """``e**a``, correctly rounded (to nearest, ties to even) on every input.

    ``exp(+-0) = 1``, ``exp(inf) = inf``, ``exp(-inf) = +0``; results overflow to ``inf`` above
    ``88.72283`` and underflow gradually through the subnormals to ``+0`` below ``-103.97208``.
    A NaN comes back quieted. Computed in integer fixed point, so it gives the same bits on every
    machine (numpy's ``np.exp`` may differ in the last bit and from machine to machine).

    >>> import numpy as np
    >>> from nxrs import softf32
    >>> softf32.exp(np.array([0.0, 1.0, -100.0], dtype=np.float32))
    array([1.0000000e+00, 2.7182817e+00, 3.7835059e-44], dtype=float32)
    """
    return _nxrs.f32_unary("exp", _f32(a))


def log(a: Float32Like) -> npt.NDArray[np.float32]:
    """The natural logarithm, correctly rounded (to nearest, ties to even) on every input.

    ``log(+-0) = -inf``, ``log(inf) = inf``, ``log(1) = +0``; a negative input (``-inf`` too) gives
    the default NaN ``0xFFC00000``, and a NaN comes back quieted. Subnormal inputs are exact
    like any other. Integer fixed point, so the same bits on every machine.

    >>> import numpy as np
    >>> from nxrs import softf32
    >>> softf32.log(np.array([1.0, 2.0, 1e-45], dtype=np.float32))
    array([   0.       ,    0.6931472, -103.27893  ], dtype=float32)
    >>> hex(softf32.log(np.float32(-1.0)).view(np.uint32))
    '0xffc00000'
    """
    return _nxrs.f32_unary("log", _f32(a))


def normal_cdf(a: Float32Like) -> npt.NDArray[np.float32]:
    """``Φ(a)``, the standard normal distribution function ``(1 + erf(a/√2)) / 2``, correctly
    rounded (to nearest, ties to even) on every input: the special function of the exact GELU,
    ``a * Φ(a)``.

    ``normal_cdf(+-0) = 0.5``, ``normal_cdf(-inf) = +0``, ``normal_cdf(inf) = 1``; results are
    subnormal below ``-12.95``, ``+0`` from ``-14.170186`` down and 1 from ``5.4199834`` up. A NaN
    comes back quieted. Integer fixed point, so the same bits on every machine.

    >>> import numpy as np
    >>> from nxrs import softf32
    >>> softf32.normal_cdf(np.array([0.0, 1.0, -1.0], dtype=np.float32))
    array([0.5       , 0.8413448 , 0.15865526], dtype=float32)
    >>> hex(int(softf32.normal_cdf(np.float32(-10.0)).view(np.uint32)))  # 7.619853e-24
    '0x191363af'
    """
    return _nxrs.f32_unary("normal_cdf", _f32(a))


def normal_pdf(a: Float32Like) -> npt.NDArray[np.float32]:
    """``φ(a) = exp(-a**2 / 2) / √(2π)``, the standard normal density, correctly rounded (to
    nearest, ties to even) on every input: with :func:`normal_cdf`, GELU's derivative
    ``Φ(a) + a * φ(a)``.

    ``normal_pdf(+-inf) = +0``; results are subnormal for ``|a|`` above ``13.15`` and ``+0`` from
    ``14.356402`` up. A NaN comes back quieted. Integer fixed point, so the same bits on every
    machine.

    >>> import numpy as np
    >>> from nxrs import softf32
    >>> softf32.normal_pdf(np.array([0.0, 1.0, -2.0], dtype=np.float32))
    array([0.3989423 , 0.24197072, 0.05399097], dtype=float32)
    """
    return _nxrs.f32_unary("normal_pdf", _f32(a))


def cos_pi(k: IntLike, n: IntLike) -> npt.NDArray[np.float32]:
    """``cos(π k / n)`` for integers ``0 <= k <= n``, ``1 <= n < 2**63`` (broadcast like
    numpy), as the cosine learning-rate decay computes it (TRAINING.md section 6): in integer
    fixed point, rounded once to nearest even; ``+0`` at ``k / n = 1/2``. InputError for other
    ``k``, ``n``.

    >>> import numpy as np
    >>> from nxrs import softf32
    >>> softf32.cos_pi(np.array([0, 1, 2, 3]), 3)
    array([ 1. ,  0.5, -0.5, -1. ], dtype=float32)
    """
    k_array, n_array = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    for array in (k_array, n_array):
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"cos_pi takes integers, not {array.dtype}")
    as_i64 = [np.asarray(a, dtype=np.int64, order="C") for a in (k_array, n_array)]
    return _nxrs.f32_cos_pi(as_i64[0], as_i64[1])


def neg(a: Float32Like) -> npt.NDArray[np.float32]:
    """Flips the sign bit (of NaNs too)."""
    return _nxrs.f32_unary("neg", _f32(a))


def abs(a: Float32Like) -> npt.NDArray[np.float32]:
    """Clears the sign bit (of NaNs too)."""
    return _nxrs.f32_unary("abs", _f32(a))


def eq(a: Float32Like, b: Float32Like) -> npt.NDArray[np.bool_]:
    """IEEE ``==`` (false for NaN; ``-0 == +0``)."""
    return _nxrs.f32_compare("eq", *_pair(a, b))


def lt(a: Float32Like, b: Float32Like) -> npt.NDArray[np.bool_]:
    """IEEE ``<`` (false for NaN)."""
    return _nxrs.f32_compare("lt", *_pair(a, b))


def le(a: Float32Like, b: Float32Like) -> npt.NDArray[np.bool_]:
    """IEEE ``<=`` (false for NaN)."""
    return _nxrs.f32_compare("le", *_pair(a, b))


def to_i32(a: Float32Like, rounding: Rounding = "trunc") -> npt.NDArray[np.int32]:
    """float32 to int32, truncating (the seed's ``f32_int``) or to nearest even.

    NaN and values outside the int32 range give ``-2**31`` (x86's "integer indefinite").
    """
    return _nxrs.f32_to_i32(_f32(a), rounding)


def to_i64(a: Float32Like, rounding: Rounding = "trunc") -> npt.NDArray[np.int64]:
    """float32 to int64; NaN and out-of-range values give ``-2**63``."""
    return _nxrs.f32_to_i64(_f32(a), rounding)


def from_int(a: IntLike) -> npt.NDArray[np.float32]:
    """Integers (int32 or int64) to float32, rounded to nearest even."""
    array = np.asarray(a)
    if not np.issubdtype(array.dtype, np.signedinteger) or array.dtype.itemsize > 8:
        raise TypeError(f"from_int takes int32 or int64 values, not {array.dtype}")
    return _nxrs.f32_from_i64(np.asarray(array, dtype=np.int64, order="C"))


def seed_sqrt(a: Float32Like) -> npt.NDArray[np.float32]:
    """The seed program's square root: 16 Newton steps from ``y = x`` (not correctly rounded)."""
    return _nxrs.f32_unary("seed_sqrt", _f32(a))


def seed_exp(a: Float32Like) -> npt.NDArray[np.float32]:
    """The seed program's ``exp``: range reduction plus an 8-term Taylor series."""
    return _nxrs.f32_unary("seed_exp", _f32(a))


def seed_log(a: Float32Like) -> npt.NDArray[np.float32]:
    """The seed program's ``log``: exponent split plus a 7-term atanh series."""
    return _nxrs.f32_unary("seed_log", _f32(a))


def seed_le(a: Float32Like, b: Float32Like) -> npt.NDArray[np.bool_]:
    """The seed program's ``f32_le``: ``a - b`` has its sign bit set or is zero.

    Not IEEE ``<=``: it differs for NaNs, infinities and overflowing differences.
    """
    return _nxrs.f32_compare("seed_le", *_pair(a, b))
