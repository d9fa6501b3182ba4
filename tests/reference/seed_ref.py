"""Independent plain-numpy float32 reference of the seed program.

Mirrors ``nx_f32_train_ckpt_gate.nx`` (``/work/shared/seed/000_017f1b12076ef4be.txt``)
bit for bit, under the import semantics fixed in ``SEED_NOTES.md``:

* ``f32_add/sub/mul/div`` are IEEE binary32, round to nearest even, subnormals kept.
  Here every such operation is one numpy float32 operation (a float32 scalar op or an
  element-wise float32 array op, both rounded once, never fused, never widened).
* ``f32_of(k)`` is int -> binary32; ``f32_int`` truncates toward zero;
  ``f32_neg`` flips the sign bit.

Vectorisation is only across independent elements (hidden units, outputs,
parameters); every element sees exactly the seed's sequence of operations, and every
sequential accumulation of the seed stays a sequential loop here.

This module must not import nxrs: it is the independent check of it.

Run ``python tests/reference/seed_ref.py --write`` to regenerate
``tests/golden/seed.json``; without arguments (or with ``--check``) it recomputes the
fixture and exits 1 if the file differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32Array = npt.NDArray[np.float32]

# ---- seed constants (``const NIN`` ...) ----
NIN = 6
NH = 10
NOUT = 4
NSAMP = 8

#: Buffer order of the seed's checkpoint (``sizes[]`` / ``mk_state`` handle slots).
BUFFER_NAMES: tuple[str, ...] = (
    "W1",
    "b1",
    "W2",
    "b2",
    "mW1",
    "vW1",
    "mb1",
    "vb1",
    "mW2",
    "vW2",
    "mb2",
    "vb2",
)
BUFFER_SIZES: dict[str, int] = {
    "W1": NH * NIN,
    "b1": NH,
    "W2": NOUT * NH,
    "b2": NOUT,
    "mW1": NH * NIN,
    "vW1": NH * NIN,
    "mb1": NH,
    "vb1": NH,
    "mW2": NOUT * NH,
    "vW2": NOUT * NH,
    "mb2": NOUT,
    "vb2": NOUT,
}

NXCK_MAGIC = 0x4B43584E  # 'NXCK' little-endian
V1_HEADER = struct.Struct("<III")
GOLDEN_PATH = Path(__file__).resolve().parents[1] / "golden" / "seed.json"
GENERATOR = "tests/reference/seed_ref.py"

_SIGN = np.uint32(0x80000000)
_MAG = np.uint32(0x7FFFFFFF)


# ---------------------------------------------------------------------------
# Primitives: the seed's imports and its own f32_le / f32_sqrt / f32_exp / f32_log
# ---------------------------------------------------------------------------


def f32_of(k: int) -> np.float32:
    """Seed import ``f32_of``: integer -> binary32.

    Exact for |k| <= 2**24, which covers every use in the seed.
    """
    return np.float32(float(k))


def f32_int(x: np.float32) -> int:
    """Seed import ``f32_int``: binary32 -> integer, truncating toward zero.

    Not reached by the seed's data, so a decision of this reference: NaN, infinities
    and |x| >= 2**63 give -2**63 (x86 ``cvttss2si`` into a 64-bit register).
    """
    xf = float(x)
    if not np.isfinite(xf) or abs(xf) >= 2.0**63:
        return -(2**63)
    return int(xf)  # int() of a float truncates toward zero


def f32_bits(x: np.float32) -> int:
    """The binary32 bit pattern of ``x`` as a Python int in [0, 2**32)."""
    return int(np.float32(x).view(np.uint32))


def f32_from_bits(b: int) -> np.float32:
    """The binary32 whose bit pattern is the low 32 bits of ``b``."""
    return np.uint32(b & 0xFFFFFFFF).view(np.float32)


def f32_neg(x: np.float32) -> np.float32:
    """Seed import ``f32_neg``: flip the sign bit (also of zeros and NaNs)."""
    return f32_from_bits(f32_bits(x) ^ 0x80000000)


def _le_bits(d: npt.NDArray[np.uint32]) -> npt.NDArray[np.bool_]:
    """The test of seed ``f32_le`` on the bits of the difference ``d``."""
    return ((d & _SIGN) != 0) | ((d & _MAG) == 0)


def seed_le(x: np.float32, y: np.float32) -> bool:
    """Seed ``f32_le``: 1 iff ``f32_sub(x, y)`` has its sign bit set or is +-0.

    Not IEEE ``<=``: it is the sign of the rounded difference (so e.g. a NaN with the
    sign bit set answers True).
    """
    d = np.float32(x) - np.float32(y)
    b = f32_bits(d)
    return (b >> 31) & 1 == 1 or (b & 0x7FFFFFFF) == 0


def seed_le_array(x: F32Array, y: F32Array | np.float32) -> npt.NDArray[np.bool_]:
    """Element-wise seed ``f32_le``."""
    return _le_bits((x - y).view(np.uint32))


# Constants exactly as the seed builds them (f32_div of f32_of integers).
_ZERO = f32_of(0)
_ONE = f32_of(1)
_TWO = f32_of(2)
_HALF = f32_of(1) / f32_of(2)
_LOG2E = f32_of(1442695) / f32_of(1000000)
_LN2 = f32_of(693147) / f32_of(1000000)
_EXP_K = [f32_of(k) for k in range(1, 9)]  # f32_of(k), k = 1..8
_LOG_K = [f32_of(2 * k + 1) for k in range(1, 8)]  # f32_of(2k+1), k = 1..7


def seed_sqrt_array(x: F32Array) -> F32Array:
    """Element-wise seed ``f32_sqrt``.

    ``x == +-0`` gives +0; otherwise ``y = x`` then 16 Newton steps
    ``y = (y + x/y) / 2``. Zeros are masked out (y = 1 there) so no 0/0 is ever
    evaluated; their lanes are replaced by +0 at the end.
    """
    x = np.asarray(x, dtype=np.float32)
    zero = (x.view(np.uint32) & _MAG) == 0
    xs = np.where(zero, _ONE, x)
    y = xs
    with np.errstate(all="ignore"):
        for _ in range(16):
            y = (y + xs / y) / _TWO
    return np.where(zero, _ZERO, y).astype(np.float32, copy=False)


def seed_sqrt(x: np.float32) -> np.float32:
    """Seed ``f32_sqrt`` on one value (see :func:`seed_sqrt_array`)."""
    x = np.float32(x)
    if f32_bits(x) & 0x7FFFFFFF == 0:
        return f32_of(0)
    y = x
    with np.errstate(all="ignore"):
        for _ in range(16):
            y = (y + x / y) / _TWO
    return np.float32(y)


def seed_exp(x: np.float32) -> np.float32:
    """Seed ``f32_exp``.

    ``t = x*log2e``; ``n = f32_int(t + 1/2)`` if ``f32_le(0, t)`` else
    ``f32_int(t - 1/2)``; ``arg = (t - f32_of(n)) * ln2``; 8 Taylor terms
    ``term = (term*arg)/f32_of(k)`` summed into ``p2f`` (starting at 1);
    ``ef = n + 127``: ``ef <= 0`` gives 0, ``ef >= 255`` is clamped to 254; the result
    is ``p2f * bits((ef & 0xFF) << 23)``.
    """
    x = np.float32(x)
    with np.errstate(all="ignore"):
        t = x * _LOG2E
        n = f32_int(t + _HALF) if seed_le(_ZERO, t) else f32_int(t - _HALF)
        arg = (t - f32_of(n)) * _LN2
        p2f = _ONE
        term = _ONE
        for fk in _EXP_K:
            term = (term * arg) / fk
            p2f = p2f + term
        ef = n + 127
        if ef <= 0:
            return f32_of(0)
        if ef >= 255:
            ef = 254
        return np.float32(p2f * f32_from_bits((ef & 0xFF) << 23))


def seed_exp_array(x: F32Array) -> F32Array:
    """Element-wise seed ``f32_exp`` (same operations as :func:`seed_exp`)."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        t = x * _LOG2E
        r = np.where(seed_le_array(np.zeros_like(t), t), t + _HALF, t - _HALF)
        ok = np.isfinite(r) & (np.abs(r) < np.float32(2.0**63))
        n = np.where(ok, np.trunc(np.where(ok, r, _ZERO)), np.float32(-(2.0**63)))
        n64 = np.where(ok, n.astype(np.int64), np.int64(-(2**63)))
        # f32_of(n): n is an integer-valued float32 (or |n| >= 2**24 where n == t).
        fn = n64.astype(np.float64).astype(np.float32)
        arg = (t - fn) * _LN2
        p2f = np.full_like(t, _ONE)
        term = np.full_like(t, _ONE)
        for fk in _EXP_K:
            term = (term * arg) / fk
            p2f = p2f + term
        under = n64 <= -127  # ef = n + 127 <= 0
        ef = np.clip(np.where(under, 0, n64 + 127), 0, 254)
        pow2 = ((ef & 0xFF).astype(np.uint32) << np.uint32(23)).view(np.float32)
        out = p2f * pow2
    return np.where(under, _ZERO, out).astype(np.float32, copy=False)


