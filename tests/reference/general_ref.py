"""Independent plain-numpy float32 reference of a general training run (``docs/TRAINING.md``).

Every binary32 operation of the spec is one numpy float32 operation here: a float32 scalar op
or an element-wise float32 array op, each rounded once, never fused, never widened (every
operand is kept float32, so numpy's promotion rules never reach float64). Vectorisation is only
across independent elements (the samples of a batch, the outputs of a layer, the cells of a
parameter); every sequential sum the spec defines is a sequential loop here.

``math="seed"`` reuses the seed's primitives from ``seed_ref.py`` (its exp, log, sqrt, le);
``math="ieee"`` takes ``exp``/``log`` as the binary64 result rounded once to binary32 (accepted
for the reference's inputs) and ``sqrt`` from numpy's float32 ``sqrt`` (IEEE).
Integers and the u64 generator (section 9) are Python ints, masked to 64 bits.

API: :class:`Config` (section 1), :class:`Trainer` with ``step(x, y)``, ``train_steps``,
``train_until``, ``fit_epochs``, ``evaluate``, ``predict``, ``predict_proba``, ``state_hash``;
:class:`Stream`, :func:`permutation` (section 9); :func:`load_digits_f32`, :func:`split`
(section 12).

Readings of the spec where its text leaves a choice (each marked "reading" at its place):

* the ``B`` of ``total / f32(B)`` and of the step's loss is the number of samples in *this*
  batch (smaller than ``batch_size`` for a short last batch);
* ``-log(p_y)`` (seed loss) is the sign-bit flip (the seed's ``f32_neg``), not ``0 - x``;
* SGD's "with ``weight_decay``" means ``weight_decay != 0``; ``buf = momentum * buf + g'`` is
  computed on every step, also with ``momentum = 0`` and on the first step;
* clipping acts on the reduced gradient, before the optimiser (and before SGD's decay term);
* ``predict`` takes the maximum of ``p`` (not of ``z``);
* the split's stream uses the run's ``seed``;
* ``Trainer.step`` on an explicit batch advances ``step`` only (``epoch``/``batch`` are
  positions in a data set, kept by ``train_steps``);
* the ranges of section 1 are checked on the binary32 values; ``MAX_LAYERS`` (not given)
  is 64 here and at least 2 sizes are required.

This module must not import nxrs: it is the independent check of it.

Run ``python tests/reference/general_ref.py --write`` to regenerate
``tests/golden/general.json``; without arguments (or with ``--check``) it recomputes the
fixture and exits 1 if the file differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Union, cast

import numpy as np
import numpy.typing as npt

if __package__:
    from . import seed_ref
else:  # run as a script: tests/reference is sys.path[0]
    import seed_ref  # type: ignore[no-redef,import-not-found,unused-ignore]

F32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
#: Labels (cross-entropy, shape (N,)) or targets (mse, shape (N, K)).
Targets = Union[IntArray, F32Array]

GOLDEN_PATH = Path(__file__).resolve().parents[1] / "golden" / "general.json"
GENERATOR = "tests/reference/general_ref.py"

MASK64 = (1 << 64) - 1

# Section 9: stream domains and the SplitMix64 constants.
INIT = 0x696E6974
SHUFFLE = 0x73687566
SPLIT = 0x73706C74
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

# Section 11: FNV-1a 64.
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

#: The spec's table (section 1) caps ``len(layers)`` at ``MAX_LAYERS`` without a value; this is
#: the reference's own choice (only used for validation).
MAX_LAYERS = 64

_SIGN = np.uint32(0x80000000)
_MAG = np.uint32(0x7FFFFFFF)


# ---------------------------------------------------------------------------
# Scalars: f32(k), bits
# ---------------------------------------------------------------------------


def f32i(k: int) -> np.float32:
    """``f32(k)``: the integer ``k`` rounded once to binary32 (nearest, ties to even).

    Python's ``float(k)`` rounds correctly to binary64, but a second rounding to binary32
    could then be wrong for ``|k| > 2**53``; so ``k`` is first rounded to 24 significant bits
    in exact integer arithmetic, after which both conversions are exact.
    """
    n = abs(k)
    extra = n.bit_length() - 24
    if extra > 0:
        q, rem = n >> extra, n & ((1 << extra) - 1)
        half = 1 << (extra - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
        n = q << extra
    with np.errstate(over="ignore"):
        v = np.float32(float(n)) if n < 2**128 else np.float32(np.inf)
    return cast(np.float32, np.float32(-v)) if k < 0 else v


def f32d(x: float | np.float32) -> np.float32:
    """A hyperparameter as binary32 (section 1): binary64 rounded to nearest even.

    A value that is already a ``np.float32`` (e.g. built as ``f32(1) / f32(100)``) is kept.
    """
    if isinstance(x, np.float32):
        return x
    return cast(np.float32, np.float32(float(x)))


def bits(x: np.float32) -> int:
    """The binary32 bit pattern of ``x``."""
    return int(np.float32(x).view(np.uint32))


def bits_list(a: F32Array) -> list[int]:
    """The bit patterns of every cell of ``a`` in row-major order."""
    return [int(v) for v in np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32)]


ZERO = f32i(0)
ONE = f32i(1)
_TWO_POW_M23 = np.float32(2.0**-23)


# ---------------------------------------------------------------------------
# Section 2: the two arithmetic settings
# ---------------------------------------------------------------------------


#: How many binary64 results were too close to a binary32 rounding boundary to round directly
#: (each one was then decided in high precision); see :func:`_round_to_f32`.
HARD_CASES = {"exp": 0, "log": 0}


def _round_to_f32(x: F32Array, y64: npt.NDArray[np.float64], fn: str) -> F32Array:
    """Round ``fn(x)``, approximated by numpy's binary64 ``y64``, once to binary32.

    numpy's binary64 ``exp``/``log`` are within a few binary64 ulps of the exact value, so
    rounding ``y64`` gives the correctly rounded binary32 unless ``y64`` lies within a few
    binary64 ulps of a binary32 rounding boundary (the midpoint between two neighbours). Those
    rare cells are detected here and decided against the exact midpoint with mpmath at 160
    bits (the exact value of exp or log of a binary32 other than exp(0) and log(1) is never a
    midpoint). Without mpmath such a cell raises rather than risking a double rounding.
    """
    with np.errstate(all="ignore"):
        y32 = y64.astype(np.float32)
        lo = np.nextafter(y32, np.float32(-np.inf)).astype(np.float64)
        hi = np.nextafter(y32, np.float32(np.inf)).astype(np.float64)
        c = y32.astype(np.float64)
        # Midpoints of two adjacent binary32 values are exact in binary64.
        near = (np.abs(y64 - (c + lo) / 2) <= 8 * np.spacing(np.abs(y64))) | (
            np.abs(y64 - (c + hi) / 2) <= 8 * np.spacing(np.abs(y64))
        )
        near &= np.isfinite(y64) & np.isfinite(c)
    if not np.any(near):
        return y32
    try:
        import mpmath  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"a {fn} result needs mpmath to be rounded correctly") from exc
    out = y32.copy()
    flat_x, flat_c, flat_out = x.reshape(-1), c.reshape(-1), out.reshape(-1)
    for i in np.flatnonzero(near.reshape(-1)):
        HARD_CASES[fn] += 1
        with mpmath.workprec(160):
            exact = getattr(mpmath, fn)(mpmath.mpf(float(flat_x[i])))
            best = flat_c[i]
            for cand in (
                np.nextafter(np.float32(best), np.float32(-np.inf)),
                np.nextafter(np.float32(best), np.float32(np.inf)),
            ):
                cf = float(cand)
                d_best = abs(exact - mpmath.mpf(best))
                d_cand = abs(exact - mpmath.mpf(cf))
                if d_cand < d_best:
                    best = cf
        flat_out[i] = np.float32(best)
    return cast(F32Array, out)


def _ieee_exp(x: F32Array) -> F32Array:
    with np.errstate(all="ignore"):
        return _round_to_f32(x, np.exp(x.astype(np.float64)), "exp")


def _ieee_log(x: F32Array) -> F32Array:
    with np.errstate(all="ignore"):
        return _round_to_f32(x, np.log(x.astype(np.float64)), "log")


def _seed_log_array(x: F32Array) -> F32Array:
    # seed_ref has only a scalar f32_log; the cells are independent.
    out = np.empty_like(x)
    flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    for i in range(flat_in.size):
        flat_out[i] = seed_ref.seed_log(flat_in[i])
    return out


def _ieee_le(x: F32Array, y: F32Array | np.float32) -> BoolArray:
    return np.less_equal(x, y)


def _seed_le(x: F32Array, y: F32Array | np.float32) -> BoolArray:
    with np.errstate(all="ignore"):
        return seed_ref.seed_le_array(x, y)


def ieee_sqrt(x: F32Array) -> F32Array:
    """Correctly rounded binary32 sqrt (numpy's float32 ``sqrt`` is the IEEE operation)."""
    with np.errstate(all="ignore"):
        return np.sqrt(x)


@dataclass(frozen=True)
class Math:
    """Section 2: ``exp``, ``log``, ``sqrt`` and ``le`` of one ``math`` setting (element-wise)."""

    name: str

    def exp(self, x: F32Array) -> F32Array:
        if self.name == "seed":
            return seed_ref.seed_exp_array(x)
        return _ieee_exp(x)

    def log(self, x: F32Array) -> F32Array:
        return _seed_log_array(x) if self.name == "seed" else _ieee_log(x)

    def sqrt(self, x: F32Array) -> F32Array:
        return seed_ref.seed_sqrt_array(x) if self.name == "seed" else ieee_sqrt(x)

    def le(self, x: F32Array, y: F32Array | np.float32) -> BoolArray:
        return _seed_le(x, y) if self.name == "seed" else _ieee_le(x, y)

    def take_new_max(self, m: F32Array, z: F32Array) -> BoolArray:
        """Section 5's running-maximum rule: does ``z`` replace the current maximum ``m``?

        ``"seed"``: ``le(m, z)`` (a later equal value wins); ``"ieee"``: ``z > m``.
        """
        return self.le(m, z) if self.name == "seed" else np.greater(z, m)


# ---------------------------------------------------------------------------
# Section 9: the random streams
# ---------------------------------------------------------------------------


def mix64(z: int) -> int:
    """SplitMix64's finaliser (a bijection of u64)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & MASK64
    return z ^ (z >> 31)


class Stream:
    """The stream ``(seed, domain, index)``: SplitMix64 from a mixed initial state."""

    def __init__(self, seed: int, domain: int, index: int) -> None:
        # ``seed as u64``: two's complement bits of the i64 seed.
        self.state = mix64(mix64(mix64(seed & MASK64) ^ domain) ^ (index & MASK64))

    def next_u64(self) -> int:
        self.state = (self.state + _GOLDEN_GAMMA) & MASK64
        return mix64(self.state)

    def below(self, n: int) -> int:
        """Lemire's multiply-and-reject: uniform in ``[0, n)`` for ``1 <= n < 2**64``."""
        return lemire_below(self.next_u64, n)


def lemire_below(draw: Callable[[], int], n: int, width: int = 64) -> int:
    """Section 9's ``below(n)`` on ``width``-bit draws (the spec's is ``width = 64``).

    Draw ``x``, ``m = x * n``, ``lo = m mod 2^width``; if ``lo < n``, ``r = (2^width - n) mod
    n`` and while ``lo < r`` draw again (recomputing ``m`` and ``lo``); return ``m >> width``.
    The width is a parameter only so that the tests can exhaust small words.
    """
    mask = (1 << width) - 1
    if not 1 <= n <= mask:
        raise ValueError(f"below({n}): n must be in [1, 2**{width})")
    m = draw() * n
    lo = m & mask
    if lo < n:
        r = ((1 << width) - n) % n
        while lo < r:
            m = draw() * n
            lo = m & mask
    return m >> width


def permutation(n: int, stream: Stream) -> list[int]:
    """Fisher-Yates over ``0..n-1``: for ``i = n-1`` down to 1, swap ``i`` and ``below(i+1)``."""
    items = list(range(n))
    for i in range(n - 1, 0, -1):
        j = stream.below(i + 1)
        items[i], items[j] = items[j], items[i]
    return items


def epoch_order(seed: int, epoch: int, n: int, shuffle: bool) -> list[int]:
    """Section 3: ``pi_e``, the identity or the permutation from ``(seed, SHUFFLE, e)``."""
    if not shuffle:
        return list(range(n))
    return permutation(n, Stream(seed, SHUFFLE, epoch))


# ---------------------------------------------------------------------------
# Section 1: configuration
# ---------------------------------------------------------------------------

_FLOAT_KEYS = (
    "lr", "beta1", "beta2", "eps", "weight_decay", "momentum", "gamma", "min_lr", "clip_norm"
)  # fmt: skip

#: Section 1's keys, in the table's order.
CONFIG_KEYS = (
    "layers",
    "loss",
    "math",
    "init",
    "seed",
    "optimizer",
    "lr",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "decay_params",
    "momentum",
    "schedule",
    "warmup_steps",
    "total_steps",
    "step_size",
    "gamma",
    "min_lr",
    "clip_norm",
    "batch_size",
    "grad_block",
    "shuffle",
    "drop_last",
)

_DEFAULTS: dict[str, Any] = {
    "loss": "cross_entropy",
    "math": "ieee",
    "init": "he",
    "seed": 0,
    "optimizer": "adam",
    "lr": 0.001,
    "beta1": 0.9,
    "beta2": 0.999,
    "eps": 1e-8,
    "weight_decay": None,  # 0, or 0.01 for AdamW
    "decay_params": "all",
    "momentum": 0.0,
    "schedule": "constant",
    "warmup_steps": 0,
    "total_steps": None,
    "step_size": None,
    "gamma": None,
    "min_lr": None,  # 0 for cosine
    "clip_norm": None,
    "batch_size": 32,
    "grad_block": None,
    "shuffle": True,
    "drop_last": False,
}


#: Section 4's initialisations of an integer list.
INITS = ("seed", "he", "glorot")


def resolve_config(**kw: Any) -> dict[str, Any]:
    """Section 1: the given keys plus the defaults of ``Trainer(layers=...)``, validated.

    Floats stay as given (Python floats or ``np.float32``); :class:`Config` converts them.
    """
    d = resolve_keys(kw)
    d["layers"] = [int(v) for v in d["layers"]]
    layers = d["layers"]
    # The table gives no minimum length; a network needs an input and an output size.
    if not 2 <= len(layers) <= MAX_LAYERS or not all(1 <= v <= 2**24 for v in layers):
        raise ValueError(f"bad layers {layers}")
    return d


def resolve_keys(
    kw: dict[str, Any], init_default: str = "he", inits: tuple[str, ...] = INITS
) -> dict[str, Any]:
    """Section 1's keys other than ``layers`` (kept as given): defaults filled in, validated.

    ``init_default`` and ``inits`` let a layer model (section 15.4) default to ``"torch"``.
    """
    unknown = set(kw) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}")
    if "layers" not in kw:
        raise ValueError("layers is required")
    defaults = dict(_DEFAULTS, init=init_default)
    d: dict[str, Any] = {k: kw.get(k, defaults.get(k)) for k in CONFIG_KEYS}
    if d["weight_decay"] is None:
        d["weight_decay"] = 0.01 if d["optimizer"] == "adamw" else 0.0
    if d["schedule"] == "cosine" and d["min_lr"] is None:
        d["min_lr"] = 0.0
    _validate(d, inits)
    return d


