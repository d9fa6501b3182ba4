"""Tests of the independent numpy reference of the seed (tests/reference/seed_ref.py).

(a) the reference recomputes tests/golden/seed.json exactly;
(b) self-consistency that can fail (v1 round trip, split run == uninterrupted run);
(c) the primitives and numpy's float32 arithmetic against independent facts;
(d) the vectorised trainer against a literal per-cell transliteration of the seed.
"""

from __future__ import annotations

import importlib
import json
import struct
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
seed_ref = importlib.import_module("reference.seed_ref")

f32 = np.float32


def bits(x: np.float32) -> int:
    return int(np.float32(x).view(np.uint32))


def from_bits(b: int) -> np.float32:
    return np.uint32(b).view(np.float32)


@pytest.fixture(scope="module")
def data():
    return seed_ref.dataset()


@pytest.fixture(scope="module")
def computed_golden():
    return seed_ref.golden()


# ---------------------------------------------------------------- (a) fixture


def test_golden_file_matches_reference(computed_golden):
    on_disk = json.loads(Path(seed_ref.GOLDEN_PATH).read_text())
    assert on_disk == computed_golden


def test_golden_file_text_is_canonical(computed_golden):
    assert Path(seed_ref.GOLDEN_PATH).read_text() == seed_ref.dump_golden(computed_golden)


def test_golden_shape(computed_golden):
    g = computed_golden
    assert g["generator"] == "tests/reference/seed_ref.py"
    assert g["model"] == {
        "nin": 6,
        "nh": 10,
        "nout": 4,
        "nsamp": 8,
        "init_seed": 1,
        "fresh_seed": 99,
    }
    assert len(g["first_step"]["W1_bits"]) == 60
    assert len(g["first_step"]["W2_bits"]) == 40
    assert set(g["epochs"]) == {"1", "400", "800"}
    assert g["first_step"]["scalars"][3:] == [1, 0]  # one step, outside any epoch
    for epoch, e in g["epochs"].items():
        assert e["v1_len"] == 12 + 24 + 4 * (3 * 60 + 3 * 10 + 3 * 40 + 3 * 4)
        assert len(e["v1_sha256"]) == 64
        assert e["scalars"] == [int(epoch), e["b1t_bits"], e["b2t_bits"], 8 * int(epoch), 0]


def test_main_check_passes():
    assert seed_ref.main(["--check"]) == 0


def test_main_check_detects_mismatch(tmp_path, computed_golden):
    g = json.loads(json.dumps(computed_golden))
    g["epochs"]["800"]["seed_hash"] ^= 1
    p = tmp_path / "seed.json"
    p.write_text(json.dumps(g))
    assert seed_ref.main(["--check", "--path", str(p)]) == 1


# ---------------------------------------------------------------- (b) consistency


def test_v1_round_trip(data):
    X, Y = data
    s = seed_ref.mk_state(1)
    seed_ref.train_run(s, X, Y, 3)
    raw = seed_ref.v1_bytes(s)
    assert raw[:4] == b"NXCK"
    assert struct.unpack_from("<II", raw, 4) == (12, 3)
    assert struct.unpack_from("<q", raw, 12)[0] == 3
    back = seed_ref.state_from_v1_bytes(raw)
    assert seed_ref.v1_bytes(back) == raw
    # v1 stores no step counter: it comes back as 0; everything else is the state's.
    assert s.step == 24 and s.batch == 0
    assert back.step == 0 and back.batch == 0
    assert seed_ref.state_hash(back) != seed_ref.state_hash(s)
    back.step = s.step
    assert seed_ref.state_hash(back) == seed_ref.state_hash(s)
    assert seed_ref.seed_hash(back) == seed_ref.seed_hash(s)
    for name in seed_ref.BUFFER_NAMES:
        a, b = getattr(s, name), getattr(back, name)
        assert b.dtype == np.float32
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert back.epoch == 3
    assert bits(back.b1t) == bits(s.b1t) and bits(back.b2t) == bits(s.b2t)


