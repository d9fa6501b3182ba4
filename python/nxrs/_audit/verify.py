"""``nxrs.verify``: checks that a run directory's model came from its data and configuration,
bit for bit (``docs/RUNS.md``, "Verifying a run").

Four checks, in this order (each runs whatever the others found; the report's
``first_failure`` is the first failure in this order):

1. the transcript's hash chain (``nxrs._runs.transcript``);
2. every checkpoint file against its entry (configuration digest, then state digest), every
   entry's file there (required when the run keeps every checkpoint), and the final model's
   file is there;
3. the data's digests against the entries' (each part given or read again: the training
   data, the validation data, the test split);
4. segments (entry ``i`` -> ``i + 1``) replayed from the nearest earlier state that can be
   trusted (a kept checkpoint that passed check 2, or the run's fresh start), the digest
   compared at every entry passed on the way; in parallel threads or Ray tasks.

Replays use the default backend: every backend, thread count and worker count gives the same
bits, so the run's own are irrelevant.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy.typing as npt

from nxrs._audit.replay import ReadCommand, RunData
from nxrs._audit.verify_records import _check_checkpoints, _read_chain, _snapshot
from nxrs._audit.verify_replays import (
    _STATUSES,
    SegmentResult,
    _check_segments,
    _pick,
    _Replays,
)
from nxrs._nxrs import ConfigError, InputError, __version__
from nxrs._runs.directory import open_run_directory
from nxrs._runs.errors import ManifestError
from nxrs._runs.object_checkpoints import local_copy
from nxrs._train.fit import check_engine
from nxrs._trainer import Trainer
from nxrs._util.checks import count, flag, optional_count

if TYPE_CHECKING:
    from nxrs._runs.transcript import DataDigests

__all__ = ["SegmentResult", "VerifyReport", "verify"]

Pair = tuple[npt.ArrayLike, npt.ArrayLike]

#: How each part of the data is named in a report ("data digest differs: the test split").
_PART_NAMES = {"validation": "the validation data", "test": "the test split"}
#: The training data, by where it came from (the report's ``data.source``).
_TRAIN_NAMES = {
    "command": "the train split",
    "file": "the training data (the whole file)",
    "given": "the training data (x, y)",
}


@dataclass
class VerifyReport:
    """What ``nxrs.verify`` found. ``ok``: every check held (segments that are not verifiable
    are not failures; they are listed in ``segments``). ``failures``: one line per failure, in
    the order of the checks; ``first_failure`` is the first of them (None when ``ok``)."""

    ok: bool
    run_dir: str
    #: The transcript's entries.
    entries: int
    #: One dict per checkpoint file, and per file an entry names that is not there, by step:
    #: ``file``, ``entry`` (None if it has none), ``step``, ``status`` ("ok", "no-entry",
    #: "unreadable", "config-differs", "state-differs"; "missing": an entry's file not in the
    #: directory; "unrecorded": newer than the last entry while a process trains the run;
    #: "unclean-end": the newest file of a run killed before recording it).
    checkpoints: list[dict[str, Any]]
    segments: list[SegmentResult]
    failures: list[str]
    first_failure: str | None
    #: ``parts``: for ``train``, ``validation`` and ``test``, the digest ``recorded`` in the
    #: transcript, the one ``given`` (computed from the data given or read again; None: not
    #: given) and ``checked`` / ``ok``; ``source``: "given", "command" (read as the ``nxrs
    #: train`` command the manifest records read it) or "file" (a ``fit`` run's file, whole).
    data: dict[str, Any]
    seconds: float
    #: Segments chosen: "all", or the count asked for (plus the last).
    chosen: str = "all"
    notes: list[str] = field(default_factory=list)
    #: The ``checkpoints`` whose status is "missing": a failure each when the run keeps every
    #: checkpoint, pruned ones otherwise.
    missing: int = 0
    #: The checkpoints the run keeps, as its manifest records it (``"all"``, a count, or None
    #: when not recorded).
    keep: int | str | None = None
    #: The process training the run while it was verified (the holder of its lock, or of its
    #: lease on object storage), or None.
    held_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (``nxrs verify --json``)."""
        return asdict(self)

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        lines = [f"nxrs verify {self.run_dir}: {verdict} ({self.seconds:.2f} s)"]
        lines.append(f"  transcript {self.entries} entries")
        statuses = Counter(c["status"] for c in self.checkpoints)
        others = ", ".join(f"{n} {status}" for status, n in statuses.items() if status != "ok")
        lines.append(
            f"  checkpoints {statuses['ok']} of {len(self.checkpoints)} match their entries"
            + (f" ({others})" if others else "")
        )
        for part, info in self.data.get("parts", {}).items():
            if info["recorded"] is None and info["given"] is None:
                continue
            state = ("ok" if info["ok"] else "DIFFERS") if info["checked"] else "not checked"
            lines.append(f"  data {part}: {state}")
        counts = {s: sum(r.status == s for r in self.segments) for s in _STATUSES}
        lines.append(
            f"  segments {len(self.segments)} replayed ({self.chosen}): {counts['ok']} ok, "
            f"{counts['failed']} failed, {counts['not-verifiable']} not verifiable"
        )
        for r in self.segments:
            origin = (
                "-"
                if r.replayed_from is None
                else f"entry {r.replayed_from} ({r.replayed_from_kind})"
            )
            lines.append(
                f"    {r.start} -> {r.end}  steps {r.start_step} -> {r.end_step}  from "
                f"{origin}  {r.steps} steps  {r.seconds:.2f} s  {r.status}"
                + (f": {r.difference}" if r.difference and r.status != "ok" else "")
            )
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  FAILURE: {f}" for f in self.failures)
        return "\n".join(lines)