def _validate(d: dict[str, Any], inits: tuple[str, ...]) -> None:
    for key, allowed in (
        ("loss", ("cross_entropy", "mse")),
        ("math", ("seed", "ieee")),
        ("init", inits),
        ("optimizer", ("adam", "adamw", "sgd")),
        ("schedule", ("constant", "linear", "step", "cosine")),
        ("decay_params", ("all", "matrices")),
    ):
        if d[key] not in allowed:
            raise ValueError(f"{key} must be one of {allowed}, not {d[key]!r}")
    if not -(2**63) <= int(d["seed"]) < 2**63:
        raise ValueError("seed must be an i64")
    f = {k: (None if d[k] is None else float(f32d(d[k]))) for k in _FLOAT_KEYS}
    lr, wd = f["lr"], f["weight_decay"]
    assert lr is not None and wd is not None
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError("lr must be finite and > 0")
    if d["optimizer"] in ("adam", "adamw"):
        for k in ("beta1", "beta2"):
            v = f[k]
            if v is None or not 0 <= v < 1:
                raise ValueError(f"{k} must be in [0, 1)")
        eps = f["eps"]
        if eps is None or not (math.isfinite(eps) and eps > 0):
            raise ValueError("eps must be finite and > 0")
    if not (math.isfinite(wd) and wd >= 0):
        raise ValueError("weight_decay must be finite and >= 0")
    if d["optimizer"] == "adam" and wd != 0:
        raise ValueError("weight_decay must be 0 for adam (use adamw)")
    if d["optimizer"] == "adam" and d["decay_params"] != "all":
        raise ValueError('decay_params = "matrices" is for adamw and sgd')
    mom = f["momentum"]
    if mom is None or not 0 <= mom < 1:
        raise ValueError("momentum must be in [0, 1)")
    if d["warmup_steps"] < 0:
        raise ValueError("warmup_steps must be >= 0")
    if d["schedule"] in ("linear", "cosine") and (
        d["total_steps"] is None or d["total_steps"] <= d["warmup_steps"]
    ):
        raise ValueError(f"{d['schedule']} needs total_steps > warmup_steps")
    lo = f["min_lr"]
    if lo is not None and not (
        lo == 0 or (math.isfinite(lo) and abs(lo) >= 2.0**-126 and 0 < lo <= lr)
    ):
        raise ValueError("min_lr must be 0, or normal and at most lr")
    if d["schedule"] == "step":
        g = f["gamma"]
        if d["step_size"] is None or d["step_size"] < 1:
            raise ValueError("step needs step_size >= 1")
        if g is None or not (math.isfinite(g) and g > 0):
            raise ValueError("step needs a finite gamma > 0")
    c = f["clip_norm"]
    if c is not None and not (math.isfinite(c) and c > 0):
        raise ValueError("clip_norm must be finite and > 0")
    if d["batch_size"] < 1:
        raise ValueError("batch_size must be >= 1")
    if d["grad_block"] is not None and d["grad_block"] < 1:
        raise ValueError("grad_block must be >= 1")


