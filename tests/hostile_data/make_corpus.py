"""Writes the hostile data corpus beside this script: CSV and NPZ files a hostile but fair user
could hand to ``nxrs train --data`` / ``nxrs sweep --data``, each of which must be refused with
exit status 1 or 2 and one line on stderr, never a traceback (tests/test_cli_edges.py runs every
one through both commands).

``expected.json`` maps each file to a fragment its one-line error must contain (the file's row
and column where the problem is a value). Run ``python tests/hostile_data/make_corpus.py`` to
regenerate (the files' contents are fixed; zip archives record the time they were written).
Deliberately independent of nxrs: numpy and the standard library only.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def npz_bytes(**arrays: Any) -> bytes:
    """An .npz archive of ``arrays``, as numpy writes it (pickled objects allowed)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def main() -> None:
    x = np.arange(30, dtype=np.float32).reshape(10, 3) / 8
    y = np.array([0, 1] * 5, dtype=np.int64)
    targets = np.linspace(0.05, 0.95, 10)  # float targets, none a whole number
    good = npz_bytes(X=x, y=y)

    files: dict[str, tuple[bytes | str, str]] = {
        # --- CSV: structure
        "empty.csv": ("", "a header row and at least one data row"),
        "blank_lines_only.csv": ("\n\n\n", "a header row and at least one data row"),
        "header_only.csv": ("a,b,label\n", "a header row and at least one data row"),
        "ragged_short_row.csv": ("a,b,label\n1,2,0\n3,4\n", "data row 2 has 2 fields"),
        "ragged_long_row.csv": ("a,b,label\n1,2,0,9\n3,4,1\n", "data row 1 has 4"),
        "binary_garbage.csv": (b"\xff\xfe\x00\x81binary\n", "not a CSV text file"),
        "duplicate_label_column.csv": ("a,label,label\n1,0,0\n2,1,1\n", "more than once"),
        "label_column_only.csv": ("label\n0\n1\n0\n1\n", "no data"),
        "unknown_suffix.dat": ("a,b,label\n1,2,0\n", "unknown data format"),
        # --- CSV: cells
        "non_numeric_cell.csv": ("a,b,label\n1,2,0\n1,x,1\n", "line 3 (data row 2), column 'b'"),
        "empty_cell.csv": ("a,b,label\n1,,0\n1,2,1\n", "line 2 (data row 1), column 'b'"),
        "nul_in_cell.csv": ("a,b,label\n1,2\x00,0\n3,4,1\n", "column 'b'"),
        "text_labels.csv": ("a,b,label\n1,2,cat\n3,4,dog\n", "column 'label'"),
        "nan_feature.csv": ("a,b,label\n1,2,0\n3,4,1\n5,nan,0\n", "line 4 (data row 3), col"),
        "inf_feature.csv": ("a,b,label\n1,2,0\n-inf,4,1\n", "line 3 (data row 2), column 'a'"),
        "beyond_float32_feature.csv": (
            "a,b,label\n1,2,0\n3,1e39,1\n",
            "beyond float32's range",
        ),
        "inf_label.csv": ("a,b,label\n1,2,0\n3,4,inf\n", "line 3 (data row 2), column 'label'"),
        "nan_label.csv": ("a,b,label\n1,2,nan\n3,4,1\n", "line 2 (data row 1), column 'label'"),
        "huge_label.csv": ("a,b,label\n1,2,0\n3,4,1e20\n", "line 3 (data row 2), column 'label'"),
        "negative_label.csv": ("a,b,label\n1,2,0\n3,4,-1\n5,6,1\n", "line 3 (data row 2)"),
        "one_class.csv": ("a,b,label\n1,2,3\n3,4,3\n5,6,3\n", "at least two classes"),
        "mixed_labels.csv": (
            "a,b,label\n" + "".join(f"{k},{k + 1},{k % 2}\n" for k in range(8)) + "9,9,1.5\n",
            "line 10 (data row 9), column 'label'",
        ),
        # --- NPZ: what is not an .npz
        "empty.npz": (b"", "not an .npz file"),
        "text_named.npz": ("X,y\n1,2\n", "not an .npz file"),
        "pk_not_a_zip.npz": (b"PK\x03\x04" + bytes(range(60)), "not an .npz file"),
        "truncated.npz": (good[: len(good) // 2], "not an .npz file"),
        "npy_named.npz": (_npy(x), "not an .npz file"),
        "damaged_member.npz": (_damaged_member(), "damaged .npz"),
        # --- NPZ: arrays
        "missing_y.npz": (npz_bytes(X=x), "missing array(s) ['y']"),
        "pickled_objects.npz": (npz_bytes(X=x.astype(object), y=y), "Python objects (pickled)"),
        "string_features.npz": (npz_bytes(X=x.astype(str), y=y), "real numbers are needed"),
        "complex_features.npz": (npz_bytes(X=x.astype(np.complex64), y=y), "real numbers"),
        "y_longer.npz": (npz_bytes(X=x, y=np.tile(y, 2)), "10 samples (rows of features) but 20"),
        "y_shorter.npz": (npz_bytes(X=x, y=y[:5]), "10 samples (rows of features) but 5"),
        "x_0d.npz": (npz_bytes(X=np.float32(1), y=y), "2-D array (samples, features)"),
        "y_0d.npz": (npz_bytes(X=x, y=np.int64(1)), "got shape ()"),
        "x_1d.npz": (npz_bytes(X=x[:, 0], y=y), "2-D array (samples, features)"),
        "x_3d.npz": (npz_bytes(X=x.reshape(10, 3, 1), y=y), "2-D array (samples, features)"),
        "y_3d.npz": (npz_bytes(X=x, y=y.reshape(10, 1, 1)), "got shape (10, 1, 1)"),
        "no_samples.npz": (npz_bytes(X=x[:0], y=y[:0]), "no data"),
        "no_features.npz": (npz_bytes(X=x[:, :0], y=y), "no data"),
        "nan_feature.npz": (npz_bytes(X=_with(x, (7, 2), np.nan), y=y), "X[7, 2]"),
        "inf_feature.npz": (npz_bytes(X=_with(x, (4, 0), -np.inf), y=y), "X[4, 0]"),
        "beyond_float32_feature.npz": (
            npz_bytes(X=_with(x.astype(np.float64), (3, 1), 1e300), y=y),
            "X[3, 1]: 1e+300 is beyond float32's range",
        ),
        "nan_target.npz": (npz_bytes(X=x, y=_with(targets, (6,), np.nan)), "y[6]"),
        "beyond_float32_target.npz": (
            npz_bytes(X=x, y=_with(targets, (2,), -1e39)),
            "y[2]: -1e+39 is beyond float32's range",
        ),
        "one_class.npz": (npz_bytes(X=x, y=np.zeros(10, np.int64)), "at least two classes"),
        "mixed_labels.npz": (npz_bytes(X=x, y=_with(y.astype(float), (8,), 0.5)), "y[8]"),
        "negative_label.npz": (npz_bytes(X=x, y=_with(y, (5,), -3)), "y[5]"),
        "label_beyond_layer_size.npz": (
            npz_bytes(X=x, y=_with(y, (1,), 2**40)),
            "layer size",
        ),
        "label_beyond_int64.npz": (
            npz_bytes(X=x, y=_with(y.astype(np.uint64), (1,), 2**64 - 1)),
            "integers beyond 2**53",
        ),
    }
    expected = {}
    for name, (content, fragment) in files.items():
        path = HERE / name
        if isinstance(content, str):
            path.write_bytes(content.encode())
        else:
            path.write_bytes(content)
        expected[name] = fragment
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def _with(a: Any, index: tuple[int, ...], value: Any) -> Any:
    """A copy of ``a`` with ``a[index] = value``."""
    b = np.array(a)
    b[index] = value
    return b


def _npy(a: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _damaged_member() -> bytes:
    """A valid zip archive whose X.npy is not an .npy file."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("X.npy"), b"\x93NUMPY\x01\x00garbage header")
        z.writestr(zipfile.ZipInfo("y.npy"), _npy(np.array([0, 1], np.int64)))
    return buf.getvalue()


if __name__ == "__main__":
    main()
