"""Bad input gets a typed nxrs exception and loses nothing."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

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
        # A MismatchError is a sound file of another run, not an unreadable one.
        assert issubclass(exc, nxrs.CheckpointError) == (exc is not nxrs.MismatchError)


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


@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        ([-1, 4], r"layer size -1 is outside 1\.\.=16777216"),
        ([6, -10, 4], "layer size -10"),
        ([6, 2**24 + 1], "layer size 16777217"),
        ([6, 2**63 - 1], "layer size 9223372036854775807"),
        ([2**70, 4], r"sizes\[0\] = 1180591620717411303424 does not fit in a 64-bit"),
        ([6, -(2**64)], r"sizes\[1\] = -18446744073709551616"),
        ([], "at least an input and an output"),
        ([6], "at least an input and an output"),
    ],
)
def test_bad_sizes_are_config_errors(sizes: list[int], match: str) -> None:
    with pytest.raises(nxrs.ConfigError, match=match):
        nxrs.Trainer(sizes=sizes)


NAN, INF = float("nan"), float("inf")
RATE_RANGE = re.escape(
    "finite, positive and normal as binary32: 1.1754944e-38 (2^-126) ..= 3.4028235e38"
)
BETA_RANGE = re.escape("0 <= value < 1")


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        *[
            (name, value, shown)
            for name in ("lr", "eps")
            for value, shown in [
                (NAN, r"NaN \(binary32 NaN\)"),
                (INF, r"inf \(binary32 inf\)"),
                (-INF, r"-inf \(binary32 -inf\)"),
                (-0.01, r"-0\.01 \(binary32 -0\.01\)"),
                (0.0, r"0\.0 \(binary32 0\.0\)"),
                (1e40, r"1e40 \(binary32 inf\)"),  # finite as a Python float, inf as binary32
                (1e-50, r"1e-50 \(binary32 0\.0\)"),  # rounds to 0
                (1e-40, r"1e-40 \(binary32 1e-40\)"),  # subnormal as binary32
            ]
        ],
        *[
            (name, value, shown)
            for name in ("beta1", "beta2")
            for value, shown in [
                (1.0, r"1\.0 \(binary32 1\.0\)"),
                (1.5, r"1\.5 \(binary32 1\.5\)"),
                (-1.0, r"-1\.0 \(binary32 -1\.0\)"),
                (NAN, r"NaN \(binary32 NaN\)"),
                (INF, r"inf \(binary32 inf\)"),
                (0.999999999, r"0\.999999999 \(binary32 1\.0\)"),  # rounds to 1
            ]
        ],
    ],
)
def test_bad_hyperparameters_are_config_errors(name: str, value: float, shown: str) -> None:
    accepted = BETA_RANGE if name.startswith("beta") else RATE_RANGE
    match = f"{name} = {shown} is outside the accepted range: {accepted}"
    with pytest.raises(nxrs.ConfigError, match=match):
        nxrs.Trainer(**{name: value})


def test_hyperparameter_edges_are_accepted() -> None:
    smallest_normal = float(np.finfo(np.float32).tiny)
    largest = float(np.finfo(np.float32).max)
    for kwargs in [
        {"beta1": 0.0, "beta2": 0.0},
        {"beta1": float(np.nextafter(np.float32(1), np.float32(0)))},
        {"lr": smallest_normal, "eps": largest},
        {"lr": largest, "eps": smallest_normal},
    ]:
        h = nxrs.Trainer(**kwargs).hyperparameters
        assert all(h[k] == v for k, v in kwargs.items())


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 2**100])
def test_seeds_outside_i64_are_config_errors(seed: int) -> None:
    with pytest.raises(nxrs.ConfigError, match=f"seed = {seed} does not fit in a 64-bit"):
        nxrs.Trainer(seed=seed)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((10**6, 10**6, 4), "1000000000000 feature values, more than the limit 268435456"),
        ((2**14 + 1, 2**14, 4), "more than the limit 268435456"),
        ((2**63, 2, 4), "samples = 9223372036854775808 does not fit in a 64-bit"),
        ((8, 2**64, 4), "features = 18446744073709551616 does not fit"),
        ((-1, 2, 4), "-1 samples of 2 features"),
        ((8, -6, 4), "8 samples of -6 features"),
        ((0, 6, 4), "0 samples of 6 features"),
        ((8, 0, 4), "8 samples of 0 features"),
        ((8, 6, 0), "classes = 0 is not at least 1"),
        ((8, 6, -4), "classes = -4 is not at least 1"),
        ((8, 6, 2**65), "classes = 36893488147419103232 does not fit"),
    ],
)
def test_seed_dataset_sizes_are_bounded(args: tuple[int, int, int], match: str) -> None:
    with pytest.raises(nxrs.InputError, match=match):
        nxrs.seed_dataset(*args)


def test_seed_dataset_accepts_one_sample_of_one_feature() -> None:
    x, y = nxrs.seed_dataset(1, 1, 1)
    assert x.shape == (1, 1) and y.tolist() == [0]


def test_bad_samples() -> None:
    t = nxrs.Trainer()
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match="6"):
        t.step(np.zeros(5, np.float32), 0)
    with pytest.raises(nxrs.InputError, match="label 4"):
        t.step(np.zeros(6, np.float32), 4)
    with pytest.raises(nxrs.InputError, match="label -1"):
        t.step(np.zeros(6, np.float32), -1)
    x, y = nxrs.seed_dataset()
    with pytest.raises(nxrs.InputError):
        t.train_until(x[:, :5], y, 1)
    with pytest.raises(nxrs.InputError):
        t.train_until(x, y + 4, 1)
    assert t.epoch == 0 and t.state_hash() == before


def test_empty_dataset_is_refused() -> None:
    x, y = nxrs.seed_dataset()
    t = nxrs.Trainer()
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match="0 samples of 6 features"):
        t.train_until(x[:0], y[:0], 2**63 - 1)  # used to count epochs forever
    with pytest.raises(nxrs.InputError, match="0 samples"):
        t.train_until(np.zeros((0, 6), np.float32), np.zeros(0, np.uint8), 1)
    assert t.epoch == 0 and t.state_hash() == before


X, Y = nxrs.seed_dataset()


def _with(x: np.ndarray, row: int, col: int, value: float) -> np.ndarray:
    x = x.copy()
    x[row, col] = value
    return x


def _labels(dtype: type[np.integer[Any]], value: int) -> np.ndarray:
    """The seed's labels as ``dtype``, with sample 5's replaced by ``value``."""
    y = Y.astype(dtype)
    y[5] = value
    return y


BAD_DATASETS: list[tuple[str, Any, Any, str]] = [
    ("int32 features", X.astype(np.int32), Y, "x must be float32 .* got dtype int32"),
    ("int64 features", X.astype(np.int64), Y, "got dtype int64"),
    ("float16 features", X.astype(np.float16), Y, "got dtype float16"),
    ("bool features", X > 0, Y, "got dtype bool"),
    ("object features", X.astype(object), Y, "got dtype object"),
    ("list of int features", [[1] * 6] * 8, Y, "got dtype int64"),
    ("ragged list", [[0.5] * 6, [0.5] * 5], Y[:2], "x is not an array"),
    ("1-D features", X[0], Y, r"x must have 2 dimension\(s\), got shape \(6,\)"),
    ("3-D features", X[None], Y, r"got shape \(1, 8, 6\)"),
    ("too few features", X[:, :5], Y, "samples have 5 features, the model takes 6"),
    ("no features", X[:, :0], Y, "8 samples of 0 features"),
    ("more rows than labels", X, Y[:7], "48 feature values are not 7 samples"),
    ("more labels than rows", X[:7], Y, "42 feature values are not 8 samples"),
    ("NaN feature", _with(X, 3, 2, np.nan), Y, "feature 2 of sample 3 is NaN"),
    ("inf feature", _with(X, 0, 5, np.inf), Y, "feature 5 of sample 0 is inf"),
    ("-inf feature", _with(X, 7, 0, -np.inf), Y, "feature 0 of sample 7 is -inf"),
    ("float64 NaN", _with(X.astype(np.float64), 1, 1, np.nan), Y, "feature 1 of sample 1 is NaN"),
    ("float labels", X, Y.astype(np.float64), "labels must have an integer dtype.*float64"),
    ("bool labels", X, Y > 0, "got dtype bool"),
    ("object labels", X, Y.astype(object), "got dtype object"),
    ("str labels", X, Y.astype(str), "got dtype <U"),
    ("2-D labels", X, Y[:, None], r"y must have 1 dimension\(s\), got shape \(8, 1\)"),
    ("label = classes", X, Y + 1, "label 4 of sample 1 is outside 0..4"),
    ("negative label", X, Y - 1, "label -1 of sample 0 is outside 0..4"),
    ("int8 label -128", X, _labels(np.int8, -128), "label -128 of sample 5"),
    ("uint64 label 2**64-1", X, _labels(np.uint64, 2**64 - 1), "label 18446744073709551615"),
    ("int64 label -2**63", X, _labels(np.int64, -(2**63)), "label -9223372036854775808"),
]


@pytest.mark.parametrize(
    ("x", "y", "match"), [case[1:] for case in BAD_DATASETS], ids=[c[0] for c in BAD_DATASETS]
)
def test_bad_datasets_are_input_errors_and_change_nothing(x: Any, y: Any, match: str) -> None:
    t = nxrs.Trainer()
    t.train_until(X, Y, 1)
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match=match):
        t.train_until(x, y, 3)
    assert t.epoch == 1 and t.state_hash() == before


def test_float64_beyond_float32_is_refused_as_inf() -> None:
    """numpy's rounding to float32 gives inf (and warns); the core refuses it."""
    t = nxrs.Trainer()
    before = t.state_hash()
    x = _with(X.astype(np.float64), 2, 4, 1e39)
    with pytest.warns(RuntimeWarning, match="overflow"):  # noqa: SIM117 (Python 3.9)
        with pytest.raises(nxrs.InputError, match="feature 4 of sample 2 is inf"):
            t.train_until(x, Y, 1)
    assert t.state_hash() == before