def verify(
    run_dir: str | os.PathLike[str],
    x: npt.ArrayLike | None = None,
    y: npt.ArrayLike | None = None,
    *,
    validation_data: Pair | None = None,
    test_data: Pair | None = None,
    data: str | os.PathLike[str] | None = None,
    segments: int | Literal["all"] = 8,
    seed: int = 0,
    engine: Literal["local", "ray"] = "local",
    workers: int | None = None,
    threads: int | None = None,
    progress: bool | None = None,
    _read_command: ReadCommand | None = None,
) -> VerifyReport:
    """Checks that the run in ``run_dir`` (a run directory of ``fit`` or ``nxrs train`` with
    its transcript, ``nxrs-transcript.jsonl``) reached its states from its data and
    configuration, bit for bit; returns a ``VerifyReport`` (``report.ok``).

    The checks (``docs/RUNS.md``, "Verifying a run"): the transcript's hash chain; every
    checkpoint file against its entry (configuration, then state digest) and the final model's
    file is kept; the data's digests against the entries'; and segments (consecutive entries)
    replayed from the nearest earlier trusted state (a kept checkpoint that passed, or the
    run's fresh start), every entry's digest on the way compared. ``segments``: how many
    segments to pick at random with ``random.Random(seed)`` among all but the last, which is
    always replayed (a count, at least 0), or ``"all"``.

    The data: ``x``, ``y`` (and ``validation_data``, ``test_data``) as the run trained on
    them; a part not given is reported as not checked. With ``x`` and ``y`` None the data is
    read again from a file, as ``nxrs.diff`` reads it: split as the ``nxrs train`` command
    the manifest records did (``data``: a file replacing its ``--data``), or for a ``fit``
    run the file ``data`` whole; MismatchError for a ``fit`` run without ``data``.

    A run being trained is verified as one state: its transcript as read, the files then
    listed; a file deleted meanwhile (pruned) is skipped and said so, files newer than the
    last entry are noted as not recorded yet (``held_by``). The newest checkpoint of a
    run killed before recording it is noted as its unclean end, not a failure. A checkpoint an
    entry lists that is not in the directory is ``missing``: a failure when the run keeps every
    checkpoint (the manifest's ``keep``), pruned otherwise.

    Segments that replay from the same state (a pruned run's, from its start) share one
    replay, so no step is computed twice and ``"all"`` costs at most the run's training.
    ``engine="local"`` runs the replays in ``workers`` threads (default: the CPUs available),
    ``engine="ray"`` as ``workers`` Ray tasks at a time (default: all at once; Ray as
    ``fit(engine="ray")`` connects to it). Each replay trainer uses ``threads`` threads (default
    1). ``progress``: a tqdm bar over segments (default: when stderr is a terminal).

    ConfigError for a bad setting, InputError when ``run_dir`` is a file (a checkpoint's:
    ``nxrs inspect``, ``nxrs diff``), FileNotFoundError when it does not exist. A run on object
    storage is named by its URL, its checkpoints read from a local copy.

    ``_read_command`` is for nxrs's own command line (the reader of the command line an older
    nxrs's manifest records in place of its data source); not part of the API.
    """
    began = time.perf_counter()
    if isinstance(segments, str) and segments != "all":
        raise ConfigError(f"segments must be a count or 'all', not {segments!r}")
    chosen_k = None if segments == "all" else count("segments", segments)
    count("seed", seed, minimum=None)
    check_engine(engine, None, None)  # the engine's name; workers mean more here (threads too)
    if progress is not None:
        progress = flag("progress", progress)
    workers = optional_count("workers", workers, minimum=1)
    per_replay = optional_count("threads", threads, minimum=1) or 1
    if (x is None) != (y is None):
        raise InputError("give both x and y, or neither (to read the data as the run did)")
    if x is None and (validation_data is not None or test_data is not None):
        raise InputError("validation_data and test_data need x and y")
    if x is not None and data is not None:
        raise InputError(
            "data (a file replacing the run's --data) is for a run's own data, not x and y"
        )
    # What the report and its messages call the run: as given (a URL, not its local copy).
    name = str(run_dir)
    # A run directory on object storage: its checkpoints are read from a local copy.
    location = local_copy(run_dir)
    if location.is_file():
        raise InputError(
            f"{name} is a file, not a run directory: nxrs verify checks a run directory (its "
            "transcript, checkpoints and data); for one checkpoint file, 'nxrs inspect FILE "
            "--verify' checks it and 'nxrs diff A B' compares two"
        )
    if not location.is_dir():
        raise FileNotFoundError(f"{name}: no such run directory")
    run = open_run_directory(run_dir)
    holder = run.holder()

    failures: list[str] = []
    notes: list[str] = []

    # --- 1. the transcript's chain
    raw, files, unread = _snapshot(run, run_dir)
    entries, chain_failures = _read_chain(raw, unread)
    failures += chain_failures
    try:
        manifest = run.read_manifest()
    except ManifestError as err:
        manifest = None
        notes.append(f"the manifest cannot be read: {err}")
    # Read before the checks: a run whose data cannot be had is refused before any work.
    run_data, source = _run_data(
        name, manifest, x, y, validation_data, test_data, data, _read_command
    )
    if holder is not None and entries:
        notes.append(
            f"the run is being trained ({holder}): verified as its transcript was, up to entry "
            f"{len(entries) - 1} (step {entries[-1]['step']})"
        )

    others = sorted({str(e.get("nxrs_version")) for e in entries} - {__version__})
    if others:
        # Replays agree across versions as long as docs/TRAINING.md's definition is the same.
        notes.append(
            f"the run was written by nxrs {', '.join(others)}; this is nxrs {__version__}: a "
            "version that changed the training definition replays to other states"
        )

    # --- 2. the checkpoints
    found = _check_checkpoints(files, entries, manifest, holder)
    failures += found.failures
    notes += found.notes

    # --- 3. the data
    data_report, data_failures = _check_data(entries, run_data, found.run_config, source)
    failures += data_failures

    # --- 4. the segments
    pairs = _pick(len(entries), chosen_k, seed)
    segment_results = _check_segments(
        entries, pairs, found.trusted, found.run_config, run_data,
        _Replays(engine, workers, per_replay, progress),
    )  # fmt: skip
    for r in segment_results:
        # Segments replayed from one pruned start share what they pass on the way: a state
        # that differs there is one failure, however many segments met it.
        if r.status == "failed" and r.difference not in failures:
            failures.append(r.difference or "")
    return VerifyReport(
        ok=not failures,
        run_dir=name,
        entries=len(entries),
        checkpoints=found.rows,
        segments=segment_results,
        failures=failures,
        first_failure=failures[0] if failures else None,
        data=data_report,
        seconds=time.perf_counter() - began,
        chosen="all" if chosen_k is None else f"{chosen_k} at random (seed {seed}) and the last",
        notes=notes,
        missing=sum(row["status"] == "missing" for row in found.rows),
        keep=found.keep,
        held_by=holder,
    )


