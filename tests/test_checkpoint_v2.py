"""NXCK v2 from Python: round trips, zero-copy views, damage detection, inspect."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nxrs


def trained(seed: int = 1, sizes: tuple[int, ...] = (6, 10, 4), epochs: int = 3) -> nxrs.Trainer:
    t = nxrs.Trainer(seed=seed, sizes=list(sizes))
    x, y = nxrs.seed_dataset(features=sizes[0], classes=sizes[-1])
    t.train_until(x, y, epochs)
    return t


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.fixture
def saved(tmp_path: Path) -> tuple[nxrs.Trainer, Path]:
    t = trained()
    path = tmp_path / "run.nxck"
    t.save(path)
    return t, path


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    seed=st.integers(-50, 50),
    epochs=st.integers(0, 3),
    lr=st.floats(1e-4, 1.0),
)
def test_round_trip_any_configuration(
    sizes: list[int], seed: int, epochs: int, lr: float, tmp_path_factory: pytest.TempPathFactory
) -> None:
    t = nxrs.Trainer(seed=seed, sizes=sizes, lr=lr)
    x, y = nxrs.seed_dataset(samples=3, features=sizes[0], classes=sizes[-1])
    t.train_until(x, y, epochs)
    path = tmp_path_factory.mktemp("rt") / "c.nxck"
    t.save(path)
    back = nxrs.Trainer.load(path)
    assert back.state_hash() == t.state_hash()
    assert back.sizes == sizes and back.hyperparameters == t.hyperparameters
    with nxrs.open(path) as ck:
        assert list(ck.keys()) == list(t.state_dict())
        for name, array in t.state_dict().items():
            view = ck[name]
            assert view.shape == array.shape and np.array_equal(bits(view), bits(array))
        assert ck.scalars["epoch"] == epochs
        assert ck.to_trainer().state_hash() == t.state_hash()
    first = path.read_bytes()
    t.save(path)
    assert path.read_bytes() == first  # the same state always gives the same bytes


def test_views_are_zero_copy_read_only_and_aligned(saved: tuple[nxrs.Trainer, Path]) -> None:
    _, path = saved
    ck = nxrs.open(path)
    assert ck.is_mapped
    w1 = ck["W1"]
    assert w1.base is ck and not w1.flags.writeable
    assert w1.ctypes.data % 64 == 0
    assert np.shares_memory(w1, ck["W1"])  # two views, one memory: no copy
    with pytest.raises(ValueError, match="read-only"):
        w1[0, 0] = 1.0
    with pytest.raises(KeyError):
        ck["nope"]


def test_views_outlive_close_and_the_checkpoint_object(saved: tuple[nxrs.Trainer, Path]) -> None:
    t, path = saved
    with nxrs.open(path) as ck:
        vw2 = ck["vW2"]
    with pytest.raises(ValueError, match="closed"):
        ck["W1"]
    del ck
    gc.collect()
    assert np.array_equal(bits(vw2), bits(t.state_dict()["vW2"]))


def test_saving_over_a_mapped_file_leaves_open_views_intact(
    saved: tuple[nxrs.Trainer, Path],
) -> None:
    _, path = saved
    ck = nxrs.open(path)
    before = ck["W1"].copy()
    view = ck["W1"]
    other = trained(seed=7, epochs=5)
    other.save(path)
    assert np.array_equal(bits(view), bits(before))
    assert nxrs.Trainer.load(path).state_hash() == other.state_hash()


def test_v1_and_v2_load_alike_and_are_told_apart(saved: tuple[nxrs.Trainer, Path]) -> None:
    t, v2 = saved
    v1 = v2.with_name("run.v1")
    t.save(v1, format="v1")
    assert nxrs.checkpoint_format(v1) == 1 and nxrs.checkpoint_format(v2) == 2
    from_v1, from_v2 = nxrs.Trainer.load(v1), nxrs.Trainer.load(v2)
    # Everything but the step counter, which v1 does not hold (it reads as 0).
    assert from_v1.steps == 0 and from_v2.steps == t.steps
    a, b = from_v1.state_dict(), from_v2.state_dict()
    assert all(np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in b)
    assert (from_v1.epoch, from_v1.b1t, from_v1.b2t) == (from_v2.epoch, from_v2.b1t, from_v2.b2t)
    with pytest.raises(nxrs.UnsupportedVersionError):
        nxrs.open(v1)


def test_restore_into_another_model_is_a_mismatch(saved: tuple[nxrs.Trainer, Path]) -> None:
    _, path = saved
    other = nxrs.Trainer(sizes=[6, 11, 4])
    before = other.state_hash()
    with pytest.raises(nxrs.MismatchError):
        other.restore(path)
    assert other.state_hash() == before


@pytest.mark.parametrize("fmt", ["v1", "v2"])
def test_every_truncation_is_a_length_error(
    fmt: Literal["v1", "v2"], saved: tuple[nxrs.Trainer, Path], tmp_path: Path
) -> None:
    t, _ = saved
    path = tmp_path / f"good.{fmt}"
    t.save(path, format=fmt)
    good = path.read_bytes()
    cut = tmp_path / "cut"
    for length in range(len(good)):
        cut.write_bytes(good[:length])
        with pytest.raises(nxrs.LengthError):
            nxrs.Trainer.load(cut)
        if fmt == "v2":
            with pytest.raises(nxrs.LengthError):
                nxrs.open(cut, verify=False)


def test_every_single_bit_flip_is_detected(
    saved: tuple[nxrs.Trainer, Path], tmp_path: Path
) -> None:
    _, path = saved
    good = path.read_bytes()
    damaged = tmp_path / "flip.nxck"
    undetected = []
    for bit in range(len(good) * 8):
        content = bytearray(good)
        content[bit // 8] ^= 1 << (bit % 8)
        damaged.write_bytes(content)
        try:
            nxrs.open(damaged, verify=True)
            undetected.append(bit)
        except nxrs.CheckpointError:
            pass
    print(f"{len(good) * 8} single-bit flips, {len(undetected)} undetected")
    assert undetected == []


def test_a_flip_in_tensor_data_names_the_tensor(
    saved: tuple[nxrs.Trainer, Path], tmp_path: Path
) -> None:
    _, path = saved
    with nxrs.open(path) as ck:
        row = next(r for r in ck.tensor_table() if r["name"] == "mW2")
    content = bytearray(path.read_bytes())
    content[row["offset"] + 5] ^= 0x01
    damaged = tmp_path / "d.nxck"
    damaged.write_bytes(content)
    with pytest.raises(nxrs.ChecksumError, match="mW2"):
        nxrs.Trainer.load(damaged)
    lazy = nxrs.open(damaged, verify=False)  # header checks only: opens
    lazy.verify_tensor("W1")
    with pytest.raises(nxrs.ChecksumError, match="mW2"):
        lazy.verify()
    with pytest.raises(nxrs.ChecksumError, match="mW2"):
        lazy.to_trainer()  # never a trainer from unverified bytes


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "f.nxck"
    for prefix in (b"", b"NXCK", b"NXCK\xff\xff\xff\xff\x02\x00\x00\x00"):
        path.write_bytes(prefix + data)
        with pytest.raises(nxrs.CheckpointError):
            nxrs.open(path)
        with pytest.raises(nxrs.CheckpointError):
            nxrs.Trainer.load(path)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args], capture_output=True, text=True, timeout=120
    )


def test_inspect_v2(saved: tuple[nxrs.Trainer, Path]) -> None:
    _, path = saved
    proc = run_cli("inspect", str(path), "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "NXCK v2" in proc.stdout and "sizes=[6, 10, 4]" in proc.stdout
    assert "epoch=3" in proc.stdout and "lr=0.01 (0x3c23d70a)" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("  W1 ")]
    assert rows and rows[0][-1] == "ok"


def test_inspect_reports_a_bad_tensor(saved: tuple[nxrs.Trainer, Path], tmp_path: Path) -> None:
    _, path = saved
    content = bytearray(path.read_bytes())
    content[-1] ^= 0x80
    bad = tmp_path / "bad.nxck"
    bad.write_bytes(content)
    # Without --verify the tensors' checksums are not computed: nothing to fail.
    lenient = run_cli("inspect", str(bad))
    assert lenient.returncode == 0 and "BAD" not in lenient.stdout
    statuses = [line.rsplit("  ", 1)[-1] for line in lenient.stdout.splitlines()[5:]]
    assert len(statuses) == 12 and set(statuses) == {"not checked"}
    strict = run_cli("inspect", str(bad), "--verify")
    assert strict.returncode == 1 and "1 tensor(s) failed" in strict.stderr
    rows = {line.split()[0]: line.split()[-1] for line in strict.stdout.splitlines()[5:]}
    assert rows["vb2"] == "BAD" and rows["W1"] == "ok"


def test_inspect_v1_and_garbage(saved: tuple[nxrs.Trainer, Path], tmp_path: Path) -> None:
    t, _ = saved
    v1 = tmp_path / "seed.ckpt"
    t.save(v1, format="v1")
    proc = run_cli("inspect", str(v1), "--verify")
    assert proc.returncode == 0 and "NXCK v1" in proc.stdout and "seed model" in proc.stdout
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a checkpoint at all")
    proc = run_cli("inspect", str(garbage))
    assert proc.returncode == 1 and "BadMagicError" in proc.stderr


def test_checkpoint_is_a_read_only_mapping(saved: tuple[nxrs.Trainer, Path]) -> None:
    """Every Mapping operation agrees with the trainer's own state_dict (a copy made without
    the file), names in file order, arrays bit for bit."""
    from collections.abc import ItemsView, KeysView, Mapping, ValuesView

    t, path = saved
    state = t.state_dict()
    with nxrs.open(path) as ck:
        assert isinstance(ck, Mapping) and issubclass(nxrs.Checkpoint, Mapping)
        assert list(ck) == list(state) and len(ck) == len(state) == 12
        assert isinstance(ck.keys(), KeysView) and list(ck.keys()) == list(state)
        assert ck.keys() == set(state)  # set-like, as a dict's keys
        assert isinstance(ck.values(), ValuesView) and isinstance(ck.items(), ItemsView)
        for (name, view), value in zip(ck.items(), ck.values()):
            assert np.array_equal(bits(view), bits(state[name])) and value.shape == view.shape
        assert dict(ck).keys() == state.keys()
        got = ck.get("W1")
        assert got is not None and np.array_equal(bits(got), bits(state["W1"]))
        for missing in ("nope", 1, None, b"W1"):
            assert missing not in ck and ck.get(missing) is None  # type: ignore[arg-type]
            assert ck.get(missing, "default") == "default"  # type: ignore[arg-type]
            with pytest.raises(KeyError):
                ck[missing]  # type: ignore[index]
        keys = ck.keys()
        assert "W1" in ck and "W1" in keys and "nope" not in keys
        for mutate in ("__setitem__", "__delitem__", "pop", "update", "clear"):
            assert not hasattr(ck, mutate)
    with pytest.raises(ValueError, match="closed"):
        list(ck)
    with pytest.raises(ValueError, match="closed"):
        ck.keys()
