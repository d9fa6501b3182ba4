"""Training data from files and built-in data sets: ``load`` reads and checks a whole file
(or ``"digits"``, ``"mnist1d"``), ``split`` is the deterministic train/test split and
``train_test`` the split of a ``--data`` value: a built-in data set's own split where it has one
(``"mnist1d"``: the paper's), ``split`` otherwise (TRAINING.md section 12). Character-level
text for sequence models (section 15.8) is a ``Text``: ``load_text`` reads one from a UTF-8
file, ``load_tinyshakespeare`` gets nanoGPT's tiny Shakespeare (its own module's docstring has
the rule).

``nxrs train`` and ``nxrs sweep`` read their ``--data`` with ``load``, which checks the whole
file before anything is split or trained (shapes, lengths, dtypes, values, labels), so a bad
file is refused with one ``nxrs.InputError`` naming the file's own row and column, never a
position counted after the shuffled split.

The label rule (``task``), the same for every file format:

- ``"classify"``: the labels are class indices, whole numbers ``>= 0`` (written ``3`` or ``3.0``
  in a CSV file, or of an integer or float dtype in an ``.npz``), at least two distinct ones. A
  label that is not a whole number is an error naming its row.
- ``"regress"``: the labels are float targets (one column, or a 2-D ``y`` in an ``.npz``).
- ``"auto"`` (the default): classes when every label is a whole number; float targets when at
  most half of them are (or ``y`` is 2-D); anything between is a *mixed* label column, an error
  naming the first row whose label is not a whole number (pass ``task`` to say which you mean).

This module never imports the training code; it needs numpy and, for ``digits``,
scikit-learn, for ``mnist1d`` the ``mnist1d`` package (``pip install 'nxrs[mnist1d]'``);
``load_tinyshakespeare`` downloads its file once, with the standard library.
"""

from __future__ import annotations

import csv
import math
import random
import threading
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, InputError, permutation
from nxrs.data._text import Text, load_text, load_tinyshakespeare

if TYPE_CHECKING:
    # Python 3.9 has no typing.TypeGuard; annotations are not evaluated at run time.
    from typing_extensions import TypeGuard

__all__ = [
    "BUILTIN",
    "MNIST1D_SPLIT",
    "TASKS",
    "TEST_SIZE",
    "Text",
    "check_test_size",
    "load",
    "load_digits",
    "load_mnist1d",
    "load_text",
    "load_tinyshakespeare",
    "own_split",
    "split",
    "train_test",
]

#: The values of ``load``'s ``task`` (``nxrs train --task``).
TASKS = ("auto", "classify", "regress")

#: The built-in data sets ``load`` (``--data``) knows by name.
BUILTIN = ("digits", "mnist1d")

#: MNIST-1D's own split, the paper's: (training, test) samples. ``load("mnist1d")`` returns the
#: training samples first, then the test samples, each in the package's order.
MNIST1D_SPLIT = (4000, 1000)

#: ``train_test``'s test fraction (``--test-size``'s default) for data without its own split.
TEST_SIZE = 0.2

#: The built-in data sets that have their own train/test split, and its (training, test) sizes.
_OWN_SPLITS = {"mnist1d": MNIST1D_SPLIT}

#: The paper's generation arguments, the mnist1d package's defaults (``get_dataset_args()``,
#: version 0.0.2.post1), stated here so that a package release with other defaults cannot
#: silently change what ``"mnist1d"`` means. ``shuffle_seq`` False: the signals' own order.
_MNIST1D_ARGS: dict[str, Any] = {
    "num_samples": 5000,
    "train_split": 0.8,
    "template_len": 12,
    "padding": [36, 60],
    "scale_coeff": 0.4,
    "max_translation": 48,
    "corr_noise_scale": 0.25,
    "iid_noise_scale": 2e-2,
    "shear_scale": 0.75,
    "shuffle_seq": False,
    "final_seq_length": 40,
    "seed": 42,
}