@dataclass(frozen=True)
class Config:
    """A resolved configuration (section 1) with its floats as binary32."""

    layers: tuple[int, ...]
    loss: str
    math: str
    init: str
    seed: int
    optimizer: str
    lr: np.float32
    beta1: np.float32
    beta2: np.float32
    eps: np.float32
    weight_decay: np.float32
    decay_params: str
    momentum: np.float32
    schedule: str
    warmup_steps: int
    total_steps: int | None
    step_size: int | None
    gamma: np.float32 | None
    min_lr: np.float32 | None
    clip_norm: np.float32 | None
    batch_size: int
    grad_block: int | None
    shuffle: bool
    drop_last: bool

    @classmethod
    def make(cls, **kw: Any) -> Config:
        """Resolve ``kw`` (section 1's keys) with the defaults and convert the floats."""
        return cls.from_resolved(resolve_config(**kw))

    @classmethod
    def from_resolved(cls, resolved: dict[str, Any]) -> Config:
        """A :class:`Config` of already resolved keys (``layers`` as a sequence of ints)."""
        d = dict(resolved)
        d["layers"] = tuple(d["layers"])
        for k in _FLOAT_KEYS:
            if d[k] is not None:
                d[k] = f32d(d[k])
        return cls(**d)

    def hyper_bits(self) -> dict[str, int | None]:
        """Every float hyperparameter's binary32 bit pattern (as a checkpoint stores it; the
        keys of section 1's later rows only when set)."""
        out: dict[str, int | None] = {}
        for k in _FLOAT_KEYS:
            if k == "min_lr" and self.min_lr is None:
                continue
            v = getattr(self, k)
            out[k] = None if v is None else bits(v)
        return out


# ---------------------------------------------------------------------------
# Section 4: initialisation
# ---------------------------------------------------------------------------


def _c_rem(a: int, m: int) -> int:
    """``a % m`` with the sign of the dividend (C, Rust), unlike Python's ``%``."""
    r = abs(a) % abs(m)
    return -r if a < 0 else r


def _c_div(a: int, m: int) -> int:
    """``a / m`` truncating toward zero (C, Rust)."""
    q = abs(a) // abs(m)
    return -q if (a < 0) != (m < 0) else q


def init_weights(cfg: Config) -> list[F32Array]:
    """Section 4: the weight matrices ``W_{l+1}`` (``outputs x inputs``) of every layer."""
    out: list[F32Array] = []
    fifty = f32i(50)
    for l in range(len(cfg.layers) - 1):  # noqa: E741 - the spec's name
        n_in, n_out = cfg.layers[l], cfg.layers[l + 1]
        cells = n_in * n_out
        if cfg.init == "seed":
            mul, modulus = (7, 13) if l == 0 else (5, 11)
            half = _c_div(modulus, 2)
            w = np.array(
                [f32i(_c_rem(k * mul + cfg.seed, modulus) - half) for k in range(cells)],
                dtype=np.float32,
            )
            w = cast(F32Array, w / fifty)
        else:
            fan = n_in if cfg.init == "he" else n_in + n_out
            # The scale always uses the correctly rounded sqrt (section 2).
            a = ieee_sqrt(np.array([f32i(6) / f32i(fan)], dtype=np.float32))[0]
            w = uniform_cells(Stream(cfg.seed, INIT, l), cells, a)
        out.append(w.astype(np.float32).reshape(n_out, n_in))
    return out


def uniform_cells(st: Stream, cells: int, a: np.float32) -> F32Array:
    """Section 4's draws: ``cells`` values ``(f32(k) * 2^-23) * a``, ``k = (x >> 40) - 2^23``
    for the next ``cells`` draws ``x`` of ``st``, in order."""
    ks = [(st.next_u64() >> 40) - (1 << 23) for _ in range(cells)]
    # f32(k) is exact for |k| <= 2**23; the product by 2**-23 is exact too.
    return cast(F32Array, (np.array(ks, dtype=np.int64).astype(np.float32) * _TWO_POW_M23) * a)


# ---------------------------------------------------------------------------
# Section 6: learning-rate schedule
# ---------------------------------------------------------------------------


def powi(g: np.float32, n: int) -> np.float32:
    """``gamma^n`` by binary exponentiation from the most significant bit of ``n``."""
    r = ONE
    if n > 0:
        for bit in bin(n)[2:]:
            r = np.float32(r * r)
            if bit == "1":
                r = np.float32(r * g)
    return r


