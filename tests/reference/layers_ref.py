"""Independent plain-numpy float32 reference of layer models (``docs/TRAINING.md`` section 15).

Written from the text of TRAINING.md alone (never from nxrs' code); it builds on
``general_ref.py`` (sections 1-13: the ``math`` settings, the streams, initialisation draws, the
schedule, the optimisers, clipping, the loss, the epochs and the state hash) and adds the layers.

Exactness, as in ``general_ref.py``: every binary32 operation of the text is one numpy float32
operation (scalar or element-wise), rounded once, never fused or widened. Vectorisation is
only across independent elements (samples, outputs, channels, cells); every chain the text
defines (a sum ``Σ``, "from +0" or "from the first") is an explicit left fold in its order. Copies
of values (pooling's chosen cells, im2col columns, masks) move bit patterns (``uint32`` views),
so NaN payloads and signed zeros are kept.

An activation block is an array ``(n, *shape)``: the block's samples in batch order, each
sample's cells in row-major order. A 1-D convolution or pooling is computed as the 2-D one with
height 1 (kernel 1, stride 1, padding 0 along it), which gives the same windows, columns, chains
and orders.

API:

* :func:`parse_layers` (a JSON-like list or an integer list -> :class:`Network`, with shape
  inference and section 15.1's refusals as ``ValueError``); :func:`build_layer` for one layer;
* per layer (:class:`Layer`): ``forward(state, x, ctx)`` in training or evaluation mode
  (:class:`Ctx`) and ``backward(state, cache, g, ctx)`` giving the input gradient and the
  parameters' block gradients; a :class:`Residual` (15.7) holds its branch, which
  :func:`forward_list` and :func:`backward_list` run with the model's tensors, kept per layer
  in depth-first order (:attr:`Network.flat`: position ``i + 1`` at index ``i``);
* :func:`normal_cdf` and :func:`normal_pdf` (section 2's Φ and φ, correctly rounded: binary64
  values, decided with mpmath where one lies near a binary32 rounding boundary);
* :class:`LayerTrainer` (a :class:`general_ref.Run`): a whole training run of a layer list with
  ``step``, ``train_steps``, ``fit_epochs``, ``predict``, ``predict_proba``, ``evaluate``,
  ``state_dict`` and ``state_hash``.

Readings of the text where it leaves a choice (each marked "reading" at its place):

* "at most 4096 layers" counts the list's layers after ``Input``, nested ones and the Residuals
  themselves included (15.7);
* the 2^28 parameter cells count ``W``, ``b``, ``gamma`` and ``beta`` (the running statistics
  are "not parameters");
* an integer list keeps section 1's ``init`` values (``"seed"``, ``"he"``, ``"glorot"``; default
  ``"he"``); a list of layer objects takes ``"he"``, ``"glorot"``, ``"torch"`` (default
  ``"torch"``), not ``"seed"``;
* BatchNorm's ``eps`` and ``momentum`` and LayerNorm's ``eps`` are binary32 (15.1), so
  ``sqrt(σ² + eps)`` adds the binary32 ``eps``; ``1 - momentum`` is one binary32 subtraction;
* in the JSON form a 1-D size may also be a bare integer and a pooling ``stride`` may be
  ``null`` (its kernel).
* "every activation at most 2^24 cells" includes the input's shape;
* BatchNorm and LayerNorm take a number among "the layers with tensors" (so a Dense after a
  BatchNorm draws from the stream of its own number), though they draw nothing;
* BatchNorm's ``n = 1`` (running statistics kept) counts values, samples x positions, as its
  statistics do (PyTorch refuses exactly when that count is 1);
* Tanh's ``-(a + a)`` flips the sign bit, like Sigmoid's ``-x``;
* NaN results follow section 14 (the first NaN operand quieted, else ``0xFFC00000``) with the
  operands in the order the text writes them; ``exp`` of a NaN in the ``"ieee"`` setting is that
  NaN quieted (numpy's binary64 ``exp`` returns its operand);
* 15.7's ``bias`` is a JSON boolean (anything else is refused); an ``Input`` inside a branch is
  refused as any later ``Input`` is; a Residual's branch is built and checked layer by layer
  (a nested layer's refusal names its own position and type, and its activations are checked
  against 2^24 cells there), then the branch's output shape against the Residual's input;
* a Residual's own addition ``x + f(x)`` and its input gradient ``g_f + g`` are binary32
  additions like any other (section 14's NaN, ``x`` and ``g_f`` the first operands).
* 15.8: a sequence's shape is a :class:`Seq` (it carries the list's Embedding); "every other
  layer acts on the sequence as on any activation" is taken literally (a Conv1d or
  BatchNorm1d would see ``(T, D)`` as ``(C, L)``, and its output stays a sequence);
  ``vocab`` above 2^24 is refused (an id must be exact in binary32); ``proj_std`` without
  ``std`` is not used (the text gives it under ``std`` only); without ``std``, attention's
  ``Wqkv`` (``fan_in = D``, ``fan_out = 3D``) and then ``Wo`` (``D``, ``D``) are drawn from the
  one stream of the layer's number; an mse loss on a ``(T, K)`` output takes targets
  ``(N, T, K)``, per token; ``gpt()``'s LayerNorms write ``eps`` 1e-05 as every LayerNorm.

Run ``python tests/reference/layers_ref.py --write`` to regenerate ``tests/golden/layers.json``;
without arguments (or with ``--check``) it recomputes the fixture and exits 1 if the file
differs. This module must not import nxrs.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Union, cast

import numpy as np
import numpy.typing as npt

if __package__:
    from . import general_ref as gr
    from . import seed_ref
else:  # run as a script: tests/reference is sys.path[0]
    import general_ref as gr  # type: ignore[no-redef,import-not-found,unused-ignore]
    import seed_ref  # type: ignore[no-redef,import-not-found,unused-ignore]

F32Array = gr.F32Array
BoolArray = gr.BoolArray
IntArray = gr.IntArray
Shape = tuple[int, ...]

GOLDEN_PATH = Path(__file__).resolve().parents[1] / "golden" / "layers.json"
GENERATOR = "tests/reference/layers_ref.py"

#: Section 15.5's stream domain.
DROPOUT = 0x64726F70
#: Section 15.1's limits.
MAX_LIST_LAYERS = 4096
MAX_ACTIVATION_CELLS = 2**24
MAX_PARAMETER_CELLS = 2**28
#: 15.8: a token id is exact in binary32.
MAX_VOCAB = 2**24

ZERO = gr.ZERO
ONE = gr.ONE
_SIGN = np.uint32(0x80000000)
_MAG = np.uint32(0x7FFFFFFF)

#: Section 15.4's initialisations of a list of layer objects (reading: not ``"seed"``).
LAYER_INITS = ("he", "glorot", "torch")


# ---------------------------------------------------------------------------
# Bits and chains
# ---------------------------------------------------------------------------


def u32(x: F32Array) -> npt.NDArray[np.uint32]:
    """The bit patterns of ``x`` (a view)."""
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def from_u32(b: npt.NDArray[np.uint32]) -> F32Array:
    return cast(F32Array, np.ascontiguousarray(b, dtype=np.uint32).view(np.float32))


def neg(x: F32Array) -> F32Array:
    """``-x``: the sign bit flipped (of zeros and NaNs too), not ``0 - x``."""
    return from_u32(u32(x) ^ _SIGN)


_QUIET = np.uint32(0x00400000)
#: softf32's NaN for an invalid operation without a NaN operand (section 14).
DEFAULT_NAN = np.uint32(0xFFC00000)

Operand = Union[F32Array, np.float32]


def _binary(op: Any, a: Operand, b: Operand) -> F32Array:
    """One IEEE binary32 operation ``op(a, b)`` element-wise, with section 14's NaN: the first
    NaN operand quieted, else (an invalid operation) ``0xFFC00000``.

    numpy's own NaN for two NaN operands is not that: its SIMD body and its scalar tail pick
    different operands of ``+`` and ``*`` (measured: element 0 and element 17 of one add
    differ), so NaN results are rebuilt here from the operands.
    """
    av = np.asarray(a, dtype=np.float32)
    bv = np.asarray(b, dtype=np.float32)
    with np.errstate(all="ignore"):
        r = np.asarray(op(av, bv), dtype=np.float32)
    bad = np.isnan(r)
    if not bad.any():
        return r
    ab, bb = np.broadcast_arrays(av, bv)
    an, bn = np.isnan(ab), np.isnan(bb)
    out = np.where(
        an,
        ab.view(np.uint32) | _QUIET,
        np.where(bn, bb.view(np.uint32) | _QUIET, np.where(bad, DEFAULT_NAN, r.view(np.uint32))),
    )
    return from_u32(out.astype(np.uint32))


def add(a: Operand, b: Operand) -> F32Array:
    return _binary(np.add, a, b)


def sub(a: Operand, b: Operand) -> F32Array:
    return _binary(np.subtract, a, b)


def mul(a: Operand, b: Operand) -> F32Array:
    return _binary(np.multiply, a, b)


def div(a: Operand, b: Operand) -> F32Array:
    return _binary(np.divide, a, b)


def sqrt(x: F32Array) -> F32Array:
    """Correctly rounded binary32 ``sqrt`` with section 14's NaN (a NaN operand quieted, a
    negative operand ``0xFFC00000``)."""
    xv = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        r = np.asarray(np.sqrt(xv), dtype=np.float32)
    bad = np.isnan(r)
    if not bad.any():
        return r
    xn = np.isnan(xv)
    out = np.where(xn, xv.view(np.uint32) | _QUIET, np.where(bad, DEFAULT_NAN, r.view(np.uint32)))
    return from_u32(out.astype(np.uint32))


def fold(terms: F32Array, start: np.float32 | None = None) -> F32Array:
    """The left fold over axis 0 (from the first term, or from ``start``), element-wise."""
    if start is None:
        acc = np.asarray(terms[0], dtype=np.float32)
        rest = range(1, terms.shape[0])
    else:
        acc = np.full(terms.shape[1:], start, dtype=np.float32)
        rest = range(terms.shape[0])
    for i in rest:
        acc = add(acc, terms[i])
    return acc


def f32i(k: int) -> np.float32:
    return gr.f32i(k)


def bits32(a: F32Array) -> list[int]:
    """The fixture's bits of ``a``, which must be float32 already (a float64 result would mean
    an operation was widened: never converted silently)."""
    if np.asarray(a).dtype != np.float32:
        raise TypeError(f"expected float32, got {np.asarray(a).dtype}")
    return gr.bits_list(a)


# ---------------------------------------------------------------------------
# Section 2: normal_cdf (Φ) and normal_pdf (φ), correctly rounded
# ---------------------------------------------------------------------------

_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
#: A bound, with a wide margin, on the relative error of the binary64 Φ and φ of
#: :func:`_normal64` at binary32 inputs (measured against mpmath: below 2^-44 for Φ, whose
#: argument ``-x / sqrt(2)`` is rounded, below 2^-51 for φ, whose ``x * x`` is exact). A
#: binary64 value this close to a binary32 rounding boundary is decided in high precision.
_NORMAL_SLACK = 2.0**-36
#: The bits of that high precision; a value still too close to a boundary at it raises.
_NORMAL_PREC = 160
#: How many cells were decided in high precision (so tests can see the path was taken).
NORMAL_HARD_CASES = {"normal_cdf": 0, "normal_pdf": 0}


def _f32_of_bits(b: int) -> float:
    return cast(float, struct.unpack("<f", struct.pack("<I", b))[0])


def _bits_of_f32(v: float) -> int:
    """The binary32 nearest ``v`` (ties to even: C's conversion), as bits."""
    return cast(int, struct.unpack("<I", struct.pack("<f", v))[0])


def _normal64(fn: str, x: float) -> float:
    if fn == "normal_cdf":
        return 0.5 * math.erfc(-x / _SQRT2)
    return math.exp(-(x * x) / 2.0) / _SQRT_2PI


def _normal_exact(fn: str, x: float) -> int:
    """``fn(x)`` rounded once to binary32 (bits), decided against the exact midpoints with
    mpmath at :data:`_NORMAL_PREC` bits (Φ and φ of a binary32 other than Φ(0) are
    transcendental, so never a midpoint)."""
    import mpmath  # type: ignore[import-untyped,unused-ignore]

    with mpmath.workprec(_NORMAL_PREC):
        t = mpmath.mpf(x)
        if fn == "normal_cdf":
            v = mpmath.erfc(-t / mpmath.sqrt(2)) / 2
        else:
            v = mpmath.exp(-(t * t) / 2) / mpmath.sqrt(2 * mpmath.pi)
        # float(v) rounds twice (to binary64, then binary32): at most one step off.
        b0 = _bits_of_f32(float(v))
        ranked = sorted(
            (abs(v - mpmath.mpf(_f32_of_bits(b))), b) for b in (b0 - 1, b0, b0 + 1) if b >= 0
        )
        (d0, best), (d1, _) = ranked[0], ranked[1]
        if d1 - d0 <= v * mpmath.mpf(2) ** (32 - _NORMAL_PREC):
            raise RuntimeError(f"{fn}({x!r}) is too close to a midpoint to round")
        return cast(int, best)


@functools.cache
def _normal_bits(fn: str, xb: int) -> int:
    """``fn`` of the binary32 with bits ``xb``, correctly rounded, as bits (section 2)."""
    if xb & 0x7FFFFFFF > 0x7F800000:  # NaN: quieted, its payload kept
        return xb | 0x00400000
    if xb & 0x7FFFFFFF == 0x7F800000:  # ±inf: Φ(+inf) = 1, Φ(-inf) = +0, φ(±inf) = +0
        return 0x3F800000 if fn == "normal_cdf" and xb == 0x7F800000 else 0
    x = _f32_of_bits(xb)
    y = _normal64(fn, x)  # >= 0: Φ and φ are never negative
    b = _bits_of_f32(y)
    # The two binary32 rounding boundaries around y (midpoints are exact in binary64).
    c = _f32_of_bits(b)
    mids = [(c + _f32_of_bits(b + 1)) / 2]
    if b > 0:
        mids.append((c + _f32_of_bits(b - 1)) / 2)
    if any(abs(y - m) <= _NORMAL_SLACK * y for m in mids):
        NORMAL_HARD_CASES[fn] += 1
        return _normal_exact(fn, x)
    return b


def _normal(fn: str, x: F32Array) -> F32Array:
    xb = u32(np.asarray(x, dtype=np.float32))
    uniq, inv = np.unique(xb, return_inverse=True)
    vals = np.array([_normal_bits(fn, int(b)) for b in uniq], dtype=np.uint32)
    return from_u32(vals[inv].reshape(xb.shape))


def normal_cdf(x: F32Array) -> F32Array:
    """Φ(x) = (1 + erf(x / sqrt(2))) / 2, correctly rounded binary32, element-wise."""
    return _normal("normal_cdf", x)


def normal_pdf(x: F32Array) -> F32Array:
    """φ(x) = exp(-x² / 2) / sqrt(2π), correctly rounded binary32, element-wise."""
    return _normal("normal_pdf", x)


# ---------------------------------------------------------------------------
# Section 15.5: dropout masks
# ---------------------------------------------------------------------------

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mix64_array(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Section 9's ``mix64`` element-wise (numpy's ``uint64`` products wrap mod 2^64)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return cast(npt.NDArray[np.uint64], z ^ (z >> np.uint64(31)))


def dropout_threshold(p: np.float32) -> int:
    """``P = round(p * 2^24)``: exact in binary64, rounded to nearest, ties to even."""
    return round(float(p) * 2.0**24)


def dropout_dropped(
    seed: int, step: int, position: int, first_sample: int, n: int, cells: int, p: np.float32
) -> BoolArray:
    """Section 15.5: ``(n, cells)``, True where the cell is dropped.

    ``key`` is the initial state of the stream ``(seed, DROPOUT, step)``; sample ``s`` of the
    block is sample ``first_sample + s`` of its batch; ``x = mix64(mix64(mix64(key ^ i) ^ s) ^
    u)``; dropped when ``(x >> 40) < P``.
    """
    key = gr.Stream(seed, DROPOUT, step).state
    k1 = gr.mix64(key ^ position)
    s = np.arange(first_sample, first_sample + n, dtype=np.uint64)
    k2 = mix64_array(np.uint64(k1) ^ s)
    u = np.arange(cells, dtype=np.uint64)
    x = mix64_array(k2[:, None] ^ u[None, :])
    return cast(BoolArray, (x >> np.uint64(40)) < np.uint64(dropout_threshold(p)))


# ---------------------------------------------------------------------------
# Section 15.8: normal draws (Marsaglia's polar method)
# ---------------------------------------------------------------------------

_TWO_POW_M23 = np.float32(2.0**-23)
_MINUS_TWO = np.float32(-2.0)  # f32(-2)


def _unit(xs: npt.NDArray[np.uint64]) -> F32Array:
    """``f32((x >> 40) - 2^23) * 2^-23`` per draw: in ``[-1, 1)``, every step exact."""
    k = (xs >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return cast(F32Array, k.astype(np.float32) * _TWO_POW_M23)


def normal_cells(st: gr.Stream, count: int) -> F32Array:
    """``count`` standard normal values from ``st`` by 15.8: each pair of draws ``x1, x2``
    gives ``u``, ``v``, ``q = (u * u) + (v * v)``; a pair with ``q >= 1`` or ``q = 0`` is
    dropped; else ``f = sqrt((f32(-2) * ln(q)) / q)`` (``ln`` correctly rounded in both
    ``math`` settings) and the pair gives ``u * f`` then ``v * f``; an odd count's last cell
    takes ``u * f`` alone.

    Vectorised over pairs: each round draws exactly the pairs still needed (so the stream is
    never drawn past the last pair used: the next tensor continues from there), keeps the
    accepted ones in order and draws again for the rest.
    """
    ln = gr.Math("ieee").log  # correctly rounded, whatever the run's setting
    parts: list[F32Array] = []
    need = (count + 1) // 2
    while need:
        xs = np.array([st.next_u64() for _ in range(2 * need)], dtype=np.uint64)
        u, v = _unit(xs[0::2]), _unit(xs[1::2])
        with np.errstate(all="ignore"):
            q = add(mul(u, u), mul(v, v))
            ok = (q < ONE) & (q != ZERO)
            u, v, q = u[ok], v[ok], q[ok]
            f = sqrt(div(mul(_MINUS_TWO, ln(q)), q))
            parts.append(np.stack([mul(u, f), mul(v, f)], axis=1).reshape(-1))
        need -= int(ok.sum())
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return cast(F32Array, np.concatenate(parts)[:count])


def normal_tensor(st: gr.Stream, shape: Shape, std: np.float32) -> F32Array:
    """A tensor of ``N(0, std)`` cells (``z * std``), row-major, continuing ``st``."""
    with np.errstate(all="ignore"):
        return mul(normal_cells(st, math.prod(shape)), std).reshape(shape)


# ---------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------


@dataclass
class Ctx:
    """How a layer runs: the ``math`` setting, training or evaluation mode, and (Dropout) the
    run's ``seed``, the step ``t`` and the batch position of the block's first sample."""

    math: gr.Math
    train: bool = True
    seed: int = 0
    step: int = 0
    first_sample: int = 0


State = dict[str, F32Array]


def _refuse(position: int, kind: str, why: str) -> ValueError:
    return ValueError(f"layer {position} ({kind}): {why}")


def _int(v: Any, what: str, position: int, kind: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _refuse(position, kind, f"{what} must be an integer, not {v!r}")
    return int(v)


def _sizes(v: Any, dims: int, what: str, position: int, kind: str) -> tuple[int, ...]:
    """An integer (every dimension) or a list of ``dims`` integers (a pair for 2-D)."""
    if isinstance(v, (list, tuple)):
        if len(v) != dims:
            raise _refuse(position, kind, f"{what} needs {dims} sizes, not {list(v)}")
        return tuple(_int(e, what, position, kind) for e in v)
    return (_int(v, what, position, kind),) * dims


def _f32_param(v: Any, what: str, position: int, kind: str) -> np.float32:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise _refuse(position, kind, f"{what} must be a number, not {v!r}")
    return gr.f32d(float(v)) if not isinstance(v, np.float32) else v


def _std(v: Any, what: str, position: int, kind: str) -> tuple[np.float32, float] | None:
    """15.8's ``std`` / ``proj_std``: None when not given, else its binary32 value (finite,
    ``> 0``) and the number as given (what the JSON form writes)."""
    if v is None:
        return None
    with np.errstate(over="ignore"):  # a value beyond binary32 is refused just below
        f = _f32_param(v, what, position, kind)
    if not (np.isfinite(f) and f > ZERO):
        raise _refuse(position, kind, f"{what} must be finite and > 0 as binary32, not {v!r}")
    return f, _json_number(v)


def _std_json(std: tuple[np.float32, float] | None, key: str = "std") -> dict[str, float]:
    """Written only when given, as given."""
    return {} if std is None else {key: std[1]}


def _json_number(v: Any) -> float:
    """A float parameter as the JSON form writes it: the value given (its binary32 is what
    counts; a ``np.float32`` is written as its exact binary64 value)."""
    return float(v)


def out_len(n: int, k: int, s: int, q: int, position: int, kind: str) -> int:
    """Section 15.1: ``n' = floor((n + 2q - k) / s) + 1``, refused below 1."""
    if n + 2 * q < k:
        raise _refuse(position, kind, f"kernel {k} is longer than its padded input {n + 2 * q}")
    return (n + 2 * q - k) // s + 1


class Seq(tuple[int, ...]):
    """The shape ``(T, D)`` of a sequence (15.8): ``T`` tokens of ``D`` cells, row-major. It
    carries the list's :class:`Embedding`, where every sequence starts (TiedHead reads its
    ``E``). Equal to the plain tuple of its sizes."""

    embedding: Embedding

    def __new__(cls, sizes: Sequence[int], embedding: Embedding) -> Seq:
        obj = super().__new__(cls, tuple(sizes))
        obj.embedding = embedding
        return obj


class Layer:
    """One layer of the list: its parameters (as given), its position, its shapes."""

    kind: ClassVar[str] = ""
    #: The spatial dimensions of convolutions and pooling (1 or 2), 0 otherwise.
    dims: ClassVar[int] = 0
    #: Whether a sequence input gives a sequence output (15.8: every layer but Flatten).
    keeps_sequence: ClassVar[bool] = True

    def __init__(self, position: int) -> None:
        self.position = position
        self.number = 0  # section 15.4's number among the layers with tensors (0: none)
        self.in_shape: Shape = ()
        self.out_shape: Shape = ()

    # ---- description ----

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind}

    def infer(self, shape: Shape) -> Shape:
        """Sets and returns the output shape for the input ``shape`` (or refuses it). A
        layer whose input is a sequence (15.8) keeps it one, unless it is ``Flatten``."""
        self.in_shape = shape
        out = self._infer(shape)
        if isinstance(shape, Seq) and self.keeps_sequence and not isinstance(out, Seq):
            out = Seq(out, shape.embedding)
        self.out_shape = out
        return out

    def _infer(self, shape: Shape) -> Shape:
        return shape

    def _wrong_shape(self, shape: Shape) -> ValueError:
        return _refuse(self.position, self.kind, f"does not take the shape {shape}")

    def walk(self) -> list[Layer]:
        """This layer and (a Residual) its branch's layers, depth first: the positions it
        takes (15.7), in order from its own."""
        return [self]

    def params(self) -> list[tuple[str, Shape]]:
        """Parameter tensors (section 15.4's order), names without the layer's number."""
        return []

    def running(self) -> list[tuple[str, Shape]]:
        """Running statistics (BatchNorm)."""
        return []

    def reads(self) -> list[tuple[str, Shape]]:
        """Another layer's tensors this layer computes with (TiedHead reads ``E``): they are
        in its state dict (the same dict object as their owner's) but not its parameters."""
        return []

    def init_state(self, init: str, seed: int) -> State:
        """Section 15.4: the initial parameters and running statistics."""
        return {}

    # ---- computation ----

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        """``x`` of shape ``(n, *in_shape)`` -> ``(n, *out_shape)`` and what backward needs."""
        raise NotImplementedError

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        """``g`` of shape ``(n, *out_shape)`` -> the input gradient and each parameter's block
        gradient (one chain over the block's terms from the first term)."""
        raise NotImplementedError


# ---- Input, Flatten, activations -------------------------------------------------------


class Input(Layer):
    kind = "Input"

    def __init__(self, position: int, shape: Any) -> None:
        super().__init__(position)
        if not isinstance(shape, (list, tuple)) or not 1 <= len(shape) <= 3:
            raise _refuse(position, self.kind, f"shape must have 1 to 3 sizes, not {shape!r}")
        self.shape = tuple(_int(v, "a size", position, self.kind) for v in shape)
        if min(self.shape) < 1:
            raise _refuse(position, self.kind, f"sizes must be >= 1, not {list(self.shape)}")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "shape": list(self.shape)}


class Flatten(Layer):
    kind = "Flatten"
    keeps_sequence = False

    def _infer(self, shape: Shape) -> Shape:
        return (math.prod(shape),)

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        return x.reshape(x.shape[0], -1), None

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        return g.reshape((g.shape[0], *self.in_shape)), {}


class ReLU(Layer):
    kind = "ReLU"

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        off = ctx.math.le(x, ZERO)
        return from_u32(np.where(off, np.uint32(0), u32(x))), off

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        return from_u32(np.where(cache, np.uint32(0), u32(g))), {}


class Sigmoid(Layer):
    kind = "Sigmoid"

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        with np.errstate(all="ignore"):
            y = div(ONE, add(ONE, ctx.math.exp(neg(x))))
        return y, y

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        y = cache
        with np.errstate(all="ignore"):
            return mul(g, mul(y, sub(ONE, y))), {}


class Tanh(Layer):
    kind = "Tanh"

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        with np.errstate(all="ignore"):
            a = from_u32(u32(x) & _MAG)
            t = ctx.math.exp(neg(add(a, a)))
            r = div(sub(ONE, t), add(ONE, t))
        y = from_u32((u32(r) & _MAG) | (u32(x) & _SIGN))
        return y, y

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        y = cache
        with np.errstate(all="ignore"):
            return mul(g, sub(ONE, mul(y, y))), {}


class GELU(Layer):
    """15.7: ``y = x * Φ(x)``; backward ``g * (Φ(x) + (x * φ(x)))`` (both ``math`` settings)."""

    kind = "GELU"

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        cdf = normal_cdf(x)
        with np.errstate(all="ignore"):
            return mul(x, cdf), (x, cdf)

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        x, cdf = cache
        with np.errstate(all="ignore"):
            return mul(g, add(cdf, mul(x, normal_pdf(x)))), {}


class Dropout(Layer):
    kind = "Dropout"

    def __init__(self, position: int, p: Any) -> None:
        super().__init__(position)
        self.p = _f32_param(p, "p", position, self.kind)
        self.p_given = _json_number(p)
        if not ZERO <= self.p < ONE:
            raise _refuse(position, self.kind, f"p must be in [0, 1), not {float(self.p)}")
        self.c = np.float32(ONE / np.float32(ONE - self.p))

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "p": self.p_given}

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        if not ctx.train:
            return x, None
        n = x.shape[0]
        dropped = dropout_dropped(
            ctx.seed, ctx.step, self.position, ctx.first_sample, n, x[0].size, self.p
        ).reshape(x.shape)
        with np.errstate(all="ignore"):
            kept = mul(x, self.c)
        return from_u32(np.where(dropped, np.uint32(0), u32(kept))), dropped

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        with np.errstate(all="ignore"):
            kept = mul(g, self.c)
        return from_u32(np.where(cache, np.uint32(0), u32(kept))), {}