def seed_log(x: np.float32) -> np.float32:
    """Seed ``f32_log``: exponent split plus 7-term atanh series.

    ``e = ((bits >> 23) & 0xFF) - 127``; ``m`` = the mantissa with exponent 127;
    ``u = (m-1)/(m+1)``; ``s = u + sum_k u^(2k+1)/(2k+1)`` (k = 1..7, with
    ``t = t*u2``); result ``f32_of(e)*ln2 + 2*s``. The sign bit is ignored.
    """
    b = f32_bits(np.float32(x))
    e = ((b >> 23) & 0xFF) - 127
    m = f32_from_bits((b & 0x7FFFFF) | 0x3F800000)
    with np.errstate(all="ignore"):
        u = (m - _ONE) / (m + _ONE)
        u2 = u * u
        t = u
        s = u
        for fk in _LOG_K:
            t = t * u2
            s = s + t / fk
        return np.float32(f32_of(e) * _LN2 + _TWO * s)


# ---------------------------------------------------------------------------
# Data and state
# ---------------------------------------------------------------------------


def dataset() -> tuple[F32Array, npt.NDArray[np.int64]]:
    """The fixed dataset built in seed ``main``.

    ``X[s, i] = f32_of(((s*NIN + i)*3) % 7 - 3) / f32_of(4)``, ``Y[s] = (s*3) % NOUT``.
    """
    X = np.zeros((NSAMP, NIN), dtype=np.float32)
    Y = np.zeros(NSAMP, dtype=np.int64)
    for s in range(NSAMP):
        for i in range(NIN):
            X[s, i] = f32_of(((s * NIN + i) * 3) % 7 - 3) / f32_of(4)
        Y[s] = (s * 3) % NOUT
    return X, Y


