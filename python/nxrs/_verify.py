"""``nxrs.verify``: checks that a run directory's model came from its data and configuration,
bit for bit (``docs/RUNS.md``, "Verifying a run").

Four checks, in this order (each runs whatever the others found; the report's
``first_failure`` is the first failure in this order):

1. the transcript's hash chain (``nxrs._transcript``);
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
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy.typing as npt

from nxrs._checks import count, flag, optional_count
from nxrs._config import config_diff
from nxrs._fit import check_engine
from nxrs._manager import CheckpointEntry, list_checkpoints
from nxrs._nxrs import CheckpointError, ConfigError, InputError, __version__
from nxrs._object_checkpoints import local_copy
from nxrs._replay import RunData, first_difference, replay
from nxrs._rundir import ManifestError, RunDirectory, open_run_directory
from nxrs._trainer import Trainer
from nxrs._transcript import ENTRY_KEYS, TRANSCRIPT_NAME, Transcript, entry_digest

if TYPE_CHECKING:
    from nxrs._transcript import DataDigests

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
class SegmentResult:
    """One segment (entry ``start`` -> ``end``, consecutive) as replayed."""

    start: int
    end: int
    start_step: int
    end_step: int
    #: The entry whose state the replay started from (``start`` or an earlier one whose
    #: checkpoint is kept; 0 for the run's fresh start); None when there is none.
    replayed_from: int | None
    replayed_from_step: int | None
    #: "checkpoint" (a kept checkpoint's file), "start" (a fresh trainer of the run's
    #: configuration) or None.
    replayed_from_kind: str | None
    #: Optimiser steps replayed (from ``replayed_from`` to ``end``).
    steps: int
    seconds: float
    #: "ok", "failed" or "not-verifiable".
    status: str
    #: For a failed segment, what failed and the first tensor cell or scalar that differs
    #: (when the checkpoint of the entry that differs is kept); why, for a not-verifiable one.
    difference: str | None = None


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


_STATUSES = ("ok", "failed", "not-verifiable")

#: A replay's starting state: a checkpoint file's path, its bytes (sent to a Ray task), or the
#: run's configuration (a fresh trainer).
Base = Union[Path, bytes, dict[str, Any]]


@dataclass
class _Job:
    """One replay: from the state of entry ``base_entry`` through every entry up to the last
    chosen segment that replays from it (segments sharing a start share one replay: a pruned
    run's segments all pass the same states)."""

    #: The chosen segments it covers (each by its start entry).
    segments: list[int]
    base: Base
    base_entry: int
    base_digest: str
    #: (entry, step, state digest) of every entry after the base up to the last segment's end.
    targets: list[tuple[int, int, str]]
    threads: int


@dataclass
class _Outcome:
    job: _Job
    #: Seconds from the job's start until each target entry's state was reached and matched.
    reached: dict[int, float]
    #: The first entry whose digest the replay did not reach (None: all matched); -1 when the
    #: starting state itself was not the recorded one.
    mismatch: int | None = None
    #: The replayed state at ``mismatch`` (NXCK bytes), for ``first_difference``.
    state: bytes | None = None
    seconds: float = 0.0
    #: The entry ``mismatch`` records an earlier step than the replay had reached (entries
    #: reordered, or a step edited): no replay goes back.
    went_back: bool = False
    #: The checkpoint file to start from was deleted after check 2 (a run being trained
    #: prunes it): nothing was replayed.
    vanished: bool = False


def _run_job(job: _Job, x: npt.ArrayLike, y: npt.ArrayLike) -> _Outcome:
    """Replays one job (in a thread of this process or in a Ray task)."""
    start = time.perf_counter()
    outcome = _Outcome(job, {})
    if isinstance(job.base, dict):
        trainer = Trainer(**job.base, threads=job.threads)
    elif isinstance(job.base, bytes):
        trainer = Trainer.from_bytes(job.base, threads=job.threads)
    else:
        try:
            trainer = Trainer.load(job.base, threads=job.threads)
        except FileNotFoundError:
            outcome.vanished = True
            return outcome
    if trainer.state_digest() != job.base_digest:
        # The file changed since check 2 was made of it.
        outcome.mismatch = -1
    else:
        data = RunData(x, y)
        for entry, step, digest in job.targets:
            if step < trainer.steps:
                outcome.mismatch, outcome.went_back = entry, True
                break
            replay(trainer, data, step)
            if trainer.state_digest() != digest:
                outcome.mismatch, outcome.state = entry, trainer.to_bytes()
                break
            outcome.reached[entry] = time.perf_counter() - start
    outcome.seconds = time.perf_counter() - start
    return outcome


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
    run_data, source = _run_data(name, manifest, x, y, validation_data, test_data, data)
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


@dataclass
class _Checkpoints:
    """What check 2 found: the report's rows, the entries whose files passed (a replay may
    start there), the run's configuration, the failures and notes, and the ``keep`` the
    manifest records."""

    rows: list[dict[str, Any]]
    trusted: dict[int, Path]
    run_config: dict[str, Any] | None
    failures: list[str]
    notes: list[str]
    keep: int | str | None


def _check_checkpoints(
    files: list[CheckpointEntry],
    entries: list[dict[str, Any]],
    manifest: dict[str, Any] | None,
    holder: str | None,
) -> _Checkpoints:
    """Check 2: every checkpoint file against its entry (configuration, then state digest),
    every file an entry names there (required when the run keeps every checkpoint), and the
    final model's file kept. ``holder``: the process training the run now, if any."""
    # Each file read once, one at a time (a run's checkpoints may not all fit in memory).
    loaded: dict[str, tuple[dict[str, Any], str, str]] = {}
    unreadable: dict[str, str] = {}
    vanished: list[str] = []
    for f in files:
        try:
            t = Trainer.load(f.path, threads=1)
        except FileNotFoundError:
            # Listed, then deleted: a run being trained prunes its old checkpoints.
            vanished.append(f.path.name)
            continue
        except (CheckpointError, OSError) as err:
            unreadable[f.path.name] = f"checkpoint {f.path.name} cannot be read: {err}"
            continue
        loaded[f.path.name] = (t.config, t.config_digest(), t.state_digest())
        del t
    run_config = _run_config(entries, manifest, [c for c, _, _ in loaded.values()])
    keep = None if manifest is None else manifest.get("keep")
    present = [f for f in files if f.path.name not in vanished]
    by_name = {e["checkpoint"]: i for i, e in enumerate(entries) if e.get("checkpoint")}
    unrecorded = _unrecorded(present, entries, by_name, manifest, holder)
    trusted: dict[int, Path] = {}
    # (step, row, failure) of every file there and every entry's file that is not.
    rows: list[tuple[int, dict[str, Any], str | None]] = []
    for f in present:
        name = f.path.name
        index = by_name.get(name)
        row: dict[str, Any] = {"file": name, "entry": index, "step": f.step, "status": "ok"}
        failure = None
        if index is None:
            row["status"], failure = "no-entry", f"checkpoint {name} has no transcript entry"
            beyond = unrecorded.get(name)
            if beyond and name in loaded and loaded[name][1] == entries[-1]["config_digest"]:
                row["status"], failure = beyond, None
        elif name not in loaded:
            row["status"], failure = "unreadable", unreadable[name]
        else:
            config, config_digest, state_digest = loaded[name]
            entry = entries[index]
            if config_digest != entry["config_digest"]:
                row["status"] = "config-differs"
                diff = None if run_config is None else config_diff(config, run_config)
                which = f" ({', '.join(diff)})" if diff else ""
                failure = f"checkpoint {name}: its configuration differs from the run's{which}"
            elif state_digest != entry["state_digest"]:
                row["status"] = "state-differs"
                failure = f"checkpoint {name} differs from its entry {index}"
            else:
                trusted[index] = f.path
        rows.append((f.step, row, failure))
    there = {f.path.name for f in present}
    final = None
    for name, index in by_name.items():
        if name in there:
            continue
        step = entries[index]["step"]
        failure = None
        if name in vanished:
            pass  # there when the run was read, deleted since: skipped (a note says so)
        elif index == len(entries) - 1:
            final = f"the final model {name} (entry {index}, step {step}) is missing"
        elif keep == "all":
            failure = f"checkpoint {name} listed in entry {index} is missing"
        rows.append(
            (step, {"file": name, "entry": index, "step": step, "status": "missing"}, failure)
        )
    rows.sort(key=lambda r: r[0])
    failures = [failure for _, _, failure in rows if failure is not None]
    found = _Checkpoints([row for _, row, _ in rows], trusted, run_config, failures, [], keep)
    if final is not None:
        found.failures.append(final)
    found.notes = _checkpoint_notes(found, vanished, entries, holder)
    return found


def _unrecorded(
    files: list[CheckpointEntry],
    entries: list[dict[str, Any]],
    by_name: dict[str, int],
    manifest: dict[str, Any] | None,
    holder: str | None,
) -> dict[str, str]:
    """The checkpoint files past the transcript's last entry that are not tampering, by name,
    with their status: while a process trains the run (``holder``), every one
    (``"unrecorded"``: it records each once saved); otherwise the one of an unclean end
    (``"unclean-end"``): a run whose manifest says it is still running (no process ended it
    cleanly) and whose newest file is the only one past the last entry, as a process killed
    between saving a checkpoint and recording it leaves it (the next resume records it)."""
    if not entries:
        return {}
    after = [
        f.path.name for f in files if f.path.name not in by_name and f.step > entries[-1]["step"]
    ]
    if holder is not None:
        return dict.fromkeys(after, "unrecorded")
    running = manifest is not None and manifest.get("state") == "running"
    if running and len(after) == 1 and after[0] == files[-1].path.name:
        return {after[0]: "unclean-end"}
    return {}


def _checkpoint_notes(
    found: _Checkpoints, vanished: list[str], entries: list[dict[str, Any]], holder: str | None
) -> list[str]:
    """What check 2 says besides its failures: the files past the transcript (unrecorded or an
    unclean end), the files deleted while being read, the listed files not kept."""
    notes = []
    last = f"entry {len(entries) - 1}, step {entries[-1]['step']}" if entries else ""
    for row in found.rows:
        if row["status"] == "unrecorded":
            notes.append(
                f"checkpoint {row['file']} (step {row['step']}) is newer than the transcript's "
                f"last entry ({last}): the process training the run ({holder}) records it once "
                "saved; not verified"
            )
        elif row["status"] == "unclean-end":
            notes.append(
                f"the run ended uncleanly: checkpoint {row['file']} (step {row['step']}) was "
                "saved, but its process was killed or crashed before the transcript recorded it "
                f"(its last entry: {last}); not verified (resuming the run records it)"
            )
    if vanished:
        notes.append(
            f"{_names(vanished)} deleted during verification (a process training the run "
            "prunes old checkpoints): skipped"
        )
    missing = [
        row["file"]
        for row in found.rows
        if row["status"] == "missing" and row["file"] not in vanished
    ]
    if missing and found.keep != "all":
        why = (
            f"the run keeps the newest {found.keep}, the others were pruned"
            if isinstance(found.keep, int)
            else "the run does not record how many it keeps (an older nxrs wrote it)"
        )
        notes.append(f"{len(missing)} of the checkpoints the transcript lists are not kept: {why}")
    return notes


def _names(names: list[str]) -> str:
    """Checkpoint file names for a note: the first three, and how many more."""
    shown = ", ".join(names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"checkpoint{'s' if len(names) > 1 else ''} {shown}{more}"


def _run_data(
    name: str,
    manifest: dict[str, Any] | None,
    x: npt.ArrayLike | None,
    y: npt.ArrayLike | None,
    validation_data: Pair | None,
    test_data: Pair | None,
    data: str | os.PathLike[str] | None,
) -> tuple[RunData, str]:
    """The data to check and replay on, and where it came from: given (``x``, ``y``, ...), or
    read again from a file (``RunData.of_run``: as the ``nxrs train`` command the manifest
    records read it, or a ``fit`` run's file whole)."""
    if x is not None and y is not None:
        return RunData(x, y, validation=validation_data, test=test_data), "given"
    run_data = RunData.of_run(manifest, None if data is None else os.fspath(data), name)
    return run_data, "file" if manifest is None or manifest.get("command") is None else "command"


def _pick(n: int, chosen_k: int | None, seed: int) -> list[int]:
    """The segments (by their first entry) of a transcript of ``n`` entries to replay: all
    (``chosen_k`` None), or ``chosen_k`` chosen by ``seed`` among all but the last, and the
    last."""
    pairs = list(range(n - 1))
    if chosen_k is not None and chosen_k < len(pairs) - 1:
        picked = random.Random(seed).sample(pairs[:-1], chosen_k)
        pairs = [*sorted(picked), pairs[-1]]
    return pairs


@dataclass(frozen=True)
class _Replays:
    """How the replays run: ``engine``, ``workers`` at a time, ``threads`` each, a progress
    bar or not."""

    engine: str
    workers: int | None
    threads: int
    progress: bool | None


def _check_segments(
    entries: list[dict[str, Any]],
    pairs: list[int],
    trusted: dict[int, Path],
    run_config: dict[str, Any] | None,
    run_data: RunData,
    how: _Replays,
) -> list[SegmentResult]:
    """Check 4: the segments ``pairs`` replayed from their nearest trusted state (segments
    sharing one share its replay), each entry's digest compared on the way."""
    n = len(entries)
    start_digest_ok = (
        n > 0
        and entries[0]["event"] == "start"
        and run_config is not None
        and Trainer(**run_config).state_digest() == entries[0]["state_digest"]
    )
    results: dict[int, SegmentResult] = {}
    by_base: dict[int, list[int]] = {}
    for i in pairs:
        base = _base_for(i, trusted, start_digest_ok)
        result = SegmentResult(
            start=i, end=i + 1, start_step=entries[i]["step"], end_step=entries[i + 1]["step"],
            replayed_from=base, replayed_from_step=None if base is None else entries[base]["step"],
            replayed_from_kind=None if base is None else _kind(base, trusted),
            steps=0, seconds=0.0, status="not-verifiable",
        )  # fmt: skip
        results[i] = result
        if base is None:
            result.difference = _why_not_verifiable(i, entries, run_config)
        else:
            by_base.setdefault(base, []).append(i)
    jobs = []
    for base, starts in by_base.items():
        origin: Base = trusted[base] if base in trusted else dict(run_config or {})
        end = max(starts) + 1
        targets = [
            (k, entries[k]["step"], entries[k]["state_digest"]) for k in range(base + 1, end + 1)
        ]
        jobs.append(_Job(starts, origin, base, entries[base]["state_digest"], targets, how.threads))

    outcomes = _run_jobs(jobs, run_data, how.engine, how.workers, how.threads, how.progress)
    for outcome in outcomes:
        for i in outcome.job.segments:
            result = results[i]
            base_step = entries[outcome.job.base_entry]["step"]
            if result.end in outcome.reached:
                result.status = "ok"
                result.steps = result.end_step - base_step
                result.seconds = outcome.reached[result.end]
                continue
            if outcome.vanished:
                result.difference = (
                    f"not verifiable: the checkpoint it replays from (entry {result.replayed_from}"
                    f", {entries[outcome.job.base_entry]['checkpoint']}) was deleted during "
                    "verification (a process training the run prunes old checkpoints)"
                )
                continue
            result.status = "failed"
            result.seconds = outcome.seconds
            if outcome.mismatch is None or outcome.mismatch == -1:
                result.difference = (
                    f"segment {result.start} -> {result.end}: the checkpoint it replays from "
                    f"(entry {result.replayed_from}) changed during verification"
                )
            else:
                result.steps = entries[outcome.mismatch]["step"] - base_step
                result.difference = _describe_mismatch(outcome, entries, trusted)
    return [results[i] for i in pairs]


#: How many times ``_snapshot`` reads a transcript that changes while the files are listed.
_SNAPSHOT_TRIES = 10


def _snapshot(
    run: RunDirectory, run_dir: str | os.PathLike[str]
) -> tuple[list[dict[str, Any]], list[CheckpointEntry], str | None]:
    """The run as one state: the transcript's entries and the checkpoint files (of the local
    copy of a run on object storage), or why the transcript cannot be read. A process training
    the run saves a file, then records it: the transcript is read again after listing the
    files until it did not change meanwhile, so every file listed is recorded or newer than
    the last entry, and every entry's file was there unless it was deleted (pruned)."""
    transcript = run.transcript()
    after = _entries(transcript)
    for _ in range(_SNAPSHOT_TRIES):
        before = after
        files = list_checkpoints(local_copy(run_dir))
        after = _entries(transcript)
        if after == before:
            break
    # Still changing: the entries read before the last listing (a file newer than them is
    # reported as not recorded yet, never an entry as missing because its file came later).
    entries, unread = before
    return entries, files, unread


def _entries(transcript: Transcript) -> tuple[list[dict[str, Any]], str | None]:
    """The transcript's entries, or none and why they cannot be read."""
    if not transcript.exists():
        return [], f"the transcript {TRANSCRIPT_NAME} is missing: nothing to verify against"
    try:
        entries = transcript.read()
    except (ValueError, OSError) as err:
        return [], f"the transcript cannot be read: {err}"
    if not entries:
        return [], f"the transcript {TRANSCRIPT_NAME} has no entries"
    return entries, None


def _read_chain(
    raw: list[dict[str, Any]], unread: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The transcript's well-formed entries, and the first break of its chain (if any), or
    ``unread``: an entry after a break cannot be trusted to be the run's, but the later checks
    still look at every entry, so that one report names everything that differs."""
    if unread is not None:
        return [], [unread]
    failures: list[str] = []
    entries: list[dict[str, Any]] = []
    for i, entry in enumerate(raw):
        why = _chain_break(i, entry, raw[i - 1] if i else None)
        if why is not None and not failures:
            failures.append(f"chain broken at entry {i}: {why}")
        if _well_formed(entry):
            entries.append(entry)
    return entries, failures


def _well_formed(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` has every key, with values of the kinds the later checks read."""

    def step(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    return (
        all(k in entry for k in ENTRY_KEYS)
        and step(entry["step"])
        and isinstance(entry["state_digest"], str)
        and isinstance(entry["config_digest"], str)
        and isinstance(entry["data"], dict)
        and (entry["checkpoint"] is None or isinstance(entry["checkpoint"], str))
    )


def _chain_break(i: int, entry: dict[str, Any], previous: dict[str, Any] | None) -> str | None:
    """Why entry ``i`` does not continue the chain after ``previous``, or None."""
    missing = [k for k in ENTRY_KEYS if k not in entry]
    if missing:
        return f"it lacks {', '.join(missing)}"
    if not _well_formed(entry):
        return "a value of the wrong kind (step, digests, data or checkpoint)"
    if entry["entry"] != i:
        return (
            f"it says it is entry {entry['entry']!r} (an entry before it was removed or inserted)"
        )
    expected = None if previous is None else previous.get("digest")
    if entry["prev"] != expected:
        return (
            "its prev is not the previous entry's digest (an entry removed, inserted or reordered)"
        )
    if entry["digest"] != entry_digest(entry):
        return "its digest does not match its contents (the entry was edited)"
    if previous is not None and _well_formed(previous) and entry["step"] <= previous["step"]:
        return f"its step {entry['step']} is not after the previous entry's ({previous['step']})"
    return None


def _run_config(
    entries: list[dict[str, Any]],
    manifest: dict[str, Any] | None,
    configs: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The run's configuration: the one (of the manifest's and the checkpoints') whose digest
    is the one the transcript records (the last entry's), so that one edited checkpoint or
    manifest cannot pass for it; None when none has that digest."""
    if not entries:
        return None
    wanted = entries[-1]["config_digest"]
    candidates: list[dict[str, Any]] = []
    if manifest is not None and isinstance(manifest.get("config"), dict):
        candidates.append(manifest["config"])
    candidates += configs
    for config in candidates:
        try:
            if Trainer(**config).config_digest() == wanted:
                return dict(config)
        except (TypeError, ValueError):
            continue  # not a configuration this nxrs builds (a damaged manifest)
    return None


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


def _kind(base: int, trusted: dict[int, Path]) -> str:
    return "checkpoint" if base in trusted else "start"


def _base_for(i: int, trusted: dict[int, Path], start_ok: bool) -> int | None:
    """The entry to replay segment ``i`` -> ``i + 1`` from: the nearest at or before ``i``
    whose checkpoint passed check 2, or the run's fresh start (entry 0)."""
    for k in range(i, -1, -1):
        if k in trusted:
            return k
    return 0 if start_ok else None


def _why_not_verifiable(
    i: int, entries: list[dict[str, Any]], run_config: dict[str, Any] | None
) -> str:
    if entries[0]["event"] == "start" and run_config is not None:
        return (
            "not verifiable: the run started from given weights (a fresh trainer of its "
            "configuration is not its entry 0) and no checkpoint at or before entry "
            f"{i} is kept"
        )
    if run_config is None:
        return "not verifiable: the run's configuration is unknown"
    return f"not verifiable: no checkpoint at or before entry {i} is kept"


def _describe_mismatch(
    outcome: _Outcome, entries: list[dict[str, Any]], trusted: dict[int, Path]
) -> str:
    k = outcome.mismatch
    assert k is not None and k >= 1
    before, after = entries[k - 1]["step"], entries[k]["step"]
    if outcome.went_back:
        return (
            f"segment {k - 1} -> {k} (steps {before} -> {after}) goes back: no replay reaches "
            f"step {after} from step {before}"
        )
    text = f"segment {k - 1} -> {k} (steps {before} -> {after}) replays to another state"
    if k in trusted and outcome.state is not None:
        try:
            kept = Trainer.load(trusted[k])
        except FileNotFoundError:
            return text  # deleted during verification (pruned): the difference unknown
        where = first_difference(Trainer.from_bytes(outcome.state), kept)
        if where is not None:
            text += f"; first difference (replayed vs checkpoint): {where}"
    return text


def _run_jobs(
    jobs: list[_Job],
    run_data: RunData,
    engine: str,
    workers: int | None,
    threads: int,
    progress: bool | None,
) -> Iterator[_Outcome]:
    """The jobs' outcomes as they finish: in threads (each replay releases the GIL while it
    steps) or as Ray tasks."""
    if not jobs:
        return
    bar = _progress_bar(progress, sum(len(job.segments) for job in jobs))
    try:
        if engine == "ray":
            outcomes = _ray_jobs(jobs, run_data, workers)
        else:
            outcomes = _thread_jobs(jobs, run_data, workers, threads)
        for outcome in outcomes:
            if bar is not None:
                bar.update(len(outcome.job.segments))
            yield outcome
    finally:
        if bar is not None:
            bar.close()


def _thread_jobs(
    jobs: list[_Job], run_data: RunData, workers: int | None, threads: int
) -> Iterator[_Outcome]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    size = workers or max(1, (cpus or 1) // threads)
    pool = ThreadPoolExecutor(max_workers=min(size, len(jobs)))
    try:
        futures = [pool.submit(_run_job, job, run_data.x, run_data.y) for job in jobs]
        for future in as_completed(futures):
            yield future.result()
    finally:
        # On Ctrl-C (or an error) the segments not started are dropped, not waited for.
        pool.shutdown(wait=True, cancel_futures=True)


def _ray_jobs(jobs: list[_Job], run_data: RunData, workers: int | None) -> Iterator[_Outcome]:
    from nxrs import _distributed

    ray = _distributed.connect(None)
    x_ref, y_ref = ray.put(run_data.x), ray.put(run_data.y)
    task = ray.remote(num_cpus=1, max_retries=2)(_run_job)
    limit = workers or len(jobs)
    waiting = list(jobs)
    pending: list[Any] = []
    while waiting or pending:
        while waiting and len(pending) < limit:
            job = waiting.pop(0)
            if isinstance(job.base, Path):
                # The file as this process reads it: a task may run on another machine.
                try:
                    job.base = job.base.read_bytes()
                except FileNotFoundError:
                    yield _Outcome(job, {}, vanished=True)
                    continue
            pending.append(task.remote(job, x_ref, y_ref))
        if not pending:
            break  # the files of the jobs left were all deleted
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


def _progress_bar(progress: bool | None, total: int) -> Any:
    """A tqdm bar over segments when asked (``True``), or by default when stderr is a
    terminal."""
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="segment", file=sys.stderr, dynamic_ncols=True)