BAD_SAMPLES: list[tuple[str, Any, Any, str]] = [
    ("float16 features", X[0].astype(np.float16), 0, "got dtype float16"),
    ("int features", [1, 2, 3, 4, 5, 6], 0, "got dtype int64"),
    ("2-D features", X[:1], 0, r"x must have 1 dimension\(s\), got shape \(1, 6\)"),
    ("scalar features", 0.5, 0, r"got shape \(\)"),
    ("NaN feature", _with(X, 0, 4, np.nan)[0], 0, "feature 4 of sample 0 is NaN"),
    ("inf feature", _with(X, 0, 0, np.inf)[0], 0, "feature 0 of sample 0 is inf"),
    ("no features", X[0, :0], 0, "1 samples of 0 features"),
    ("float label", X[0], 1.0, "labels must have an integer dtype.*float64"),
    ("bool label", X[0], True, "got dtype bool"),
    ("label beyond 64 bits", X[0], 2**64, "got dtype object"),
    ("label array", X[0], [1], r"y must have 0 dimension\(s\), got shape \(1,\)"),
    ("label 4", X[0], np.uint8(4), "label 4 of sample 0 is outside 0..4"),
    ("label 2**64-1", X[0], np.uint64(2**64 - 1), "label 18446744073709551615"),
    ("label -1", X[0], np.int16(-1), "label -1 of sample 0"),
]


