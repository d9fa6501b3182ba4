"""Crash-safe file writes: the one Python way nxrs replaces a file (the run manifest, a sweep's
results, exported weights). The Rust core's checkpoint writer follows the same steps.

A file is written to a temporary name beside it, fsynced, renamed over the target, and the
directory fsynced, so after a crash at any moment the target is the complete old or the
complete new content, and a completed write survives a power loss.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = [
    "finite_or_null",
    "fsync_path",
    "json_text",
    "temporary_name",
    "temporary_prefix",
    "write_bytes_atomically",
    "write_json_atomically",
]


def finite_or_null(document: Any) -> Any:
    """``document`` (dicts, lists, tuples, scalars) with every non-finite float (a diverged
    run's loss) replaced by None: strict JSON has no NaN or infinity."""
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {k: finite_or_null(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [finite_or_null(v) for v in document]
    return document


def _json_form(value: object) -> Any:
    """``json.dumps``'s hook for what JSON has no type for: an object that gives its JSON form
    by a ``_json_form`` method (a layer object, ``nxrs.layers.Layer``: a configuration's
    ``layers`` as given, e.g. a sweep's; this module is below ``nxrs.layers``, so it asks the
    object rather than knowing its class)."""
    form = getattr(type(value), "_json_form", None)
    if form is not None:
        return form(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_text(document: Any, indent: int | None = None) -> str:
    """``document`` as strict JSON text (RFC 8259: non-finite floats as null; layer objects as
    their JSON objects), one line without ``indent``; no newline at the end. Every JSON nxrs
    writes (files and ``--json`` output) goes through here, so no reader meets Python's bare
    ``NaN`` or ``Infinity``."""
    return json.dumps(finite_or_null(document), indent=indent, allow_nan=False, default=_json_form)


def write_json_atomically(path: Path, document: Any) -> None:
    """Writes ``document`` to ``path`` as strict JSON (``json_text``), as
    ``write_bytes_atomically`` writes."""
    write_bytes_atomically(path, (json_text(document, indent=1) + "\n").encode())


def temporary_prefix(name: str) -> str:
    """How the temporary files of writes to the file ``name`` begin (``temporary_name``): a run
    directory sweeps the manifest's, left by killed writers."""
    return f".{name}.tmp."


def temporary_name(path: Path) -> Path:
    """Where ``write_bytes_atomically`` writes before the rename: ``.<name>.tmp.<pid>`` beside
    ``path``."""
    return path.with_name(f"{temporary_prefix(path.name)}{os.getpid()}")


def fsync_path(path: Path) -> None:
    """``fsync`` of a file or directory by path: for a directory, makes its entries (a rename,
    a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path``: temporary file, fsync, rename, directory fsync. On any
    failure the temporary file is removed and ``path`` is unchanged."""
    temp = temporary_name(path)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    fsync_path(path.parent)
