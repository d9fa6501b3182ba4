"""``nxrs.Checkpoint`` and ``nxrs.open``: an open NXCK v2 file, over the compiled
``nxrs._nxrs._Checkpoint``, whose ``to_trainer`` gives an ``nxrs.Trainer``."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from nxrs._nxrs import _Checkpoint
from nxrs._trainer import Trainer

if TYPE_CHECKING:
    from _typeshed import StrOrBytesPath

__all__ = ["Checkpoint", "open"]


@final
class Checkpoint(_Checkpoint):
    """An open, validated NXCK v2 checkpoint (from ``nxrs.open(path, verify=...)``, which is
    ``Checkpoint(path, verify=...)``).

    A read-only mapping from tensor names, in file order, to their arrays: ``len(ck)``,
    ``name in ck``, ``for name in ck``, ``keys()``, ``values()``, ``items()`` and ``get()``
    behave as on any ``collections.abc.Mapping`` (``isinstance(ck, Mapping)`` holds).

    ``ck[name]`` is a read-only float32 array viewing the memory-mapped file without copying;
    each array keeps the mapping alive, so it stays valid after ``close()``. Saving over the file
    does not change what open arrays show (saves replace the file, never rewrite it). A program
    that rewrites the file *in place* (``shutil.copyfile``, ``cp``) does change them, and can get
    the process killed by SIGBUS, as with numpy.memmap or safetensors: replace checkpoints by
    writing a new file and renaming it over the old one.

    >>> with nxrs.open("run.nxck") as ck:  # doctest: +SKIP
    ...     w1 = ck["W1"]
    """

    # The public name, as in the previous releases.
    __module__ = "nxrs"
    __slots__ = ()

    def to_trainer(self) -> Trainer:
        """A Trainer with this checkpoint's configuration and state (copied).

        Opened with ``verify=False``, the checksums are checked now (ChecksumError).
        """
        return Trainer._from_checkpoint(self)


def open(path: StrOrBytesPath, *, verify: bool = True) -> Checkpoint:
    """Opens an NXCK v2 file: maps it, validates the header and (unless ``verify=False``) every
    tensor's CRC-32C. Raises a CheckpointError subclass naming what is wrong and where.

    The arrays view the mapping: do not rewrite the file in place while they are in use (see
    ``Checkpoint``). Only regular files are opened (OSError otherwise, as for ``Trainer.load``).
    """
    return Checkpoint(path, verify=verify)