def test_v1_rejects_bad_input():
    raw = seed_ref.v1_bytes(seed_ref.mk_state(1))
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(b"XXCK" + raw[4:])
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(raw[:4] + struct.pack("<I", 11) + raw[8:])
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(raw[:8] + struct.pack("<I", 2) + raw[12:])
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(raw[:-1])
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(raw + b"\0")
    with pytest.raises(ValueError):
        seed_ref.state_from_v1_bytes(raw[:10])


def test_split_run_equals_uninterrupted(data, computed_golden):
    """The seed's T1-T4: 400 epochs, save, load into a fresh mk_state(99), 400 more."""
    X, Y = data
    a = seed_ref.mk_state(1)
    seed_ref.train_run(a, X, Y, 800)

    b = seed_ref.mk_state(1)
    seed_ref.train_run(b, X, Y, 400)
    h_mid = seed_ref.seed_hash(b)
    raw = seed_ref.v1_bytes(b)

    c = seed_ref.mk_state(99)
    assert seed_ref.seed_hash(c) != h_mid
    loaded = seed_ref.state_from_v1_bytes(raw)
    for name in seed_ref.BUFFER_NAMES:  # overwrite the fresh state, as ckpt_load does
        getattr(c, name)[...] = getattr(loaded, name)
    c.epoch, c.b1t, c.b2t = loaded.epoch, loaded.b1t, loaded.b2t
    c.step, c.batch = loaded.step, loaded.batch
    assert seed_ref.seed_hash(c) == h_mid
    # Everything but the step counter, which v1 does not store (the file loads with 0).
    assert seed_ref.v1_bytes(c) == raw
    assert (b.step, c.step) == (3200, 0)
    assert seed_ref.state_hash(c) != seed_ref.state_hash(b)

    seed_ref.train_run(c, X, Y, 800)
    assert c.epoch == 800
    assert seed_ref.seed_hash(c) == seed_ref.seed_hash(a)
    assert seed_ref.v1_bytes(c) == seed_ref.v1_bytes(a)
    assert (a.step, c.step, a.batch, c.batch) == (6400, 3200, 0, 0)
    c.step = a.step
    assert seed_ref.state_hash(c) == seed_ref.state_hash(a)
    assert seed_ref.seed_hash(a) == computed_golden["epochs"]["800"]["seed_hash"]


def test_training_changes_seed_hash(computed_golden):
    g = computed_golden
    assert g["init"]["seed_hash"] != g["epochs"]["400"]["seed_hash"]
    assert g["epochs"]["400"]["seed_hash"] != g["epochs"]["800"]["seed_hash"]
    assert g["init"]["seed_hash"] != g["fresh_init"]["seed_hash"]


def test_train_run_is_noop_at_or_past_target(data):
    X, Y = data
    s = seed_ref.mk_state(1)
    seed_ref.train_run(s, X, Y, 2)
    h = seed_ref.state_hash(s)
    seed_ref.train_run(s, X, Y, 2)
    seed_ref.train_run(s, X, Y, 1)
    assert seed_ref.state_hash(s) == h and s.epoch == 2


def test_train_run_is_train_steps(data):
    X, Y = data
    a = seed_ref.mk_state(1)
    seed_ref.train_run(a, X, Y, 2)
    b = seed_ref.mk_state(1)
    for _ in range(2):
        for s in range(seed_ref.NSAMP):
            seed_ref.train_step(b, X[s], int(Y[s]))
        b.epoch += 1
    assert seed_ref.state_hash(a) == seed_ref.state_hash(b)


def test_seed_hash_sees_weights_only_state_hash_sees_all():
    s = seed_ref.mk_state(1)
    h_seed, h_full = seed_ref.seed_hash(s), seed_ref.state_hash(s)
    t = s.copy()
    t.vb2[3] = f32(1)
    t.b2t = f32(0.5)
    t.epoch = 7
    assert seed_ref.seed_hash(t) == h_seed
    assert seed_ref.state_hash(t) != h_full
    for field in ("step", "batch"):  # each counter alone changes the full-state hash
        w = s.copy()
        setattr(w, field, 1)
        assert seed_ref.seed_hash(w) == h_seed
        assert seed_ref.state_hash(w) != h_full
    u = s.copy()
    u.W2[39] = f32(-0.0)  # only the sign bit of W2's last cell
    assert seed_ref.seed_hash(u) != h_seed
    assert seed_ref.state_hash(u) != h_full


