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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Optional, cast

from nxrs._nxrs import CheckpointError, ConfigError, _Trainer, sweep_temp_files
from nxrs._runs.object_checkpoints import ObjectCheckpoints
from nxrs._storage.store import is_url
from nxrs._util.checks import count, keep_count

if TYPE_CHECKING:
    from nxrs._trainer import Trainer

__all__ = ["CheckpointEntry", "CheckpointManager", "CorruptCheckpointWarning"]

#: The prefix ``fit`` and ``nxrs train`` name a run directory's checkpoints with.
DEFAULT_PREFIX = "step"


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint in a managed directory failed validation: skipped, not counted, left alone."""


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint file of a managed directory. In a directory on object storage, ``path``
    is where its local copy is (or goes: the cache) and ``url`` the object's URL."""

    step: int
    path: Path
    url: Optional[str] = None  # noqa: UP045 (a dataclass field evaluated on Python 3.9)


class CheckpointManager:
    """Saves checkpoints as ``<prefix>-<step>.nxck`` in one directory and keeps the newest ``keep``.

    ``keep`` is a count (an int, numpy's too, not a bool) of at least 1, or ``"all"`` (never
    prune: what an auditor replaying a run with ``nxrs verify`` wants), and ``prefix`` letters,
    digits or ``_``; ConfigError otherwise.

    The rules, chosen so that no sequence of saves, corrupt files and stray files loses the
    newest good checkpoint:

    - **Which files are checkpoints.** Regular files named exactly as ``path_for`` names them:
      the prefix, ``-``, the step in ASCII decimal zero-padded to 12 digits, ``.nxck``. Anything
      else in the directory (other names, ``step-9.nxck``, non-ASCII digits, directories,
      symbolic links) is not the manager's: never read, never deleted (only the temporary files
      of interrupted saves are swept, below). ``list()`` gives the checkpoints without reading
      them.
    - **Which checkpoints are valid.** Those that ``Trainer.load`` reads: a v2 file with its
      header and every checksum verified, or a v1 file in the seed model's layout (v1 has no
      checksums and no sizes; a v1 file counts like a v2 file). ``latest()``, ``load_latest()``
      and the pruning of ``save()`` all use this one rule, so they agree on every file. A file
      removed between listing and reading (say by another process's pruning) is skipped as
      absent; one that fails to read (any ``CheckpointError`` or ``OSError``) is reported with a
      ``CorruptCheckpointWarning``, skipped, not counted and never deleted: remove it yourself.
      Other errors (a ``MemoryError``, say) propagate.
    - **Saving and pruning.** ``save(trainer, step)`` writes the v2 file crash-safely
      (``Trainer.save``: temporary file, fsync, rename, directory fsync), then prunes: it keeps
      the ``keep`` valid checkpoints of the highest steps and, in every case, the file it has
      just written, and deletes every other valid checkpoint. So a valid checkpoint is deleted
      only when ``keep`` valid ones of higher steps remain, and only after the new file is
      durable: a preemption at any moment leaves the last good checkpoint. Saving a step lower
      than ``keep`` valid ones already there leaves ``keep + 1`` valid checkpoints (``latest()``
      still gives the highest step); the next save prunes again.
    - **Cost.** Pruning reads and verifies every checkpoint of the directory, one at a time
      (``Trainer.load``: the whole file, and the model's state in memory while it is checked):
      ``keep + 1`` files per save in the steady state (the ``keep`` it keeps, the one it
      deletes), plus every invalid file left in the directory, again at each save.
      ``latest()`` and ``load_latest()`` read newest first until one validates.

    Temporary files left by interrupted saves are swept when the manager opens the directory,
    and by every save (``Trainer.save`` sweeps the target's directory before it writes).

    A stray file with a high step does not displace the checkpoint just saved:

    >>> import tempfile, warnings, nxrs
    >>> manager = nxrs.CheckpointManager(tempfile.mkdtemp(), keep=1)
    >>> _ = manager.path_for(9).write_bytes(b"junk")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     saved = manager.save(nxrs.Trainer(seed=1), step=1)
    ...     latest = manager.latest()
    >>> [entry.step for entry in manager.list()], latest == nxrs.CheckpointEntry(1, saved)
    ([1, 9], True)
    >>> {warning.category.__name__ for warning in caught}
    {'CorruptCheckpointWarning'}
    """

    #: The class of the trainers ``load_latest`` gives: ``nxrs.Trainer``, which the Trainer's
    #: module (a layer above this one, which never imports it) sets when it defines the class.
    _trainer_class: ClassVar[type[_Trainer]] = _Trainer

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int | Literal["all"] = 3,
        prefix: str = DEFAULT_PREFIX,
    ):
        #: The count of checkpoints kept, None for all.
        self.keep: int | None = keep_count(keep)
        if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_]+", prefix):
            raise ConfigError(f"prefix must be letters, digits or '_', not {prefix!r}")
        self.prefix = prefix
        #: The checkpoints on object storage when ``directory`` is a URL (None: local).
        self._objects: ObjectCheckpoints | None = None
        #: The directory: a Path, or a URL (str) on object storage.
        self.directory: Path | str
        if is_url(directory):
            self._objects = ObjectCheckpoints(str(directory))
            self.directory = self._objects.store.url
            #: Where the files are written and read: the directory, or the store's cache.
            self._files = self._objects.cache
        else:
            self.directory = self._files = Path(directory)
            self._files.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(self._files)
        #: The checkpoint a run's manifest refers to (fit sets it): never pruned.
        self._pinned: str | None = None

    def path_for(self, step: int) -> Path:
        """Where the checkpoint of ``step`` (a count: an int, at least 0; ConfigError
        otherwise) lives.

        >>> import tempfile, nxrs
        >>> nxrs.CheckpointManager(tempfile.mkdtemp()).path_for(42).name
        'step-000000000042.nxck'
        """
        step = count("step", step, minimum=0)
        return self._files / checkpoint_name(self.prefix, step)

    def save(self, trainer: Trainer, step: int, metadata: Mapping[str, str] | None = None) -> Path:
        """Saves ``trainer`` as the checkpoint of ``step`` (v2), then prunes; returns its path.

        ``metadata`` (strings) goes into the file (``nxrs.open(path).metadata``); ``fit`` records
        the data's fingerprint there. The file written is never deleted by this pruning; see the
        class for the rules. On object storage the file is the local copy (the cache), and the
        checkpoint counts once its object is uploaded and checked; an upload that fails raises
        OSError and the store's newest checkpoint stays the previous one.
        """
        path = self.path_for(step)
        trainer.save(path, metadata=metadata)
        # _commit's two steps, called from here so that the warnings of invalid files point at
        # save's caller (their stacklevel counts the frames).
        if self._objects is not None:
            self._objects.upload(path)
        self._prune(also_keep=path)
        return path

    def _commit(self, path: Path, report: Callable[[str], None]) -> None:
        """Makes the checkpoint just written to ``path`` count: uploaded (object storage), then
        the older ones pruned, invalid files reported to ``report`` (a background save's
        writer thread, which hands them to the training thread)."""
        if self._objects is not None:
            self._objects.upload(path)
        self._prune(also_keep=path, report=report)

    def prune(self) -> None:
        """Deletes the valid checkpoints older than the ``keep`` newest valid ones.

        ``save`` does this after every save; invalid and unknown files are left alone.
        """
        self._prune(also_keep=None)

    def list(self) -> list[CheckpointEntry]:
        """The checkpoint files, oldest step first (not validated; see ``latest``)."""
        if self._objects is None:
            return list_checkpoints(self._files, self.prefix)
        entries = []
        for found in self._objects.listing():
            step = checkpoint_step(self.prefix, found.name)
            if step is not None:
                url = self._objects.store.url_of(found.name)
                entries.append(CheckpointEntry(step, self._files / found.name, url))
        return sorted(entries, key=lambda e: e.step)

    def latest(self) -> CheckpointEntry | None:
        """The newest checkpoint that validates, or None; invalid newer ones are warned about."""
        found = self._newest_valid()
        return None if found is None else found[0]

    def load_latest(self) -> Trainer | None:
        """A Trainer from the newest valid checkpoint (the one ``latest`` gives), or None."""
        found = self._newest_valid()
        return None if found is None else found[1]

    def _newest_valid(self) -> tuple[CheckpointEntry, Trainer] | None:
        for entry in reversed(self.list()):
            trainer = self._load(entry)
            if trainer is not None:
                return entry, trainer
        return None

    def _prune(self, also_keep: Path | None, report: Callable[[str], None] | None = None) -> None:
        """``prune``, keeping ``also_keep``; ``report`` takes the invalid files' messages
        instead of ``CorruptCheckpointWarning`` (a background save's thread, which hands them
        to the training thread: warning filters are global, not per thread)."""
        if self.keep is None:
            return  # keep="all": nothing to delete, and nothing to read
        valid_newer = 0
        for entry in reversed(self.list()):
            # On object storage every listed checkpoint was written whole by one checksummed
            # PUT: valid by construction, and not downloaded to be checked again.
            if self._objects is None and self._load(entry, report) is None:
                continue
            keep = entry.path == also_keep or entry.path.name == self._pinned
            if valid_newer >= self.keep and not keep:
                if self._objects is not None:
                    self._objects.delete(entry.path.name)
                else:
                    entry.path.unlink(missing_ok=True)
            valid_newer += 1

    def _local_copy(self, entry: CheckpointEntry) -> Path:
        """The file of ``entry``: itself, or on object storage its cached copy (downloaded,
        checksum checked, unless the cache holds the listed version). FileNotFoundError if
        it is gone."""
        if self._objects is not None:
            self._objects.fetch(entry.path.name)
        return entry.path

    def _load(
        self, entry: CheckpointEntry, report: Callable[[str], None] | None = None
    ) -> Trainer | None:
        """The one validity rule: the checkpoint's Trainer, or None when it is not valid.

        ``Trainer.load`` rather than ``nxrs.open``: it reads both versions, and it builds exactly
        what ``load_latest`` returns, so ``latest`` cannot accept a file that fails to load.
        """
        try:
            return cast("Trainer", self._trainer_class.load(self._local_copy(entry)))
        except FileNotFoundError:
            return None  # gone since listing: absent, not corrupt
        except (CheckpointError, OSError) as err:
            message = f"checkpoint {entry.path} is not valid, skipped and left in place: {err}"
            if report is not None:
                report(message)
                return None
            warnings.warn(
                message,
                CorruptCheckpointWarning,
                stacklevel=4,  # the caller of latest, load_latest, save or prune, via one helper
            )
            return None