# ---- Dense and convolutions ------------------------------------------------------------


def uniform_scale(init: str, fan_in: int, fan_out: int) -> np.float32:
    """Section 15.4's bound ``a`` of ``init`` for a layer's fans."""
    if init == "torch":
        a_sq = np.float32(ONE / f32i(fan_in))
    elif init == "he":
        a_sq = np.float32(f32i(6) / f32i(fan_in))
    else:  # glorot
        a_sq = np.float32(f32i(6) / f32i(fan_in + fan_out))
    # The initialisation scale always uses the correctly rounded sqrt (section 2).
    return cast(np.float32, gr.ieee_sqrt(np.array([a_sq], dtype=np.float32))[0])


def uniform_init(
    init: str, seed: int, number: int, fan_in: int, fan_out: int, w: Shape, b: Shape | None
) -> State:
    """Section 15.4 for a layer with ``W`` and ``b`` (``b`` None: no bias, so no bias draws,
    15.7): the stream ``(seed, INIT, number - 1)``."""
    a = uniform_scale(init, fan_in, fan_out)
    st = gr.Stream(seed, gr.INIT, number - 1)
    wv = gr.uniform_cells(st, math.prod(w), a).reshape(w)
    if b is None:
        return {"W": wv}
    if init == "torch":  # the biases continue the same stream after the last weight
        bv = gr.uniform_cells(st, math.prod(b), a).reshape(b)
    else:
        bv = np.zeros(b, dtype=np.float32)
    return {"W": wv, "b": bv}


def _bias(v: Any, position: int, kind: str) -> bool:
    """Section 15.7's ``bias`` (reading: a JSON boolean, nothing else)."""
    if not isinstance(v, (bool, np.bool_)):
        raise _refuse(position, kind, f"bias must be true or false, not {v!r}")
    return bool(v)


def linear_forward(W: F32Array, b: F32Array | None, a: F32Array) -> F32Array:
    """Dense's products on rows ``a`` ``(r, n)`` (samples, or a block's tokens in order):
    ``z[r, o] = b_o + Σ_j W[o, j] * a[r, j]`` from the bias, inputs in order (section 5), or
    from +0 without one (15.7)."""
    with np.errstate(all="ignore"):
        if b is not None:
            acc = np.repeat(b[None, :], a.shape[0], axis=0)
        else:
            acc = np.zeros((a.shape[0], W.shape[0]), dtype=np.float32)
        for j in range(W.shape[1]):
            acc = add(acc, mul(W[None, :, j], a[:, j, None]))
    return acc


def linear_backward(W: F32Array, a: F32Array, g: F32Array) -> tuple[F32Array, F32Array]:
    """Dense's backward pass on rows: the input gradient ``Σ_o W[o, j] * δ[r, o]`` from +0,
    outputs in order, and ``W``'s block gradient, one chain of the terms ``δ[r, o] * a[r, j]``
    over the rows in order from the first."""
    with np.errstate(all="ignore"):
        gx = np.zeros_like(a)
        for o in range(W.shape[0]):  # from +0, outputs in order
            gx = add(gx, mul(W[None, o, :], g[:, o, None]))
        gW = mul(g[0][:, None], a[0][None, :])
        for s in range(1, g.shape[0]):  # rows in order, from the first
            gW = add(gW, mul(g[s][:, None], a[s][None, :]))
    return gx, gW


def _rows(x: F32Array, width: int) -> F32Array:
    """A block's activations as rows of ``width`` cells: per sample, or per token of a
    sequence (samples in order, then tokens), as Dense and LayerNorm act on them (15.8)."""
    return np.ascontiguousarray(x).reshape(-1, width)


