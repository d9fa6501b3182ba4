"""Saves that do not stop training: ``fit(async_save=True)`` and ``nxrs train --async-save``
(``docs/RUNS.md``, "Saves in the background").

At a save point the training thread takes a copy of the trainer's state
(``Trainer._snapshot``: the parameters, the optimiser's moments, the counters; no working
memory) and goes on training. One background thread (``SaveInFlight``) writes the copy with the
same crash-safe writer as a synchronous save (``Trainer.save``: temporary file, fsync, rename,
directory fsync), prunes the older checkpoints and computes the copy's state digest. The
checkpoint counts (the transcript entry, the manifest's ``progress``) only once that is done,
and it is the training thread that records it, at the next step boundary after the writer
finished (``done``) or when it waits for it (``wait``). At most one save is in flight: the
caller waits for it before starting another.

The writing is one function (``Write``: the copy, where it goes, its metadata): ``manager_write``
writes the file and makes it count as ``CheckpointManager.save`` does (on object storage: the
upload, checked, then the pruning).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nxrs._nxrs import _Snapshot
    from nxrs._runs.checkpoints import CheckpointManager
    from nxrs._trainer import Trainer

__all__ = ["SaveInFlight", "SavedState", "Write", "manager_write"]

#: A seam for tests: called in the writer thread with the checkpoint's path just before it is
#: written (to make the writer slow, block it, or make it fail). None in normal use.
_before_write: Callable[[Path], None] | None = None

#: Makes a copy durable at a path with its metadata, then prunes; returns warnings to report
#: (as strings: the writer thread never emits warnings itself, whose filters are global).
Write = Callable[["_Snapshot", Path, Mapping[str, str]], list[str]]


def manager_write(manager: CheckpointManager) -> Write:
    """Writes into ``manager``'s directory as ``CheckpointManager.save`` does: the file
    (crash-safely), then what makes it count (``CheckpointManager._commit``: the upload on
    object storage, the pruning)."""

    def write(snapshot: _Snapshot, path: Path, metadata: Mapping[str, str]) -> list[str]:
        snapshot.save(path, metadata=list(metadata.items()))
        reports: list[str] = []
        manager._commit(path, report=reports.append)
        return reports

    return write


@dataclass(frozen=True)
class SavedState:
    """The counters and digests of a copy that was saved: what the transcript entry and the
    manifest's ``progress`` record (they read a trainer's ``steps``, ``epoch``, ``batch``,
    ``state_digest()`` and ``config_digest()``, which this has)."""

    steps: int
    epoch: int
    batch: int
    digest: str
    config: str

    def state_digest(self) -> str:
        return self.digest

    def config_digest(self) -> str:
        return self.config


@dataclass
class SaveInFlight:
    """One save of a copy of the state, written by a background thread (``start``)."""

    path: Path
    steps: int
    epoch: int
    batch: int
    config_digest: str
    #: Set by the writer thread when it has finished, whatever the outcome.
    error: BaseException | None = None
    saved: SavedState | None = None
    warnings: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None
    #: The copy: once the writer has finished, its memory can hold the next one (``start``).
    snapshot: _Snapshot | None = None

    @classmethod
    def start(
        cls,
        trainer: Trainer,
        path: Path,
        metadata: Mapping[str, str],
        write: Write,
        spare: _Snapshot | None = None,
    ) -> SaveInFlight:
        """Copies ``trainer``'s state now (the GIL released; into ``spare``'s memory, a
        finished save's copy, when given) and starts writing it to ``path`` in a background
        thread; the trainer may change as soon as this returns."""
        snapshot = trainer._snapshot(spare)
        job = cls(path, snapshot.steps, snapshot.epoch, snapshot.batch, trainer.config_digest())
        job.snapshot = snapshot
        # Not a daemon: the interpreter waits for a write under way rather than cutting it
        # (fit itself always waits for it before returning).
        job.thread = threading.Thread(
            target=job._run, args=(snapshot, dict(metadata), write), name="nxrs-async-save"
        )
        job.thread.start()
        return job

    def _run(self, snapshot: _Snapshot, metadata: dict[str, str], write: Write) -> None:
        try:
            if _before_write is not None:
                _before_write(self.path)
            self.warnings = write(snapshot, self.path, metadata)
            digest = snapshot.state_digest()
            self.saved = SavedState(self.steps, self.epoch, self.batch, digest, self.config_digest)
        except BaseException as err:  # handed to the training thread, which decides
            self.error = err

    def done(self) -> bool:
        """Whether the writer has finished (then ``error`` or ``saved`` tells how)."""
        return self.thread is None or not self.thread.is_alive()

    def wait(self) -> None:
        """Blocks until the writer has finished."""
        if self.thread is not None:
            self.thread.join()