#: The package's ``make_dataset`` seeds and draws from the process's global generators (numpy's
#: legacy ``np.random`` and Python's ``random``): one generation at a time in this process.
_MNIST1D_LOCK = threading.Lock()

F32Array = npt.NDArray[np.float32]
I64Array = npt.NDArray[np.int64]

#: The largest finite binary32 value; larger finite values would become infinities.
_F32_MAX = float(np.finfo(np.float32).max)

#: Where a cell is, in the file's own terms: ``(row, column)`` -> text. ``row`` counts the
#: samples of the whole file from 0 in file order; ``column`` is a feature's index, or None for
#: the label.
Locate = Callable[[int, "int | None"], str]


def load_digits() -> tuple[F32Array, npt.NDArray[np.int64]]:
    """scikit-learn's bundled 8x8 digits: pixels ``/ 16`` (exact in binary32), labels 0..9."""
    try:
        from sklearn.datasets import (  # type: ignore[import-untyped,unused-ignore]
            load_digits as sk_load_digits,
        )
    except ImportError as err:
        raise InputError(
            "the digits data set comes with scikit-learn, which is not installed: pip install "
            "scikit-learn (or pass a .npz or .csv file)"
        ) from err

    d = sk_load_digits()
    x = np.asarray(d.data).astype(np.float32) / np.float32(16)
    return x, np.asarray(d.target, dtype=np.int64)


def load_mnist1d() -> tuple[tuple[F32Array, I64Array], tuple[F32Array, I64Array]]:
    """MNIST-1D (Greydanus & Kobak, 2020), the paper's data and split:
    ``(x_train, y_train), (x_test, y_test)``, 4,000 and 1,000 signals of length 40 (float32,
    shape ``(n, 40)``; a convolutional model reads each as ``(1, 40)``), labels 0..9 (int64).

    Generated on the spot by the ``mnist1d`` package's own ``make_dataset`` with the paper's
    arguments (the package's defaults, seed 42; TRAINING.md section 12), never downloaded and
    cached nowhere; each float64 value is rounded to the nearest binary32 (ties to even). The
    same bytes on every call: the package seeds numpy's global generator itself, and the
    caller's ``np.random`` and ``random`` states are restored afterwards (another thread that
    draws from ``np.random`` meanwhile would change the data: generate before starting such
    threads). An ``InputError`` when the package (``pip install 'nxrs[mnist1d]'``) is missing.
    """
    data = _mnist1d_generate()
    n_train, n_test = MNIST1D_SPLIT
    parts = []
    for key, n, what in (("", n_train, "training"), ("_test", n_test, "test")):
        x, y = np.asarray(data["x" + key]), np.asarray(data["y" + key])
        if x.shape != (n, 40) or y.shape != (n,):
            raise InputError(
                f"the installed mnist1d package generated {what} signals of shape {x.shape} and "
                f"labels of shape {y.shape}, not the paper's ({n}, 40) and ({n},)"
            )
        parts.append(_check(x, y, "classify", _sample_of(what), "mnist1d"))
    return parts[0], parts[1]


def _sample_of(what: str) -> Locate:
    return lambda row, column: f"{what} sample {row}"


def _mnist1d_generate() -> dict[str, Any]:
    """The package's ``make_dataset(args)`` with the paper's arguments: a dict of float64
    signals ``x``, ``x_test`` and int64 labels ``y``, ``y_test``. Not ``get_dataset``, which
    downloads a pickle or writes one into the working directory."""
    try:
        # The package's __init__ also imports matplotlib.pyplot, scipy and requests (its
        # declared dependencies): there is no importing make_dataset alone.
        import mnist1d.data as m1d  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as err:
        ours = err.name is None or err.name.split(".")[0] == "mnist1d"
        cause = "is not installed" if ours else f"cannot import {err.name}"
        raise InputError(
            f"the mnist1d data set is generated by the mnist1d package, which {cause}: "
            "pip install 'nxrs[mnist1d]' (or pip install mnist1d)"
        ) from err
    args = m1d.get_dataset_args()
    vars(args).update(_MNIST1D_ARGS)
    with _MNIST1D_LOCK:
        np_state, py_state = np.random.get_state(), random.getstate()
        try:
            data: dict[str, Any] = m1d.make_dataset(args)
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
    return data