def nearest_f32(exact: Fraction) -> np.float32:
    """``exact`` rounded to nearest binary32, ties to even (for magnitudes up to 2)."""
    near = np.float32(float(exact))  # within a binary32 ulp; a double rounding is fixed below
    neighbours = [np.nextafter(near, np.float32(-2)), near, np.nextafter(near, np.float32(2))]
    distances = [abs(Fraction(float(c)) - exact) for c in neighbours]
    best = min(distances)
    ties = [c for c, d in zip(neighbours, distances) if d == best]
    return cast(np.float32, min(ties, key=lambda c: int(c.view(np.uint32)) & 1))


def cos_pi(k: int, n: int) -> np.float32:
    """``cos(π k / n)`` correctly rounded to binary32 (section 6; ``+0`` at ``k / n = 1/2``),
    from mpmath's value at 100 digits cut to a multiple of ``2^-300``."""
    import mpmath

    with mpmath.workdps(100):
        c = mpmath.cospi(mpmath.mpf(k) / n)
        exact = Fraction(int(mpmath.floor(c * 2**300)), 2**300)
    return cast(np.float32, nearest_f32(exact) + ZERO)


def lr_at(cfg: Config, t: int) -> np.float32:
    """Section 6: ``lr_t = (lr * w_t) * d_t`` for ``t`` steps completed; cosine's own formula
    after its warm-up."""
    w = f32i(t + 1) / f32i(cfg.warmup_steps) if t < cfg.warmup_steps else ONE
    if cfg.schedule == "cosine" and t >= cfg.warmup_steps:
        assert cfg.total_steps is not None and cfg.min_lr is not None
        lo = cfg.min_lr
        k, n = t - cfg.warmup_steps, cfg.total_steps - cfg.warmup_steps
        if k > n:
            return lo
        f = np.float32(np.float32(0.5) * np.float32(ONE + cos_pi(k, n)))
        return cast(np.float32, np.float32(lo + np.float32(f * np.float32(cfg.lr - lo))))
    if cfg.schedule in ("constant", "cosine"):
        d = ONE
    elif cfg.schedule == "linear":
        tot, wu = cfg.total_steps, cfg.warmup_steps
        assert tot is not None
        if t < wu:
            d = ONE
        elif t < tot:
            d = f32i(tot - t) / f32i(tot - wu)
        else:
            d = ZERO
    else:
        assert cfg.step_size is not None and cfg.gamma is not None
        d = powi(cfg.gamma, t // cfg.step_size)
    return cast(np.float32, np.float32(np.float32(cfg.lr * w) * d))


# ---------------------------------------------------------------------------
# Section 5 and 10: forward, loss, backward
# ---------------------------------------------------------------------------


def seq_sum_rows(rows: F32Array, start: np.float32 | None = None) -> F32Array:
    """The left fold over axis 0 of ``rows``, element-wise over the other axes.

    ``start=None`` starts from the first row (the spec's default), else from ``start``.
    """
    if start is None:
        acc = rows[0].copy()
        rest = range(1, rows.shape[0])
    else:
        acc = np.full(rows.shape[1:], start, dtype=np.float32)
        rest = range(rows.shape[0])
    for i in rest:
        acc = acc + rows[i]
    return cast(F32Array, acc)


@dataclass
class Forward:
    """One forward pass over a batch: pre-activations ``z[l]`` and layer inputs ``a[l]``."""

    z: list[F32Array]  # z[l]: (B, outputs of layer l)
    a: list[F32Array]  # a[l]: (B, inputs of layer l); a[0] = x


def forward(m: Math, Ws: Sequence[F32Array], bs: Sequence[F32Array], x: F32Array) -> Forward:
    """Section 5, forward, vectorised over the samples (rows of ``x``) and the outputs."""
    a = np.ascontiguousarray(x, dtype=np.float32)
    zs: list[F32Array] = []
    acts: list[F32Array] = []
    n_layers = len(Ws)
    for l in range(n_layers):  # noqa: E741
        W, b = Ws[l], bs[l]
        acts.append(a)
        acc = np.repeat(b[None, :], a.shape[0], axis=0)
        # Contiguous columns, and products into a scratch buffer: only for speed (each cell is
        # still one binary32 product then one binary32 sum).
        w_cols = np.ascontiguousarray(W.T)
        a_cols = np.ascontiguousarray(a.T)
        prod = np.empty_like(acc)
        # Accumulated from the bias, input by input in order.
        for j in range(W.shape[1]):
            np.multiply(w_cols[j][None, :], a_cols[j][:, None], out=prod)
            np.add(acc, prod, out=acc)
        zs.append(acc)
        if l < n_layers - 1:
            a = np.where(m.le(acc, ZERO), ZERO, acc).astype(np.float32)
    return Forward(zs, acts)


def softmax(m: Math, z: F32Array) -> tuple[F32Array, F32Array, F32Array]:
    """Section 5, cross-entropy part 1: returns ``(mx, S, p)`` per sample."""
    k = z.shape[1]
    mx = z[:, 0].copy()
    for o in range(1, k):
        mx = np.where(m.take_new_max(mx, z[:, o]), z[:, o], mx).astype(np.float32)
    with np.errstate(all="ignore"):
        e = m.exp(z - mx[:, None])
        s = seq_sum_rows(np.ascontiguousarray(e.T), start=ZERO)
        p = e / s[:, None]
    return mx, s, p


def loss_and_delta(
    m: Math, loss: str, z: F32Array, y: Targets
) -> tuple[F32Array, F32Array, F32Array]:
    """Section 5: per-sample losses, the output gradient ``delta`` and the outputs
    (``p`` for cross-entropy, ``z`` for mse)."""
    n, k = z.shape
    with np.errstate(all="ignore"):
        if loss == "cross_entropy":
            lab = np.asarray(y, dtype=np.int64)
            mx, s, p = softmax(m, z)
            rows = np.arange(n)
            py = p[rows, lab]
            if m.name == "seed":
                # Reading: -log(p_y) negates by flipping the sign bit (the seed's f32_neg);
                # ``0 - x`` would differ for log(p_y) = +0.
                lp = m.log(np.ascontiguousarray(py))
                losses = (lp.view(np.uint32) ^ _SIGN).view(np.float32)
            else:
                losses = m.log(s) - (z[rows, lab] - mx)
            delta = p.copy()
            delta[rows, lab] = py - ONE
            return losses, delta, p
        t = np.asarray(y, dtype=np.float32).reshape(n, k)
        d = z - t
        q = seq_sum_rows(np.ascontiguousarray((d * d).T), start=ZERO)
        losses = q / f32i(k)
        c = f32i(2) / f32i(k)
        return cast(F32Array, losses), cast(F32Array, d * c), z


def backward(
    m: Math, Ws: Sequence[F32Array], fw: Forward, delta: F32Array
) -> tuple[list[F32Array], list[F32Array]]:
    """Section 5, backward, per sample (vectorised over samples, they are independent).

    Returns ``(gW, gb)`` with ``gW[l]`` of shape ``(B, outputs, inputs)`` and ``gb[l]`` of
    shape ``(B, outputs)``.
    """
    n_layers = len(Ws)
    gW: list[F32Array] = [np.empty(0, np.float32)] * n_layers
    gb: list[F32Array] = [np.empty(0, np.float32)] * n_layers
    with np.errstate(all="ignore"):
        for l in range(n_layers - 1, -1, -1):  # noqa: E741
            gb[l] = delta
            gW[l] = delta[:, :, None] * fw.a[l][:, None, :]
            if l > 0:
                W = Ws[l]
                g = np.zeros_like(fw.a[l])
                # Accumulated from +0 over the outputs in order.
                for o in range(W.shape[0]):
                    g = g + W[None, o, :] * delta[:, o, None]
                delta = np.where(m.le(fw.z[l - 1], ZERO), ZERO, g).astype(np.float32)
    return gW, gb


def reduce_batch(per_sample: F32Array, grad_block: int | None) -> F32Array:
    """Section 5, reduction: block sums (from each block's first sample), their sum in block
    order (from the first block's), divided by ``f32(B)``.

    Reading: ``B`` is the number of samples in this batch (a short last batch divides by its
    own size), and ``G = B`` when ``grad_block`` is not set.
    """
    nb = per_sample.shape[0]
    blk = nb if grad_block is None else grad_block
    total: F32Array | None = None
    for start in range(0, nb, blk):
        s = seq_sum_rows(per_sample[start : min(start + blk, nb)])
        total = s if total is None else total + s
    assert total is not None
    return cast(F32Array, total / f32i(nb))


def argmax_rule(m: Math, v: F32Array) -> IntArray:
    """Section 10's ``predict``: the index of the maximum per row, by section 5's rule."""
    best = v[:, 0].copy()
    idx = np.zeros(v.shape[0], dtype=np.int64)
    for o in range(1, v.shape[1]):
        take = m.take_new_max(best, v[:, o])
        best = np.where(take, v[:, o], best).astype(np.float32)
        idx = np.where(take, o, idx)
    return idx


# ---------------------------------------------------------------------------
# Section 11: the state hash
# ---------------------------------------------------------------------------


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a, one byte at a time."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & MASK64
    return h


def state_bytes(tensors: Sequence[F32Array], scalars: Sequence[int]) -> bytes:
    """The byte string of section 11 (all little-endian)."""
    out = bytearray(struct.pack("<I", len(tensors)))
    for t in tensors:
        out += struct.pack("<I", t.size)
        out += np.ascontiguousarray(t, dtype=np.float32).reshape(-1).view("<u4").tobytes()
    out += struct.pack("<I", len(scalars))
    for s in scalars:
        out += struct.pack("<q", s)
    return bytes(out)


def _le_cells(a: F32Array) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view("<u4").tobytes()


def state_digest(run: Run, config_record: str) -> str:
    """Section 16's state digest of ``run``'s state under the configuration record
    ``config_record`` (the checkpoint's one-line JSON text), as 64 hex digits."""
    out = bytearray(b"nxrs-state/1\0")
    record = config_record.encode("utf-8")
    out += struct.pack("<Q", len(record)) + record
    tensors = run.state_dict()
    out += struct.pack("<I", len(tensors))
    for name, t in tensors.items():
        out += struct.pack("<I", len(name)) + name.encode("ascii")
        out += struct.pack("<I", t.ndim) + b"".join(struct.pack("<Q", d) for d in t.shape)
        out += _le_cells(t)
    scalars = run.scalars()
    out += struct.pack("<I", len(scalars)) + b"".join(struct.pack("<q", v) for v in scalars)
    return hashlib.sha256(bytes(out)).hexdigest()


def config_digest(config_record: str) -> str:
    """Section 16's configuration digest."""
    return hashlib.sha256(b"nxrs-config/1\0" + config_record.encode("utf-8")).hexdigest()


def data_part_digest(x: F32Array, y: Targets, classes: int | None) -> str:
    """Section 16's digest of one part of a run's data: ``x`` (samples first, any shape; its
    rows flattened), and ``y`` as class labels (``classes`` given) or regression targets."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(x.shape[0], -1)
    out = bytearray(b"nxrs-data-part/1\0")
    out += struct.pack("<QQ", x.shape[0], x.shape[1]) + _le_cells(x)
    if classes is not None:
        out += b"\0" + struct.pack("<Q", classes)
        out += np.asarray(y, dtype="<u8").tobytes()
    else:
        v = np.asarray(y, dtype=np.float32).reshape(x.shape[0], -1)
        out += b"\1" + struct.pack("<Q", v.shape[1]) + _le_cells(v)
    return hashlib.sha256(bytes(out)).hexdigest()


def data_digest(train: str, validation: str | None = None, test: str | None = None) -> str:
    """Section 16's digest of a run's data from its parts' digests (hex)."""
    out = bytearray(b"nxrs-data/1\0")
    for part in (train, validation, test):
        out += b"\0" if part is None else b"\1" + bytes.fromhex(part)
    return hashlib.sha256(bytes(out)).hexdigest()


# ---------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------


class Run:
    """What every training run shares (sections 3, 10 and 11): the scalars ``epoch``,
    ``b1t``, ``b2t``, ``step_count`` (the spec's ``step``) and ``batch``, the epochs' batches,
    evaluation and the state hash. A subclass holds the tensors and computes a step."""

    cfg: Config
    math: Math

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.math = Math(cfg.math)
        self.epoch = 0
        self.batch = 0
        self.step_count = 0
        self.b1t = ONE
        self.b2t = ONE
        self._order_cache: tuple[int, int, list[int]] | None = None

    # ---- what a model provides ----

    def tensor_names(self) -> list[str]:
        raise NotImplementedError

    def tensors(self) -> list[F32Array]:
        raise NotImplementedError

    def step(self, x: F32Array, y: Targets) -> np.float32:
        """One optimiser step on the batch ``(x, y)``; returns the step's loss."""
        raise NotImplementedError

    def _outputs(self, x: F32Array) -> tuple[F32Array, F32Array]:
        """The evaluation forward pass: the last layer's ``z`` and the outputs (``p`` for
        cross-entropy, ``z`` for mse)."""
        raise NotImplementedError

    # ---- section 11 ----

    def state_dict(self) -> dict[str, F32Array]:
        """Name -> tensor (copies), in state order."""
        return {k: v.copy() for k, v in zip(self.tensor_names(), self.tensors())}

    def scalars(self) -> list[int]:
        """``epoch``, bits of ``b1t``, bits of ``b2t``, ``step``, ``batch``."""
        return [self.epoch, bits(self.b1t), bits(self.b2t), self.step_count, self.batch]

    def state_hash(self) -> int:
        """Section 11's full-state hash."""
        return fnv1a64(state_bytes(self.tensors(), self.scalars()))

    def state_hash_hex(self) -> str:
        return f"{self.state_hash():016x}"

    # ---- section 3: epochs and batches ----

    def batches_per_epoch(self, n: int) -> int:
        bsz = self.cfg.batch_size
        if self.cfg.drop_last:
            if n < bsz:
                raise ValueError(f"drop_last with N={n} < batch_size={bsz}")
            return n // bsz
        return -(-n // bsz)

    def order(self, n: int) -> list[int]:
        """``pi_epoch`` for a data set of ``n`` samples (cached per epoch)."""
        c = self._order_cache
        if c is None or c[0] != self.epoch or c[1] != n:
            c = (self.epoch, n, epoch_order(self.cfg.seed, self.epoch, n, self.cfg.shuffle))
            self._order_cache = c
        return c[2]

    def train_steps(self, x: F32Array, y: Targets, steps: int) -> list[np.float32]:
        """``steps`` optimiser steps, continuing with batch ``batch`` of epoch ``epoch``."""
        n = x.shape[0]
        nb = self.batches_per_epoch(n)
        bsz = self.cfg.batch_size
        out: list[np.float32] = []
        for _ in range(steps):
            idx = self.order(n)[self.batch * bsz : min((self.batch + 1) * bsz, n)]
            out.append(self.step(x[idx], y[idx]))
            self.batch += 1
            if self.batch == nb:
                self.epoch += 1
                self.batch = 0
        return out

    def train_until(self, x: F32Array, y: Targets, epoch: int) -> list[np.float32]:
        """Steps until ``self.epoch == epoch`` (nothing if already there); the step losses."""
        nb = self.batches_per_epoch(x.shape[0])
        todo = max(0, (epoch - self.epoch) * nb - self.batch)
        return self.train_steps(x, y, todo)

    def fit_epochs(self, x: F32Array, y: Targets, epochs: int) -> list[np.float32]:
        """Finish the current epoch if one is under way, then run complete epochs, until
        ``epochs`` more epochs have been completed; returns the step losses."""
        return self.train_until(x, y, self.epoch + epochs)

    # ---- section 10 ----

    def predict_proba(self, x: F32Array) -> F32Array:
        """``p`` for cross-entropy, ``z`` for mse."""
        return self._outputs(x)[1]

    def predict(self, x: F32Array) -> npt.NDArray[Any]:
        """The index of ``p``'s maximum (section 5's rule), or ``z`` for mse."""
        out = self.predict_proba(x)
        if self.cfg.loss == "mse":
            return out
        return argmax_rule(self.math, out)

    def evaluate(self, x: F32Array, y: Targets) -> tuple[np.float32, float | None]:
        """``(loss, accuracy)``: the mean loss summed from the first sample, and for
        cross-entropy ``correct / N`` in binary64 (None for mse)."""
        z, out = self._outputs(x)
        with np.errstate(all="ignore"):
            losses, _, _ = loss_and_delta(self.math, self.cfg.loss, z, y)
            lsum = losses[0]
            for i in range(1, losses.shape[0]):
                lsum = np.float32(lsum + losses[i])
            loss = np.float32(lsum / f32i(losses.shape[0]))
        if self.cfg.loss == "mse":
            return loss, None
        correct = int(np.sum(argmax_rule(self.math, out) == np.asarray(y, dtype=np.int64)))
        return loss, correct / x.shape[0]


class Trainer(Run):
    """A training run as docs/TRAINING.md defines it.

    Parameters ``W[l]`` (2-D, ``outputs x inputs``) and ``b[l]``; optimiser slots ``m``/``v``
    (Adam, AdamW: first and second moments) or ``m`` (SGD: the momentum buffer); the scalars
    ``epoch``, ``b1t``, ``b2t``, ``step_count`` (the spec's ``step``) and ``batch``.
    """

    def __init__(self, config: Config | None = None, **kw: Any) -> None:
        super().__init__(config if config is not None else Config.make(**kw))
        cfg = self.cfg
        self.W = init_weights(cfg)
        self.b = [np.zeros(n, dtype=np.float32) for n in cfg.layers[1:]]
        self.mW = [np.zeros_like(w) for w in self.W]
        self.mb = [np.zeros_like(v) for v in self.b]
        self.vW = [np.zeros_like(w) for w in self.W]
        self.vb = [np.zeros_like(v) for v in self.b]

    # ---- section 11 ----

    def tensor_names(self) -> list[str]:
        """Names in state order: ``W1, b1, W2, b2, ...`` then the slots."""
        n = len(self.W)
        names = [f"{p}{i + 1}" for i in range(n) for p in ("W", "b")]
        if self.cfg.optimizer == "sgd":
            names += [f"m{p}{i + 1}" for i in range(n) for p in ("W", "b")]
        else:
            names += [f"{s}{p}{i + 1}" for i in range(n) for p in ("W", "b") for s in ("m", "v")]
        return names

    def tensors(self) -> list[F32Array]:
        """The state's tensors in section 11's order."""
        n = len(self.W)
        out: list[F32Array] = []
        for i in range(n):
            out += [self.W[i], self.b[i]]
        for i in range(n):
            if self.cfg.optimizer == "sgd":
                out += [self.mW[i], self.mb[i]]
            else:
                out += [self.mW[i], self.vW[i], self.mb[i], self.vb[i]]
        return out

    # ---- section 5 to 8: one step ----

    def gradients(
        self, x: F32Array, y: Targets
    ) -> tuple[list[F32Array], list[F32Array], np.float32]:
        """Sections 5 and 8: the reduced (and clipped) gradients and the step's loss."""
        cfg, m = self.cfg, self.math
        x = np.ascontiguousarray(x, dtype=np.float32)
        nb = x.shape[0]
        with np.errstate(all="ignore"):
            fw = forward(m, self.W, self.b, x)
            losses, delta, _ = loss_and_delta(m, cfg.loss, fw.z[-1], y)
            gW_s, gb_s = backward(m, self.W, fw, delta)
            gW = [reduce_batch(g, cfg.grad_block) for g in gW_s]
            gb = [reduce_batch(g, cfg.grad_block) for g in gb_s]
            lsum = losses[0]
            for i in range(1, nb):
                lsum = np.float32(lsum + losses[i])
            step_loss = np.float32(lsum / f32i(nb))
            if cfg.clip_norm is not None:
                gW, gb = clip(cfg.clip_norm, gW, gb)
        return gW, gb, step_loss

    def step(self, x: F32Array, y: Targets) -> np.float32:
        """One optimiser step on the batch ``(x, y)``; returns the step's loss.

        Advances ``step`` only: ``epoch`` and ``batch`` count positions in a data set, which
        :meth:`train_steps` keeps.
        """
        gW, gb, step_loss = self.gradients(x, y)
        with np.errstate(all="ignore"):
            self._apply(gW, gb, lr_at(self.cfg, self.step_count))
        self.step_count += 1
        return step_loss

    def _apply(self, gW: list[F32Array], gb: list[F32Array], lr_t: np.float32) -> None:
        """Section 7 on ``W1, b1, W2, b2, ...``: see :func:`optimizer_update`."""
        n = len(self.W)
        params = [t for i in range(n) for t in (self.W[i], self.b[i])]
        m = [t for i in range(n) for t in (self.mW[i], self.mb[i])]
        v = [t for i in range(n) for t in (self.vW[i], self.vb[i])]
        grads = [t for i in range(n) for t in (gW[i], gb[i])]
        matrices = [True, False] * n  # W{l}, b{l}
        self.b1t, self.b2t = optimizer_update(
            self.cfg, self.math, params, grads, m, v, self.b1t, self.b2t, lr_t, matrices
        )
        self.W, self.b = params[0::2], params[1::2]
        self.mW, self.mb = m[0::2], m[1::2]
        self.vW, self.vb = v[0::2], v[1::2]

    def _outputs(self, x: F32Array) -> tuple[F32Array, F32Array]:
        with np.errstate(all="ignore"):
            fw = forward(self.math, self.W, self.b, np.ascontiguousarray(x, dtype=np.float32))
            z = fw.z[-1]
            if self.cfg.loss == "mse":
                return z, z
            return z, softmax(self.math, z)[2]


def optimizer_update(
    cfg: Config,
    m_: Math,
    params: list[F32Array],
    grads: Sequence[F32Array],
    m: list[F32Array],
    v: list[F32Array],
    b1t: np.float32,
    b2t: np.float32,
    lr_t: np.float32,
    matrices: Sequence[bool] | None = None,
) -> tuple[np.float32, np.float32]:
    """Section 7, tensor by tensor, cell by cell (vectorised: cells are independent).

    Replaces the items of ``params``, ``m`` (first moments, or SGD's buffers) and ``v``
    (second moments; unused by SGD) with the updated tensors; returns the new ``(b1t, b2t)``.
    ``matrices`` says which tensors are weight matrices or tables: with
    ``decay_params="matrices"`` only those decay, the others updated as with ``weight_decay``
    0 (no AdamW factor at all).
    """
    decays = [True] * len(params)
    if cfg.decay_params == "matrices":
        assert matrices is not None, 'decay_params="matrices" needs the tensors\' kinds'
        decays = list(matrices)
    if cfg.optimizer == "sgd":
        wd, mom = cfg.weight_decay, cfg.momentum
        for i, g0 in enumerate(grads):
            # Reading: "with weight_decay" is weight_decay != 0 (0 * p could turn a -0
            # gradient into +0, so skipping it is observable). The buffer update below runs
            # on every step, also with momentum 0 (PyTorch skips it then).
            g = g0 + wd * params[i] if wd != ZERO and decays[i] else g0
            m[i] = mom * m[i] + g
            params[i] = params[i] - lr_t * m[i]
        return b1t, b2t
    b1, b2 = cfg.beta1, cfg.beta2
    b1t = np.float32(b1t * b1)
    b2t = np.float32(b2t * b2)
    bc1 = np.float32(ONE - b1t)
    bc2 = np.float32(ONE - b2t)
    c1 = np.float32(ONE - b1)
    c2 = np.float32(ONE - b2)
    decay = np.float32(ONE - np.float32(lr_t * cfg.weight_decay))
    for i, g in enumerate(grads):
        p = params[i]
        if cfg.optimizer == "adamw" and decays[i]:
            p = p * decay
        m[i] = b1 * m[i] + c1 * g
        v[i] = b2 * v[i] + c2 * (g * g)
        params[i] = p - (lr_t * (m[i] / bc1)) / (m_.sqrt(v[i] / bc2) + cfg.eps)
    return b1t, b2t


def clip(
    c: np.float32, gW: list[F32Array], gb: list[F32Array]
) -> tuple[list[F32Array], list[F32Array]]:
    """Section 8 on the gradients ``W1, b1, W2, b2, ...``: see :func:`clip_tensors`."""
    out = clip_tensors(c, [g for i in range(len(gW)) for g in (gW[i], gb[i])])
    return out[0::2], out[1::2]


def clip_tensors(c: np.float32, grads: Sequence[F32Array]) -> list[F32Array]:
    """Section 8: ``q = sum g*g`` over every cell of ``grads`` (in tensor order) from +0,
    ``n = sqrt(q)`` correctly rounded; if ``n > c`` every cell is multiplied by ``c / n``."""
    q = ZERO
    for g in grads:
        for v in (g * g).reshape(-1):
            q = np.float32(q + v)
    n = ieee_sqrt(np.array([q], dtype=np.float32))[0]
    if n > c:
        f = np.float32(c / n)
        return [g * f for g in grads]
    return list(grads)


# ---------------------------------------------------------------------------
# Section 12: digits and the split
# ---------------------------------------------------------------------------


def load_digits_f32() -> tuple[F32Array, IntArray]:
    """scikit-learn's ``load_digits()`` (bundled, no download): pixels ``/ 16``, labels."""
    # Only the digits case needs scikit-learn (untyped).
    from sklearn.datasets import load_digits  # type: ignore[import-untyped,unused-ignore]

    d = load_digits()
    x = np.asarray(d.data).astype(np.float32) / np.float32(16)
    return x, np.asarray(d.target, dtype=np.int64)


def split(n: int, test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """Section 12: ``(train, test)`` index lists."""
    n_test = math.ceil(test_size * n)
    order = permutation(n, Stream(seed, SPLIT, 0))
    return order[n_test:], order[:n_test]


# ---------------------------------------------------------------------------
# Golden fixture
# ---------------------------------------------------------------------------

#: The fixture's data, as integer formulas a Rust test can regenerate (``%`` on non-negative
#: operands; ``f32(k)`` as in the spec; ``/`` a binary32 division).
DATA_FORMULA = {
    "x": "x[s][i] = f32(((s*7 + i*3) % 11) - 5) / f32(4)",
    "labels": "y[s] = (s*5) % K",
    "targets": "t[s][o] = f32(((s*3 + o*5) % 7) - 3) / f32(8)",
}


def case_data(n: int, n_in: int, k: int, loss: str) -> tuple[F32Array, Targets]:
    """The data of :data:`DATA_FORMULA` for ``n`` samples (labels or targets by ``loss``)."""
    four, eight = f32i(4), f32i(8)
    x = np.array(
        [[f32i(((s * 7 + i * 3) % 11) - 5) / four for i in range(n_in)] for s in range(n)],
        dtype=np.float32,
    ).reshape(n, n_in)
    if loss == "cross_entropy":
        return x, np.array([(s * 5) % k for s in range(n)], dtype=np.int64)
    t = np.array(
        [[f32i(((s * 3 + o * 5) % 7) - 3) / eight for o in range(k)] for s in range(n)],
        dtype=np.float32,
    ).reshape(n, k)
    return x, t


#: The small cases: (name, N, config keys). Each runs FIXTURE_STEPS recorded steps, then on to
#: FIXTURE_EPOCHS completed epochs.
CASES: list[tuple[str, int, dict[str, Any]]] = [
    (
        "ce_seedmath_seedinit_adam_b1",
        10,
        dict(
            layers=[4, 6, 3], math="seed", init="seed", seed=1, lr=0.01, batch_size=1, shuffle=False
        ),
    ),
    (
        "ce_ieee_he_adam_b3_shuffle",
        10,
        dict(layers=[4, 6, 3], seed=7, lr=0.01, batch_size=3),
    ),
    (
        "ce_ieee_glorot_adamw_b4_droplast_linear_warmup",
        10,
        dict(
            layers=[4, 6, 3],
            init="glorot",
            seed=3,
            optimizer="adamw",
            lr=0.02,
            weight_decay=0.1,
            schedule="linear",
            warmup_steps=3,
            total_steps=7,
            batch_size=4,
            drop_last=True,
        ),
    ),
    (
        "ce_seedmath_he_sgd_momentum_step_b4",
        10,
        dict(
            layers=[4, 5, 3],
            math="seed",
            seed=-5,
            optimizer="sgd",
            lr=0.1,
            momentum=0.9,
            weight_decay=0.01,
            schedule="step",
            step_size=3,
            gamma=0.5,
            batch_size=4,
            shuffle=True,
        ),
    ),
    (
        "ce_seedmath_seedinit_negseed_adam_b3_clip",
        10,
        dict(
            layers=[4, 6, 3],
            math="seed",
            init="seed",
            seed=-3,
            lr=0.05,
            clip_norm=0.05,
            batch_size=3,
            shuffle=False,
        ),
    ),
    (
        "mse_ieee_he_sgd_b3_constant_warmup",
        10,
        dict(
            layers=[4, 5, 2],
            loss="mse",
            seed=11,
            optimizer="sgd",
            lr=0.05,
            warmup_steps=4,
            batch_size=3,
            shuffle=False,
        ),
    ),
    (
        "mse_seedmath_glorot_adam_b4_droplast_clip",
        10,
        dict(
            layers=[4, 6, 2],
            loss="mse",
            math="seed",
            init="glorot",
            seed=2,
            lr=0.01,
            clip_norm=0.1,
            batch_size=4,
            drop_last=True,
        ),
    ),
    (
        "ce_ieee_deep_adamw_b4_gradblock2_clip_step_warmup",
        10,
        dict(
            layers=[5, 7, 6, 3],
            seed=42,
            optimizer="adamw",
            lr=0.01,
            schedule="step",
            warmup_steps=2,
            step_size=4,
            gamma=0.7,
            clip_norm=0.2,
            batch_size=4,
            grad_block=2,
        ),
    ),
    (
        "mse_ieee_deep_sgd_b4_gradblock3_linear",
        10,
        dict(
            layers=[5, 7, 6, 3],
            loss="mse",
            seed=5,
            optimizer="sgd",
            lr=0.05,
            momentum=0.5,
            schedule="linear",
            total_steps=10,
            batch_size=4,
            grad_block=3,
        ),
    ),
]

FIXTURE_STEPS = 12
FIXTURE_EPOCHS = 3

#: The digits case (section 12): defaults except these.
DIGITS_CONFIG: dict[str, Any] = dict(layers=[64, 128, 10], batch_size=32)
DIGITS_SEED = 0
DIGITS_TEST_SIZE = 0.2
DIGITS_EPOCHS = 20


#: Section 1's rows added after the fixtures were first written, with their defaults: a case
#: records them only when set, as a checkpoint does, so the earlier cases stay as they were.
_LATER_KEYS: dict[str, Any] = {"decay_params": "all", "min_lr": None}


def _config_json(d: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (float(v) if isinstance(v, np.floating) else v)
        for k, v in d.items()
        if not (k in _LATER_KEYS and v == _LATER_KEYS[k])
    }


def run_case(name: str, n: int, keys: dict[str, Any]) -> dict[str, Any]:
    """One small case of the fixture."""
    cfg = Config.make(**keys)
    x, y = case_data(n, cfg.layers[0], cfg.layers[-1], cfg.loss)
    tr = Trainer(cfg)
    entry: dict[str, Any] = {
        "name": name,
        "config": _config_json(resolve_config(**keys)),
        "hyper_bits": cfg.hyper_bits(),
        "n": n,
        "batches_per_epoch": tr.batches_per_epoch(n),
        "init_hash": tr.state_hash_hex(),
    }
    steps = []
    for _ in range(FIXTURE_STEPS):
        (loss,) = tr.train_steps(x, y, 1)
        steps.append(
            {
                "step": tr.step_count,
                "epoch": tr.epoch,
                "batch": tr.batch,
                "loss_bits": bits(loss),
                "state_hash": tr.state_hash_hex(),
            }
        )
    entry["steps"] = steps
    # Continue to FIXTURE_EPOCHS more completed epochs (the current partial one counts).
    tr.fit_epochs(x, y, FIXTURE_EPOCHS)
    ev_loss, acc = tr.evaluate(x, y)
    entry["final"] = {
        "epoch": tr.epoch,
        "step": tr.step_count,
        "scalars": tr.scalars(),
        "state_hash": tr.state_hash_hex(),
        "eval_loss_bits": bits(ev_loss),
        "eval_accuracy": acc,
        "tensors": {k: bits_list(v) for k, v in tr.state_dict().items()},
    }
    return entry


def prng_vectors() -> dict[str, Any]:
    """Small known-answer vectors for section 9 (and the split of section 12)."""
    streams = []
    for seed, dom, idx in ((0, INIT, 0), (-1, SHUFFLE, 2), (2**63 - 1, SPLIT, 0)):
        st = Stream(seed, dom, idx)
        streams.append(
            {
                "seed": seed,
                "domain": dom,
                "index": idx,
                "draws": [f"{st.next_u64():016x}" for _ in range(4)],
            }
        )
    perms = [
        {"seed": s, "epoch": e, "n": 10, "order": epoch_order(s, e, 10, True)}
        for s in (0, 1, -7)
        for e in (0, 1, 2)
    ]
    st = Stream(9, SHUFFLE, 0)
    ns = [1, 2, 3, 7, 10, 1000, 2**63 + 5, 2**64 - 1]
    below = {
        "seed": 9,
        "domain": SHUFFLE,
        "index": 0,
        "n": ns,
        "values": [st.below(nn) for nn in ns],
    }
    return {
        "mix64": {str(z): f"{mix64(z):016x}" for z in (0, 1, 2**64 - 1)},
        "streams": streams,
        "below": below,
        "permutations": perms,
        "split_10_0.3_seed0": dict(zip(("train", "test"), split(10, 0.3, 0))),
    }


def run_digits(epochs: int = DIGITS_EPOCHS) -> dict[str, Any]:
    """The digits case: section 12's data and split, trained ``epochs`` epochs."""
    xa, ya = load_digits_f32()
    tr_idx, te_idx = split(xa.shape[0], DIGITS_TEST_SIZE, DIGITS_SEED)
    xtr, ytr, xte, yte = xa[tr_idx], ya[tr_idx], xa[te_idx], ya[te_idx]
    keys = dict(DIGITS_CONFIG, seed=DIGITS_SEED)
    tr = Trainer(**keys)
    per_epoch = []
    for _ in range(epochs):
        losses = tr.fit_epochs(xtr, ytr, 1)
        acc_sum = losses[0]
        for v in losses[1:]:
            acc_sum = np.float32(acc_sum + v)
        mean_step = np.float32(acc_sum / f32i(len(losses)))
        test_loss, test_acc = tr.evaluate(xte, yte)
        per_epoch.append(
            {
                "epoch": tr.epoch,
                "mean_step_loss_bits": bits(mean_step),
                "test_loss_bits": bits(test_loss),
                "test_accuracy": test_acc,
                "state_hash": tr.state_hash_hex(),
            }
        )
    # The training set is evaluated once, at the end (it is most of the evaluation time).
    train_loss, train_acc = tr.evaluate(xtr, ytr)
    return {
        "config": _config_json(resolve_config(**keys)),
        "data": "sklearn load_digits(): x = f32(pixel) / f32(16), labels 0..9",
        "test_size": DIGITS_TEST_SIZE,
        "split_seed": DIGITS_SEED,
        "n_train": len(tr_idx),
        "n_test": len(te_idx),
        "test_indices_first_10": te_idx[:10],
        "epochs": epochs,
        "mean_step_loss": "(sum of the epoch's step losses in order, from the first) "
        "/ f32(steps in the epoch)",
        "per_epoch": per_epoch,
        "final_state_hash": tr.state_hash_hex(),
        "train_loss_bits": bits(train_loss),
        "train_accuracy": train_acc,
        "test_loss_bits": per_epoch[-1]["test_loss_bits"],
        "test_accuracy": per_epoch[-1]["test_accuracy"],
    }


def golden(digits: bool = True) -> dict[str, Any]:
    """Compute the fixture stored in ``tests/golden/general.json``."""
    g: dict[str, Any] = {
        "generator": GENERATOR,
        "spec": "docs/TRAINING.md",
        "data": DATA_FORMULA,
        "fixture_steps": FIXTURE_STEPS,
        "fixture_epochs": FIXTURE_EPOCHS,
        "layout": "per case: init_hash before any step; steps[k] after step k+1 (train_steps, "
        "one at a time); final: after those, train until epoch = (epoch after them) + "
        "fixture_epochs, then evaluate on the case's data; tensors in state order (section 11)",
        "prng": prng_vectors(),
        "cases": [run_case(name, n, keys) for name, n, keys in CASES],
    }
    if digits:
        g["digits"] = run_digits()
    return g


def dump_golden(g: dict[str, Any]) -> str:
    """The fixture's exact file text (tensor bit lists kept on one line each)."""
    return json.dumps(g, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--write``: (re)write the fixture; default / ``--check``: compare with it."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write tests/golden/general.json")
    mode.add_argument("--check", action="store_true", help="compare (the default)")
    ap.add_argument("--path", type=Path, default=GOLDEN_PATH)
    ap.add_argument("--no-digits", action="store_true", help="skip (and do not compare) digits")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    g = golden(digits=not args.no_digits)
    print(f"computed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    ignore = ("digits",) if args.no_digits else ()
    return seed_ref.write_or_check(args.path, g, dump_golden(g), args.write, ignore)


if __name__ == "__main__":
    sys.exit(main())