@dataclass
class State:
    """Full training state: the seed's 12 buffers, its 3 scalars and nxrs's 2 counters.

    Buffers are flat float32 arrays (``W1[j*NIN + i]``, ``W2[o*NH + j]``), as in the
    seed. ``epoch``, ``b1t``, ``b2t`` are the seed's ``scal[0..2]``. ``step`` (optimiser steps
    in total: one per sample in the seed) and ``batch`` (batches of the current epoch done:
    always 0 here, the seed runs whole epochs) complete the state of ``docs/TRAINING.md``
    section 11; the seed has neither, and its v1 file stores neither.
    """

    W1: F32Array
    b1: F32Array
    W2: F32Array
    b2: F32Array
    mW1: F32Array
    vW1: F32Array
    mb1: F32Array
    vb1: F32Array
    mW2: F32Array
    vW2: F32Array
    mb2: F32Array
    vb2: F32Array
    epoch: int
    b1t: np.float32
    b2t: np.float32
    step: int = 0
    batch: int = 0

    def buffers(self) -> list[F32Array]:
        """The 12 buffers in :data:`BUFFER_NAMES` order."""
        return [getattr(self, n) for n in BUFFER_NAMES]

    def copy(self) -> State:
        """A deep copy."""
        kw: dict[str, Any] = {n: getattr(self, n).copy() for n in BUFFER_NAMES}
        return State(
            **kw,
            epoch=self.epoch,
            b1t=np.float32(self.b1t),
            b2t=np.float32(self.b2t),
            step=self.step,
            batch=self.batch,
        )