class Dense(Layer):
    kind = "Dense"

    def __init__(self, position: int, units: Any, bias: Any = True, std: Any = None) -> None:
        super().__init__(position)
        self.units = _int(units, "units", position, self.kind)
        self.bias = _bias(bias, position, self.kind)
        self.std = _std(std, "std", position, self.kind)
        if self.units < 1:
            raise _refuse(position, self.kind, f"units must be >= 1, not {self.units}")

    def to_json(self) -> dict[str, Any]:
        # 15.7: "bias" is written only when false, so earlier configurations are unchanged;
        # 15.8's "std" only when given.
        return {
            "type": self.kind,
            "units": self.units,
            **({} if self.bias else {"bias": False}),
            **_std_json(self.std),
        }

    def _infer(self, shape: Shape) -> Shape:
        if isinstance(shape, Seq):  # 15.8: per token
            if len(shape) != 2:
                raise self._wrong_shape(shape)
            return Seq((shape[0], self.units), shape.embedding)
        if len(shape) != 1:
            raise self._wrong_shape(shape)
        return (self.units,)

    def params(self) -> list[tuple[str, Shape]]:
        w: list[tuple[str, Shape]] = [("W", (self.units, self.in_shape[-1]))]
        return [*w, ("b", (self.units,))] if self.bias else w

    def init_state(self, init: str, seed: int) -> State:
        n = self.in_shape[-1]
        b = (self.units,) if self.bias else None
        if self.std is not None:  # 15.8: W from N(0, std), the bias +0
            st = gr.Stream(seed, gr.INIT, self.number - 1)
            out = {"W": normal_tensor(st, (self.units, n), self.std[0])}
            return {**out, "b": np.zeros(b, dtype=np.float32)} if b else out
        return uniform_init(init, seed, self.number, n, self.units, (self.units, n), b)

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        a = _rows(x, self.in_shape[-1])
        z = linear_forward(st["W"], st["b"] if self.bias else None, a)
        return z.reshape((x.shape[0], *self.out_shape)), a

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        a = cache
        g2 = _rows(g, self.units)
        gx, gW = linear_backward(st["W"], a, g2)
        with np.errstate(all="ignore"):
            grads = {"W": gW, "b": fold(g2)} if self.bias else {"W": gW}
        return gx.reshape((g.shape[0], *self.in_shape)), grads


@dataclass(frozen=True)
class Windows:
    """The windows of a convolution or pooling over one channel of a ``(H, W)`` plane (height
    1 for 1-D) padded by ``(qh, qw)``: ``index[t, k]`` is the flat index in the padded plane of
    window ``t``'s cell ``k`` (both row-major)."""

    hp: int  # padded height
    wp: int  # padded width
    ho: int
    wo: int
    index: IntArray  # (T, K)


def windows(h: int, w: int, k: Shape, s: Shape, q: Shape, position: int, kind: str) -> Windows:
    ho = out_len(h, k[0], s[0], q[0], position, kind)
    wo = out_len(w, k[1], s[1], q[1], position, kind)
    hp, wp = h + 2 * q[0], w + 2 * q[1]
    ty, tx = np.divmod(np.arange(ho * wo), wo)
    dy, dx = np.divmod(np.arange(k[0] * k[1]), k[1])
    rows = ty[:, None] * s[0] + dy[None, :]
    cols = tx[:, None] * s[1] + dx[None, :]
    return Windows(hp, wp, ho, wo, (rows * wp + cols).astype(np.int64))


class Spatial(Layer):
    """Convolutions and pooling: kernel, stride, padding; 1-D as 2-D with height 1."""

    def __init__(self, position: int, kernel_size: Any, stride: Any, padding: Any) -> None:
        super().__init__(position)
        d = self.dims
        self.k = _sizes(kernel_size, d, "kernel_size", position, self.kind)
        self.s = self.k if stride is None else _sizes(stride, d, "stride", position, self.kind)
        self.q = _sizes(padding, d, "padding", position, self.kind)
        if min(self.k) < 1 or min(self.s) < 1:
            raise _refuse(position, self.kind, "kernel sizes and strides must be >= 1")
        if min(self.q) < 0:
            raise _refuse(position, self.kind, "paddings must be >= 0")
        if any(q >= k for q, k in zip(self.q, self.k)):
            raise _refuse(
                position,
                self.kind,
                f"padding {list(self.q)} must be smaller than the kernel {list(self.k)}",
            )

    def _hw(self, shape: Shape) -> tuple[int, int, int]:
        """``(C, H, W)`` of an input shape (``H = 1`` for 1-D), or a refusal."""
        if len(shape) != self.dims + 1:
            raise self._wrong_shape(shape)
        return (shape[0], 1, shape[1]) if self.dims == 1 else (shape[0], shape[1], shape[2])

    def _k2(self) -> tuple[Shape, Shape, Shape]:
        if self.dims == 1:
            return (1, self.k[0]), (1, self.s[0]), (0, self.q[0])
        return self.k, self.s, self.q

    def _windows(self) -> Windows:
        c, h, w = self._hw(self.in_shape)
        k, s, q = self._k2()
        # Section 15.1's working cells, checked before the windows' index table is made.
        ho = out_len(h, k[0], s[0], q[0], self.position, self.kind)
        wo = out_len(w, k[1], s[1], q[1], self.position, self.kind)
        columns = ho * wo * c * k[0] * k[1]
        for buffer, cells in self._working_cells(columns, c * (h + 2 * q[0]) * (w + 2 * q[1])):
            if cells > MAX_ACTIVATION_CELLS:
                raise _refuse(self.position, self.kind, f"its {buffer} of {cells} cells > 2^24")
        return windows(h, w, k, s, q, self.position, self.kind)

    def _working_cells(self, columns: int, padded: int) -> list[tuple[str, int]]:
        """The layer's working buffers per sample (section 15.1), from its windows' cells
        (``positions x C x kh x kw``) and its padded input's: none for max pooling."""
        return []

    def _spatial_out(self, c: int, win: Windows) -> Shape:
        return (c, win.wo) if self.dims == 1 else (c, win.ho, win.wo)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "kernel_size": list(self.k),
            "stride": list(self.s),
            "padding": list(self.q),
        }


class Conv(Spatial):
    def __init__(
        self, position: int, out_channels: Any, kernel_size: Any, stride: Any = 1, padding: Any = 0
    ) -> None:
        self.out_channels = _int(out_channels, "out_channels", position, self.kind)
        super().__init__(position, kernel_size, stride, padding)
        if self.out_channels < 1:
            raise _refuse(position, self.kind, "out_channels must be >= 1")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "out_channels": self.out_channels, **super().to_json()}

    def _infer(self, shape: Shape) -> Shape:
        self._hw(shape)  # refuses a shape it does not take
        self.win = self._windows()
        return self._spatial_out(self.out_channels, self.win)

    def _working_cells(self, columns: int, padded: int) -> list[tuple[str, int]]:
        return [("columns", columns), ("padded input", padded)]

    def params(self) -> list[tuple[str, Shape]]:
        return [("W", (self.out_channels, self.in_shape[0], *self.k)), ("b", (self.out_channels,))]

    def init_state(self, init: str, seed: int) -> State:
        kk = math.prod(self.k)
        fan_in, fan_out = self.in_shape[0] * kk, self.out_channels * kk
        w, b = self.params()
        return uniform_init(init, seed, self.number, fan_in, fan_out, w[1], b[1])

    def _columns(self, x: F32Array) -> npt.NDArray[np.uint32]:
        """``(n, T, J)``: the im2col columns' bits, padding cells +0."""
        n = x.shape[0]
        c, h, w = self._hw(self.in_shape)
        _, _, q = self._k2()
        win = self.win
        padded = np.zeros((n, c, win.hp, win.wp), dtype=np.uint32)  # +0
        padded[:, :, q[0] : q[0] + h, q[1] : q[1] + w] = u32(x).reshape(n, c, h, w)
        plane = padded.reshape(n, c, win.hp * win.wp)
        # (n, T, C, kh*kw): for each channel in order, the window's cells row-major.
        cols = plane[:, :, win.index].transpose(0, 2, 1, 3)
        return np.ascontiguousarray(cols).reshape(n, win.index.shape[0], -1)

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        n = x.shape[0]
        o_n = self.out_channels
        W2 = st["W"].reshape(o_n, -1)
        cols = from_u32(self._columns(x))
        t_n = cols.shape[1]
        with np.errstate(all="ignore"):
            acc = np.repeat(np.repeat(st["b"][None, :, None], n, axis=0), t_n, axis=2)
            for j in range(W2.shape[1]):  # from the bias, j in order
                acc = add(acc, mul(W2[None, :, j, None], cols[:, None, :, j]))
        return acc.reshape((n, *self.out_shape)), cols

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        cols: F32Array = cache
        n, t_n, j_n = cols.shape
        o_n = self.out_channels
        W2 = st["W"].reshape(o_n, j_n)
        d = g.reshape(n, o_n, t_n)
        c, h, w = self._hw(self.in_shape)
        _, _, q = self._k2()
        win = self.win
        with np.errstate(all="ignore"):
            # Column gradients h_t[j] = Σ_o W[o, j] * δ[o, t], from +0, outputs in order.
            hcol = np.zeros((n, t_n, j_n), dtype=np.float32)
            for o in range(o_n):
                hcol = add(hcol, mul(W2[None, None, o, :], d[:, o, :, None]))
            # Each input cell: from +0, the output positions t in row-major order whose
            # window holds it (a window holds a cell once, so one add per cell per t).
            gp = np.zeros((n, c, win.hp * win.wp), dtype=np.float32)
            hc = hcol.reshape(n, t_n, c, -1)
            for t in range(t_n):
                idx = win.index[t]
                gp[:, :, idx] = add(gp[:, :, idx], hc[:, t])
            gx = gp.reshape(n, c, win.hp, win.wp)[:, :, q[0] : q[0] + h, q[1] : q[1] + w]
            gx = np.ascontiguousarray(gx).reshape((n, *self.in_shape))
            # Block gradients: one chain over (sample, position) from the first term.
            dr = np.ascontiguousarray(d.transpose(0, 2, 1)).reshape(n * t_n, o_n)
            cr = cols.reshape(n * t_n, j_n)
            gW = mul(dr[0][:, None], cr[0][None, :])
            for r in range(1, n * t_n):
                gW = add(gW, mul(dr[r][:, None], cr[r][None, :]))
            gb = fold(dr)
        return gx, {"W": gW.reshape(st["W"].shape), "b": gb}


class Conv1d(Conv):
    kind = "Conv1d"
    dims = 1


class Conv2d(Conv):
    kind = "Conv2d"
    dims = 2


# ---- pooling ----------------------------------------------------------------------------


class Pool(Spatial):
    def __init__(self, position: int, kernel_size: Any, stride: Any = None) -> None:
        super().__init__(position, kernel_size, stride, 0)

    def to_json(self) -> dict[str, Any]:
        d = super().to_json()
        del d["padding"]
        return d

    def _infer(self, shape: Shape) -> Shape:
        c, _, _ = self._hw(shape)
        self.win = self._windows()
        return self._spatial_out(c, self.win)

    def _gather(self, x: F32Array) -> npt.NDArray[np.uint32]:
        """``(n, C, T, K)``: each window's cells' bits, row-major."""
        n, c = x.shape[0], self.in_shape[0]
        return u32(x).reshape(n, c, -1)[:, :, self.win.index]


class MaxPool(Pool):
    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        wb = self._gather(x)
        wv = from_u32(wb)
        best = wb[..., 0].copy()
        idx = np.zeros(best.shape, dtype=np.int64)
        for k in range(1, wb.shape[-1]):
            bv, v = from_u32(best), wv[..., k]
            # A later cell wins when it is greater (IEEE), or is a NaN and the chosen is not.
            take = (v > bv) | (np.isnan(v) & ~np.isnan(bv))
            idx = np.where(take, k, idx)
            best = np.where(take, wb[..., k], best)
        return from_u32(best).reshape((x.shape[0], *self.out_shape)), idx

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        idx: IntArray = cache
        n, c = g.shape[0], self.in_shape[0]
        gw = g.reshape(n, c, -1)
        cell = self.win.index[np.arange(idx.shape[2])[None, None, :], idx]  # (n, C, T)
        gx = np.zeros((n, c, math.prod(self.in_shape[1:])), dtype=np.float32)
        with np.errstate(all="ignore"):
            for t in range(idx.shape[2]):  # windows in row-major order, from +0
                at = cell[:, :, t, None]
                cur = np.take_along_axis(gx, at, axis=2)
                np.put_along_axis(gx, at, add(cur, gw[:, :, t, None]), axis=2)
        return gx.reshape((n, *self.in_shape)), {}


class AvgPool(Pool):
    def _working_cells(self, columns: int, padded: int) -> list[tuple[str, int]]:
        return [("window table", columns)]

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        wv = from_u32(self._gather(x))
        with np.errstate(all="ignore"):
            acc = wv[..., 0].copy()
            for k in range(1, wv.shape[-1]):
                acc = add(acc, wv[..., k])
            y = div(acc, f32i(wv.shape[-1]))
        return y.reshape((x.shape[0], *self.out_shape)), None

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        n, c = g.shape[0], self.in_shape[0]
        gw = g.reshape(n, c, -1)
        cells = f32i(self.win.index.shape[1])
        gx = np.zeros((n, c, math.prod(self.in_shape[1:])), dtype=np.float32)
        with np.errstate(all="ignore"):
            for t in range(gw.shape[2]):  # windows in row-major order, from +0
                share = div(gw[:, :, t], cells)  # once per window
                idx = self.win.index[t]
                gx[:, :, idx] = add(gx[:, :, idx], share[:, :, None])
        return gx.reshape((n, *self.in_shape)), {}


class MaxPool1d(MaxPool):
    kind = "MaxPool1d"
    dims = 1


class MaxPool2d(MaxPool):
    kind = "MaxPool2d"
    dims = 2


class AvgPool1d(AvgPool):
    kind = "AvgPool1d"
    dims = 1


class AvgPool2d(AvgPool):
    kind = "AvgPool2d"
    dims = 2


# ---- normalisation ----------------------------------------------------------------------


def _norm_stats(
    v: F32Array, eps: np.float32
) -> tuple[F32Array, F32Array, F32Array, F32Array, F32Array]:
    """Over axis 0 of ``v`` (the chain's order), element-wise over the rest: ``μ``, ``σ²``,
    the sum ``Σ (x - μ) * (x - μ)``, ``r`` and ``x̂``."""
    fn = f32i(v.shape[0])
    mu = div(fold(v), fn)
    dv = sub(v, mu)
    ss = fold(mul(dv, dv))
    var = div(ss, fn)
    r = sqrt(add(var, eps))
    return mu, var, ss, r, div(sub(v, mu), r)


def _norm_backward(g: F32Array, gamma: F32Array, xhat: F32Array, r: F32Array) -> F32Array:
    """Over axis 0: ``d = g * gamma``, ``A``, ``M``, ``((d - A) - (x̂ * M)) / r``."""
    fn = f32i(g.shape[0])
    d = mul(g, gamma)
    A = div(fold(d), fn)
    M = div(fold(mul(d, xhat)), fn)
    return div(sub(sub(d, A), mul(xhat, M)), r)


class BatchNorm(Layer):
    def __init__(self, position: int, momentum: Any = 0.1, eps: Any = 1e-5) -> None:
        super().__init__(position)
        self.momentum = _f32_param(momentum, "momentum", position, self.kind)
        self.eps = _f32_param(eps, "eps", position, self.kind)
        self.given = {"momentum": _json_number(momentum), "eps": _json_number(eps)}
        if not ZERO <= self.momentum <= ONE:
            raise _refuse(position, self.kind, "momentum must be in [0, 1]")
        if not (np.isfinite(self.eps) and self.eps > ZERO):
            raise _refuse(position, self.kind, "eps must be finite and > 0")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, **self.given}

    def params(self) -> list[tuple[str, Shape]]:
        return [("gamma", self.in_shape[:1]), ("beta", self.in_shape[:1])]

    def running(self) -> list[tuple[str, Shape]]:
        return [("mean", self.in_shape[:1]), ("var", self.in_shape[:1])]

    def init_state(self, init: str, seed: int) -> State:
        c = self.in_shape[0]
        z, o = np.zeros(c, dtype=np.float32), np.ones(c, dtype=np.float32)
        return {"gamma": o.copy(), "beta": z.copy(), "mean": z, "var": o}

    def _rows(self, x: F32Array) -> F32Array:
        """``(n * P, C)``: the block's values of each channel, samples then positions."""
        n, c = x.shape[0], self.in_shape[0]
        return np.ascontiguousarray(x.reshape(n, c, -1).transpose(0, 2, 1)).reshape(-1, c)

    def _unrows(self, v: F32Array, n: int) -> F32Array:
        c = self.in_shape[0]
        return np.ascontiguousarray(v.reshape(n, -1, c).transpose(0, 2, 1)).reshape(
            (n, *self.in_shape)
        )

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        n = x.shape[0]
        gamma, beta = st["gamma"], st["beta"]
        with np.errstate(all="ignore"):
            if not ctx.train:
                r = sqrt(add(st["var"], self.eps))  # once per channel
                v = self._rows(x)
                return self._unrows(add(mul(gamma, div(sub(v, st["mean"]), r)), beta), n), None
            v = self._rows(x)
            mu, _, ss, r, xhat = _norm_stats(v, self.eps)
            y = add(mul(gamma, xhat), beta)
            cnt = v.shape[0]
            if cnt > 1:  # n = 1 leaves the running statistics as they are
                mom = self.momentum
                keep = sub(ONE, mom)
                unbiased = div(ss, f32i(cnt - 1))
                st["mean"] = add(mul(keep, st["mean"]), mul(mom, mu))
                st["var"] = add(mul(keep, st["var"]), mul(mom, unbiased))
        return self._unrows(y, n), (xhat, r)

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        xhat, r = cache
        n = g.shape[0]
        gv = self._rows(g)
        with np.errstate(all="ignore"):
            grads = {"gamma": fold(mul(gv, xhat)), "beta": fold(gv)}
            gx = _norm_backward(gv, st["gamma"], xhat, r)
        return self._unrows(gx, n), grads