def test_seed_hash_walks_60_cells_of_w2():
    """hstate reads W2 as 60 cells: its 40 then 20 zero cells."""
    s = seed_ref.mk_state(1)
    acc = 1469598103
    cells = [bits(v) for v in s.W1] + [bits(v) for v in s.b1]
    cells += [bits(v) for v in s.W2] + [0] * 20 + [bits(v) for v in s.b2]
    assert len(cells) == 134
    for v in cells:
        acc = ((acc ^ v) * 16777619) % (1 << 56)
    assert seed_ref.seed_hash(s) == acc


def test_state_hash_fnv1a_definition():
    s = seed_ref.mk_state(1)
    raw = seed_ref.state_hash_bytes(s)
    assert len(raw) == 4 + 12 * 4 + 4 * 342 + 4 + 40
    assert raw[:4] == struct.pack("<I", 12)
    assert raw[-44:] == struct.pack("<Iqqqqq", 5, 0, 0x3F800000, 0x3F800000, 0, 0)
    h = 0xCBF29CE484222325
    for byte in raw:
        h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
    assert seed_ref.state_hash(s) == h
    s.step, s.batch = 3, 2
    assert seed_ref.state_hash_bytes(s)[-16:] == struct.pack("<qq", 3, 2)
    # FNV-1a test vector: hash of b"a".
    h = 0xCBF29CE484222325
    h = ((h ^ ord("a")) * 0x100000001B3) % (1 << 64)
    assert h == 0xAF63DC4C8601EC8C


def test_init_and_dataset_values(data):
    X, Y = data
    assert X.dtype == np.float32 and X.shape == (8, 6)
    assert Y.dtype == np.int64 and Y.tolist() == [0, 3, 2, 1, 0, 3, 2, 1]
    assert X[0].tolist() == [-0.75, 0.0, 0.75, -0.25, 0.5, -0.5]
    assert np.array_equal(X[0], X[7])  # the seed's duplicated sample
    s = seed_ref.mk_state(1)
    assert s.W1[0] == f32(-5) / f32(50) and s.W1[1] == f32(2) / f32(50)
    assert s.W2[0] == f32(-4) / f32(50) and s.W2[1] == f32(1) / f32(50)
    for name in seed_ref.BUFFER_NAMES:
        a = getattr(s, name)
        assert a.dtype == np.float32 and a.shape == (seed_ref.BUFFER_SIZES[name],)
    assert s.epoch == 0 and s.b1t == f32(1) and s.b2t == f32(1)
    assert s.step == 0 and s.batch == 0


# ---------------------------------------------------------------- (c) primitives


def test_numpy_f32_division_is_ieee():
    assert bits(f32(1) / f32(3)) == 0x3EAAAAAB
    assert bits(f32(2) / f32(3)) == 0x3F2AAAAB
    assert bits(f32(1) / f32(10)) == 0x3DCCCCCD
    a = np.array([1, 2], dtype=np.float32) / np.array([3, 3], dtype=np.float32)
    assert a.view(np.uint32).tolist() == [0x3EAAAAAB, 0x3F2AAAAB]


def test_no_flush_to_zero():
    tiny = from_bits(1)  # 2**-149
    assert bits(tiny * f32(3)) == 3
    assert bits(from_bits(0x00800000) / f32(4)) == 0x00200000  # subnormal result
    assert bits(from_bits(4) * (f32(9) / f32(10))) == 4  # b1t's fixed point
    a = np.array([from_bits(0x00800000)], dtype=np.float32) / f32(4)
    assert a.view(np.uint32).tolist() == [0x00200000]


def test_seed_constants():
    assert bits(f32(9) / f32(10)) == 0x3F666666
    assert bits(f32(1) / f32(100)) == 0x3C23D70A
    assert seed_ref.seed_le(f32(0), f32(0))