def mk_state(seed: int) -> State:
    """Seed ``mk_state`` plus the scalars main sets (epoch 0, b1t = b2t = f32_of(1)), and
    nxrs's counters ``step = batch = 0``.

    ``W1[i] = f32_of((i*7 + seed) % 13 - 6) / f32_of(50)``,
    ``W2[i] = f32_of((i*5 + seed) % 11 - 5) / f32_of(50)``; biases and moments +0.
    (``%`` is taken on non-negative operands here; the seed only uses seeds >= 0.)
    """
    if seed < 0:
        raise ValueError("seed must be >= 0 (the seed's % on negatives is unspecified)")
    W1 = np.array(
        [f32_of((i * 7 + seed) % 13 - 6) / f32_of(50) for i in range(NH * NIN)],
        dtype=np.float32,
    )
    W2 = np.array(
        [f32_of((i * 5 + seed) % 11 - 5) / f32_of(50) for i in range(NOUT * NH)],
        dtype=np.float32,
    )
    z = {n: np.zeros(BUFFER_SIZES[n], dtype=np.float32) for n in BUFFER_NAMES}
    z["W1"] = W1
    z["W2"] = W2
    return State(**z, epoch=0, b1t=f32_of(1), b2t=f32_of(1), step=0, batch=0)


# ---------------------------------------------------------------------------
# Training: fwd, bwd, adam1, train_run
# ---------------------------------------------------------------------------

# Adam constants exactly as train_run builds them.
_B1C = f32_of(9) / f32_of(10)
_B2C = f32_of(999) / f32_of(1000)
_LR = f32_of(1) / f32_of(100)
_AEPS = f32_of(1) / f32_of(100000000)
_ONE_M_B1 = _ONE - _B1C  # f32_sub(one, b1) inside adam1 (same value every time)
_ONE_M_B2 = _ONE - _B2C

# Offsets of W1, b1, W2, b2 in the packed parameter vector used for Adam.
_P_SPLIT = (NH * NIN, NH * NIN + NH, NH * NIN + NH + NOUT * NH)
_NPARAM = NH * NIN + NH + NOUT * NH + NOUT


def _fwd(
    W1: F32Array, b1: F32Array, W2: F32Array, b2: F32Array, x: F32Array
) -> tuple[F32Array, F32Array, F32Array]:
    """Seed ``fwd`` up to the probabilities: returns (hpre, h, p).

    Hidden unit j: ``a = b1[j]; a = a + W1[j*NIN+i]*x[i]`` for i in order (vectorised
    over j). ReLU by ``f32_le(a, 0)``. Logit o: ``a = b2[o] + W2[o*NH+j]*h[j]`` over j
    in order (vectorised over o). Max by ``f32_le`` scan; ``sm`` summed in order;
    ``p[o] = e[o] / sm``.
    """
    W1m = W1.reshape(NH, NIN)
    a = b1.copy()
    for i in range(NIN):
        a = a + W1m[:, i] * x[i]
    hpre = a
    h = np.where(seed_le_array(hpre, _ZERO), _ZERO, hpre)
    W2m = W2.reshape(NOUT, NH)
    lg = b2.copy()
    for j in range(NH):
        lg = lg + W2m[:, j] * h[j]
    mx = lg[0]
    for o in range(1, NOUT):
        if seed_le(mx, lg[o]):
            mx = lg[o]
    e = seed_exp_array(lg - mx)
    sm = _ZERO
    for o in range(NOUT):
        sm = sm + e[o]
    p = e / sm
    return hpre, h, p


def forward(state: State, x: F32Array, y: int) -> tuple[F32Array, np.float32]:
    """Seed ``fwd`` on one sample: (probabilities, loss = f32_neg(f32_log(p[y])))."""
    _, _, p = _fwd(state.W1, state.b1, state.W2, state.b2, np.asarray(x, np.float32))
    return p, f32_neg(seed_log(p[int(y)]))


def _bwd(
    W2: F32Array, tgt: int, x: F32Array, hpre: F32Array, h: F32Array, p: F32Array
) -> tuple[F32Array, F32Array, F32Array, F32Array]:
    """Seed ``bwd``: returns (dW1, db1, dW2, db2).

    ``dl = p`` with ``dl[tgt] = p[tgt] - 1``; ``dh`` starts at +0 and gets
    ``W2[o*NH+j]*dl[o]`` added for o in order (vectorised over j);
    ``dW2[o*NH+j] = dl[o]*h[j]``; ``dhp = 0 if f32_le(hpre[j], 0) else dh[j]``;
    ``db1 = dhp``; ``dW1[j*NIN+i] = dhp*x[i]``.
    """
    dl = p.copy()
    dl[tgt] = p[tgt] - _ONE
    W2m = W2.reshape(NOUT, NH)
    dh = np.zeros(NH, dtype=np.float32)
    dW2 = np.empty((NOUT, NH), dtype=np.float32)
    for o in range(NOUT):
        dW2[o] = dl[o] * h
        dh = dh + W2m[o] * dl[o]
    dhp = np.where(seed_le_array(hpre, _ZERO), _ZERO, dh)
    dW1 = dhp[:, None] * x[None, :]
    return dW1.reshape(-1), dhp, dW2.reshape(-1), dl


