"""A run directory's manifest, ``nxrs-run.json`` (``docs/RUNS.md``): its schema, checked
wherever one is read, and ``RunManifest``, the document a run keeps and rewrites
crash-safely as it starts, saves, stops and ends."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from nxrs._nxrs import __version__
from nxrs._runs.errors import MANIFEST_FORMAT, _host, now, warn_save_failed
from nxrs._runs.transcript import SavedStateLike
from nxrs._util.checks import is_count

if TYPE_CHECKING:
    from nxrs._runs.directory import RunDirectory

__all__ = ["EVENTS_KEPT", "EVENT_SCHEMA", "MANIFEST_SCHEMA", "RunManifest", "event"]

# ---------------------------------------------------------------------- the manifest's schema

#: What is wrong with a JSON value, or None when it fits (the path names it in the message).
Check = Callable[[Any, str], Optional[str]]


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return names[bool]
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _is(expected: str, test: Callable[[Any], bool]) -> Check:
    def check(value: Any, path: str) -> str | None:
        return None if test(value) else f"{path} is {_kind(value)}, not {expected}"

    return check


_STRING = _is("a string", lambda v: isinstance(v, str))
_BOOLEAN = _is("a boolean", lambda v: isinstance(v, bool))
_INTEGER = _is("an integer", lambda v: is_count(v, minimum=None))
_COUNT = _is("an integer >= 0", is_count)
_OBJECT = _is("an object", lambda v: isinstance(v, dict))
_KEEP = _is("'all' or an integer >= 1", lambda v: v == "all" or is_count(v, minimum=1))


def _nullable(check: Check) -> Check:
    return lambda value, path: None if value is None else check(value, path)


def _one_of(*choices: str) -> Check:
    return _is(" or ".join(repr(c) for c in choices), lambda v: v in choices)


def _array(item: Check) -> Check:
    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, list):
            return f"{path} is {_kind(value)}, not an array"
        return next((e for k, v in enumerate(value) if (e := item(v, f"{path}[{k}]"))), None)

    return check


def _counts() -> Check:
    """An object of counts (``events_omitted``: event kind -> how many)."""

    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path} is {_kind(value)}, not an object"
        return next((e for k, v in value.items() if (e := _COUNT(v, f"{path}.{k}"))), None)

    return check


def _record(required: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with the ``required`` keys and maybe the ``optional`` ones, each checked; other
    keys are allowed (a later nxrs may add some)."""
    optional = optional or {}

    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path} is {_kind(value)}, not an object"
        for key, item in required.items():
            if key not in value:
                return f"{path} has no key {key!r}"
            if (error := item(value[key], f"{path}.{key}")) is not None:
                return error
        for key, item in optional.items():
            if key in value and (error := item(value[key], f"{path}.{key}")) is not None:
                return error
        return None

    return check


#: One history entry (``event``): what happened, when, where, at which step, and the details of
#: its kind.
EVENT_SCHEMA = _record(
    {
        "event": _STRING,
        "time": _STRING,
        "step": _COUNT,
        "epoch": _COUNT,
        "batch": _COUNT,
        "pid": _INTEGER,
        "host": _STRING,
    },
    {
        "reason": _STRING,
        "checkpoint": _STRING,
        "previous_end": _STRING,
        "moved_aside": _STRING,
        "error": _STRING,
        "resume": _BOOLEAN,
        "saved": _BOOLEAN,
    },
)

#: The manifest (``docs/RUNS.md``), checked by ``RunDirectory.read_manifest`` wherever one is
#: read (``fit`` resuming, ``nxrs status``), so no reader meets a field of another type.
MANIFEST_SCHEMA = _record(
    {
        "format": _one_of(MANIFEST_FORMAT),
        "nxrs_version": _STRING,
        "started": _STRING,
        "updated": _nullable(_STRING),
        "state": _one_of("running", "stopped", "complete", "failed"),
        "config": _OBJECT,
        "data": _record({"fingerprint": _STRING, "samples": _COUNT}),
        "plan": _record({"epochs": _COUNT, "steps_per_epoch": _COUNT, "steps": _COUNT}),
        "progress": _nullable(
            _record(
                {
                    "step": _COUNT,
                    "epoch": _COUNT,
                    "batch": _COUNT,
                    "checkpoint": _STRING,
                    "saved": _STRING,
                }
            )
        ),
        "events": _array(EVENT_SCHEMA),
    },
    {
        "command": _array(_STRING),
        "cwd": _STRING,
        "data_source": _record({"data": _STRING, "target": _nullable(_STRING), "task": _STRING}),
        "events_omitted": _counts(),
        "keep": _KEEP,
    },
)

#: The history a manifest keeps: the run's first event and the newest ``EVENTS_KEPT``; the
#: ones dropped between them are counted by kind in ``events_omitted``. (A run resumed many
#: times would otherwise grow its manifest, rewritten at every save, without bound.)
EVENTS_KEPT = 100


def event(kind: str, trainer: Any, **details: Any) -> dict[str, Any]:
    """A manifest history entry: what happened, when, where, at which step."""
    entry: dict[str, Any] = {
        "event": kind,
        "time": now(),
        "step": trainer.steps,
        "epoch": trainer.epoch,
        "batch": trainer.batch,
        "pid": os.getpid(),
        "host": _host(),
    }
    entry.update({k: v for k, v in details.items() if v is not None})
    return entry