def test_seed_sqrt_known_values():
    assert bits(seed_ref.seed_sqrt(f32(4))) == bits(f32(2))
    assert bits(seed_ref.seed_sqrt(f32(1))) == bits(f32(1))
    assert bits(seed_ref.seed_sqrt(f32(0))) == 0
    assert bits(seed_ref.seed_sqrt(f32(-0.0))) == 0
    arr = seed_ref.seed_sqrt_array(np.array([4, 0, -0.0, 9], dtype=np.float32))
    assert arr.dtype == np.float32
    assert arr.view(np.uint32).tolist() == [bits(f32(2)), 0, 0, bits(f32(3))]


def test_seed_exp_log_known_values():
    assert bits(seed_ref.seed_exp(f32(0))) == bits(f32(1))
    assert bits(seed_ref.seed_exp(f32(-0.0))) == bits(f32(1))
    assert bits(seed_ref.seed_log(f32(1))) == 0
    assert abs(float(seed_ref.seed_exp(f32(1))) - 2.718281828) < 1e-5
    assert abs(float(seed_ref.seed_log(f32(2.718281828))) - 1.0) < 1e-5
    assert abs(float(seed_ref.seed_log(f32(0.25))) + 1.386294361) < 1e-5
    assert bits(seed_ref.seed_exp(f32(-200))) == 0  # ef <= 0
    assert seed_ref.seed_exp(f32(-200)).dtype == np.float32


def test_seed_le_truth_table():
    le = seed_ref.seed_le
    assert le(f32(1), f32(2)) is True
    assert le(f32(2), f32(1)) is False
    assert le(f32(1.5), f32(1.5)) is True
    assert le(f32(-1), f32(-1)) is True
    assert le(f32(-1), f32(0)) is True
    assert le(f32(0), f32(-1)) is False
    assert le(f32(0.0), f32(-0.0)) is True  # 0 - (-0) = +0
    assert le(f32(-0.0), f32(0.0)) is True  # -0 - 0 = -0
    assert le(f32(-0.0), f32(-0.0)) is True
    assert le(from_bits(1), f32(0)) is False  # smallest subnormal
    assert le(from_bits(0x80000001), f32(0)) is True
    arr = seed_ref.seed_le_array(
        np.array([1, 2, 1.5, 0.0, -0.0, 0], dtype=np.float32),
        np.array([2, 1, 1.5, -0.0, 0.0, -1], dtype=np.float32),
    )
    assert arr.tolist() == [True, False, True, True, True, False]


def _round_f32(q: Fraction) -> float:
    """Exact rational -> nearest binary32 (ties to even, subnormals, overflow)."""
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    quantum = Fraction(2) ** (max(e, -126) - 23)
    m = a / quantum
    n = m.numerator // m.denominator
    rem = m - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    v = n * quantum
    r = float("inf") if v >= Fraction(2) ** 128 else float(v)
    return -r if neg else r


_finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(_finite32, _finite32)
def test_numpy_f32_ops_are_correctly_rounded(x, y):
    """numpy float32 +,-,*,/ equal the exactly rounded rational result."""
    fx, fy = f32(x), f32(y)
    qx, qy = Fraction(x), Fraction(y)
    with np.errstate(all="ignore"):
        cases = [(fx + fy, qx + qy), (fx - fy, qx - qy), (fx * fy, qx * qy)]
        if y != 0:
            cases.append((fx / fy, qx / qy))
    for got, exact in cases:
        assert got.dtype == np.float32
        want = _round_f32(exact)
        if want == 0:
            assert float(got) == 0.0
        else:
            assert bits(got) == bits(f32(want)), (x, y, exact)


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, min_value=-120, max_value=20))
def test_exp_array_matches_scalar(x):
    a = seed_ref.seed_exp_array(np.array([x, x], dtype=np.float32))
    s = seed_ref.seed_exp(f32(x))
    assert a.dtype == np.float32 and s.dtype == np.float32
    assert a.view(np.uint32).tolist() == [bits(s)] * 2


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, min_value=0, allow_infinity=False))
def test_sqrt_array_matches_scalar(x):
    a = seed_ref.seed_sqrt_array(np.array([x], dtype=np.float32))
    assert a.view(np.uint32).tolist() == [bits(seed_ref.seed_sqrt(f32(x)))]