def load(
    spec: str | Path, target: str | None = None, task: str = "auto"
) -> tuple[F32Array, npt.NDArray[Any]]:
    """The features and labels of ``spec``: ``"digits"`` (``load_digits``), ``"mnist1d"``
    (``load_mnist1d``'s training samples, then its test samples: ``train_test`` splits them
    back), an ``.npz`` file with arrays ``X`` (samples, features) and ``y``, or a ``.csv`` file
    with a header row and the label column ``target`` (default: the last column; ``target`` is
    refused for the other kinds).

    Returns ``x`` as float32 (float64 values rounded to nearest) and ``y`` as int64 class
    indices or float32 targets, by the label rule ``task`` (see the module's docstring). Every
    problem is an ``InputError`` naming the file and, for a bad value, its row and column.
    """
    if task not in TASKS:
        raise InputError(f"task {task!r} is not one of {', '.join(TASKS)}")
    text = str(spec)
    if text == "":
        raise InputError("the data path is empty (use 'digits', 'mnist1d' or a .npz/.csv file)")
    path = Path(text)
    kind = text if text in BUILTIN else path.suffix
    if target is not None and kind != ".csv":
        raise InputError(
            f"a target column ({target!r}) applies to a .csv file only; {text} has its labels "
            + ("built in" if kind in BUILTIN else "in its array y")
        )
    if kind == "digits":
        return _check(*load_digits(), task, lambda r, c: f"sample {r}", "digits")
    if kind == "mnist1d":
        (x_train, y_train), (x_test, y_test) = load_mnist1d()
        x, y = np.concatenate([x_train, x_test]), np.concatenate([y_train, y_test])
        return _check(x, y, task, lambda r, c: f"sample {r}", "mnist1d")
    if kind not in (".npz", ".csv"):
        raise InputError(f"{path}: unknown data format {path.suffix!r} (use .npz or .csv)")
    if not path.is_file():
        raise InputError(f"{path}: no such file (use 'digits', 'mnist1d' or a .npz/.csv file)")
    if kind == ".npz":
        x, y = _read_npz(path)
        return _check(x, y, task, _npz_cell, str(path))
    x, y, locate = _read_csv(path, target)
    return _check(x, y, task, locate, str(path))