def _adam(
    P: F32Array,
    G: F32Array,
    M: F32Array,
    V: F32Array,
    bc1: np.float32,
    bc2: np.float32,
) -> tuple[F32Array, F32Array, F32Array]:
    """Seed ``adam1`` element-wise; returns new (P, M, V).

    ``M = b1*M + (1-b1)*g``; ``V = b2*V + (1-b2)*(g*g)``; ``mh = M/bc1``;
    ``vh = V/bc2``; ``P = P - (lr*mh) / (f32_sqrt(vh) + eps)``. Each cell depends only
    on its own cell and the shared scalars, so the four adam1 calls of one step can run
    as one vector over the packed (W1, b1, W2, b2).
    """
    M = _B1C * M + _ONE_M_B1 * G
    V = _B2C * V + _ONE_M_B2 * (G * G)
    mh = M / bc1
    vh = V / bc2
    P = P - (_LR * mh) / (seed_sqrt_array(vh) + _AEPS)
    return P, M, V


class _Packed:
    """Parameters and Adam moments packed as W1|b1|W2|b2 vectors (for speed)."""

    def __init__(self, st: State) -> None:
        self.P = np.concatenate([st.W1, st.b1, st.W2, st.b2])
        self.M = np.concatenate([st.mW1, st.mb1, st.mW2, st.mb2])
        self.V = np.concatenate([st.vW1, st.vb1, st.vW2, st.vb2])
        self.b1t = np.float32(st.b1t)
        self.b2t = np.float32(st.b2t)
        for a in (self.P, self.M, self.V):
            assert a.dtype == np.float32 and a.shape == (_NPARAM,)

    def step(self, x: F32Array, y: int) -> None:
        """One iteration of train_run's inner loop."""
        W1, b1, W2, b2 = np.split(self.P, _P_SPLIT)
        hpre, h, p = _fwd(W1, b1, W2, b2, x)
        dW1, db1, dW2, db2 = _bwd(W2, y, x, hpre, h, p)
        self.b1t = self.b1t * _B1C
        self.b2t = self.b2t * _B2C
        bc1 = _ONE - self.b1t
        bc2 = _ONE - self.b2t
        G = np.concatenate([dW1, db1, dW2, db2])
        self.P, self.M, self.V = _adam(self.P, G, self.M, self.V, bc1, bc2)

    def store(self, st: State) -> None:
        """Write back into ``st`` (buffers and b1t/b2t; not epoch)."""
        st.W1, st.b1, st.W2, st.b2 = (a.copy() for a in np.split(self.P, _P_SPLIT))
        st.mW1, st.mb1, st.mW2, st.mb2 = (a.copy() for a in np.split(self.M, _P_SPLIT))
        st.vW1, st.vb1, st.vW2, st.vb2 = (a.copy() for a in np.split(self.V, _P_SPLIT))
        st.b1t = np.float32(self.b1t)
        st.b2t = np.float32(self.b2t)


def train_step(state: State, x: F32Array, y: int) -> None:
    """One per-sample step, the body of seed ``train_run``'s inner loop (in place).

    fwd, bwd, ``b1t *= b1``, ``b2t *= b2``, ``bc1 = 1 - b1t``, ``bc2 = 1 - b2t``, then
    adam1 on W1, b1, W2, b2. ``state.step`` counts it; ``state.epoch`` and ``state.batch``
    are not touched (a step on an explicit sample, as nxrs's ``Trainer.step``).
    """
    pk = _Packed(state)
    with np.errstate(all="ignore"):
        pk.step(np.asarray(x, dtype=np.float32), int(y))
    pk.store(state)
    state.step += 1


def train_run(state: State, X: F32Array, Y: npt.NDArray[np.int64], target_epoch: int) -> None:
    """Seed ``train_run`` (in place): while epoch < target, one pass over the NSAMP
    samples in order, then epoch += 1. Does nothing if epoch >= target. Each sample is one
    optimiser step (``step += 1``); ``batch`` is 0 again at every epoch's end.
    """
    X = np.asarray(X, dtype=np.float32)
    ys = [int(v) for v in Y]
    pk = _Packed(state)
    ep = state.epoch
    steps = state.step
    with np.errstate(all="ignore"):
        while ep < target_epoch:
            for s in range(NSAMP):
                pk.step(X[s], ys[s])
                steps += 1
            ep += 1
    pk.store(state)
    state.epoch = ep
    state.step = steps
    state.batch = 0