def checkpoint_name(prefix: str, step: int) -> str:
    """The file name of the checkpoint of ``step``: the prefix, ``-``, the step in ASCII decimal
    zero-padded to 12 digits, ``.nxck`` (``CheckpointManager.path_for``)."""
    return f"{prefix}-{step:012d}.nxck"


def checkpoint_step(prefix: str, name: str) -> int | None:
    """The step of a checkpoint's file name (``checkpoint_name``'s); None for any other name."""
    # [0-9], not \d: \d also matches other scripts' digits ("step-٩.nxck"), which int() reads.
    match = re.fullmatch(rf"{re.escape(prefix)}-([0-9]+)\.nxck", name)
    if match is None:
        return None
    step = int(match.group(1))
    # Only the name checkpoint_name gives: "step-9.nxck" would be a second file for step 9, and
    # of two files of one step, pruning could keep either.
    return step if name == checkpoint_name(prefix, step) else None


def list_checkpoints(directory: Path, prefix: str = DEFAULT_PREFIX) -> list[CheckpointEntry]:
    """The checkpoint files of ``directory``, oldest step first, without reading them or
    changing anything (``CheckpointManager.list``; ``nxrs status`` lists a run directory with
    it, without making a manager, whose constructor sweeps temporary files)."""
    entries = []
    with os.scandir(directory) as children:
        for child in children:
            step = checkpoint_step(prefix, child.name)
            # Not following links: a link is not a file this manager wrote, and deleting or
            # counting it (or its target, maybe another step's file) is nothing to guess at.
            if step is not None and child.is_file(follow_symlinks=False):
                entries.append(CheckpointEntry(step, directory / child.name))
    return sorted(entries, key=lambda e: e.step)