def split(n: int, test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """TRAINING.md section 12: ``n_test = ceil(test_size * n)``; the permutation of the stream
    ``(seed, SPLIT, 0)``; its first ``n_test`` samples are the test set, the rest training.

    >>> split(10, 0.3, 0)
    ([7, 6, 5, 4, 2, 1, 0], [3, 9, 8])
    """
    n_test = math.ceil(test_size * n)
    if not 0 < n_test < n:
        raise InputError(f"a test size of {test_size} of {n} samples leaves an empty part")
    order = permutation(seed, "split", 0, n)
    return order[n_test:], order[:n_test]


def own_split(spec: str | Path) -> tuple[int, int] | None:
    """The (training, test) sizes of ``spec``'s own train/test split (``"mnist1d"``:
    ``MNIST1D_SPLIT``, the paper's), or None for data without one (digits, files)."""
    return _OWN_SPLITS.get(str(spec))


def check_test_size(spec: str | Path, test_size: float | None) -> None:
    """A ``ConfigError`` for a ``test_size`` given with data that has its own split: a re-split
    would make its test accuracy incomparable with everyone else's, and ignoring the value
    silently would report a split the user did not ask for."""
    own = own_split(spec)
    if own is not None and test_size is not None:
        raise ConfigError(
            f"{spec} has its own train/test split (the paper's {own[0]:,} training and "
            f"{own[1]:,} test samples), so a test size ({test_size}) does not apply: leave "
            "it out"
        )


def train_test(
    spec: str | Path, n: int, test_size: float | None = None, seed: int = 0
) -> tuple[list[int], list[int]]:
    """The training and test indices of ``load(spec)``'s ``n`` samples (TRAINING.md section 12):
    a data set's own split (``own_split``; ``"mnist1d"``: the first 4,000 samples train, the
    last 1,000 test), which takes no ``test_size`` (``check_test_size``) and no ``seed``;
    otherwise ``split(n, test_size, seed)``, ``test_size`` defaulting to ``TEST_SIZE``.
    """
    check_test_size(spec, test_size)
    own = own_split(spec)
    if own is None:
        return split(n, TEST_SIZE if test_size is None else test_size, seed)
    n_train, n_test = own
    if n != n_train + n_test:
        raise InputError(f"{spec} has {n_train + n_test} samples, not {n}")
    return list(range(n_train)), list(range(n_train, n))


def _split_record(data: str, test_size: float | None, seed: int) -> dict[str, Any]:
    """How ``train_test`` splits ``--data`` ``data``, for a run's data identity (the run
    manifest's ``data.file``, written by ``nxrs train``): the data set's own split by name
    (``{"split": "mnist1d"}``), or the test size (``--test-size``, default ``TEST_SIZE``) and
    the split seed."""
    if own_split(data) is not None:
        return {"split": data}
    return {"test_size": TEST_SIZE if test_size is None else test_size, "split_seed": seed}


def _source_record(data: str, target: str | None, task: str) -> dict[str, Any]:
    """How ``nxrs train`` read its data (``--data``, ``--target``, ``--task``), for the run
    manifest's ``data_source``: what replaying the run (``nxrs verify``, ``nxrs diff``) reads
    the data again by, with the split of the manifest's ``data.file`` (``_split_record``)."""
    return {"data": data, "target": target, "task": task}


#: The ``task`` of a text run's ``data_source`` record (``_text_source_record``): its data is a
#: token stream, read again by ``_read_text_again``.
_TEXT_TASK = "text"


def _text_source_record(data: str) -> dict[str, Any]:
    """``_source_record`` of an ``nxrs train --data`` run on text (the built-in name or a
    ``.txt`` file)."""
    return _source_record(data, None, _TEXT_TASK)


def _is_text_source(source: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether a manifest's ``data_source`` record (if any) is a text run's."""
    return isinstance(source, Mapping) and source.get("task") == _TEXT_TASK


def _read_again(
    source: Mapping[str, Any],
    split: Mapping[str, Any],
    data: str | None = None,
    cwd: str | None = None,
) -> tuple[F32Array, npt.NDArray[Any], F32Array, npt.NDArray[Any]]:
    """The training and test samples (``x_train, y_train, x_test, y_test``) of an ``nxrs
    train`` run, read and split again as it did from its manifest's records: ``source``
    (``_source_record``) and ``split`` (``_split_record``'s). ``data`` replaces the recorded
    ``--data`` (a file moved since); ``cwd`` (the manifest's) is where the run's command ran,
    which a relative data path is relative to."""
    if data is None:
        data = str(source["data"])
        if cwd is not None and data not in BUILTIN:
            data = str(Path(cwd) / data)
    x, y = load(data, source.get("target"), source.get("task", "auto"))
    test_size, seed = split.get("test_size"), split.get("split_seed", 0)
    train_idx, test_idx = train_test(data, len(x), test_size, seed)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def _read_text_again(
    source: Mapping[str, Any], data: str | None = None, cwd: str | None = None
) -> Text:
    """The text of an ``nxrs train`` run on text (``source``: its manifest's ``data_source``,
    ``_is_text_source``), read again as it was: the built-in tiny Shakespeare, or the file
    (``data`` replacing the recorded one, a relative path relative to ``cwd``)."""
    name = str(source["data"]) if data is None else data
    if name == "shakespeare":
        return load_tinyshakespeare()
    if data is None and cwd is not None:
        name = str(Path(cwd) / name)
    return load_text(name)


def _describe_split(record: Mapping[str, Any]) -> str:
    """``_split_record``'s record in words, for messages: ``"mnist1d's own split"`` or
    ``"test size 0.2, split seed 0"``."""
    if "split" in record:
        return f"{record['split']}'s own split"
    return f"test size {record.get('test_size')}, split seed {record.get('split_seed')}"


def _npz_cell(row: int, column: int | None) -> str:
    return f"y[{row}]" if column is None else f"X[{row}, {column}]"


def _read_npz(path: Path) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    # numpy's own reader takes any file that is not a zip archive for a pickle (and says
    # "pickled data"): look at the file first.
    if not zipfile.is_zipfile(path):
        with path.open("rb") as f:
            start = f.read(8)
        what = "an empty file" if not start else f"a file starting with {start!r}"
        raise InputError(f"{path}: not an .npz file (a zip archive of .npy arrays): {what}")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise InputError(f"{path}: missing array(s) {missing} (has {f.files})")
            for key in ("X", "y"):
                try:
                    arrays[key] = np.asarray(f[key])
                except ValueError as err:
                    if "allow_pickle" in str(err):
                        raise InputError(
                            f"{path}: array {key} holds Python objects (pickled), which nxrs "
                            "does not load: save numeric arrays"
                        ) from err
                    raise
    except InputError:
        raise
    except Exception as err:  # zip, zlib and .npy header errors: a damaged archive
        raise InputError(f"{path}: a damaged .npz file: {type(err).__name__}: {err}") from err
    return arrays["X"], arrays["y"]


def _read_csv(path: Path, target: str | None) -> tuple[npt.NDArray[Any], npt.NDArray[Any], Locate]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            rows, lines = [], []
            for row in reader:
                if row:  # blank lines are no rows
                    rows.append(row)
                    lines.append(reader.line_num)
    except (UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: not a CSV text file: {err}") from err
    if len(rows) < 2:
        raise InputError(f"{path}: a header row and at least one data row are needed")
    header, body = rows[0], rows[1:]
    for k, row in enumerate(body, start=1):
        if len(row) != len(header):
            raise InputError(
                f"{path}: data row {k} has {len(row)} fields, the header has {len(header)} "
                f"(line {lines[k]})"
            )
    column = header[-1] if target is None else target
    if column not in header:
        raise InputError(f"{path}: no column {column!r} (columns: {', '.join(header)})")
    if header.count(column) > 1:
        raise InputError(f"{path}: the header names {column!r} more than once")
    k = header.index(column)
    names = header[:k] + header[k + 1 :]

    def locate(row: int, col: int | None) -> str:
        name = column if col is None else names[col]
        return f"line {lines[row + 1]} (data row {row + 1}), column {name!r}"

    table = np.empty((len(body), len(header)), dtype=np.float64)
    for r, row in enumerate(body):
        for c, cell in enumerate(row):
            try:
                table[r, c] = float(cell)
            except ValueError:
                where = locate(r, None if c == k else c - (c > k))
                raise InputError(
                    f"{path}: not a numeric table: {where} holds {cell[:40]!r}, not a number"
                ) from None
    return np.delete(table, k, axis=1), table[:, k], locate


def _check(
    x: npt.NDArray[Any], y: npt.NDArray[Any], task: str, locate: Locate, name: str
) -> tuple[F32Array, npt.NDArray[Any]]:
    """The whole data set's rule, before any split: shapes, lengths, dtypes, values, labels."""
    if x.ndim != 2:
        raise InputError(
            f"{name}: the features must be a 2-D array (samples, features), got shape {x.shape}"
        )
    if y.ndim not in (1, 2) or (y.ndim == 2 and task == "classify"):
        wanted = "1-D (one label per sample)" if task == "classify" else "1-D or 2-D"
        raise InputError(f"{name}: the labels must be a {wanted} array, got shape {y.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InputError(f"{name}: no data: the features have shape {x.shape}")
    if len(y) != len(x):
        raise InputError(
            f"{name}: {len(x)} samples (rows of features) but {len(y)} labels: one label per "
            "sample is needed"
        )
    features = _floats(x, "feature", lambda r, c: locate(r, c), name)
    if y.ndim == 2 or task == "regress":
        return features, _targets(y, locate, name)
    labels = _numbers(y, "label", name)
    whole = labels == np.floor(labels)
    finite = np.isfinite(labels)
    if not finite.all():
        r = int(np.argmin(finite))
        raise InputError(
            f"{name}: {locate(r, None)}: the label is {float(labels[r])}: labels must be finite"
        )
    if task == "auto" and not whole.all():
        if np.count_nonzero(whole) * 2 <= len(whole):
            return features, _targets(y, locate, name)
        r = int(np.argmin(whole))
        raise InputError(
            f"{name}: {locate(r, None)}: the label {float(labels[r])!r} is not a whole number, "
            "while most labels are (a mixed label column): fix it, or say what the labels are "
            "(--task classify or --task regress)"
        )
    return features, _classes(y, labels, whole, locate, name)


def _numbers(a: npt.NDArray[Any], what: str, name: str) -> npt.NDArray[np.float64]:
    """``a``'s values as float64, for an array of real numbers (bool, integer or float)."""
    if a.dtype.kind not in "biuf":
        raise InputError(f"{name}: the {what}s have dtype {a.dtype}: real numbers are needed")
    if a.dtype.kind in "iu" and a.size and int(np.abs(a).max()) > 2**53:
        raise InputError(f"{name}: the {what}s hold integers beyond 2**53, not exact as floats")
    return a.astype(np.float64)


def _floats(a: npt.NDArray[Any], what: str, locate: Locate, name: str) -> F32Array:
    """``a`` as float32 (float64 rounded to nearest, as numpy's ``astype`` does), refusing
    non-finite values and finite ones beyond float32's range (they would become infinities)."""
    if a.dtype == np.float32:
        values32 = a
        bad = ~np.isfinite(a)
    else:
        values = _numbers(a, what, name)
        with np.errstate(over="ignore", invalid="ignore"):  # found and reported below
            values32 = values.astype(np.float32)
        bad = ~np.isfinite(values32)
    if bad.any():
        cell = np.unravel_index(int(np.argmax(bad)), a.shape)
        r, c = int(cell[0]), int(cell[1]) if a.ndim == 2 else None
        value = a[cell]
        if np.isfinite(value):
            problem = f"{float(value)!r} is beyond float32's range (+-{_F32_MAX:.7g})"
        else:
            problem = f"{value}: {what}s must be finite"
        where = locate(r, c) if what == "feature" else locate(r, None)
        raise InputError(f"{name}: {where}: {problem}")
    return np.ascontiguousarray(values32)


def _targets(y: npt.NDArray[Any], locate: Locate, name: str) -> F32Array:
    return _floats(y, "target", locate, name)


def _classes(
    y: npt.NDArray[Any],
    labels: npt.NDArray[np.float64],
    whole: npt.NDArray[np.bool_],
    locate: Locate,
    name: str,
) -> npt.NDArray[np.int64]:
    bad = ~whole | (labels < 0) | (labels >= 2.0**63)
    if bad.any():
        r = int(np.argmax(bad))
        raise InputError(
            f"{name}: {locate(r, None)}: the label {float(labels[r])!r} is not a class index "
            "(a whole number from 0)"
            + ("; pass --task regress for float targets" if not whole[r] else "")
        )
    classes = np.unique(labels)
    if len(classes) < 2:
        raise InputError(
            f"{name}: every label is {int(classes[0])}: classification needs at least two classes"
        )
    return y.astype(np.int64) if y.dtype.kind in "biu" else labels.astype(np.int64)