# ---------------------------------------------------------------------------
# Hashes and checkpoint bytes
# ---------------------------------------------------------------------------


def _bits_list(a: F32Array) -> list[int]:
    return [int(v) for v in np.asarray(a, dtype=np.float32).view(np.uint32)]


def seed_hash(state: State) -> int:
    """Seed ``hstate``: start 1469598103; ``acc = ((acc ^ v) * 16777619) mod 2**56``
    over the bit patterns of W1 (60 cells), b1 (10), W2 (**60**: its 40 cells then
    the 20 zero cells past its end that the seed reads) and b2 (4).
    """
    mask = (1 << 56) - 1
    cells = (
        _bits_list(state.W1)
        + _bits_list(state.b1)
        + _bits_list(state.W2)
        + [0] * (NH * NIN - NOUT * NH)
        + _bits_list(state.b2)
    )
    acc = 1469598103
    for v in cells:
        acc = ((acc ^ v) * 16777619) & mask
    return acc


def scalars(state: State) -> list[int]:
    """The state's scalars in hash order: epoch, b1t bits, b2t bits, step, batch."""
    return [
        int(state.epoch),
        f32_bits(state.b1t),
        f32_bits(state.b2t),
        int(state.step),
        int(state.batch),
    ]


def state_hash_bytes(state: State) -> bytes:
    """The byte string hashed by :func:`state_hash` (``docs/TRAINING.md`` section 11): the
    buffer count, each buffer's cell count and cells, the scalar count (5) and the scalars
    ``epoch, b1t bits, b2t bits, step, batch`` as i64, all little-endian."""
    out = bytearray(struct.pack("<I", len(BUFFER_NAMES)))
    for name in BUFFER_NAMES:
        a = np.asarray(getattr(state, name), dtype=np.float32)
        out += struct.pack("<I", a.size)
        out += a.astype("<f4").tobytes()
    values = scalars(state)
    out += struct.pack("<I", len(values))
    out += struct.pack(f"<{len(values)}q", *values)
    return bytes(out)


def state_hash(state: State) -> int:
    """The project's full-state hash: 64-bit FNV-1a over :func:`state_hash_bytes`."""
    h = 0xCBF29CE484222325
    for byte in state_hash_bytes(state):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def v1_bytes(state: State) -> bytes:
    """Seed ``ckpt_save`` file bytes (NXCK v1).

    ``u32 0x4b43584e, u32 12, u32 3``, the scalars as i64 LE (epoch, b1t bits, b2t
    bits), then every buffer's cells as u32 LE bit patterns in BUFFER_NAMES order.
    """
    out = bytearray(V1_HEADER.pack(NXCK_MAGIC, len(BUFFER_NAMES), 3))
    out += struct.pack("<qqq", int(state.epoch), f32_bits(state.b1t), f32_bits(state.b2t))
    for name in BUFFER_NAMES:
        out += np.asarray(getattr(state, name), dtype=np.float32).astype("<f4").tobytes()
    return bytes(out)


V1_LEN = V1_HEADER.size + 3 * 8 + 4 * sum(BUFFER_SIZES.values())