class BatchNorm1d(BatchNorm):
    kind = "BatchNorm1d"

    def _infer(self, shape: Shape) -> Shape:
        if len(shape) not in (1, 2):
            raise self._wrong_shape(shape)
        return shape


class BatchNorm2d(BatchNorm):
    kind = "BatchNorm2d"

    def _infer(self, shape: Shape) -> Shape:
        if len(shape) != 3:
            raise self._wrong_shape(shape)
        return shape


class LayerNorm(Layer):
    kind = "LayerNorm"

    def __init__(self, position: int, eps: Any = 1e-5, bias: Any = True) -> None:
        super().__init__(position)
        self.eps = _f32_param(eps, "eps", position, self.kind)
        self.eps_given = _json_number(eps)
        self.bias = _bias(bias, position, self.kind)
        if not (np.isfinite(self.eps) and self.eps > ZERO):
            raise _refuse(position, self.kind, "eps must be finite and > 0")

    def to_json(self) -> dict[str, Any]:
        # 15.7: "bias" is written only when false, so earlier configurations are unchanged.
        return {"type": self.kind, "eps": self.eps_given, **({} if self.bias else {"bias": False})}

    def _norm_shape(self) -> Shape:
        """The cells normalised together: the sample's (its shape), or on a sequence each
        token's ``D`` (15.8)."""
        return self.in_shape[-1:] if isinstance(self.in_shape, Seq) else tuple(self.in_shape)

    def params(self) -> list[tuple[str, Shape]]:
        gamma = [("gamma", self._norm_shape())]
        return [*gamma, ("beta", self._norm_shape())] if self.bias else gamma

    def init_state(self, init: str, seed: int) -> State:
        st = {"gamma": np.ones(self._norm_shape(), dtype=np.float32)}
        if self.bias:
            st["beta"] = np.zeros(self._norm_shape(), dtype=np.float32)
        return st

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        # (cells, rows): the chain runs over a row's cells; rows are samples, or tokens.
        v = np.ascontiguousarray(_rows(x, math.prod(self._norm_shape())).T)
        with np.errstate(all="ignore"):
            _, _, _, r, xhat = _norm_stats(v, self.eps)
            y = mul(st["gamma"].reshape(-1, 1), xhat)
            if self.bias:  # without a bias the product alone (15.7): a -0 stays -0
                y = add(y, st["beta"].reshape(-1, 1))
        return np.ascontiguousarray(y.T).reshape(x.shape), (xhat, r)

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        xhat, r = cache
        shape = self._norm_shape()
        gv = np.ascontiguousarray(_rows(g, math.prod(shape)).T)
        with np.errstate(all="ignore"):
            gx = _norm_backward(gv, st["gamma"].reshape(-1, 1), xhat, r)
            # One term per row: chains over the samples in batch order (then tokens).
            grads = {"gamma": fold(np.ascontiguousarray(mul(gv, xhat).T)).reshape(shape)}
            if self.bias:
                grads["beta"] = fold(np.ascontiguousarray(gv.T)).reshape(shape)
        return np.ascontiguousarray(gx.T).reshape(g.shape), grads


# ---- residual blocks ----------------------------------------------------------------------


def check_cells(position: int, kind: str, shape: Shape) -> None:
    """Section 15.1: every activation at most 2^24 cells per sample."""
    if math.prod(shape) > MAX_ACTIVATION_CELLS:
        raise _refuse(position, kind, f"an activation of {math.prod(shape)} cells > 2^24")


class Residual(Layer):
    """15.7: ``y = x + f(x)``, ``f`` its branch (a nested list, run by :func:`forward_list`
    and :func:`backward_list`, which hold the layers' tensors)."""

    kind = "Residual"

    def __init__(self, position: int, layers: Any) -> None:
        super().__init__(position)
        if not isinstance(layers, (list, tuple)) or not layers:
            raise _refuse(position, self.kind, "layers must be a list of at least one layer")
        # Depth first: the branch's layers take the positions after the Residual's.
        self.layers: list[Layer] = []
        pos = position + 1
        for spec in layers:
            layer = build_layer(spec, pos)
            if isinstance(layer, Input):
                raise _refuse(pos, "Input", "only the first layer is an Input")
            self.layers.append(layer)
            pos += len(layer.walk())

    def walk(self) -> list[Layer]:
        return [self, *(inner for layer in self.layers for inner in layer.walk())]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "layers": [layer.to_json() for layer in self.layers]}

    def _infer(self, shape: Shape) -> Shape:
        out = shape
        for layer in self.layers:
            out = layer.infer(out)
            check_cells(layer.position, layer.kind, out)
        if out != shape:
            raise _refuse(
                self.position,
                self.kind,
                f"its branch gives the shape {out}, not its input's shape {shape}",
            )
        return shape


def forward_list(
    layers: Sequence[Layer], states: Sequence[State], x: F32Array, ctx: Ctx
) -> tuple[F32Array, list[Any]]:
    """A list of layers (the model's or a branch) on a block; ``states[i]`` holds the tensors
    of the layer at position ``i + 1`` (every layer depth first: :meth:`Network.flat`)."""
    caches = []
    for layer in layers:
        if isinstance(layer, Residual):
            fx, cache = forward_list(layer.layers, states, x, ctx)
            with np.errstate(all="ignore"):
                x = add(x, fx)  # x the first operand
        else:
            x, cache = layer.forward(states[layer.position - 1], x, ctx)
        caches.append(cache)
    return x, caches


def backward_list(
    layers: Sequence[Layer],
    states: Sequence[State],
    caches: list[Any],
    g: F32Array,
    ctx: Ctx,
    grads: dict[str, F32Array],
) -> F32Array:
    """The backward pass of :func:`forward_list`'s list: its input gradient; each parameter's
    block gradient is put in ``grads`` by name (``W1``, ``gamma2``, ...)."""
    for layer, cache in zip(reversed(layers), reversed(caches)):
        if isinstance(layer, Residual):
            # The branch's last layer gets g; the input gradient is g_f + g.
            gf = backward_list(layer.layers, states, cache, g, ctx, grads)
            with np.errstate(all="ignore"):
                g = add(gf, g)
        else:
            g, own = layer.backward(states[layer.position - 1], cache, g, ctx)
            for name, v in own.items():
                key = f"{name}{layer.number}"
                if key in grads:
                    # 15.8: E's block gradient is TiedHead's chain (computed first, as the
                    # head comes later in the list) + Embedding's, one addition per cell.
                    with np.errstate(all="ignore"):
                        v = add(grads[key], v)
                grads[key] = v
    return g


# ---------------------------------------------------------------------------
# Section 15.8: sequences
# ---------------------------------------------------------------------------


def _sequence_of(layer: Layer, shape: Shape) -> Seq:
    """``shape`` if it is a ``(T, D)`` sequence, else the layer's refusal."""
    if not isinstance(shape, Seq) or len(shape) != 2:
        raise _refuse(layer.position, layer.kind, f"takes a (T, D) sequence, not the shape {shape}")
    return shape


class Embedding(Layer):
    """``y[t, :] = E[id_t, :]`` (the row's bits); only directly after ``Input(T)``."""

    kind = "Embedding"

    def __init__(self, position: int, vocab: Any, width: Any, std: Any = None) -> None:
        super().__init__(position)
        self.vocab = _int(vocab, "vocab", position, self.kind)
        self.width = _int(width, "width", position, self.kind)
        self.std = _std(std, "std", position, self.kind)
        # Reading: an id is exact in binary32 ("vocab <= 2^24"), so a larger vocab is refused.
        if not 1 <= self.vocab <= MAX_VOCAB:
            raise _refuse(position, self.kind, f"vocab must be in 1..2^24, not {self.vocab}")
        if self.width < 1:
            raise _refuse(position, self.kind, f"width must be >= 1, not {self.width}")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "vocab": self.vocab, "width": self.width, **_std_json(self.std)}

    def _infer(self, shape: Shape) -> Shape:
        if isinstance(shape, Seq) or len(shape) != 1:
            raise self._wrong_shape(shape)
        return Seq((shape[0], self.width), self)

    def params(self) -> list[tuple[str, Shape]]:
        return [("E", (self.vocab, self.width))]

    def init_state(self, init: str, seed: int) -> State:
        # N(0, std), or N(0, 1) without one (PyTorch's), whatever the run's init.
        std = ONE if self.std is None else self.std[0]
        st = gr.Stream(seed, gr.INIT, self.number - 1)
        return {"E": normal_tensor(st, (self.vocab, self.width), std)}

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        ids = x.astype(np.int64)  # exact binary32 ids, checked by Network.samples
        return from_u32(u32(st["E"])[ids]), ids

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        ids = cache.reshape(-1)
        rows = _rows(g, self.width)
        gE = np.zeros((self.vocab, self.width), dtype=np.float32)  # unread rows: +0
        seen = np.zeros(self.vocab, dtype=bool)
        with np.errstate(all="ignore"):
            for r, v in enumerate(ids):  # samples in order, then tokens, from the first
                gE[v] = add(gE[v], rows[r]) if seen[v] else rows[r]
                seen[v] = True
        # Ids have no gradient; nothing runs below the Embedding.
        return np.zeros(cache.shape, dtype=np.float32), {"E": gE}


class PositionalEmbedding(Layer):
    """``y[t, d] = x[t, d] + P[t, d]`` for ``t < T <= context``."""

    kind = "PositionalEmbedding"

    def __init__(self, position: int, context: Any, width: Any, std: Any = None) -> None:
        super().__init__(position)
        self.context = _int(context, "context", position, self.kind)
        self.width = _int(width, "width", position, self.kind)
        self.std = _std(std, "std", position, self.kind)
        if self.context < 1 or self.width < 1:
            raise _refuse(position, self.kind, "context and width must be >= 1")

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "context": self.context,
            "width": self.width,
            **_std_json(self.std),
        }

    def _infer(self, shape: Shape) -> Shape:
        seq = _sequence_of(self, shape)
        if seq[1] != self.width:
            raise self._wrong_shape(shape)
        if seq[0] > self.context:
            raise _refuse(
                self.position,
                self.kind,
                f"a sequence of {seq[0]} tokens is longer than its context {self.context}",
            )
        return seq

    def params(self) -> list[tuple[str, Shape]]:
        return [("P", (self.context, self.width))]

    def init_state(self, init: str, seed: int) -> State:
        std = ONE if self.std is None else self.std[0]
        st = gr.Stream(seed, gr.INIT, self.number - 1)
        return {"P": normal_tensor(st, (self.context, self.width), std)}

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        with np.errstate(all="ignore"):
            return add(x, st["P"][None, : x.shape[1]]), None

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        gP = np.zeros((self.context, self.width), dtype=np.float32)  # rows T..: +0
        with np.errstate(all="ignore"):
            gP[: g.shape[1]] = fold(g)  # each sample's g[t, :], samples in order
        return g, {"P": gP}


class CausalSelfAttention(Layer):
    """15.8's attention: ``qkv = x Wqkvᵀ``, per head the causal softmax of ``q kᵀ * c`` over
    the key positions ``j <= i``, ``o = p v``, ``y = o Woᵀ``."""

    kind = "CausalSelfAttention"

    def __init__(
        self, position: int, heads: Any, bias: Any = False, std: Any = None, proj_std: Any = None
    ) -> None:
        super().__init__(position)
        self.heads = _int(heads, "heads", position, self.kind)
        if _bias(bias, position, self.kind):
            raise _refuse(position, self.kind, "bias=True is not supported")
        self.std = _std(std, "std", position, self.kind)
        self.proj_std = _std(proj_std, "proj_std", position, self.kind)
        if self.heads < 1:
            raise _refuse(position, self.kind, f"heads must be >= 1, not {self.heads}")

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "heads": self.heads,
            **_std_json(self.std),
            **_std_json(self.proj_std, "proj_std"),
        }

    def _infer(self, shape: Shape) -> Shape:
        seq = _sequence_of(self, shape)
        if seq[1] % self.heads:
            raise _refuse(
                self.position, self.kind, f"{self.heads} heads do not divide the width {seq[1]}"
            )
        h = seq[1] // self.heads
        # c = 1 / sqrt(f32(h)): two correctly rounded operations.
        self.c = div(ONE, sqrt(np.array([f32i(h)], dtype=np.float32)))[0]
        return seq

    def params(self) -> list[tuple[str, Shape]]:
        d = self.in_shape[1]
        return [("Wqkv", (3 * d, d)), ("Wo", (d, d))]

    def init_state(self, init: str, seed: int) -> State:
        d = self.in_shape[1]
        st = gr.Stream(seed, gr.INIT, self.number - 1)  # Wqkv, then Wo continuing it
        if self.std is not None:
            wo_std = self.std if self.proj_std is None else self.proj_std
            return {
                "Wqkv": normal_tensor(st, (3 * d, d), self.std[0]),
                "Wo": normal_tensor(st, (d, d), wo_std[0]),
            }
        # Reading: without std, proj_std is not used (the text gives it under std only).
        a_qkv, a_o = uniform_scale(init, d, 3 * d), uniform_scale(init, d, d)
        return {
            "Wqkv": gr.uniform_cells(st, 3 * d * d, a_qkv).reshape(3 * d, d),
            "Wo": gr.uniform_cells(st, d * d, a_o).reshape(d, d),
        }

    def _heads(self, m: F32Array, n: int, t_n: int) -> F32Array:
        """``(n * T, D)`` rows -> ``(n, H, T, h)``."""
        return np.ascontiguousarray(m.reshape(n, t_n, self.heads, -1).transpose(0, 2, 1, 3))

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        n, t_n, d = x.shape
        c = self.c
        a = _rows(x, d)
        qkv = linear_forward(st["Wqkv"], None, a)
        q, k, v = (self._heads(qkv[:, i * d : (i + 1) * d], n, t_n) for i in range(3))
        hw = q.shape[-1]
        later = np.arange(t_n)[:, None] < np.arange(t_n)[None, :]  # [i, j]: j > i
        with np.errstate(all="ignore"):
            acc = np.zeros((n, self.heads, t_n, t_n), dtype=np.float32)  # [.., i, j]
            for e in range(hw):  # from +0, e in order
                acc = add(acc, mul(q[:, :, :, None, e], k[:, :, None, :, e]))
            s = mul(acc, c)
            # The maximum over j <= i by the "ieee" rule, in both settings.
            mx = s[..., 0].copy()
            for j in range(1, t_n):
                take = (s[..., j] > mx) & (j <= np.arange(t_n))
                mx = from_u32(np.where(take, u32(s[..., j]), u32(mx)))
            w = ctx.math.exp(sub(s, mx[..., None]))
            w = from_u32(np.where(later, np.uint32(0), u32(w)))  # never read below
            z = np.zeros((n, self.heads, t_n), dtype=np.float32)
            for j in range(t_n):  # from +0, j in order, j <= i only
                z = from_u32(np.where(j <= np.arange(t_n), u32(add(z, w[..., j])), u32(z)))
            p = from_u32(np.where(later, np.uint32(0), u32(div(w, z[..., None]))))
            o = np.zeros_like(q)
            for j in range(t_n):
                term = mul(p[..., j, None], v[:, :, None, j, :])
                keep = (j <= np.arange(t_n))[:, None]
                o = from_u32(np.where(keep, u32(add(o, term)), u32(o)))
        oc = np.ascontiguousarray(o.transpose(0, 2, 1, 3)).reshape(n * t_n, d)
        y = linear_forward(st["Wo"], None, oc)
        return y.reshape(n, t_n, d), (a, q, k, v, p, oc)

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        a, q, k, v, p, oc = cache
        n, t_n, d = g.shape
        c = self.c
        hw = q.shape[-1]
        pos = np.arange(t_n)
        go_rows, gWo = linear_backward(st["Wo"], oc, _rows(g, d))
        go = self._heads(go_rows, n, t_n)
        with np.errstate(all="ignore"):
            dp = np.zeros((n, self.heads, t_n, t_n), dtype=np.float32)  # [.., i, j]
            for e in range(hw):
                dp = add(dp, mul(go[:, :, :, None, e], v[:, :, None, :, e]))
            r = np.zeros((n, self.heads, t_n), dtype=np.float32)
            for j in range(t_n):  # j <= i only
                r = from_u32(np.where(j <= pos, u32(add(r, mul(p[..., j], dp[..., j]))), u32(r)))
            ds = mul(mul(p, sub(dp, r[..., None])), c)
            dv = np.zeros_like(v)  # [.., j, e]
            dk = np.zeros_like(k)
            for i in range(t_n):  # i = j .. T-1, in order
                keep = (pos <= i)[:, None]  # over j
                dv = from_u32(
                    np.where(
                        keep, u32(add(dv, mul(p[:, :, i, :, None], go[:, :, i, None, :]))), u32(dv)
                    )
                )
                dk = from_u32(
                    np.where(
                        keep, u32(add(dk, mul(ds[:, :, i, :, None], q[:, :, i, None, :]))), u32(dk)
                    )
                )
            dq = np.zeros_like(q)  # [.., i, e]
            for j in range(t_n):  # j = 0 .. i, in order
                keep = (j <= pos)[:, None]  # over i
                dq = from_u32(
                    np.where(
                        keep, u32(add(dq, mul(ds[..., j, None], k[:, :, None, j, :]))), u32(dq)
                    )
                )

        def rows(m: F32Array) -> F32Array:
            return np.ascontiguousarray(m.transpose(0, 2, 1, 3)).reshape(n * t_n, d)

        dqkv = np.concatenate([rows(dq), rows(dk), rows(dv)], axis=1)
        gx, gWqkv = linear_backward(st["Wqkv"], a, dqkv)
        return gx.reshape(n, t_n, d), {"Wqkv": gWqkv, "Wo": gWo}