# ------------------------------------------------- (d) literal transliteration


def _literal_step(s, x, tgt):
    """The seed's fwd/bwd/train_run-body/adam1, cell by cell with scalar ops."""
    le, sqrt, exp = seed_ref.seed_le, seed_ref.seed_sqrt, seed_ref.seed_exp
    nin, nh, nout = 6, 10, 4
    zero, one = f32(0), f32(1)
    hpre = [zero] * nh
    h = [zero] * nh
    for j in range(nh):
        a = s.b1[j]
        for i in range(nin):
            a = a + s.W1[j * nin + i] * x[i]
        hpre[j] = a
        h[j] = zero if le(a, zero) else a
    lg = [zero] * nout
    for o in range(nout):
        a = s.b2[o]
        for j in range(nh):
            a = a + s.W2[o * nh + j] * h[j]
        lg[o] = a
    mx = lg[0]
    for o in range(1, nout):
        if le(mx, lg[o]):
            mx = lg[o]
    p = [zero] * nout
    sm = zero
    for o in range(nout):
        p[o] = exp(lg[o] - mx)
        sm = sm + p[o]
    for o in range(nout):
        p[o] = p[o] / sm
    dl = [p[o] - one if o == tgt else p[o] for o in range(nout)]
    dh = [zero] * nh
    dW2 = [zero] * (nout * nh)
    for o in range(nout):
        for j in range(nh):
            dW2[o * nh + j] = dl[o] * h[j]
            dh[j] = dh[j] + s.W2[o * nh + j] * dl[o]
    db1 = [zero] * nh
    dW1 = [zero] * (nh * nin)
    for j in range(nh):
        dhp = zero if le(hpre[j], zero) else dh[j]
        db1[j] = dhp
        for i in range(nin):
            dW1[j * nin + i] = dhp * x[i]
    b1c, b2c = f32(9) / f32(10), f32(999) / f32(1000)
    lr, eps = f32(1) / f32(100), f32(1) / f32(100000000)
    s.b1t = s.b1t * b1c
    s.b2t = s.b2t * b2c
    bc1, bc2 = one - s.b1t, one - s.b2t
    for P, G, M, V in (
        (s.W1, dW1, s.mW1, s.vW1),
        (s.b1, db1, s.mb1, s.vb1),
        (s.W2, dW2, s.mW2, s.vW2),
        (s.b2, dl, s.mb2, s.vb2),
    ):
        for w in range(len(P)):
            g = G[w]
            M[w] = b1c * M[w] + (one - b1c) * g
            V[w] = b2c * V[w] + (one - b2c) * (g * g)
            mh = M[w] / bc1
            vh = V[w] / bc2
            P[w] = P[w] - (lr * mh) / (sqrt(vh) + eps)
    s.step += 1


def test_vectorised_matches_literal_transliteration(data, computed_golden):
    X, Y = data
    lit = seed_ref.mk_state(1)
    _literal_step(lit, X[0], int(Y[0]))
    fs = computed_golden["first_step"]
    assert lit.W1.view(np.uint32).tolist() == fs["W1_bits"]
    assert lit.W2.view(np.uint32).tolist() == fs["W2_bits"]
    assert seed_ref.state_hash(lit) == fs["state_hash"]
    assert lit.step == 1
    for s in range(1, 8):
        _literal_step(lit, X[s], int(Y[s]))
    lit.epoch = 1
    assert seed_ref.state_hash(lit) == computed_golden["epochs"]["1"]["state_hash"]
    for _ in range(2):
        for s in range(8):
            _literal_step(lit, X[s], int(Y[s]))
        lit.epoch += 1
    vec = seed_ref.mk_state(1)
    seed_ref.train_run(vec, X, Y, 3)
    assert seed_ref.state_hash(lit) == seed_ref.state_hash(vec)