@pytest.mark.parametrize(
    ("x", "y", "match"), [case[1:] for case in BAD_SAMPLES], ids=[c[0] for c in BAD_SAMPLES]
)
def test_bad_steps_are_input_errors_and_change_nothing(x: Any, y: Any, match: str) -> None:
    t = nxrs.Trainer()
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match=match):
        t.step(x, y)
    assert t.state_hash() == before


def test_epoch_beyond_64_bits_is_an_input_error() -> None:
    t = nxrs.Trainer()
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match="epoch = 1180591620717411303424 does not fit"):
        t.train_until(X, Y, 2**70)
    assert t.state_hash() == before


def corrupt_cases(good: bytes) -> list[tuple[bytes, type[Exception], type[Exception]]]:
    """Each damaged file with what ``restore`` into the seed model and ``load`` raise."""
    same = [
        (good[:-1], nxrs.LengthError),
        (good + b"\0", nxrs.LengthError),
        (good[:7], nxrs.LengthError),
        (b"", nxrs.LengthError),
        (b"XXCK" + good[4:], nxrs.BadMagicError),
        # b1t's scalar with bits above 32: not a binary32 pattern.
        (good[:20] + (1 << 40).to_bytes(8, "little") + good[28:], nxrs.HeaderError),
        (good[:12] + (-5).to_bytes(8, "little", signed=True) + good[20:], nxrs.HeaderError),
    ]
    # Other buffer or scalar counts: another model's file for restore; load reads a v1 file as
    # the seed model, so for it they are a header defect.
    counts = [
        (good[:4] + (11).to_bytes(4, "little") + good[8:], nxrs.MismatchError, nxrs.HeaderError),
        (good[:8] + (4).to_bytes(4, "little") + good[12:], nxrs.MismatchError, nxrs.HeaderError),
    ]
    return [(content, exc, exc) for content, exc in same] + counts


def test_corrupt_v1_files_raise_and_change_nothing(
    trained: tuple[nxrs.Trainer, Path], tmp_path: Path
) -> None:
    _, good_path = trained
    good = good_path.read_bytes()
    victim = nxrs.Trainer(seed=99)
    before = victim.state_hash()
    for k, (content, restore_exc, load_exc) in enumerate(corrupt_cases(good)):
        path = tmp_path / f"bad{k}.ckpt"
        path.write_bytes(content)
        with pytest.raises(restore_exc):
            victim.restore(path)
        with pytest.raises(load_exc):
            nxrs.Trainer.load(path)
        assert victim.state_hash() == before, f"case {k} changed the trainer"


def test_model_mismatch(trained: tuple[nxrs.Trainer, Path]) -> None:
    _, path = trained
    other = nxrs.Trainer(sizes=[6, 9, 4])
    with pytest.raises(nxrs.CheckpointError):  # a v1 file names no model: its lengths differ
        other.restore(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        nxrs.Trainer.load(tmp_path / "nope.ckpt")
    assert info.value.filename == str(tmp_path / "nope.ckpt")


def test_unknown_save_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        nxrs.Trainer().save(tmp_path / "x", format="v9")