class TiedHead(Layer):
    """``z[t, v] = Σ_d E[v, d] * x[t, d]`` from +0: logits against the Embedding's ``E``."""

    kind = "TiedHead"

    def _infer(self, shape: Shape) -> Shape:
        seq = _sequence_of(self, shape)
        self.embedding = seq.embedding
        if seq[1] != self.embedding.width:
            raise _refuse(
                self.position,
                self.kind,
                f"its input's width {seq[1]} is not the Embedding's width {self.embedding.width}",
            )
        return Seq((seq[0], self.embedding.vocab), self.embedding)

    def reads(self) -> list[tuple[str, Shape]]:
        return [("E", (self.embedding.vocab, self.embedding.width))]

    def forward(self, st: State, x: F32Array, ctx: Ctx) -> tuple[F32Array, Any]:
        a = _rows(x, x.shape[-1])
        z = linear_forward(st["E"], None, a)
        return z.reshape((x.shape[0], *self.out_shape)), a

    def backward(
        self, st: State, cache: Any, g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        gx, gE = linear_backward(st["E"], cache, _rows(g, g.shape[-1]))
        # Named E{n} of the Embedding (Network gives the head its number).
        return gx.reshape((g.shape[0], *self.in_shape)), {"E": gE}


# ---------------------------------------------------------------------------
# Section 15.1: the list
# ---------------------------------------------------------------------------

#: JSON type -> (class, the parameters it takes, the optional ones with their defaults).
_TYPES: dict[str, tuple[type[Layer], tuple[str, ...], dict[str, Any]]] = {
    "Input": (Input, ("shape",), {}),
    "Dense": (Dense, ("units",), {"bias": True, "std": None}),
    "Conv1d": (Conv1d, ("out_channels", "kernel_size"), {"stride": 1, "padding": 0}),
    "Conv2d": (Conv2d, ("out_channels", "kernel_size"), {"stride": 1, "padding": 0}),
    "MaxPool1d": (MaxPool1d, ("kernel_size",), {"stride": None}),
    "MaxPool2d": (MaxPool2d, ("kernel_size",), {"stride": None}),
    "AvgPool1d": (AvgPool1d, ("kernel_size",), {"stride": None}),
    "AvgPool2d": (AvgPool2d, ("kernel_size",), {"stride": None}),
    "Flatten": (Flatten, (), {}),
    "ReLU": (ReLU, (), {}),
    "Tanh": (Tanh, (), {}),
    "Sigmoid": (Sigmoid, (), {}),
    "Dropout": (Dropout, ("p",), {}),
    "BatchNorm1d": (BatchNorm1d, (), {"momentum": 0.1, "eps": 1e-5}),
    "BatchNorm2d": (BatchNorm2d, (), {"momentum": 0.1, "eps": 1e-5}),
    "LayerNorm": (LayerNorm, (), {"eps": 1e-5, "bias": True}),
    "GELU": (GELU, (), {}),
    "Residual": (Residual, ("layers",), {}),
    "Embedding": (Embedding, ("vocab", "width"), {"std": None}),
    "PositionalEmbedding": (PositionalEmbedding, ("context", "width"), {"std": None}),
    "CausalSelfAttention": (
        CausalSelfAttention,
        ("heads",),
        {"bias": False, "std": None, "proj_std": None},
    ),
    "TiedHead": (TiedHead, (), {}),
}


def build_layer(spec: dict[str, Any], position: int) -> Layer:
    """One layer from its JSON object (section 15.1's names)."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"layer {position}: not a layer object: {spec!r}")
    kind = spec["type"]
    if kind not in _TYPES:
        raise ValueError(f"layer {position}: unknown layer type {kind!r}")
    cls, required, optional = _TYPES[kind]
    keys = set(spec) - {"type"}
    missing = [k for k in required if k not in keys]
    unknown = keys - set(required) - set(optional)
    if missing or unknown:
        raise _refuse(
            position, kind, f"missing parameters {missing}, unknown parameters {sorted(unknown)}"
        )
    args = {k: spec.get(k, optional.get(k)) for k in (*required, *optional)}
    return cls(position, **args)


def integer_list_layers(sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Section 15's shorthand: ``[n_0, ..., n_L]`` -> Input, (Dense, ReLU)..., Dense."""
    out: list[dict[str, Any]] = [{"type": "Input", "shape": [sizes[0]]}]
    for i, n in enumerate(sizes[1:]):
        out.append({"type": "Dense", "units": n})
        if i < len(sizes) - 2:
            out.append({"type": "ReLU"})
    return out


class Network:
    """A validated layer list with its shapes and tensor numbering (section 15.1, 15.4)."""

    def __init__(self, specs: Sequence[dict[str, Any]]) -> None:
        if not specs or not isinstance(specs[0], dict) or specs[0].get("type") != "Input":
            raise ValueError("layer 0: the list must start with Input(*shape)")
        # Reading: the 4096 counts the layers after Input.
        if len(specs) - 1 > MAX_LIST_LAYERS:
            raise ValueError(f"at most {MAX_LIST_LAYERS} layers, not {len(specs) - 1}")
        first = build_layer(specs[0], 0)
        assert isinstance(first, Input)
        self.input_shape: Shape = first.shape
        shape = self.input_shape
        check_cells(0, "Input", shape)
        #: The list's layers; a Residual holds its branch's.
        self.layers: list[Layer] = []
        pos = 1
        for spec in specs[1:]:
            layer = build_layer(spec, pos)
            if isinstance(layer, Input):
                raise _refuse(pos, "Input", "only the first layer is an Input")
            for inner in layer.walk():  # 15.8: only directly after Input (so one per list)
                if isinstance(inner, Embedding) and inner.position != 1:
                    raise _refuse(inner.position, inner.kind, "must come directly after Input")
            shape = layer.infer(shape)
            check_cells(pos, layer.kind, shape)
            self.layers.append(layer)
            pos += len(layer.walk())
        #: Every layer depth first (15.7): ``flat[i]`` is at position ``i + 1``.
        self.flat: list[Layer] = [inner for layer in self.layers for inner in layer.walk()]
        # The limit counts nested layers and the Residuals themselves (15.7).
        if len(self.flat) > MAX_LIST_LAYERS:
            raise ValueError(f"at most {MAX_LIST_LAYERS} layers, not {len(self.flat)}")
        number = 0
        n_params = 0
        for layer in self.flat:
            if layer.params():
                number += 1
                layer.number = number
                n_params += sum(math.prod(s) for _, s in layer.params())
        #: 15.8: the list's Embedding (a sequence model reads token ids), or None.
        self.embedding = self.flat[0] if self.flat and isinstance(self.flat[0], Embedding) else None
        for layer in self.flat:
            if isinstance(layer, TiedHead):  # its gradient is named E{n} of the Embedding
                layer.number = layer.embedding.number
        #: 15.8: ``T`` when the output is a ``(T, K)`` sequence (a loss per token), else None.
        self.tokens: int | None = shape[0] if isinstance(shape, Seq) else None
        if len(shape) != (2 if isinstance(shape, Seq) else 1):
            last = self.layers[-1].position if self.layers else 0
            want = "a (T, K) sequence" if isinstance(shape, Seq) else "(K)"
            raise ValueError(f"layer {last}: the last layer's output must be {want}, not {shape}")
        # Reading: the running statistics are not parameters.
        if n_params > MAX_PARAMETER_CELLS:
            raise ValueError(f"at most 2^28 parameter cells, not {n_params}")
        self.output_size = shape[-1]

    def to_json(self) -> list[dict[str, Any]]:
        return [{"type": "Input", "shape": list(self.input_shape)}] + [
            layer.to_json() for layer in self.layers
        ]

    def samples(self, x: Any) -> F32Array:
        """``X`` as ``(N, *shape)``, from ``(N, *shape)`` or flat ``(N, prod(shape))``; a
        sequence model's token ids checked first (15.8)."""
        if self.embedding is not None:
            check_token_ids(x, self.embedding.vocab)
        xs: F32Array = np.ascontiguousarray(x, dtype=np.float32)
        return xs.reshape((xs.shape[0], *self.input_shape))

    def param_names(self) -> list[str]:
        return [f"{name}{l.number}" for l in self.flat for name, _ in l.params()]  # noqa: E741

    def running_names(self) -> list[str]:
        return [f"{name}{l.number}" for l in self.flat for name, _ in l.running()]  # noqa: E741

    def init_state(self, init: str, seed: int) -> list[State]:
        """Per layer of :attr:`flat`: its tensors (section 15.4); a TiedHead's is its
        Embedding's dict itself (it reads ``E``)."""
        states = [layer.init_state(init, seed) for layer in self.flat]
        for i, layer in enumerate(self.flat):
            if isinstance(layer, TiedHead):
                states[i] = states[layer.embedding.position - 1]
        return states

    def forward(self, states: list[State], x: F32Array, ctx: Ctx) -> tuple[F32Array, list[Any]]:
        return forward_list(self.layers, states, x, ctx)

    def backward(
        self, states: list[State], caches: list[Any], g: F32Array, ctx: Ctx
    ) -> tuple[F32Array, dict[str, F32Array]]:
        """The input gradient and the block gradients of every parameter, by name (``W1``,
        ``gamma2``, ...)."""
        grads: dict[str, F32Array] = {}
        gx = backward_list(self.layers, states, caches, g, ctx, grads)
        return gx, grads


def check_token_ids(x: Any, vocab: int) -> None:
    """15.8: every id an integer in ``0 .. vocab-1`` (an integer, or a float with such a
    value), else a refusal naming the sample, the position and the value."""
    a = np.asarray(x)
    flat = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
    if a.dtype.kind in "iub":
        bad = (flat < 0) | (flat >= vocab)
    else:
        with np.errstate(all="ignore"):
            v = flat.astype(np.float64)
            bad = ~(np.isfinite(v) & (v == np.floor(v)) & (v >= 0) & (v < vocab))
    if bad.any():
        s, t = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"sample {s}, position {t}: token id {flat[s, t]!r} is not an integer in 0..{vocab - 1}"
        )


def parse_layers(layers: Sequence[Any]) -> Network:
    """A layer list (JSON objects) or an integer list (section 15's shorthand)."""
    if layers and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in layers):
        return Network(integer_list_layers([int(v) for v in layers]))
    return Network(list(layers))


# ---------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------


def is_integer_list(layers: Sequence[Any]) -> bool:
    return bool(layers) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in layers
    )


@dataclass(frozen=True)
class LayerConfig:
    """A resolved configuration: the network and section 1's other keys (``cfg``; its
    ``layers`` are the integer list, or empty for a list of layer objects)."""

    net: Network
    cfg: gr.Config
    #: Section 1's keys as given (floats not yet binary32), with the defaults.
    resolved: dict[str, Any]

    @classmethod
    def make(cls, **kw: Any) -> LayerConfig:
        layers = kw.get("layers")
        if layers is None:
            raise ValueError("layers is required")
        if is_integer_list(layers):
            d = gr.resolve_config(**kw)
        else:
            d = gr.resolve_keys(kw, init_default="torch", inits=LAYER_INITS)
            d["layers"] = ()
        net = parse_layers(layers)
        resolved = dict(d, layers=list(d["layers"]) if d["layers"] else net.to_json())
        return cls(net, gr.Config.from_resolved(d), resolved)

    def config_json(self) -> dict[str, Any]:
        """The configuration as given, every layer's parameters written out (15.1)."""
        return gr._config_json(self.resolved)


#: Section 7's weight matrices and tables, by the kind in a parameter's name: what
#: ``decay_params="matrices"`` decays (never a bias ``b`` or a norm's ``gamma``, ``beta``).
MATRIX_KINDS = ("W", "Wqkv", "Wo", "E", "P")


def is_matrix(name: str) -> bool:
    """Whether the parameter ``name`` (its kind then its layer's number) is a matrix."""
    return name.rstrip("0123456789") in MATRIX_KINDS


