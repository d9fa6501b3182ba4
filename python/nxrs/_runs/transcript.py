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

Entries are never changed or removed: a pruned checkpoint keeps its entry. An entry is added
once its checkpoint is saved, and written by appending (``docs/RUNS.md``, "The transcript"):

- **A local file** is appended to: the new entries' lines in one write, then an fsync. A line is
  an entry once its newline is written: a last line without one is the torn end of an append
  that did not finish (a process killed, a disk full), which readers ignore and the next writer
  cuts off before it appends.
- **Object storage** has no append: a save's new entries are a new object, a *segment*
  ``nxrs-transcript.<its first entry, 12 digits>.jsonl``, created only if absent. The
  transcript is ``nxrs-transcript.jsonl`` (its first entries) followed by the segments in
  order. So that it stays a few objects, the last ``MERGE_FAN_IN`` segments are merged into the
  first of them (rewritten, then the others deleted) whenever they hold about as many entries
  each (the same power of ``MERGE_FAN_IN``): a run of n entries keeps about
  ``(MERGE_FAN_IN - 1) * log(n) / log(MERGE_FAN_IN)`` segments and rewrites each entry about
  ``log(n) / log(MERGE_FAN_IN)`` times in all. A reader skips a segment that begins at an entry
  already read (one a merge left before deleting it).

The entries in memory are the truth: entries that could not be written stay there and are
written by the next ``write``, and a transcript found not to be what this process wrote (a file
truncated or replaced, an object deleted or changed) is written again whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nxrs._nxrs import Dataset, __version__
from nxrs._util.files import fsync_path, temporary_prefix, write_bytes_atomically

if TYPE_CHECKING:
    from nxrs._storage.store import ObjectDirectory

__all__ = [
    "MERGE_FAN_IN",
    "TRANSCRIPT_NAME",
    "DataDigests",
    "ObjectWriter",
    "SavedStateLike",
    "Transcript",
    "canonical",
    "entry_digest",
]


class ObjectWriter(Protocol):
    """How a transcript on object storage writes its objects: only while this process holds
    the run's lease (``nxrs._runs.lease.Lease``)."""

    def write(self, name: str, data: bytes, version: str | None) -> str: ...
    def delete(self, name: str) -> None: ...


class SavedStateLike(Protocol):
    """What an entry records of a state: a ``Trainer``'s counters and digests, or those of a
    copy a background save wrote (``nxrs._runs.async_save.SavedState``)."""

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
#: How the name of every object of a transcript begins (a listing's prefix).
TRANSCRIPT_STEM = "nxrs-transcript."
_SEGMENT = re.compile(r"nxrs-transcript\.([0-9]{12})\.jsonl")
#: How many segments of about the same size a transcript on object storage merges into one.
MERGE_FAN_IN = 8


def segment_name(first: int) -> str:
    """The name of the segment whose entries begin at entry ``first``."""
    return f"{TRANSCRIPT_STEM}{first:012d}.jsonl"


def part_first(name: str) -> int | None:
    """The entry a transcript's object (file) of this name begins at: 0 for
    ``nxrs-transcript.jsonl``, a segment's by its name; None for any other name."""
    if name == TRANSCRIPT_NAME:
        return 0
    match = _SEGMENT.fullmatch(name)
    return None if match is None else int(match.group(1))


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


@dataclass(frozen=True)
class _Part:
    """An object (a file) of a transcript as this process read or wrote it: its name, the
    index of its first entry, how many it holds, its version (on a store; for a local file its
    device and inode)."""

    name: str
    first: int
    count: int
    version: str


def _text(entries: list[dict[str, Any]]) -> bytes:
    return b"".join(canonical(e) + b"\n" for e in entries)


def _order(count: int) -> int:
    """The power of ``MERGE_FAN_IN`` a segment of ``count`` entries is of (segments merge with
    those of their own)."""
    return (count.bit_length() - 1) // (MERGE_FAN_IN.bit_length() - 1)


