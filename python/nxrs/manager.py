"""A directory of step-numbered checkpoints, as a training loop uses them.

>>> import tempfile, nxrs
>>> x, y = nxrs.seed_dataset()
>>> manager = nxrs.CheckpointManager(tempfile.mkdtemp(), keep=2)
>>> trainer = manager.load_latest() or nxrs.Trainer(seed=1)
>>> for epoch in range(trainer.epoch + 1, 4):
...     trainer.train_until(x, y, epoch)
...     _ = manager.save(trainer, step=epoch)
>>> [entry.step for entry in manager.list()]
[2, 3]
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from nxrs._nxrs import CheckpointError, Trainer, open, sweep_temp_files

__all__ = ["CheckpointEntry", "CheckpointManager", "CorruptCheckpointWarning"]

T = TypeVar("T")


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint in a managed directory failed validation and was skipped."""


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint file of a managed directory."""

    step: int
    path: Path


class CheckpointManager:
    """Saves checkpoints as ``<prefix>-<step>.nxck`` in one directory and keeps the newest ``keep``.

    Every save is crash-safe (``Trainer.save``: temporary file, fsync, rename, directory fsync),
    and older checkpoints are deleted only after the new one is durable, so a preemption at any
    moment leaves at least the last good checkpoint. ``latest()`` returns the newest checkpoint
    that validates (header and every checksum); a corrupt or partial newer file is reported with a
    ``CorruptCheckpointWarning`` and skipped, never loaded. Temporary files left by interrupted
    saves are swept when the manager opens the directory, and by every save (``Trainer.save``
    sweeps the target's directory before it writes).
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 3, prefix: str = "step"):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, not {keep}")
        if not re.fullmatch(r"[A-Za-z0-9_]+", prefix):
            raise ValueError(f"prefix must be letters, digits or '_', not {prefix!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.prefix = prefix
        self._pattern = re.compile(rf"{re.escape(prefix)}-(\d+)\.nxck")
        self.directory.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(self.directory)

    def path_for(self, step: int) -> Path:
        """Where the checkpoint of ``step`` lives."""
        if step < 0:
            raise ValueError(f"step must be non-negative, not {step}")
        return self.directory / f"{self.prefix}-{step:012d}.nxck"

    def save(self, trainer: Trainer, step: int) -> Path:
        """Saves ``trainer`` as the checkpoint of ``step`` (v2), then keeps the newest ``keep``."""
        path = self.path_for(step)
        trainer.save(path)
        for old in self.list()[: -self.keep]:
            old.path.unlink(missing_ok=True)
        return path

    def list(self) -> list[CheckpointEntry]:
        """The checkpoint files, oldest step first (not validated; see ``latest``)."""
        entries = []
        for child in self.directory.iterdir():
            match = self._pattern.fullmatch(child.name)
            if match and child.is_file():
                entries.append(CheckpointEntry(int(match.group(1)), child))
        return sorted(entries, key=lambda e: e.step)

    def latest(self) -> CheckpointEntry | None:
        """The newest checkpoint that validates, or None; invalid newer ones are warned about."""
        found = self._newest_valid(_validate)
        return None if found is None else found[0]

    def load_latest(self) -> Trainer | None:
        """A Trainer from the newest valid checkpoint, or None when there is none."""
        found = self._newest_valid(Trainer.load)
        return None if found is None else found[1]

    def _newest_valid(self, read: Callable[[Path], T]) -> tuple[CheckpointEntry, T] | None:
        """``read`` (which validates) applied to the newest checkpoint it accepts."""
        for entry in reversed(self.list()):
            try:
                return entry, read(entry.path)
            except (CheckpointError, OSError) as err:
                warnings.warn(
                    f"skipping checkpoint {entry.path}: {err}",
                    CorruptCheckpointWarning,
                    stacklevel=3,
                )
        return None


def _validate(path: Path) -> None:
    """Opens ``path`` with full verification (header and every tensor checksum)."""
    with open(path, verify=True):
        pass
