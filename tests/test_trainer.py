"""nxrs.Trainer against the independent numpy reference and its golden values, bit for bit."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import nxrs

EPOCHS = ["1", "400", "800"]


def bits(a: Any) -> list[int]:
    return [int(v) for v in np.asarray(a, dtype=np.float32).reshape(-1).view(np.uint32)]


def f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return nxrs.seed_dataset()


def test_dataset_is_the_seeds(data: tuple[np.ndarray, np.ndarray], seed_ref: ModuleType) -> None:
    x, y = data
    ref_x, ref_y = seed_ref.dataset()
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert bits(x) == bits(ref_x)
    assert y.tolist() == ref_y.tolist()


def test_hyperparameters_are_the_seeds_divisions() -> None:
    h = nxrs.Trainer().hyperparameters
    f = np.float32
    assert f32_bits(h["lr"]) == f32_bits(f(1) / f(100))
    assert f32_bits(h["beta1"]) == f32_bits(f(9) / f(10))
    assert f32_bits(h["beta2"]) == f32_bits(f(999) / f(1000))
    assert f32_bits(h["eps"]) == f32_bits(f(1) / f(100000000))


def test_init_matches_reference(golden: dict[str, Any], seed_ref: ModuleType) -> None:
    for seed, key in [(1, "init"), (99, "fresh_init")]:
        t = nxrs.Trainer(seed=seed)
        assert t.hash() == golden[key]["seed_hash"]
        assert t.state_hash() == golden[key]["state_hash"]
        ref = seed_ref.mk_state(seed)
        for name, array in t.state_dict().items():
            assert bits(array) == bits(getattr(ref, name)), name


def test_first_steps_match_reference_tensor_by_tensor(
    data: tuple[np.ndarray, np.ndarray], seed_ref: ModuleType
) -> None:
    """Every cell of every tensor after each of the first 24 steps (3 epochs)."""
    x, y = data
    t = nxrs.Trainer(seed=1)
    ref = seed_ref.mk_state(1)
    for step in range(24):
        s = step % len(y)
        t.step(x[s], int(y[s]))
        seed_ref.train_step(ref, x[s], int(y[s]))
        for name, array in t.state_dict().items():
            assert bits(array) == bits(getattr(ref, name)), f"step {step}, tensor {name}"
        assert f32_bits(t.b1t) == f32_bits(ref.b1t) and f32_bits(t.b2t) == f32_bits(ref.b2t)


def test_first_step_matches_golden(
    data: tuple[np.ndarray, np.ndarray], golden: dict[str, Any]
) -> None:
    x, y = data
    t = nxrs.Trainer(seed=1)
    t.step(x[0], int(y[0]))
    first = golden["first_step"]
    state = t.state_dict()
    assert bits(state["W1"]) == first["W1_bits"]
    assert bits(state["W2"]) == first["W2_bits"]
    assert t.state_hash() == first["state_hash"]


def test_epochs_match_golden(
    data: tuple[np.ndarray, np.ndarray], golden: dict[str, Any], tmp_path: Path
) -> None:
    x, y = data
    t = nxrs.Trainer(seed=1)
    for epoch in EPOCHS:
        t.train_until(x, y, int(epoch))
        want = golden["epochs"][epoch]
        assert t.epoch == int(epoch)
        assert t.hash() == want["seed_hash"]
        assert t.state_hash() == want["state_hash"]
        assert f32_bits(t.b1t) == want["b1t_bits"] and f32_bits(t.b2t) == want["b2t_bits"]
        path = tmp_path / f"epoch{epoch}.ckpt"
        t.save(path, format="v1")
        content = path.read_bytes()
        assert len(content) == want["v1_len"]
        assert hashlib.sha256(content).hexdigest() == want["v1_sha256"]


def test_v1_bytes_equal_the_references(
    data: tuple[np.ndarray, np.ndarray], seed_ref: ModuleType, tmp_path: Path
) -> None:
    x, y = data
    t = nxrs.Trainer(seed=1)
    t.train_until(x, y, 2)
    ref = seed_ref.mk_state(1)
    seed_ref.train_run(ref, *seed_ref.dataset(), 2)
    t.save(tmp_path / "a.ckpt", format="v1")
    assert (tmp_path / "a.ckpt").read_bytes() == seed_ref.v1_bytes(ref)


def test_python_steps_equal_train_until(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    by_steps = nxrs.Trainer(seed=1)
    losses = [by_steps.step(x[s], int(y[s])) for _ in range(10) for s in range(len(y))]
    by_epochs = nxrs.Trainer(seed=1)
    by_epochs.train_until(x, y, 10)
    assert by_steps.hash() == by_epochs.hash()
    assert by_steps.epoch == 0 and by_epochs.epoch == 10  # step() never counts epochs
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_split_run_through_v1_equals_uninterrupted(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    x, y = data
    whole = nxrs.Trainer(seed=1)
    whole.train_until(x, y, 60)
    first = nxrs.Trainer(seed=1)
    first.train_until(x, y, 25)
    first.save(tmp_path / "mid.ckpt", format="v1")
    resumed = nxrs.Trainer.load(tmp_path / "mid.ckpt")
    assert resumed.steps == 0  # v1 stores no step counter: it reads as 0
    resumed.train_until(x, y, 60)
    # Everything but the step counter is the uninterrupted run's, bit for bit.
    assert same_but_steps(resumed, whole)
    assert resumed.steps == 35 * 8 and whole.steps == 60 * 8


def same_but_steps(a: nxrs.Trainer, b: nxrs.Trainer) -> bool:
    """Every tensor's bits, epoch, batch, b1t and b2t equal (not the step counter)."""
    sa, sb = a.state_dict(), b.state_dict()
    return (
        list(sa) == list(sb)
        and all(bits(sa[k]) == bits(sb[k]) for k in sa)
        and (a.epoch, a.batch, f32_bits(a.b1t), f32_bits(a.b2t))
        == (b.epoch, b.batch, f32_bits(b.b1t), f32_bits(b.b2t))
    )