class Transcript:
    """The transcript of the run directory ``directory`` (its entries in ``entries``, read by
    ``read``). Only the process holding the directory's lock adds entries (``add``) and writes
    them (``write``); on object storage through ``writer``, its lease."""

    def __init__(
        self,
        directory: str | Path,
        store: ObjectDirectory | None = None,
        writer: ObjectWriter | None = None,
    ) -> None:
        #: Where it is: a local path, or its URL on object storage (``store``'s).
        self.path: Path | str = (
            Path(directory) / TRANSCRIPT_NAME if store is None else store.url_of(TRANSCRIPT_NAME)
        )
        self.directory = directory
        self.store = store
        self.writer = writer
        self.entries: list[dict[str, Any]] = []
        #: How many of ``entries`` (the first ones) are written where the transcript is.
        self.written = 0
        #: The bytes after the last complete line read: a torn append, which is no entry.
        self.torn = 0
        #: Its objects (files) as this process last read or wrote them.
        self._parts: list[_Part] = []
        #: The length of the local file's complete lines.
        self._size = 0
        #: Whether what is stored is not what appends would continue (a segment a merge left, a
        #: gap, local segment files): the next ``write`` writes the transcript whole.
        self._rewrite = False

    @property
    def unwritten(self) -> int:
        """How many entries are not written yet (a write failed: ``write`` tries again)."""
        return len(self.entries) - self.written

    def exists(self) -> bool:
        return bool(self._names())

    def names(self) -> list[str]:
        """The names of the transcript's objects (files) in the directory, in order."""
        return [name for _, name, _ in self._names()]

    def _names(self) -> list[tuple[int, str, str | None]]:
        """The transcript's objects (files), in order: the entry each begins at (by its name),
        its name, its version (on a store; None for a file)."""
        if self.store is None:
            directory = Path(self.directory)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                found: list[tuple[int, str, str | None]] = [
                    (first, entry.name, None)
                    for entry in os.scandir(directory)
                    if (first := part_first(entry.name)) is not None and entry.is_file()
                ]
                return sorted(found, key=lambda f: (f[0], f[1] != TRANSCRIPT_NAME))
            return []
        listed = [
            (first, o.name, o.version)
            for o in self.store.listing(prefix=TRANSCRIPT_STEM)
            if (first := part_first(o.name)) is not None
        ]
        return sorted(listed, key=lambda f: (f[0], f[1] != TRANSCRIPT_NAME))

    def _contents(self, name: str) -> tuple[bytes, str] | None:
        """An object's (file's) bytes and version, or None when it is gone."""
        if self.store is None:
            try:
                with open(Path(self.directory) / name, "rb") as f:
                    stat = os.fstat(f.fileno())
                    return f.read(), f"{stat.st_dev}:{stat.st_ino}"
            except FileNotFoundError:
                return None
        found = self.store.get(name)
        return None if found is None else (found.data, found.version)

    def read(self) -> list[dict[str, Any]]:
        """The entries as the directory holds them (none when there is no transcript). A last
        line without its newline is a torn append, no entry (``torn`` counts its bytes).
        ValueError names the first line that is not a JSON object: ``nxrs verify`` reports it,
        ``fit`` refuses to add to it."""
        entries: list[dict[str, Any]] = []
        parts: list[_Part] = []
        self.torn = 0
        irregular = False
        for first, name, _ in self._names():
            found = self._contents(name)
            if found is None:
                irregular = True  # deleted since the listing: a merge's leftover
                continue
            data, version = found
            end = data.rfind(b"\n") + 1
            self.torn += len(data) - end
            if first < len(entries):
                irregular = True  # a merge's leftover: its entries are read already
                continue
            if first > len(entries) or (not parts and name != TRANSCRIPT_NAME):
                # Entries missing before it: read as they are (nxrs verify names the break).
                irregular = True
            found_entries = self._parse(name, data[:end])
            parts.append(_Part(name, first, len(found_entries), version))
            entries.extend(found_entries)
            if name == TRANSCRIPT_NAME:
                self._size = end
        self.entries = entries
        self.written = len(entries)
        self._parts = parts
        # A local transcript is continued by appending to its one file (a torn end is cut off
        # first); one on a store by segments after whole objects, and a torn one there was not
        # written by nxrs.
        extra = len(parts) > 1 if self.store is None else self.torn > 0
        self._rewrite = irregular or extra
        return entries

    def _parse(self, name: str, data: bytes) -> list[dict[str, Any]]:
        where = self.path if name == TRANSCRIPT_NAME else f"{self.directory}/{name}"
        entries = []
        for number, line in enumerate(data.split(b"\n")[:-1], start=1):
            try:
                entry = json.loads(line)
            except ValueError as err:  # UnicodeDecodeError is a ValueError
                raise ValueError(f"{where}: line {number} is not JSON ({err})") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: line {number} is not a JSON object")
            entries.append(entry)
        return entries

    @property
    def last(self) -> dict[str, Any] | None:
        return self.entries[-1] if self.entries else None

    def add(
        self, trainer: SavedStateLike, event: str, checkpoint: str | None, data: DataDigests
    ) -> dict[str, Any]:
        """Adds the entry of ``trainer``'s state (``event``, saved as ``checkpoint``), chained
        to the last, in memory: ``write`` writes it."""
        from nxrs._runs.errors import now

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
        self.entries.append(entry)
        return entry

    def write(self) -> None:
        """Writes the entries not written yet (appended), or the whole transcript again when
        what the directory holds is not what this process read or wrote. OSError if it cannot
        (the entries stay in memory: the next ``write`` tries again); on object storage
        LeaseLostError when this process no longer holds the run's lease."""
        if self.store is None:
            self._write_file()
        else:
            self._write_objects()

    def _write_file(self) -> None:
        assert isinstance(self.path, Path)
        known = self._parts[0].version if self._parts else None
        if not self._rewrite:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                stat = os.fstat(fd)
                identity = f"{stat.st_dev}:{stat.st_ino}"
                created = known is None and stat.st_size == 0
                if created or (identity == known and stat.st_size >= self._size):
                    self._append(fd, stat.st_size)
                    self._parts = [_Part(TRANSCRIPT_NAME, 0, len(self.entries), identity)]
                    if created:
                        fsync_path(self.path.parent)
                    return
            finally:
                os.close(fd)
        # Truncated, replaced or deleted since this process read or wrote it (or made of
        # segments, copied from a store): written again whole, crash-safely.
        text = _text(self.entries)
        write_bytes_atomically(self.path, text)
        stat = os.stat(self.path)
        self._parts = [_Part(TRANSCRIPT_NAME, 0, len(self.entries), f"{stat.st_dev}:{stat.st_ino}")]
        self._size, self.written, self._rewrite = len(text), len(self.entries), False
        for _, name, _ in self._names():
            if name != TRANSCRIPT_NAME:
                (self.path.parent / name).unlink(missing_ok=True)

    def _append(self, fd: int, size: int) -> None:
        """Appends the unwritten entries to the file ``fd`` (of ``size`` bytes) after its
        complete lines, cutting off a torn end first, then fsyncs; a write that fails is cut
        off again, so the file ends at a complete line."""
        text = _text(self.entries[self.written :])
        if not text and size == self._size:
            return
        try:
            if size > self._size:
                os.ftruncate(fd, self._size)  # the torn end of an append that did not finish
            view, offset = memoryview(text), self._size
            while view:
                done = os.pwrite(fd, view, offset)
                view, offset = view[done:], offset + done
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            raise
        self._size += len(text)
        self.written = len(self.entries)

    def _write_objects(self) -> None:
        """On object storage: checks by one listing that the transcript's objects are the ones
        this process read or wrote, then creates a segment of the unwritten entries and merges
        the last segments; anything else found (an object deleted, changed or added) and the
        transcript is written again whole."""
        assert self.store is not None and self.writer is not None
        listed = {name: version for _, name, version in self._names()}
        if self._rewrite or listed != {p.name: p.version for p in self._parts}:
            self._rewrite, self.written = True, 0
            version = self.writer.write(
                TRANSCRIPT_NAME, _text(self.entries), listed.get(TRANSCRIPT_NAME)
            )
            self._parts = [_Part(TRANSCRIPT_NAME, 0, len(self.entries), version)]
            self._rewrite, self.written = False, len(self.entries)
            for name in listed:
                if name != TRANSCRIPT_NAME:
                    # One left (the store unreachable) is skipped by readers, as it begins
                    # at an entry already read, and deleted by the next write.
                    with contextlib.suppress(OSError):
                        self.writer.delete(name)
            return
        if self.unwritten:
            first = self.written
            name = segment_name(first) if self._parts else TRANSCRIPT_NAME
            version = self.writer.write(name, _text(self.entries[first:]), None)
            self._parts.append(_Part(name, first, len(self.entries) - first, version))
            self.written = len(self.entries)
        # A merge that fails (the store unreachable) leaves the segments as they were: merged
        # after a later append, or, if it wrote part of its work, written whole by the next
        # write (its listing differs).
        with contextlib.suppress(OSError):
            self._merge()

    def _merge(self) -> None:
        """Merges the last ``MERGE_FAN_IN`` segments (never the first object) into the first of
        them while they are of one order of size."""
        assert self.writer is not None
        while len(self._parts) > MERGE_FAN_IN:
            tail = self._parts[-MERGE_FAN_IN:]
            if len({_order(p.count) for p in tail}) != 1:
                return
            first, count = tail[0].first, sum(p.count for p in tail)
            text = _text(self.entries[first : first + count])
            version = self.writer.write(tail[0].name, text, tail[0].version)
            self._parts[-MERGE_FAN_IN:] = [_Part(tail[0].name, first, count, version)]
            for part in tail[1:]:
                self.writer.delete(part.name)
