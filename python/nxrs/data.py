"""Training data from files: ``load`` reads and checks a whole file, ``split`` is the
deterministic train/test split (TRAINING.md section 12).

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

This module never imports the training code; it needs numpy and, for ``digits``, scikit-learn.
"""

from __future__ import annotations

import csv
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import InputError, permutation

__all__ = ["TASKS", "load", "load_digits", "split"]

#: The values of ``load``'s ``task`` (``nxrs train --task``).
TASKS = ("auto", "classify", "regress")

F32Array = npt.NDArray[np.float32]

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


def load(
    spec: str | Path, target: str | None = None, task: str = "auto"
) -> tuple[F32Array, npt.NDArray[Any]]:
    """The features and labels of ``spec``: ``"digits"``, an ``.npz`` file with arrays ``X``
    (samples, features) and ``y``, or a ``.csv`` file with a header row and the label column
    ``target`` (default: the last column; ``target`` is refused for the other kinds).

    Returns ``x`` as float32 (float64 values rounded to nearest) and ``y`` as int64 class
    indices or float32 targets, by the label rule ``task`` (see the module's docstring). Every
    problem is an ``InputError`` naming the file and, for a bad value, its row and column.
    """
    if task not in TASKS:
        raise InputError(f"task {task!r} is not one of {', '.join(TASKS)}")
    text = str(spec)
    if text == "":
        raise InputError("the data path is empty (use 'digits' or a .npz/.csv file)")
    path = Path(text)
    kind = "digits" if text == "digits" else path.suffix
    if target is not None and kind != ".csv":
        raise InputError(
            f"a target column ({target!r}) applies to a .csv file only; {text} has its labels "
            + ("built in" if kind == "digits" else "in its array y")
        )
    if kind == "digits":
        return _check(*load_digits(), task, lambda r, c: f"sample {r}", "digits")
    if kind not in (".npz", ".csv"):
        raise InputError(f"{path}: unknown data format {path.suffix!r} (use .npz or .csv)")
    if not path.is_file():
        raise InputError(f"{path}: no such file (use 'digits' or a .npz/.csv file)")
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