def _run_data(
    name: str,
    manifest: dict[str, Any] | None,
    x: npt.ArrayLike | None,
    y: npt.ArrayLike | None,
    validation_data: Pair | None,
    test_data: Pair | None,
    data: str | os.PathLike[str] | None,
    read_command: ReadCommand | None,
) -> tuple[RunData, str]:
    """The data to check and replay on, and where it came from: given (``x``, ``y``, ...), or
    read again from a file (``RunData.of_run``: as the ``nxrs train`` run the manifest
    records read it, or a ``fit`` run's file whole)."""
    if x is not None and y is not None:
        return RunData(x, y, validation=validation_data, test=test_data), "given"
    file = None if data is None else os.fspath(data)
    run_data = RunData.of_run(manifest, file, name, read_command=read_command)
    return run_data, "file" if manifest is None or manifest.get("command") is None else "command"


def _check_data(
    entries: list[dict[str, Any]],
    run_data: RunData,
    run_config: dict[str, Any] | None,
    source: str,
) -> tuple[dict[str, Any], list[str]]:
    """The data's digests against every entry's, part by part."""
    recorded: dict[str, str | None] = {"train": None, "validation": None, "test": None}
    for entry in entries:
        for part in recorded:
            value = entry["data"].get(part)
            if recorded[part] is None and isinstance(value, str):
                recorded[part] = value
    report: dict[str, Any] = {"source": source, "parts": {}}
    if run_config is None:
        for part, value in recorded.items():
            report["parts"][part] = {"recorded": value, "given": None, "checked": False, "ok": None}
        return report, [
            "data not checked: the run's configuration is unknown (no checkpoint or "
            "manifest holds the configuration the transcript records)"
        ]
    digests: DataDigests = run_data.digests(Trainer(**run_config))
    given = digests.parts()
    train_name = _TRAIN_NAMES[source]
    failures = []
    for part in ("train", "validation", "test"):
        mine = given[part]
        if part == "validation" and run_data.validation is None:
            mine = None
        if part == "test" and run_data.test is None:
            mine = None
        differs = mine is not None and any(e["data"].get(part) != mine for e in entries)
        report["parts"][part] = {
            "recorded": recorded[part],
            "given": mine,
            "checked": mine is not None,
            "ok": None if mine is None else not differs,
        }
        if differs:
            name = train_name if part == "train" else _PART_NAMES[part]
            if recorded[part] is None:
                failures.append(f"data digest differs: {name} was given, but the run had none")
            else:
                failures.append(f"data digest differs: {name}")
    return report, failures