class LayerTrainer(gr.Run):
    """A training run of a layer list (sections 3-11 with section 15)."""

    def __init__(self, config: LayerConfig | None = None, **kw: Any) -> None:
        lc = config if config is not None else LayerConfig.make(**kw)
        super().__init__(lc.cfg)
        self.lc = lc
        self.net = lc.net
        cfg = self.cfg
        if cfg.init == "seed":
            # Section 4's seed pattern (integer lists only): the Dense layers' weights.
            ws = gr.init_weights(cfg)
            self.states = [
                {"W": ws[layer.number - 1], "b": np.zeros(layer.out_shape, dtype=np.float32)}
                if isinstance(layer, Dense)
                else {}
                for layer in self.net.flat
            ]
        else:
            self.states = self.net.init_state(cfg.init, cfg.seed)
        self.names = self.net.param_names()
        self.m = {k: np.zeros_like(v) for k, v in self.params().items()}
        self.v = {k: np.zeros_like(v) for k, v in self.params().items()}

    # ---- tensors ----

    def params(self) -> dict[str, F32Array]:
        """The parameters by name, in state order (no copies)."""
        out: dict[str, F32Array] = {}
        for layer, st in zip(self.net.flat, self.states):
            for name, _ in layer.params():
                out[f"{name}{layer.number}"] = st[name]
        return out

    def _running(self) -> list[tuple[str, F32Array]]:
        return [
            (f"{name}{layer.number}", st[name])
            for layer, st in zip(self.net.flat, self.states)
            for name, _ in layer.running()
        ]

    def _set_params(self, values: dict[str, F32Array]) -> None:
        for layer, st in zip(self.net.flat, self.states):
            for name, _ in layer.params():
                st[name] = values[f"{name}{layer.number}"]

    def tensor_names(self) -> list[str]:
        """Section 15.4: parameters, the optimiser's slots per parameter, running stats."""
        names = list(self.names)
        if self.cfg.optimizer == "sgd":
            names += [f"m{k}" for k in self.names]
        else:
            names += [f"{s}{k}" for k in self.names for s in ("m", "v")]
        return names + [k for k, _ in self._running()]

    def tensors(self) -> list[F32Array]:
        p = self.params()
        out = [p[k] for k in self.names]
        for k in self.names:
            out += [self.m[k]] if self.cfg.optimizer == "sgd" else [self.m[k], self.v[k]]
        return out + [v for _, v in self._running()]

    # ---- one step ----

    def gradients(self, x: F32Array, y: gr.Targets) -> tuple[dict[str, F32Array], np.float32]:
        """Sections 5, 8 and 15: the reduced (and clipped) gradients and the step's loss.

        Each block runs forward (BatchNorm's statistics over the block, its running
        statistics updated once, in block order), the loss, and backward on its own.
        """
        cfg, m = self.cfg, self.math
        xs = self.net.samples(x)
        nb = xs.shape[0]
        blk = nb if cfg.grad_block is None else cfg.grad_block
        total: dict[str, F32Array] | None = None
        losses: list[F32Array] = []
        # 15.8: a sequence output divides by f32(B * T) (the mean over tokens).
        divisor = f32i(nb * (self.net.tokens or 1))
        with np.errstate(all="ignore"):
            for start in range(0, nb, blk):
                end = min(start + blk, nb)
                ctx = Ctx(m, True, cfg.seed, self.step_count, start)
                z, caches = self.net.forward(self.states, xs[start:end], ctx)
                lb, delta, _ = self._loss(z, y[start:end])
                losses.append(lb)
                _, grads = self.net.backward(self.states, caches, delta, ctx)
                total = grads if total is None else {k: add(total[k], grads[k]) for k in total}
            assert total is not None
            g = {k: div(total[k], divisor) for k in self.names}
            ls = np.concatenate(losses)
            step_loss = np.float32(div(fold(ls), divisor))
            if cfg.clip_norm is not None:
                clipped = gr.clip_tensors(cfg.clip_norm, [g[k] for k in self.names])
                g = dict(zip(self.names, clipped))
        return g, step_loss

    def _loss(self, z: F32Array, y: gr.Targets) -> tuple[F32Array, F32Array, F32Array]:
        """Section 5's per-sample losses, ``δ`` and outputs; for a ``(T, K)`` sequence output
        (15.8) per token, each sample's loss the sum of its tokens' from the first (labels
        ``(n, T)``; reading: mse targets ``(n, T, K)``), ``δ`` and the outputs ``(n, T, K)``."""
        if self.net.tokens is None:
            return gr.loss_and_delta(self.math, self.cfg.loss, z, y)
        n, t_n, k = z.shape
        labels = np.asarray(y)
        shape = (n * t_n,) if self.cfg.loss == "cross_entropy" else (n * t_n, k)
        yt = cast(gr.Targets, labels.reshape(shape))
        with np.errstate(all="ignore"):
            lt, dt, out = gr.loss_and_delta(self.math, self.cfg.loss, z.reshape(n * t_n, k), yt)
            ls = fold(np.ascontiguousarray(lt.reshape(n, t_n).T))  # tokens in order
        return ls, dt.reshape(z.shape), out.reshape(z.shape)

    def train_steps(self, x: F32Array, y: gr.Targets, steps: int) -> list[np.float32]:
        """15.8: a sequence model's token ids are checked (naming the data set's sample)
        before anything is computed."""
        self.net.samples(x)
        return super().train_steps(x, y, steps)

    def step(self, x: F32Array, y: gr.Targets) -> np.float32:
        g, step_loss = self.gradients(x, y)
        p = self.params()
        params = [p[k] for k in self.names]
        ms = [self.m[k] for k in self.names]
        vs = [self.v[k] for k in self.names]
        with np.errstate(all="ignore"):
            self.b1t, self.b2t = gr.optimizer_update(
                self.cfg,
                self.math,
                params,
                [g[k] for k in self.names],
                ms,
                vs,
                self.b1t,
                self.b2t,
                gr.lr_at(self.cfg, self.step_count),
                [is_matrix(k) for k in self.names],
            )
        self._set_params(dict(zip(self.names, params)))
        self.m = dict(zip(self.names, ms))
        self.v = dict(zip(self.names, vs))
        self.step_count += 1
        return step_loss

    # ---- section 15.6 ----

    def _outputs(self, x: F32Array) -> tuple[F32Array, F32Array]:
        with np.errstate(all="ignore"):
            ctx = Ctx(self.math, False, self.cfg.seed, self.step_count, 0)
            z, _ = self.net.forward(self.states, self.net.samples(x), ctx)
            if self.cfg.loss == "mse":
                return z, z
            k = z.shape[-1]  # per token on a sequence (15.8)
            return z, gr.softmax(self.math, z.reshape(-1, k))[2].reshape(z.shape)

    def predict(self, x: F32Array) -> npt.NDArray[Any]:
        """Section 10; on a sequence output (15.8) ``(N, T)`` classes."""
        if self.net.tokens is None or self.cfg.loss == "mse":
            return super().predict(x)
        p = self.predict_proba(x)
        return gr.argmax_rule(self.math, p.reshape(-1, p.shape[-1])).reshape(p.shape[:2])

    def evaluate(self, x: F32Array, y: gr.Targets) -> tuple[np.float32, float | None]:
        """Section 10; on a sequence output (15.8) the sum of the samples' losses (each
        its tokens' sum) over ``f32(N * T)``, and the accuracy over tokens."""
        if self.net.tokens is None:
            return super().evaluate(x, y)
        z, _ = self._outputs(x)
        n, t_n = z.shape[0], self.net.tokens
        with np.errstate(all="ignore"):
            losses, _, _ = self._loss(z, y)
            loss = np.float32(div(fold(losses), f32i(n * t_n)))
        if self.cfg.loss == "mse":
            return loss, None
        correct = int(np.sum(self.predict(x) == np.asarray(y, dtype=np.int64)))
        return loss, correct / (n * t_n)


# ---------------------------------------------------------------------------
# Golden fixture: one layer
# ---------------------------------------------------------------------------

#: How the fixture's inputs were made (documentation: the fixture stores every cell's bits).
GEN_DOC = {
    "stream": "cell i of a tensor: the i-th draw x of the stream (case_seed, LAYR = 0x6C617972, "
    "tensor_tag) (section 9), value (f32((x >> 40) - 2^23) * 2^-23) * f32(scale) (exact)",
    "int": "cell i: f32(((i * a + b) % m) - m / 2) / f32(d) (integer % and /; many ties)",
    "specials": "then the listed cells are overwritten with the listed bit patterns",
    "tensor_tag": "0 x, 1 g, 2 W / gamma, 3 b / beta, 4 running mean, 5 running var "
    "(var: |value| + 1/2)",
}
LAYR = 0x6C617972

# Special values' bit patterns.
NAN = 0x7FC00000
NNAN = 0xFFC00001
INF = 0x7F800000
NINF = 0xFF800000
NZERO = 0x80000000
PZERO = 0x00000000
SUB = 0x00000003  # a subnormal
NSUB = 0x80400000  # a negative subnormal
BIG = 0x7F7FFFFF  # the largest finite
ONE_B = 0x3F800000