class RunManifest:
    """The manifest of a run directory (``docs/RUNS.md``): made when a run starts, updated when
    it resumes, saves, stops and ends, and written crash-safely after every change. ``fit``
    keeps one for the run it trains; ``read`` gives one back, checked against
    ``MANIFEST_SCHEMA``. ``document`` is the JSON object itself."""

    def __init__(self, run: RunDirectory, document: dict[str, Any]) -> None:
        self.run = run
        self.document = document

    @classmethod
    def read(cls, run: RunDirectory) -> RunManifest | None:
        """The manifest of ``run``'s directory, or None when it has none; ManifestError (a
        MismatchError) when it is not a valid manifest."""
        document = run.read_manifest()
        return None if document is None else cls(run, document)

    @classmethod
    def new(
        cls, run: RunDirectory, config: Mapping[str, Any], fingerprint: str, samples: int
    ) -> RunManifest:
        """The manifest of a run starting now with ``config`` on data of ``fingerprint`` and
        ``samples`` (not written yet: ``begin`` then ``write``)."""
        return cls(
            run,
            {
                "format": MANIFEST_FORMAT,
                "nxrs_version": __version__,
                "started": now(),
                "updated": None,
                "state": "running",
                "config": dict(config),
                "data": {"fingerprint": fingerprint, "samples": samples},
                "plan": {},
                "progress": None,
                "events": [],
                # Nothing pruned yet; ``begin`` lowers it to the count a process keeps.
                "keep": "all",
            },
        )

    def begin(
        self,
        *,
        epochs: int,
        steps_per_epoch: int,
        command: list[str] | None,
        source: Mapping[str, Any] | None,
        keep: int | None = 3,
        data_source: Mapping[str, Any] | None = None,
    ) -> None:
        """Records that this nxrs runs the run now, towards ``epochs`` epochs, started by
        ``command`` (when known) on data split from the file ``source`` (when known) and read
        as ``data_source`` says (when known: ``nxrs.data._source_record``), keeping the newest
        ``keep`` checkpoints (None: every one)."""
        document = self.document
        # The fewest any process of the run kept, so "all" (nxrs verify then requires every
        # checkpoint) only while none pruned; a manifest of an nxrs that did not record it
        # stays without (unknown).
        kept = document.get("keep")
        if kept is not None and keep is not None:
            document["keep"] = keep if kept == "all" else min(kept, keep)
        document["nxrs_version"] = __version__
        document["state"] = "running"
        if command is not None:
            document["command"] = command
            # Where it ran: the command's relative paths (its --data) are relative to it.
            document["cwd"] = os.getcwd()
        if source is not None:
            # Recorded from now on, also in a run directory written by an older nxrs, which
            # recorded only the training split's fingerprint (still checked by fit).
            document["data"]["file"] = dict(source)
        if data_source is not None:
            # What replay (nxrs verify, nxrs diff) reads the data again by.
            document["data_source"] = dict(data_source)
        document["plan"] = {
            "epochs": epochs,
            "steps_per_epoch": steps_per_epoch,
            "steps": epochs * steps_per_epoch,
        }

    def describe_end(self) -> str:
        """How the previous process in this directory ended."""
        state = self.document.get("state")
        events = self.document.get("events") or [{}]
        last = events[-1]
        if state == "stopped":
            return f"stopped ({last.get('reason', 'signal')})"
        if state == "complete":
            return "complete"
        if state == "failed":
            return f"failed ({last.get('error', 'error')})"
        return "unclean (no stop recorded: killed or crashed)"

    def checkpointed(
        self,
        trainer: SavedStateLike,
        checkpoint: Path,
        stored: tuple[int, str] | None = None,
    ) -> None:
        """Records ``checkpoint`` as the newest holding the run's state (``trainer``'s); on
        object storage with the object's ``stored`` size and SHA-256 (``bytes``, ``sha256``),
        checked when it was uploaded, before this refers to it."""
        self.document["progress"] = {
            "step": trainer.steps,
            "epoch": trainer.epoch,
            "batch": trainer.batch,
            "checkpoint": checkpoint.name,
            "saved": now(),
        }
        if stored is not None:
            self.document["progress"].update(bytes=stored[0], sha256=stored[1])

    def add_event(self, entry: dict[str, Any]) -> None:
        """Appends ``entry`` (``event``) to the history, keeping it to the first event and the
        newest ``EVENTS_KEPT`` (the others counted in ``events_omitted``)."""
        events: list[dict[str, Any]] = self.document["events"]
        events.append(entry)
        while len(events) > EVENTS_KEPT + 1:
            dropped = events.pop(1)
            omitted: dict[str, int] = self.document.setdefault("events_omitted", {})
            omitted[dropped["event"]] = omitted.get(dropped["event"], 0) + 1

    def write(self) -> None:
        """Writes the manifest (its ``updated`` time set now), crash-safely."""
        self.run.write_manifest(self.document)

    def record(self, entry: dict[str, Any] | None, state: str | None = None) -> None:
        """Adds ``entry`` to the history, sets ``state``, and writes the manifest; a failure to
        write is a warning (SaveFailedWarning), not an error: training goes on, and the next
        ``record`` writes the manifest whole again."""
        if entry is not None:
            self.add_event(entry)
        if state is not None:
            self.document["state"] = state
        try:
            self.write()
        except OSError as err:
            warn_save_failed(
                f"the run manifest {self.run.manifest_path} was not updated: {err}; it is kept "
                "in memory and written at the next save"
            )
