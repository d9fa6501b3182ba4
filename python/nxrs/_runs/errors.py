"""A run directory's file names, its errors and warnings, and the two ways a run reports
while training (a warning for a failed save, a line on stderr)."""

from __future__ import annotations

import contextlib
import datetime
import signal
import socket
import sys
import warnings
from pathlib import Path

from nxrs._nxrs import MismatchError, NxrsError
from nxrs._util.files import temporary_prefix

__all__ = [
    "LEASE_NAME",
    "LOCK_NAME",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "PREVIOUS_NAME",
    "CheckpointSaveError",
    "ManifestError",
    "RecordSaveError",
    "RunLockedError",
    "RunStopped",
    "SaveFailedWarning",
    "now",
    "stderr_line",
    "warn_save_failed",
]

MANIFEST_NAME = "nxrs-run.json"
LOCK_NAME = ".nxrs-run.lock"
#: The lease object of a run directory on object storage (``nxrs._runs.lease``), its lock.
LEASE_NAME = ".nxrs-run.lease"
PREVIOUS_NAME = "previous"
MANIFEST_FORMAT = "nxrs-run/1"
_MANIFEST_TEMP = temporary_prefix(MANIFEST_NAME)


class RunLockedError(NxrsError):
    """Another live process holds the run directory's lock."""


class ManifestError(MismatchError):
    """The run directory's manifest is not a valid nxrs run manifest: not JSON, another format,
    or a field missing or of the wrong type (``MANIFEST_SCHEMA``).

    A ``MismatchError``: ``fit`` refuses to resume such a directory as it refuses one holding
    another run (``nxrs train`` exit 3; ``resume=False`` / ``--restart`` moves it aside), and
    ``nxrs status`` reports it in one line (exit 1).
    """


class CheckpointSaveError(OSError):
    """A checkpoint that had to be written (at the end of a run, or when stopping on a signal)
    could not be: the newest valid checkpoint in the directory is the previous one."""


class RecordSaveError(CheckpointSaveError):
    """A run ended (complete, or stopped by a signal) with its transcript or its manifest not
    written: its checkpoints are saved, but the records that describe them and make the run
    verifiable are not (a disk full, the store unreachable). The message says which entries or
    which manifest state are missing. A CheckpointSaveError (``nxrs train`` exit 5): running the
    same command again, once they can be written, writes them (a resume records every
    checkpoint its transcript lacks)."""


class SaveFailedWarning(UserWarning):
    """A periodic checkpoint (or a manifest update) could not be written; training goes on and
    the next save point tries again. The previous checkpoint is intact."""


class RunStopped(KeyboardInterrupt):
    """``fit`` stopped on SIGINT or SIGTERM after saving a checkpoint of the step it reached.

    A ``KeyboardInterrupt``, so code that handles Ctrl-C handles it. ``signal`` is the signal's
    number, ``step`` the step saved and ``checkpoint`` the file (None without a checkpoint).
    """

    def __init__(self, signum: int, step: int, checkpoint: Path | None) -> None:
        name = signal.Signals(signum).name
        where = f"saved {checkpoint}" if checkpoint is not None else "no checkpoint configured"
        super().__init__(f"stopped by {name} at step {step}; {where}")
        self.signal = signum
        self.step = step
        self.checkpoint = checkpoint


def now() -> str:
    """The current UTC time, ISO 8601 to the millisecond."""
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _host() -> str:
    return socket.gethostname()


def warn_save_failed(message: str) -> None:
    warnings.warn(message, SaveFailedWarning, stacklevel=3)


def stderr_line(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)