def gen_cells(gen: dict[str, Any], seed: int, tag: int, count: int) -> F32Array:
    """A tensor's cells by :data:`GEN_DOC`."""
    if gen["kind"] == "ids":  # 15.8's token ids (as binary32 values)
        a, b, m = gen["a"], gen["b"], gen["m"]
        return np.array([(i * a + b) % m for i in range(count)], dtype=np.float32)
    if gen["kind"] == "int":
        a, b, m, dv = gen["a"] + tag, gen["b"] + 3 * tag, gen["m"], gen["d"]
        return np.array(
            [f32i(((i * a + b) % m) - m // 2) / f32i(dv) for i in range(count)],
            dtype=np.float32,
        ).reshape(count)
    scale = f32i(gen.get("scale", 1))
    return gr.uniform_cells(gr.Stream(seed, LAYR, tag), count, scale)


def _with_specials(v: F32Array, specials: dict[int, int]) -> F32Array:
    b = u32(v).copy()
    for i, s in specials.items():
        b.reshape(-1)[i] = s
    return from_u32(b)


#: Per-layer cases: (name, layer JSON, input shape, n, extra). ``extra`` may give ``gen``,
#: ``specials`` (tensor name -> {cell: bits}), ``position``, ``seed``, ``step``,
#: ``first_sample`` (Dropout's mask). Every case runs in both math settings.
_STREAM: dict[str, Any] = {"kind": "stream"}
_TIES: dict[str, Any] = {"kind": "int", "a": 5, "b": 1, "m": 7, "d": 4}

LAYER_CASES: list[tuple[str, dict[str, Any], Shape, int, dict[str, Any]]] = [
    ("dense", {"type": "Dense", "units": 3}, (5,), 3, {}),
    (
        "dense_specials",
        {"type": "Dense", "units": 4},
        (3,),
        4,
        {"specials": {"x": {0: NAN, 2: INF, 4: NZERO, 5: SUB, 7: NINF, 9: NSUB}, "W": {3: INF}}},
    ),
    (
        "conv1d_s2_p1",
        {"type": "Conv1d", "out_channels": 3, "kernel_size": [3], "stride": [2], "padding": [1]},
        (2, 9),
        2,
        {},
    ),
    (
        "conv1d_k4_s3_lastcell_unused",
        {"type": "Conv1d", "out_channels": 2, "kernel_size": [4], "stride": [3], "padding": [0]},
        (1, 11),
        3,
        {},
    ),
    (
        "conv1d_inf_weight_over_padding",
        {"type": "Conv1d", "out_channels": 2, "kernel_size": [3], "stride": [1], "padding": [2]},
        (2, 5),
        2,
        {"specials": {"W": {0: INF, 4: NINF}, "x": {3: NAN, 6: NZERO}}},
    ),
    (
        "conv2d_k3x2_s2x3_p1",
        {
            "type": "Conv2d",
            "out_channels": 2,
            "kernel_size": [3, 2],
            "stride": [2, 3],
            "padding": [1, 1],
        },
        (2, 5, 7),
        2,
        {},
    ),
    (
        "conv2d_k3_specials",
        {
            "type": "Conv2d",
            "out_channels": 3,
            "kernel_size": [3, 3],
            "stride": [1, 1],
            "padding": [0, 0],
        },
        (1, 4, 5),
        1,
        {"specials": {"x": {0: NAN, 7: INF, 8: NZERO, 12: SUB}, "g": {1: NZERO}}},
    ),
    (
        "conv2d_inf_weight_over_padding",
        {
            "type": "Conv2d",
            "out_channels": 1,
            "kernel_size": [2, 2],
            "stride": [1, 2],
            "padding": [1, 1],
        },
        (2, 3, 3),
        2,
        {"specials": {"W": {0: INF}}},
    ),
    (
        "maxpool1d_k3_s2_ties_nan",
        {"type": "MaxPool1d", "kernel_size": [3], "stride": [2]},
        (2, 8),
        2,
        {
            "gen": _TIES,
            "specials": {"x": {3: NAN, 5: NNAN, 8: NZERO, 9: PZERO, 10: PZERO, 20: NAN}},
        },
    ),
    (
        "maxpool1d_default_stride_last_unfit",
        {"type": "MaxPool1d", "kernel_size": [2], "stride": None},
        (3, 7),
        2,
        {
            "gen": _TIES,
            "specials": {"x": {0: NZERO, 1: PZERO, 2: PZERO, 3: NZERO, 4: NINF, 5: NINF}},
        },
    ),
    (
        "maxpool2d_k2x3_s1x2_ties_nan",
        {"type": "MaxPool2d", "kernel_size": [2, 3], "stride": [1, 2]},
        (2, 5, 6),
        2,
        {"gen": _TIES, "specials": {"x": {7: NAN, 14: INF, 40: NNAN}}},
    ),
    (
        "maxpool2d_k2_default_stride",
        {"type": "MaxPool2d", "kernel_size": [2, 2], "stride": None},
        (1, 5, 5),
        3,
        {"gen": _TIES},
    ),
    (
        "avgpool1d_k3_s2",
        {"type": "AvgPool1d", "kernel_size": [3], "stride": [2]},
        (2, 9),
        2,
        {"specials": {"x": {4: INF, 13: NAN, 14: SUB}}},
    ),
    (
        "avgpool2d_k2_s1_overlap",
        {"type": "AvgPool2d", "kernel_size": [2, 2], "stride": [1, 1]},
        (2, 4, 5),
        2,
        {},
    ),
    (
        "avgpool2d_k3x2_default_stride",
        {"type": "AvgPool2d", "kernel_size": [3, 2], "stride": None},
        (1, 7, 5),
        2,
        {"specials": {"x": {0: BIG, 1: BIG}}},
    ),
    ("flatten", {"type": "Flatten"}, (2, 3, 2), 2, {}),
    (
        "relu_specials",
        {"type": "ReLU"},
        (3, 4),
        2,
        {
            "specials": {
                "x": {0: NAN, 1: NNAN, 2: NZERO, 3: PZERO, 4: INF, 5: NINF, 6: SUB, 7: NSUB}
            }
        },
    ),
    (
        "tanh_specials",
        {"type": "Tanh"},
        (12,),
        2,
        {
            "gen": {"kind": "stream", "scale": 4},
            "specials": {
                "x": {
                    0: NAN,
                    1: NNAN,
                    2: NZERO,
                    3: PZERO,
                    4: INF,
                    5: NINF,
                    6: SUB,
                    7: NSUB,
                    8: 0x41200000,
                    9: 0xC1200000,
                    10: 0x3A800000,
                    11: BIG,
                }
            },
        },
    ),
    (
        "sigmoid_specials",
        {"type": "Sigmoid"},
        (12,),
        2,
        {
            "gen": {"kind": "stream", "scale": 8},
            "specials": {
                "x": {
                    0: NAN,
                    1: NNAN,
                    2: NZERO,
                    3: PZERO,
                    4: INF,
                    5: NINF,
                    6: SUB,
                    7: NSUB,
                    8: 0x42C80000,
                    9: 0xC2C80000,
                    10: 0xC2B00000,
                    11: 0x41A00000,
                }
            },
        },
    ),
    (
        "dropout_p05",
        {"type": "Dropout", "p": 0.5},
        (2, 3, 4),
        3,
        {"position": 3, "seed": -7, "step": 5, "first_sample": 2, "specials": {"x": {1: NAN}}},
    ),
    (
        "dropout_p0375",
        {"type": "Dropout", "p": 0.375},
        (7,),
        4,
        {"position": 1, "seed": 2**63 - 1, "step": 0, "first_sample": 0},
    ),
    ("batchnorm1d_c", {"type": "BatchNorm1d", "momentum": 0.1, "eps": 1e-5}, (3,), 4, {}),
    ("batchnorm1d_c_n1", {"type": "BatchNorm1d", "momentum": 0.1, "eps": 1e-5}, (3,), 1, {}),
    ("batchnorm1d_cl", {"type": "BatchNorm1d", "momentum": 0.3, "eps": 0.001}, (2, 5), 3, {}),
    ("batchnorm2d_chw", {"type": "BatchNorm2d", "momentum": 0.1, "eps": 1e-5}, (2, 3, 3), 2, {}),
    (
        "batchnorm2d_n1_specials",
        {"type": "BatchNorm2d", "momentum": 1.0, "eps": 1e-5},
        (2, 2, 3),
        1,
        {"specials": {"x": {0: INF}, "g": {7: NAN}}},
    ),
    ("layernorm_n", {"type": "LayerNorm", "eps": 1e-5}, (6,), 3, {}),
    ("layernorm_chw", {"type": "LayerNorm", "eps": 0.01}, (2, 3, 2), 2, {}),
    (
        "layernorm_cl_const",
        {"type": "LayerNorm", "eps": 1e-5},
        (2, 2),
        2,
        {"gen": {"kind": "int", "a": 0, "b": 0, "m": 5, "d": 2}},
    ),
    # Section 15.7 (appended: the cases above keep their case seeds).
    ("gelu_wide", {"type": "GELU"}, (2, 6), 4, {"gen": {"kind": "stream", "scale": 16}}),
    (
        "gelu_specials",
        {"type": "GELU"},
        (16,),
        2,
        {
            "specials": {
                "x": {
                    0: NAN,
                    1: NNAN,
                    2: NZERO,
                    3: PZERO,
                    4: INF,
                    5: NINF,
                    6: SUB,
                    7: NSUB,
                    8: BIG,
                    9: BIG | NZERO,
                    10: 0xC1500000,  # -13: Φ subnormal
                    11: 0xC1640000,  # -14.25: Φ rounds to +0, φ to 2^-148
                    12: 0x40B00000,  # 5.5: Φ rounds to 1
                    13: 0x7F812345,  # a signalling NaN: quieted, payload kept
                    16: NAN,
                    17: INF,
                },
                "g": {16: NNAN, 17: 0x7FC00005, 18: NAN},
            }
        },
    ),
    (
        "dense_nobias",
        {"type": "Dense", "units": 3, "bias": False},
        (5,),
        3,
        {"specials": {"x": {0: NZERO, 7: INF}, "W": {2: NZERO}}},
    ),
    (
        "layernorm_nobias",
        {"type": "LayerNorm", "eps": 1e-5, "bias": False},
        (2, 3),
        3,
        {"specials": {"g": {4: NAN}}},
    ),
]


#: 15.8's tensors' tags in the cases' streams.
SEQUENCE_TAGS = {"E": 2, "P": 2, "Wqkv": 2, "Wo": 3}

#: 15.8's per-layer cases (the fixture's ``sequence_layer_cases``; case seeds continue after
#: :data:`LAYER_CASES`'). ``extra`` as there, plus ``sequence`` (the input is a ``(T, D)``
#: sequence), ``token_ids`` (the input is token ids, ``gen`` of kind ``ids``) and ``vocab``
#: (TiedHead: the rows of the ``E`` it reads).
SEQUENCE_CASES: list[tuple[str, dict[str, Any], Shape, int, dict[str, Any]]] = [
    (
        "embedding_v7_d6_repeats_unused_rows",
        {"type": "Embedding", "vocab": 7, "width": 6},
        (5,),
        3,
        {
            "token_ids": True,
            "gen": {"kind": "ids", "a": 3, "b": 1, "m": 5},
            "specials": {"E": {6: 0x7FC01234, 8: NZERO, 40: INF}, "g": {0: NAN, 3: NZERO, 7: INF}},
        },
    ),
    (
        "embedding_v3_d2_one_row",
        {"type": "Embedding", "vocab": 3, "width": 2, "std": 0.5},
        (4,),
        2,
        {"token_ids": True, "gen": {"kind": "ids", "a": 0, "b": 2, "m": 3}},
    ),
    (
        "positional_c7_t5_d6_specials",
        {"type": "PositionalEmbedding", "context": 7, "width": 6},
        (5, 6),
        3,
        {
            "sequence": True,
            "specials": {
                "x": {0: 0x7FC01234, 1: INF, 2: NZERO, 4: SUB, 40: NNAN},
                "P": {1: NINF, 2: NZERO, 4: NSUB, 7: 0xFFC0ABCD, 33: NAN, 40: INF},
                "g": {5: NAN, 6: NZERO},
            },
        },
    ),
    (
        "positional_t_is_context",
        {"type": "PositionalEmbedding", "context": 4, "width": 3, "std": 0.02},
        (4, 3),
        2,
        {"sequence": True},
    ),
    (
        "attention_h2_t5_d6",
        {"type": "CausalSelfAttention", "heads": 2},
        (5, 6),
        2,
        {"sequence": True},
    ),
    (
        "attention_h3_t5_d6",
        {"type": "CausalSelfAttention", "heads": 3, "std": 0.02, "proj_std": 0.01},
        (5, 6),
        3,
        {"sequence": True},
    ),
    (
        "attention_h1_t1_d4",
        {"type": "CausalSelfAttention", "heads": 1},
        (1, 4),
        2,
        {"sequence": True},
    ),
    (
        "attention_h2_t6_d4_wide_scores",
        {"type": "CausalSelfAttention", "heads": 2},
        (6, 4),
        2,
        {"sequence": True, "gen": {"kind": "stream", "scale": 64}},
    ),
    (
        "attention_h2_t5_d6_specials",
        {"type": "CausalSelfAttention", "heads": 2},
        (5, 6),
        2,
        {
            "sequence": True,
            "specials": {
                # sample 0: its last token's x (a NaN no earlier query may see); sample 1:
                # an infinity at token 2, signed zeros and subnormals at token 0
                "x": {24: 0x7FC01234, 30: NZERO, 31: SUB, 32: NSUB, 43: INF},
                "Wo": {1: NZERO, 20: 0xFFC00077},
                "Wqkv": {100: NZERO, 101: SUB},
                "g": {5: NNAN, 50: INF, 51: NZERO},
            },
        },
    ),
    (
        "attention_h2_t4_d4_inf_weight",
        {"type": "CausalSelfAttention", "heads": 2},
        (4, 4),
        1,
        {"sequence": True, "specials": {"Wqkv": {17: INF}, "g": {0: PZERO, 1: NZERO}}},
    ),
    (
        "tied_head_v7_d6",
        {"type": "TiedHead"},
        (5, 6),
        2,
        {"sequence": True, "vocab": 7, "specials": {"E": {3: INF, 10: NZERO}, "g": {2: NAN}}},
    ),
    (
        "dense_per_token",
        {"type": "Dense", "units": 4},
        (5, 6),
        2,
        {"sequence": True, "specials": {"x": {7: NZERO}, "W": {5: SUB}}},
    ),
    (
        "dense_per_token_nobias_std",
        {"type": "Dense", "units": 3, "bias": False, "std": 0.02},
        (3, 5),
        3,
        {"sequence": True},
    ),
    (
        "layernorm_per_token",
        {"type": "LayerNorm", "eps": 1e-5},
        (5, 6),
        2,
        {"sequence": True, "specials": {"g": {4: NAN}}},
    ),
    (
        "layernorm_per_token_nobias",
        {"type": "LayerNorm", "eps": 1e-5, "bias": False},
        (4, 3),
        3,
        {"sequence": True},
    ),
    (
        "dropout_on_sequence",
        {"type": "Dropout", "p": 0.25},
        (5, 6),
        2,
        {"sequence": True, "position": 4, "seed": 11, "step": 2, "first_sample": 1},
    ),
    ("gelu_on_sequence", {"type": "GELU"}, (3, 4), 2, {"sequence": True}),
]


SEQUENCE_GEN_DOC = {
    "ids": "gen kind ids (token ids): cell i = f32((i * a + b) % m)",
    "tensor_tag": "as generation's, and E 2, P 2, Wqkv 2, Wo 3",
}
SEQUENCE_CASE_LAYOUT = (
    "as layer_case_layout, plus: sequence: true when the input is a (T, D) sequence "
    "(input_shape [T, D], x (n, T, D); Dense and LayerNorm then act per token, gamma/beta (D), "
    "and every chain over the block's terms runs over samples, then tokens); token_ids: true "
    "for the Embedding (input_shape [T], x the ids as binary32 values, output a (T, width) "
    "sequence, x_grad all +0: ids have no gradient); vocab: for TiedHead, the rows of the E "
    "it reads (tensors.E is (vocab, D)); block_grads.E is then TiedHead's own chain (the "
    "terms g[t, v] * x[t, d] over samples then tokens), not yet added to an Embedding's. "
    "Attention's tensors are Wqkv (3D x D) and Wo (D x D); PositionalEmbedding's P "
    "(context x width); an Embedding's E (vocab x width). A layer's std only sets its "
    "initialisation: the tensors here are the case's"
)
SEQUENCE_RUN_LAYOUT = (
    "as run_layout, with the data of sequence_run_data: X (N, T) token ids as binary32; "
    "labels: next (y (N, T): a label per token, the loss per token, divisions by f32(B*T) "
    "and f32(N*T)), class (y (N): per-sample labels after Flatten), targets (mse, (N, K)); "
    "final.predict_proba (N, T, K) for next, (N, K) otherwise; final.predict row-major "
    "(N*T classes for next, N for class, null for mse); eval_accuracy over tokens for next"
)


def layer_case(
    name: str,
    spec: dict[str, Any],
    in_shape: Shape,
    n: int,
    extra: dict[str, Any],
    math_name: str,
    case_seed: int,
) -> dict[str, Any]:
    """One per-layer case: inputs, parameters, g; forward (train, eval), input gradient,
    parameter block gradients, running statistics after the block."""
    position = extra.get("position", 1)
    layer = build_layer(spec, position)
    if extra.get("sequence"):  # 15.8: a (T, D) sequence from an Embedding of "vocab" rows
        vocab = extra.get("vocab", 1)
        in_shape = Seq(in_shape, Embedding(0, vocab, in_shape[-1]))
    out_shape = layer.infer(in_shape)
    gen = extra.get("gen", _STREAM)
    specials: dict[str, dict[int, int]] = extra.get("specials", {})

    def tensor(tname: str, tag: int, shape: Shape) -> F32Array:
        v = gen_cells(gen if tname in ("x",) else _STREAM, case_seed, tag, math.prod(shape))
        if tname == "var":
            v = from_u32(u32(v) & _MAG) + np.float32(0.5)
        return _with_specials(v, specials.get(tname, {})).reshape(shape)

    x = tensor("x", 0, (n, *in_shape))
    g = tensor("g", 1, (n, *out_shape))
    tags = {"W": 2, "gamma": 2, "b": 3, "beta": 3, "mean": 4, "var": 5}
    tags.update(SEQUENCE_TAGS)
    named = layer.params() + layer.running() + layer.reads()
    st: State = {nm: tensor(nm, tags[nm], s) for nm, s in named}
    before = {k: v.copy() for k, v in st.items()}
    m = gr.Math(math_name)
    ctx = Ctx(m, True, extra.get("seed", 0), extra.get("step", 0), extra.get("first_sample", 0))
    y, cache = layer.forward(st, x, ctx)
    gx, grads = layer.backward(st, cache, g, ctx)
    case: dict[str, Any] = {
        "name": f"{name}/{math_name}",
        "math": math_name,
        **{k: extra[k] for k in ("sequence", "token_ids", "vocab") if k in extra},
        "layer": layer.to_json(),
        "input_shape": list(in_shape),
        "output_shape": list(out_shape),
        "n": n,
        "gen": gen,
        "case_seed": case_seed,
        "specials": {k: {str(i): b for i, b in v.items()} for k, v in specials.items()},
        "x": bits32(x),
        "g": bits32(g),
        "tensors": {k: bits32(v) for k, v in before.items()},
        "train": {
            "y": bits32(y),
            "x_grad": bits32(gx),
            "block_grads": {k: bits32(v) for k, v in grads.items()},
        },
    }
    if isinstance(layer, Dropout):
        case["dropout"] = {
            "seed": ctx.seed,
            "step": ctx.step,
            "position": position,
            "first_sample": ctx.first_sample,
            "P": dropout_threshold(layer.p),
        }
    if layer.running():
        case["train"]["running_after"] = {k: bits32(st[k]) for k, _ in layer.running()}
    if isinstance(layer, (Dropout, BatchNorm)):
        ye, _ = layer.forward(dict(before), x, Ctx(m, False))
        case["eval"] = {"y": bits32(ye)}
    return case


# ---------------------------------------------------------------------------
# Golden fixture: runs
# ---------------------------------------------------------------------------


def _inp(*shape: int) -> dict[str, Any]:
    return {"type": "Input", "shape": list(shape)}


#: End-to-end runs: (name, N, config keys). Data: general_ref's DATA_FORMULA on the flat rows.
RUNS: list[tuple[str, int, dict[str, Any]]] = [
    (
        "conv1d_relu_maxpool_dense_adam",
        10,
        dict(
            layers=[
                _inp(1, 12),
                {
                    "type": "Conv1d",
                    "out_channels": 3,
                    "kernel_size": [3],
                    "stride": [1],
                    "padding": [1],
                },
                {"type": "ReLU"},
                {"type": "MaxPool1d", "kernel_size": [2], "stride": [2]},
                {"type": "Flatten"},
                {"type": "Dense", "units": 3},
            ],
            seed=3,
            lr=0.01,
            batch_size=4,
        ),
    ),
    (
        "conv1d_s2_seedmath_gradblock3_he",
        9,
        dict(
            layers=[
                _inp(2, 9),
                {
                    "type": "Conv1d",
                    "out_channels": 2,
                    "kernel_size": [3],
                    "stride": [2],
                    "padding": [1],
                },
                {"type": "ReLU"},
                {"type": "MaxPool1d", "kernel_size": [3], "stride": [1]},
                {"type": "Flatten"},
                {"type": "Dense", "units": 4},
            ],
            math="seed",
            init="he",
            seed=-2,
            lr=0.02,
            batch_size=4,
            grad_block=3,
            shuffle=False,
        ),
    ),
    (
        "conv2d_bn_relu_avgpool_dropout_sgd_gradblock2",
        11,
        dict(
            layers=[
                _inp(1, 6, 6),
                {
                    "type": "Conv2d",
                    "out_channels": 2,
                    "kernel_size": [3, 3],
                    "stride": [1, 1],
                    "padding": [1, 1],
                },
                {"type": "BatchNorm2d", "momentum": 0.1, "eps": 1e-5},
                {"type": "ReLU"},
                {"type": "AvgPool2d", "kernel_size": [2, 2], "stride": [2, 2]},
                {"type": "Flatten"},
                {"type": "Dropout", "p": 0.25},
                {"type": "Dense", "units": 3},
            ],
            seed=5,
            optimizer="sgd",
            lr=0.05,
            momentum=0.9,
            batch_size=5,
            grad_block=2,
        ),
    ),
    (
        "conv2d_bn_relu_avgpool_dropout_adamw_seedmath",
        11,
        dict(
            layers=[
                _inp(1, 6, 6),
                {
                    "type": "Conv2d",
                    "out_channels": 2,
                    "kernel_size": [3, 3],
                    "stride": [1, 1],
                    "padding": [1, 1],
                },
                {"type": "BatchNorm2d", "momentum": 0.1, "eps": 1e-5},
                {"type": "ReLU"},
                {"type": "AvgPool2d", "kernel_size": [2, 2], "stride": [2, 2]},
                {"type": "Flatten"},
                {"type": "Dropout", "p": 0.25},
                {"type": "Dense", "units": 3},
            ],
            math="seed",
            seed=5,
            optimizer="adamw",
            lr=0.01,
            batch_size=5,
        ),
    ),
    (
        "dense_bn1d_relu_short_batch",
        7,
        dict(
            layers=[
                _inp(4),
                {"type": "Dense", "units": 5},
                {"type": "BatchNorm1d", "momentum": 0.2, "eps": 1e-5},
                {"type": "ReLU"},
                {"type": "Dense", "units": 3},
            ],
            init="glorot",
            seed=9,
            lr=0.01,
            batch_size=3,
            shuffle=False,
        ),
    ),
    (
        "dense_layernorm_tanh_mse_adamw_clip",
        9,
        dict(
            layers=[
                _inp(5),
                {"type": "Dense", "units": 6},
                {"type": "LayerNorm", "eps": 1e-5},
                {"type": "Tanh"},
                {"type": "Dense", "units": 2},
            ],
            loss="mse",
            seed=1,
            optimizer="adamw",
            lr=0.02,
            clip_norm=0.5,
            batch_size=4,
            grad_block=2,
        ),
    ),
    (
        "dense_sigmoid_mse_sgd_step_seedmath",
        8,
        dict(
            layers=[
                _inp(5),
                {"type": "Dense", "units": 4},
                {"type": "Sigmoid"},
                {"type": "Dense", "units": 2},
            ],
            loss="mse",
            math="seed",
            seed=4,
            optimizer="sgd",
            lr=0.1,
            schedule="step",
            step_size=2,
            gamma=0.5,
            warmup_steps=1,
            batch_size=3,
        ),
    ),
    # Section 15.7: residual blocks, GELU, layers without biases.
    (
        "residual_mlp_gelu_nobias_adamw",
        10,
        dict(
            layers=[
                _inp(6),
                {"type": "Dense", "units": 8},
                {
                    "type": "Residual",
                    "layers": [
                        {"type": "LayerNorm", "eps": 1e-5, "bias": False},
                        {"type": "Dense", "units": 16, "bias": False},
                        {"type": "GELU"},
                        {"type": "Dense", "units": 8, "bias": False},
                    ],
                },
                {
                    "type": "Residual",
                    "layers": [
                        {"type": "LayerNorm", "eps": 1e-5},
                        {"type": "Dense", "units": 8},
                        {"type": "GELU"},
                    ],
                },
                {"type": "LayerNorm", "eps": 1e-5},
                {"type": "Dense", "units": 3},
            ],
            seed=12,
            optimizer="adamw",
            lr=0.01,
            batch_size=4,
        ),
    ),
    (
        "nested_residual_dropout_nobias_mse_sgd_seedmath_gradblock2",
        11,
        dict(
            layers=[
                _inp(8),
                {
                    "type": "Residual",
                    "layers": [
                        {"type": "LayerNorm", "eps": 1e-5, "bias": False},
                        {"type": "Dense", "units": 8},
                        {"type": "GELU"},
                        {"type": "Dropout", "p": 0.25},
                        {
                            "type": "Residual",
                            "layers": [
                                {"type": "LayerNorm", "eps": 0.001, "bias": False},
                                {"type": "Dense", "units": 8, "bias": False},
                                {"type": "Tanh"},
                                {"type": "Dropout", "p": 0.5},
                            ],
                        },
                    ],
                },
                {"type": "GELU"},
                {"type": "Dense", "units": 2, "bias": False},
            ],
            loss="mse",
            math="seed",
            seed=-5,
            optimizer="sgd",
            lr=0.05,
            momentum=0.9,
            batch_size=5,
            grad_block=2,
        ),
    ),
    (
        "conv1d_residual_gelu_he_clip",
        9,
        dict(
            layers=[
                _inp(2, 8),
                {
                    "type": "Residual",
                    "layers": [
                        {
                            "type": "Conv1d",
                            "out_channels": 2,
                            "kernel_size": [3],
                            "stride": [1],
                            "padding": [1],
                        },
                        {"type": "GELU"},
                    ],
                },
                {"type": "Flatten"},
                {"type": "Dense", "units": 3, "bias": False},
            ],
            init="he",
            seed=6,
            lr=0.02,
            clip_norm=0.5,
            batch_size=3,
        ),
    ),
]

RUN_STEPS = 6

#: Integer-list equivalence: these configurations run as general_ref's integer list, as the
#: same integer list here, and as the explicit layer list; the three must give the same hashes.
INTEGER_RUNS: list[tuple[str, int, dict[str, Any]]] = [
    ("int_4_6_3_he_adam", 10, dict(layers=[4, 6, 3], seed=7, lr=0.01, batch_size=3)),
    (
        "int_5_7_3_seedmath_sgd_gradblock2",
        9,
        dict(
            layers=[5, 7, 3],
            math="seed",
            seed=-1,
            optimizer="sgd",
            lr=0.05,
            momentum=0.5,
            batch_size=4,
            grad_block=2,
        ),
    ),
    (
        "int_4_6_3_seedinit_clip",
        10,
        dict(
            layers=[4, 6, 3],
            math="seed",
            init="seed",
            seed=1,
            lr=0.05,
            clip_norm=0.05,
            batch_size=3,
        ),
    ),
]


def run_record(tr: gr.Run, x: F32Array, y: gr.Targets, steps: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(steps):
        (loss,) = tr.train_steps(x, y, 1)
        out.append(
            {"step": tr.step_count, "loss_bits": gr.bits(loss), "state_hash": tr.state_hash_hex()}
        )
    return out


def run_case(name: str, n: int, keys: dict[str, Any]) -> dict[str, Any]:
    lc = LayerConfig.make(**keys)
    net = lc.net
    x, y = gr.case_data(n, math.prod(net.input_shape), net.output_size, lc.cfg.loss)
    tr = LayerTrainer(lc)
    entry: dict[str, Any] = {
        "name": name,
        "config": lc.config_json(),
        "hyper_bits": lc.cfg.hyper_bits(),
        "n": n,
        "tensor_names": tr.tensor_names(),
        "init_hash": tr.state_hash_hex(),
        "steps": run_record(tr, x, y, RUN_STEPS),
    }
    proba = tr.predict_proba(x)
    ev_loss, acc = tr.evaluate(x, y)
    entry["final"] = {
        "scalars": tr.scalars(),
        "tensors": {k: bits32(v) for k, v in tr.state_dict().items()},
        "predict_proba": bits32(proba),
        "predict": [int(v) for v in tr.predict(x)] if lc.cfg.loss == "cross_entropy" else None,
        "eval_loss_bits": gr.bits(ev_loss),
        "eval_accuracy": acc,
    }
    return entry


def integer_case(name: str, n: int, keys: dict[str, Any]) -> dict[str, Any]:
    """An integer list through general_ref and through this reference (as the integer list
    and, unless ``init="seed"``, as the explicit layer list): the hashes must agree."""
    cfg = gr.Config.make(**keys)
    x, y = gr.case_data(n, cfg.layers[0], cfg.layers[-1], cfg.loss)
    ref = run_record(gr.Trainer(cfg), x, y, RUN_STEPS)
    here = run_record(LayerTrainer(**keys), x, y, RUN_STEPS)
    if here != ref:
        raise AssertionError(f"{name}: the integer list differs from general_ref")
    if cfg.init != "seed":
        explicit = dict(keys, layers=integer_list_layers(list(cfg.layers)), init=cfg.init)
        if run_record(LayerTrainer(**explicit), x, y, RUN_STEPS) != ref:
            raise AssertionError(f"{name}: the explicit layer list differs from general_ref")
    return {
        "name": name,
        "n": n,
        "config": gr._config_json(gr.resolve_config(**keys)),
        "steps": ref,
    }


def gpt(
    vocab: int, context: int = 64, layers: int = 4, heads: int = 4, width: int = 128
) -> list[dict[str, Any]]:
    """15.8's ``gpt`` (nanoGPT's character model) as its JSON layer list; ``s = 0.02 /
    sqrt(2 * layers)`` in binary64 (binary32 rounding happens when the layers read it)."""
    s = 0.02 / math.sqrt(2 * layers)
    ln = {"type": "LayerNorm", "eps": 1e-05, "bias": False}
    out: list[dict[str, Any]] = [
        _inp(context),
        {"type": "Embedding", "vocab": vocab, "width": width, "std": 0.02},
        {"type": "PositionalEmbedding", "context": context, "width": width, "std": 0.02},
    ]
    for _ in range(layers):
        attention = {"type": "CausalSelfAttention", "heads": heads, "std": 0.02, "proj_std": s}
        mlp = [
            dict(ln),
            {"type": "Dense", "units": 4 * width, "bias": False, "std": 0.02},
            {"type": "GELU"},
            {"type": "Dense", "units": width, "bias": False, "std": s},
        ]
        out.append({"type": "Residual", "layers": [dict(ln), attention]})
        out.append({"type": "Residual", "layers": mlp})
    return [*out, dict(ln), {"type": "TiedHead"}]


#: 15.8's runs' data, as integer formulas (``V`` the vocabulary, ``T`` the input's length).
SEQUENCE_DATA = {
    "tokens": "tok[i] = (5*i + (i*i) % 3) % V",
    "x": "x[s][t] = f32(tok[3*s + t]) (token ids), shape (N, T)",
    "next_tokens": 'labels "next": y[s][t] = tok[3*s + t + 1], shape (N, T)',
    "classes": 'labels "class": y[s] = (s*5) % K (one label per sample)',
    "targets": 'labels "targets": t[s][o] = f32(((s*3 + o*5) % 7) - 3) / f32(8) (mse)',
}


def sequence_data(n: int, t_n: int, vocab: int, labels: str, k: int) -> tuple[Any, Any]:
    """:data:`SEQUENCE_DATA`."""
    tok = [(5 * i + (i * i) % 3) % vocab for i in range(3 * n + t_n + 1)]
    x = np.array([[tok[3 * s + t] for t in range(t_n)] for s in range(n)], dtype=np.float32)
    if labels == "next":
        return x, np.array([[tok[3 * s + t + 1] for t in range(t_n)] for s in range(n)])
    return x, gr.case_data(n, 1, k, "cross_entropy" if labels == "class" else "mse")[1]


#: 15.8's runs: (name, N, labels, steps, config keys).
SEQUENCE_RUNS: list[tuple[str, int, str, int, dict[str, Any]]] = [
    (
        "gpt_v11_c8_l2_h2_w16_adamw_clip",
        10,
        "next",
        3,
        dict(
            layers=gpt(11, context=8, layers=2, heads=2, width=16),
            seed=21,
            optimizer="adamw",
            lr=0.01,
            weight_decay=0.1,
            beta1=0.9,
            beta2=0.99,
            clip_norm=1.0,
            batch_size=4,
        ),
    ),
    (
        "gpt_v7_c6_l1_h3_w6_seedmath_gradblock2_short_batch",
        7,
        "next",
        3,
        dict(
            layers=gpt(7, context=6, layers=1, heads=3, width=6),
            math="seed",
            seed=-3,
            lr=0.02,
            batch_size=3,
            grad_block=2,
            shuffle=False,
        ),
    ),
    (
        "sequence_classifier_torch_init_dropout",
        9,
        "class",
        4,
        dict(
            layers=[
                _inp(6),
                {"type": "Embedding", "vocab": 9, "width": 6},
                {"type": "Dense", "units": 6},
                {"type": "PositionalEmbedding", "context": 8, "width": 6},
                {"type": "LayerNorm", "eps": 1e-5},
                {"type": "Residual", "layers": [{"type": "CausalSelfAttention", "heads": 3}]},
                {"type": "Dropout", "p": 0.25},
                {"type": "GELU"},
                {"type": "Flatten"},
                {"type": "Dense", "units": 3},
            ],
            seed=8,
            lr=0.01,
            batch_size=4,
        ),
    ),
    (
        "sequence_regressor_glorot_sgd_seedmath_gradblock2",
        8,
        "targets",
        4,
        dict(
            layers=[
                _inp(5),
                {"type": "Embedding", "vocab": 6, "width": 4, "std": 0.5},
                {"type": "PositionalEmbedding", "context": 5, "width": 4},
                {"type": "CausalSelfAttention", "heads": 2},
                {"type": "Dense", "units": 4, "bias": False},
                {"type": "LayerNorm", "eps": 1e-5},
                {"type": "Dropout", "p": 0.5},
                {"type": "Flatten"},
                {"type": "Dense", "units": 2},
            ],
            loss="mse",
            math="seed",
            init="glorot",
            seed=4,
            optimizer="sgd",
            lr=0.01,
            momentum=0.9,
            batch_size=3,
            grad_block=2,
        ),
    ),
]


def sequence_run_case(
    name: str, n: int, labels: str, steps: int, keys: dict[str, Any]
) -> dict[str, Any]:
    lc = LayerConfig.make(**keys)
    net = lc.net
    assert net.embedding is not None
    x, y = sequence_data(n, net.input_shape[0], net.embedding.vocab, labels, net.output_size)
    tr = LayerTrainer(lc)
    entry: dict[str, Any] = {
        "name": name,
        "config": lc.config_json(),
        "hyper_bits": lc.cfg.hyper_bits(),
        "n": n,
        "labels": labels,
        "tensor_names": tr.tensor_names(),
        "init_hash": tr.state_hash_hex(),
        "steps": run_record(tr, x, y, steps),
    }
    ev_loss, acc = tr.evaluate(x, y)
    entry["final"] = {
        "scalars": tr.scalars(),
        "tensors": {k: bits32(v) for k, v in tr.state_dict().items()},
        "predict_proba": bits32(tr.predict_proba(x)),
        "predict": (
            [int(v) for v in np.asarray(tr.predict(x)).reshape(-1)]
            if lc.cfg.loss == "cross_entropy"
            else None
        ),
        "eval_loss_bits": gr.bits(ev_loss),
        "eval_accuracy": acc,
    }
    return entry


def golden() -> dict[str, Any]:
    cases = [
        layer_case(name, spec, shape, n, extra, mname, 100 + i)
        for i, (name, spec, shape, n, extra) in enumerate(LAYER_CASES)
        for mname in ("seed", "ieee")
    ]
    first = 100 + len(LAYER_CASES)
    sequence_cases = [
        layer_case(name, spec, shape, n, extra, mname, first + i)
        for i, (name, spec, shape, n, extra) in enumerate(SEQUENCE_CASES)
        for mname in ("seed", "ieee")
    ]
    return {
        "generator": GENERATOR,
        "spec": "docs/TRAINING.md section 15",
        "bits": "every float is its binary32 bit pattern as an integer; tensors row-major",
        "nan": "a NaN result is section 14's: the first NaN operand quieted, else 0xFFC00000; "
        "the operand order is the text's (e.g. W[o, j] * col_t[j], acc + term, g * gamma_c)",
        "generation": GEN_DOC,
        "layer_case_layout": "x (n, *input_shape), g (n, *output_shape); tensors: the layer's "
        "parameters and running statistics before the block (names without the layer's number); "
        "train: training-mode forward y, input gradient x_grad, block_grads (one chain over the "
        "block's terms from the first), running_after (BatchNorm); eval: evaluation-mode y "
        "(Dropout, BatchNorm); dropout: the mask's seed, step, list position, batch position of "
        "the block's first sample and P",
        "run_data": gr.DATA_FORMULA,
        "run_layout": "X flat (N, prod(input shape)); steps[k]: after step k+1 (train_steps one at "
        "a time, section 3's order); final: after the steps, state tensors by name in state "
        "order, predict_proba (p, or z for mse) and predict on X, evaluate(X, y)",
        "layer_cases": cases,
        "runs": [run_case(name, n, keys) for name, n, keys in RUNS],
        "integer_runs": [integer_case(name, n, keys) for name, n, keys in INTEGER_RUNS],
        # Section 15.8 (new keys: every entry above is as it was).
        "sequence_generation": SEQUENCE_GEN_DOC,
        "sequence_layer_case_layout": SEQUENCE_CASE_LAYOUT,
        "sequence_layer_cases": sequence_cases,
        "sequence_run_data": SEQUENCE_DATA,
        "sequence_run_layout": SEQUENCE_RUN_LAYOUT,
        "sequence_runs": [sequence_run_case(*run) for run in SEQUENCE_RUNS],
    }


def dump_golden(g: dict[str, Any]) -> str:
    return json.dumps(g, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--write``: (re)write the fixture; default / ``--check``: compare with it."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write tests/golden/layers.json")
    mode.add_argument("--check", action="store_true", help="compare (the default)")
    ap.add_argument("--path", type=Path, default=GOLDEN_PATH)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    g = golden()
    print(f"computed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return seed_ref.write_or_check(args.path, g, dump_golden(g), args.write)


if __name__ == "__main__":
    sys.exit(main())
