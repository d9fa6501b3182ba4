"""The command line's standard output and error, made so that what becomes of them never
changes a command's exit status: ``nxrs train | head -1`` (the reader goes away while the
command still writes), ``nxrs train >&-`` or ``2>&-`` (the descriptor is closed from the
start). A run that completed exits 0 however its output was cut; a pipefail retry loop would
otherwise run a finished run again and again.

Python's own streams report a reader that went away as a ``BrokenPipeError`` at the next write
or flush (from wherever it happens: a progress line in the middle of ``fit``), and a closed
descriptor as ``sys.stdout is None``. Here each is a stream on a descriptor that is always
open: writes that find the reader gone switch the descriptor to ``/dev/null`` and go on.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["own_standard_streams"]


def _discard(fd: int) -> None:
    """Makes ``fd`` a descriptor of ``/dev/null``: what is written to it from now on (by this
    process's streams, by C code, by a child process that inherits it) goes nowhere, and no
    file the process opens later can take its number."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


class _Cuttable(io.RawIOBase):
    """The writing end ``fd`` of a standard stream whose reader may go away: from the first
    write that finds it gone, what is written is discarded (``_discard``)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer) -> int:
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            _discard(self._fd)
            return len(memoryview(data))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _cuttable(stream: TextIO | None, fd: int) -> TextIO:
    """A text stream on ``fd`` (``_Cuttable``) with ``stream``'s encoding and buffering
    (unbuffered under ``python -u`` or ``PYTHONUNBUFFERED``, as Python's own), or, when
    ``stream`` is None (Python found ``fd`` closed), on ``/dev/null`` in its place."""
    if stream is None or not _is_open(fd):
        _discard(fd)
    else:
        try:
            stream.flush()
        except BrokenPipeError:
            _discard(fd)
            stream.flush()
    raw = _Cuttable(fd)
    buffered = stream is None or isinstance(getattr(stream, "buffer", None), io.BufferedWriter)
    binary: Any = io.BufferedWriter(raw) if buffered else raw
    return io.TextIOWrapper(
        binary,
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=getattr(stream, "errors", None) or "backslashreplace",
        line_buffering=getattr(stream, "line_buffering", False),
        write_through=not buffered,
    )


def own_standard_streams() -> None:
    """Replaces ``sys.stdout`` and ``sys.stderr`` with ``_cuttable`` streams on descriptors 1
    and 2 (the command line's entry point does, before a command runs)."""
    sys.stdout = _cuttable(sys.stdout, 1)
    sys.stderr = _cuttable(sys.stderr, 2)
