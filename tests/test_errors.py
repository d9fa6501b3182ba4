"""Bad input gets a typed nxrs exception and loses nothing."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import nxrs

EXCEPTIONS = [
    nxrs.NxrsError,
    nxrs.ConfigError,
    nxrs.InputError,
    nxrs.CheckpointError,
    nxrs.BadMagicError,
    nxrs.UnsupportedVersionError,
    nxrs.LengthError,
    nxrs.MismatchError,
    nxrs.HeaderError,
    nxrs.ChecksumError,
]


@pytest.mark.parametrize("exc", EXCEPTIONS)
def test_exception_family(exc: type[Exception]) -> None:
    assert issubclass(exc, nxrs.NxrsError)
    assert exc.__module__ == "nxrs" and getattr(nxrs, exc.__name__) is exc
    err = pickle.loads(pickle.dumps(exc("message")))
    assert type(err) is exc and str(err) == "message"


def test_checkpoint_errors_are_checkpoint_errors() -> None:
    for exc in EXCEPTIONS[4:]:
        assert issubclass(exc, nxrs.CheckpointError)


@pytest.fixture
def trained(tmp_path: Path) -> tuple[nxrs.Trainer, Path]:
    x, y = nxrs.seed_dataset()
    t = nxrs.Trainer(seed=1)
    t.train_until(x, y, 3)
    path = tmp_path / "good.ckpt"
    t.save(path, format="v1")
    return t, path


def test_bad_config() -> None:
    with pytest.raises(nxrs.ConfigError, match="at least"):
        nxrs.Trainer(sizes=[6])
    with pytest.raises(nxrs.ConfigError, match="layer size 0"):
        nxrs.Trainer(sizes=[6, 0, 4])


def test_bad_samples() -> None:
    t = nxrs.Trainer()
    with pytest.raises(nxrs.InputError, match="6"):
        t.step(np.zeros(5, np.float32), 0)
    with pytest.raises(nxrs.InputError, match="label 4"):
        t.step(np.zeros(6, np.float32), 4)
    with pytest.raises(nxrs.InputError, match="label -1"):
        t.step(np.zeros(6, np.float32), -1)
    with pytest.raises(TypeError):
        t.step(np.zeros(6, np.float64), 0)  # no silent rounding of float64 input
    x, y = nxrs.seed_dataset()
    with pytest.raises(nxrs.InputError):
        t.train_until(x[:, :5], y, 1)
    with pytest.raises(nxrs.InputError):
        t.train_until(x, y + 4, 1)
    assert t.epoch == 0


def corrupt_cases(good: bytes) -> list[tuple[bytes, type[Exception]]]:
    return [
        (good[:-1], nxrs.LengthError),
        (good + b"\0", nxrs.LengthError),
        (good[:7], nxrs.LengthError),
        (b"", nxrs.LengthError),
        (b"XXCK" + good[4:], nxrs.BadMagicError),
        (good[:4] + (11).to_bytes(4, "little") + good[8:], nxrs.MismatchError),
        (good[:8] + (4).to_bytes(4, "little") + good[12:], nxrs.MismatchError),
        # b1t's scalar with bits above 32: not a binary32 pattern.
        (good[:20] + (1 << 40).to_bytes(8, "little") + good[28:], nxrs.HeaderError),
        (good[:12] + (-5).to_bytes(8, "little", signed=True) + good[20:], nxrs.HeaderError),
    ]


def test_corrupt_v1_files_raise_and_change_nothing(
    trained: tuple[nxrs.Trainer, Path], tmp_path: Path
) -> None:
    _, good_path = trained
    good = good_path.read_bytes()
    victim = nxrs.Trainer(seed=99)
    before = victim.state_hash()
    for k, (content, exc) in enumerate(corrupt_cases(good)):
        path = tmp_path / f"bad{k}.ckpt"
        path.write_bytes(content)
        with pytest.raises(exc):
            victim.restore(path)
        with pytest.raises(exc):
            nxrs.Trainer.load(path)
        assert victim.state_hash() == before, f"case {k} changed the trainer"


def test_model_mismatch(trained: tuple[nxrs.Trainer, Path]) -> None:
    _, path = trained
    other = nxrs.Trainer(sizes=[6, 9, 4])
    with pytest.raises(nxrs.CheckpointError):
        other.restore(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        nxrs.Trainer.load(tmp_path / "nope.ckpt")
    assert info.value.filename == str(tmp_path / "nope.ckpt")


def test_unknown_save_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        nxrs.Trainer().save(tmp_path / "x", format="v9")
