"""A run's transcript: the append-only, hash-chained record of every state a run directory's
run reached and saved (``docs/RUNS.md``, "The transcript"), which ``nxrs verify`` checks.

``nxrs-transcript.jsonl`` holds one JSON object per line, each entry:

- ``entry`` (its index from 0), ``event`` (``"start"``: the state the run began from in this
  directory, not saved as a file; ``"checkpoint"``: a saved checkpoint), ``step``, ``epoch``,
  ``batch``, ``checkpoint`` (the file's name, or null for a start);
- ``state_digest``, ``config_digest`` and ``data_digest`` (``docs/TRAINING.md`` section 16),
  ``data`` (the digests of the data's parts: ``train``, ``validation``, ``test``, null when the
  run has no such part), ``nxrs_version``, ``time`` (UTC, information only);
- ``prev``: the previous entry's ``digest`` (null for entry 0), and ``digest``: SHA-256 of the
  entry's canonical JSON text without ``digest`` (keys sorted, no spaces, ASCII). Changing,
  removing, inserting or reordering entries breaks the chain.

Entries are never changed or removed: a pruned checkpoint keeps its entry. The file is rewritten
whole, crash-safely (temporary file, fsync, rename; on object storage, one PUT), after each
checkpoint is saved, so it is always a complete old or new transcript; a checkpoint saved just
before a kill gets its entry when the run resumes from it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nxrs._files import temporary_prefix, write_bytes_atomically
from nxrs._nxrs import Dataset, __version__

if TYPE_CHECKING:
    from nxrs._store import ObjectDirectory

__all__ = [
    "TRANSCRIPT_NAME",
    "DataDigests",
    "SavedStateLike",
    "Transcript",
    "canonical",
    "entry_digest",
]


class SavedStateLike(Protocol):
    """What an entry records of a state: a ``Trainer``'s counters and digests, or those of a
    copy a background save wrote (``nxrs._async_save.SavedState``)."""

    @property
    def steps(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def batch(self) -> int: ...
    def state_digest(self) -> str: ...
    def config_digest(self) -> str: ...


TRANSCRIPT_NAME = "nxrs-transcript.jsonl"
TRANSCRIPT_TEMP = temporary_prefix(TRANSCRIPT_NAME)

#: Every key of an entry (the file writes each entry as its ``canonical`` text).
ENTRY_KEYS = (
    "entry",
    "event",
    "step",
    "epoch",
    "batch",
    "checkpoint",
    "state_digest",
    "config_digest",
    "data_digest",
    "data",
    "nxrs_version",
    "time",
    "prev",
    "digest",
)


def canonical(document: Any) -> bytes:
    """The canonical JSON text of ``document``: keys sorted, no spaces, ASCII only. An entry
    holds only strings, integers and nulls, so the text has one form in any language."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def entry_digest(entry: dict[str, Any]) -> str:
    """SHA-256 (hex) of ``entry``'s canonical text without its ``digest``."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(canonical(body)).hexdigest()


@dataclass(frozen=True)
class DataDigests:
    """The digests of a run's data (``docs/TRAINING.md`` section 16): the whole and its
    parts (hex; None for a part the run does not have)."""

    digest: str
    train: str
    validation: str | None = None
    test: str | None = None

    @classmethod
    def of(
        cls, train: Dataset, validation: Dataset | None = None, test: Dataset | None = None
    ) -> DataDigests:
        """The digests of a run's data from its parts, converted (``Trainer._dataset``)."""
        from nxrs._nxrs import _data_digest

        return cls(
            digest=_data_digest(train, validation, test),
            train=train.digest,
            validation=None if validation is None else validation.digest,
            test=None if test is None else test.digest,
        )

    def parts(self) -> dict[str, str | None]:
        return {"train": self.train, "validation": self.validation, "test": self.test}


class Transcript:
    """The transcript of the run directory ``directory`` (its entries in ``entries``, read by
    ``read``). Only the process holding the directory's lock appends."""

    def __init__(self, directory: str | Path, store: ObjectDirectory | None = None) -> None:
        #: Where it is: a local path, or its URL on object storage (``store``'s).
        self.path: Path | str = (
            Path(directory) / TRANSCRIPT_NAME if store is None else store.url_of(TRANSCRIPT_NAME)
        )
        self.store = store
        #: On object storage: the version of the transcript this process read or wrote (None:
        #: there was none), the condition of its next write.
        self._etag: str | None = None
        self.entries: list[dict[str, Any]] = []

    def exists(self) -> bool:
        if self.store is None:
            assert isinstance(self.path, Path)
            return self.path.is_file()
        return self.store.version(TRANSCRIPT_NAME) is not None

    def _text(self) -> str | None:
        if self.store is None:
            assert isinstance(self.path, Path)
            try:
                return self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
        found = self.store.get(TRANSCRIPT_NAME)
        self._etag = None if found is None else found.version
        return None if found is None else found.data.decode("utf-8")

    def read(self) -> list[dict[str, Any]]:
        """The entries as the file holds them (none when there is no file). ValueError names
        the first line that is not a JSON object: ``nxrs verify`` reports it, ``fit`` refuses
        to append to it."""
        text = self._text()
        if text is None:
            self.entries = []
            return self.entries
        entries = []
        for number, line in enumerate(text.splitlines(), start=1):
            try:
                entry = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{self.path}: line {number} is not JSON ({err})") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{self.path}: line {number} is not a JSON object")
            entries.append(entry)
        self.entries = entries
        return entries

    @property
    def last(self) -> dict[str, Any] | None:
        return self.entries[-1] if self.entries else None

    def append(
        self, trainer: SavedStateLike, event: str, checkpoint: str | None, data: DataDigests
    ) -> dict[str, Any]:
        """Adds the entry of ``trainer``'s state (``event``, saved as ``checkpoint``), chained
        to the last, and writes the transcript crash-safely (OSError if it cannot: the entries
        on disk are then the old ones)."""
        from nxrs._rundir import now

        last = self.last
        entry: dict[str, Any] = {
            "entry": len(self.entries),
            "event": event,
            "step": trainer.steps,
            "epoch": trainer.epoch,
            "batch": trainer.batch,
            "checkpoint": checkpoint,
            "state_digest": trainer.state_digest(),
            "config_digest": trainer.config_digest(),
            "data_digest": data.digest,
            "data": data.parts(),
            "nxrs_version": __version__,
            "time": now(),
            "prev": None if last is None else last["digest"],
        }
        entry["digest"] = entry_digest(entry)
        text = b"".join(canonical(e) + b"\n" for e in [*self.entries, entry])
        if self.store is None:
            assert isinstance(self.path, Path)
            write_bytes_atomically(self.path, text)
        else:
            from nxrs._lease import write_unchanged

            # One PUT, on the condition that it is still the version this process read or
            # wrote (LeaseLostError if another process changed it).
            self._etag = write_unchanged(self.store, TRANSCRIPT_NAME, text, self._etag)
        self.entries.append(entry)
        return entry