def test_state_dict_is_a_copy_with_model_shapes(seed_ref: ModuleType) -> None:
    t = nxrs.Trainer(seed=1)
    state = t.state_dict()
    assert tuple(state) == seed_ref.BUFFER_NAMES
    assert state["W1"].shape == (10, 6) and state["vW2"].shape == (4, 10)
    assert state["b1"].shape == (10,) and state["mb2"].shape == (4,)
    before = t.state_hash()
    state["W1"][:] = 7
    assert t.state_hash() == before


def test_other_sizes_train(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    t = nxrs.Trainer(seed=3, sizes=[6, 5, 7, 4])
    assert t.sizes == [6, 5, 7, 4]
    t.train_until(x, y, 3)
    assert t.state_dict()["W3"].shape == (4, 7)


def test_repr() -> None:
    assert repr(nxrs.Trainer()).startswith("Trainer(sizes=[6, 10, 4], epoch=0, state_hash=0x")


def test_strided_inputs_equal_contiguous(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    strided_x = np.repeat(x, 2, axis=1)[:, ::2]  # a non-contiguous view of the same values
    assert not strided_x.flags.c_contiguous and np.array_equal(strided_x, x)
    a, b = nxrs.Trainer(), nxrs.Trainer()
    a.step(x[1], int(y[1]))
    b.step(strided_x[1], int(y[1]))
    a.train_until(x, y, 2)
    b.train_until(strided_x, y, 2)
    assert a.state_hash() == b.state_hash()


@pytest.mark.parametrize(
    "dtype",
    ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", ">i4", ">u8"],
)
def test_labels_of_any_integer_dtype_train_as_int64(
    data: tuple[np.ndarray, np.ndarray], golden: dict[str, Any], dtype: str
) -> None:
    x, y = data
    t = nxrs.Trainer(seed=1)
    t.train_until(x, y.astype(dtype), 1)
    t.step(x[0], np.dtype(dtype).type(y[0]))
    want = nxrs.Trainer(seed=1)
    want.train_until(x, y, 1)
    assert want.state_hash() == golden["epochs"]["1"]["state_hash"]
    want.step(x[0], int(y[0]))
    assert t.state_hash() == want.state_hash()


def test_lists_go_through_asarray(
    data: tuple[np.ndarray, np.ndarray], golden: dict[str, Any]
) -> None:
    x, y = data
    t = nxrs.Trainer(seed=1)
    # Python floats are float64 under np.asarray; the seed's features are exact in float32.
    t.train_until(x.tolist(), y.tolist(), 1)
    assert t.state_hash() == golden["epochs"]["1"]["state_hash"]


def test_float64_features_are_rounded_by_numpy(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, y = data
    # Values float32 cannot hold, so the rounding rule matters: rounding down would differ.
    x64 = x.astype(np.float64) + 1 / 3
    rounded = x64.astype(np.float32)
    down = np.where(
        rounded.astype(np.float64) > x64, np.nextafter(rounded, np.float32(-np.inf)), rounded
    )
    assert not np.array_equal(rounded, down)
    a, b, c = nxrs.Trainer(seed=1), nxrs.Trainer(seed=1), nxrs.Trainer(seed=1)
    a.train_until(x64, y, 2)
    b.train_until(rounded, y, 2)
    c.train_until(down, y, 2)
    assert a.state_hash() == b.state_hash() != c.state_hash()
    a.step(x64[3], int(y[3]))
    b.step(rounded[3], int(y[3]))
    assert a.state_hash() == b.state_hash()


def _f32_bits(values: list[float] | np.ndarray) -> list[int]:
    return np.asarray(values, dtype=np.float32).view(np.uint32).tolist()


def _trunc_mod(a: int, m: int) -> int:
    """C's ``%``: the remainder with the sign of ``a``."""
    return abs(a) % m * (1 if a >= 0 else -1)


@pytest.mark.parametrize("seed", [2**63 - 1, 2**63 - 2, 2**62 + 12345, -(2**63), -1])
def test_init_is_exact_for_every_i64_seed(seed: int) -> None:
    """The init formula in Python big ints (no overflow possible) and numpy float32 division.

    ``W1[k] = ((k*7 + seed) % 13 - 6) / 50``, ``W2[k] = ((k*5 + seed) % 11 - 5) / 50``, ``%``
    truncating as in the seed's C (equal to Python's for seed >= 0).
    """
    t = nxrs.Trainer(seed=seed).state_dict()
    f = np.float32
    for name, mul, mod, n in [("W1", 7, 13, 60), ("W2", 5, 11, 40)]:
        want = [f(_trunc_mod(k * mul + seed, mod) - mod // 2) / f(50) for k in range(n)]
        assert _f32_bits(t[name].reshape(-1)) == _f32_bits(want), name


def test_init_for_the_largest_seed_matches_the_reference(seed_ref: ModuleType) -> None:
    seed = 2**63 - 1
    ref = seed_ref.mk_state(seed)
    for name, array in nxrs.Trainer(seed=seed).state_dict().items():
        assert bits(array) == bits(getattr(ref, name)), name