def state_from_v1_bytes(data: bytes) -> State:
    """Inverse of :func:`v1_bytes` (seed ``ckpt_load`` into a fresh state).

    Stricter than the seed: raises ValueError on a bad magic, buffer or scalar count,
    a length other than the exact v1 length, or b1t/b2t scalars with bits above 32.
    v1 stores no step counter: the state comes back with ``step = 0`` (and ``batch = 0``,
    v1 files being written at epoch boundaries), as nxrs loads it.
    """
    data = bytes(data)
    if len(data) < V1_HEADER.size:
        raise ValueError("NXCK v1: truncated header")
    magic, nbuf, nscalar = V1_HEADER.unpack_from(data, 0)
    if magic != NXCK_MAGIC:
        raise ValueError(f"NXCK v1: bad magic 0x{magic:08x}")
    if nbuf != len(BUFFER_NAMES):
        raise ValueError(f"NXCK v1: n_buf {nbuf} != {len(BUFFER_NAMES)}")
    if nscalar != 3:
        raise ValueError(f"NXCK v1: n_scalar {nscalar} != 3")
    if len(data) != V1_LEN:
        raise ValueError(f"NXCK v1: length {len(data)} != {V1_LEN}")
    epoch, b1t_bits, b2t_bits = struct.unpack_from("<qqq", data, V1_HEADER.size)
    for nm, b in (("b1t", b1t_bits), ("b2t", b2t_bits)):
        if not 0 <= b <= 0xFFFFFFFF:
            raise ValueError(f"NXCK v1: {nm} scalar 0x{b & (2**64 - 1):x} is not f32 bits")
    off = V1_HEADER.size + 24
    bufs: dict[str, F32Array] = {}
    for name in BUFFER_NAMES:
        n = BUFFER_SIZES[name]
        bufs[name] = np.frombuffer(data, dtype="<f4", count=n, offset=off).astype(np.float32)
        off += 4 * n
    return State(
        **bufs,
        epoch=epoch,
        b1t=f32_from_bits(b1t_bits),
        b2t=f32_from_bits(b2t_bits),
        step=0,
        batch=0,
    )


# ---------------------------------------------------------------------------
# Golden fixture
# ---------------------------------------------------------------------------


def _epoch_entry(st: State) -> dict[str, Any]:
    v1 = v1_bytes(st)
    return {
        "seed_hash": seed_hash(st),
        "state_hash": state_hash(st),
        "b1t_bits": f32_bits(st.b1t),
        "b2t_bits": f32_bits(st.b2t),
        "scalars": scalars(st),
        "v1_len": len(v1),
        "v1_sha256": hashlib.sha256(v1).hexdigest(),
    }


def golden() -> dict[str, Any]:
    """Compute the fixture stored in ``tests/golden/seed.json``."""
    X, Y = dataset()
    init = mk_state(1)
    fresh = mk_state(99)
    first = init.copy()
    train_step(first, X[0], int(Y[0]))
    epochs: dict[str, Any] = {}
    st = init.copy()
    for target in (1, 400, 800):
        train_run(st, X, Y, target)
        epochs[str(target)] = _epoch_entry(st)
    return {
        "generator": GENERATOR,
        "model": {
            "nin": NIN,
            "nh": NH,
            "nout": NOUT,
            "nsamp": NSAMP,
            "init_seed": 1,
            "fresh_seed": 99,
        },
        "init": {"seed_hash": seed_hash(init), "state_hash": state_hash(init)},
        "fresh_init": {"seed_hash": seed_hash(fresh), "state_hash": state_hash(fresh)},
        "first_step": {
            "state_hash": state_hash(first),
            "W1_bits": _bits_list(first.W1),
            "W2_bits": _bits_list(first.W2),
            "b1t_bits": f32_bits(first.b1t),
            "b2t_bits": f32_bits(first.b2t),
            "scalars": scalars(first),
        },
        "epochs": epochs,
    }


def dump_golden(g: dict[str, Any]) -> str:
    """The fixture's exact file text."""
    return json.dumps(g, indent=2) + "\n"


def write_or_check(
    path: Path, fixture: dict[str, Any], text: str, write: bool, ignore: tuple[str, ...] = ()
) -> int:
    """Writes ``text`` (``fixture``'s file text) to ``path``, or checks that the fixture there
    equals ``fixture`` (the keys in ``ignore`` left out); returns the exit status, 1 on a
    mismatch. The fixtures' command lines (``--write`` / ``--check``) share it."""
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
        return 0
    try:
        on_disk = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"cannot read {path}: {exc}", file=sys.stderr)
        return 1
    for key in ignore:
        on_disk.pop(key, None)
    if on_disk != fixture:
        print(f"MISMATCH: {path} differs from the reference", file=sys.stderr)
        return 1
    print(f"OK: {path} matches the reference")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``--write``: (re)write the fixture; default / ``--check``: compare with it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write tests/golden/seed.json")
    mode.add_argument("--check", action="store_true", help="compare (the default)")
    ap.add_argument("--path", type=Path, default=GOLDEN_PATH)
    args = ap.parse_args(argv)
    g = golden()
    return write_or_check(args.path, g, dump_golden(g), args.write)


if __name__ == "__main__":
    sys.exit(main())
