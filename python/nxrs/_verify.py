"""``nxrs.verify``: checks that a run directory's model came from its data and configuration,
bit for bit (``docs/RUNS.md``, "Verifying a run").

Four checks, in this order (each runs whatever the others found; the report's
``first_failure`` is the first failure in this order):

1. the transcript's hash chain (``nxrs._transcript``);
2. every checkpoint file against its entry (configuration digest, then state digest), and the
   final model's file is there;
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy.typing as npt

from nxrs._checks import count, flag, optional_count
from nxrs._config import config_diff
from nxrs._fit import check_engine
from nxrs._manager import list_checkpoints
from nxrs._nxrs import CheckpointError, ConfigError, InputError, MismatchError, __version__
from nxrs._object_checkpoints import local_copy
from nxrs._replay import RunData, first_difference, replay
from nxrs._rundir import ManifestError, RunDirectory
from nxrs._trainer import Trainer
from nxrs._transcript import ENTRY_KEYS, TRANSCRIPT_NAME, Transcript, entry_digest

if TYPE_CHECKING:
    from nxrs._transcript import DataDigests

__all__ = ["SegmentResult", "VerifyReport", "verify"]

Pair = tuple[npt.ArrayLike, npt.ArrayLike]

#: How each part of the data is named in a report ("data digest differs: the test split").
_PART_NAMES = {"validation": "the validation data", "test": "the test split"}


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
    #: One dict per checkpoint file: ``file``, ``entry`` (None if it has none), ``step``,
    #: ``status`` ("ok", "no-entry", "unreadable", "config-differs", "state-differs").
    checkpoints: list[dict[str, Any]]
    segments: list[SegmentResult]
    failures: list[str]
    first_failure: str | None
    #: ``parts``: for ``train``, ``validation`` and ``test``, the digest ``recorded`` in the
    #: transcript, the one ``given`` (computed from the data given or read again; None: not
    #: given) and ``checked`` / ``ok``; ``source``: "given" or "command" (read as the ``nxrs
    #: train`` command the manifest records read it).
    data: dict[str, Any]
    seconds: float
    #: Segments chosen: "all", or the count asked for (plus the last).
    chosen: str = "all"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (``nxrs verify --json``)."""
        return asdict(self)

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        lines = [f"nxrs verify {self.run_dir}: {verdict} ({self.seconds:.2f} s)"]
        lines.append(f"  transcript {self.entries} entries")
        good = sum(c["status"] == "ok" for c in self.checkpoints)
        lines.append(f"  checkpoints {good} of {len(self.checkpoints)} match their entries")
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


def _run_job(job: _Job, x: npt.ArrayLike, y: npt.ArrayLike) -> _Outcome:
    """Replays one job (in a thread of this process or in a Ray task)."""
    start = time.perf_counter()
    if isinstance(job.base, dict):
        trainer = Trainer(**job.base, threads=job.threads)
    elif isinstance(job.base, bytes):
        trainer = Trainer.from_bytes(job.base, threads=job.threads)
    else:
        trainer = Trainer.load(job.base, threads=job.threads)
    outcome = _Outcome(job, {})
    if trainer.state_digest() != job.base_digest:
        # The file changed since check 2 was made of it.
        outcome.mismatch = -1
    else:
        data = RunData(x, y)
        for entry, step, digest in job.targets:
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
    read and split again as the ``nxrs train`` command the manifest records did (``data``: a
    file replacing its ``--data``); MismatchError when the run was not an ``nxrs train`` run.

    Segments that replay from the same state (a pruned run's, from its start) share one
    replay, so no step is computed twice and ``"all"`` costs at most the run's training.
    ``engine="local"`` runs the replays in ``workers`` threads (default: the CPUs available),
    ``engine="ray"`` as ``workers`` Ray tasks at a time (default: all at once; Ray as
    ``fit(engine="ray")`` connects to it). Each replay trainer uses ``threads`` threads (default
    1). ``progress``: a tqdm bar over segments (default: when stderr is a terminal).

    ConfigError for a bad setting, FileNotFoundError when ``run_dir`` is not a directory.
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
    # A run directory on object storage is verified from a local copy of its objects.
    directory = local_copy(run_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")

    failures: list[str] = []
    notes: list[str] = []

    # --- 1. the transcript's chain
    entries, chain_failures = _read_chain(directory)
    failures += chain_failures
    try:
        manifest = RunDirectory(directory).read_manifest()
    except ManifestError as err:
        manifest = None
        notes.append(f"the manifest cannot be read: {err}")

    others = sorted({str(e.get("nxrs_version")) for e in entries} - {__version__})
    if others:
        # Replays agree across versions as long as docs/TRAINING.md's definition is the same.
        notes.append(
            f"the run was written by nxrs {', '.join(others)}; this is nxrs {__version__}: a "
            "version that changed the training definition replays to other states"
        )

    # --- 2. the checkpoints
    checkpoints, trusted, run_config, checkpoint_failures = _check_checkpoints(
        directory, entries, manifest
    )
    failures += checkpoint_failures

    # --- 3. the data
    run_data, source = _run_data(directory, manifest, x, y, validation_data, test_data, data)
    data_report, data_failures = _check_data(entries, run_data, run_config, source)
    failures += data_failures

    # --- 4. the segments
    pairs = _pick(len(entries), chosen_k, seed)
    segment_results = _check_segments(
        entries, pairs, trusted, run_config, run_data,
        _Replays(engine, workers, per_replay, progress),
    )  # fmt: skip
    for r in segment_results:
        # Segments replayed from one pruned start share what they pass on the way: a state
        # that differs there is one failure, however many segments met it.
        if r.status == "failed" and r.difference not in failures:
            failures.append(r.difference or "")
    return VerifyReport(
        ok=not failures,
        run_dir=str(run_dir),
        entries=len(entries),
        checkpoints=checkpoints,
        segments=segment_results,
        failures=failures,
        first_failure=failures[0] if failures else None,
        data=data_report,
        seconds=time.perf_counter() - began,
        chosen="all" if chosen_k is None else f"{chosen_k} at random (seed {seed}) and the last",
        notes=notes,
    )


def _check_checkpoints(
    directory: Path, entries: list[dict[str, Any]], manifest: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[int, Path], dict[str, Any] | None, list[str]]:
    """Check 2: every checkpoint file against its entry (configuration, then state digest),
    and the final model's file kept. Returns the rows of the report, the entries whose files
    passed (a replay may start there), the run's configuration and the failures."""
    failures: list[str] = []
    files = list_checkpoints(directory)
    # Each file read once, one at a time (a run's checkpoints may not all fit in memory).
    loaded: dict[str, tuple[dict[str, Any], str, str]] = {}
    unreadable: dict[str, str] = {}
    for f in files:
        try:
            t = Trainer.load(f.path, threads=1)
        except (CheckpointError, OSError) as err:
            unreadable[f.path.name] = f"checkpoint {f.path.name} cannot be read: {err}"
            continue
        loaded[f.path.name] = (t.config, t.config_digest(), t.state_digest())
        del t
    run_config = _run_config(entries, manifest, [c for c, _, _ in loaded.values()])
    by_name = {e["checkpoint"]: i for i, e in enumerate(entries) if e.get("checkpoint")}
    trusted: dict[int, Path] = {}
    checkpoints: list[dict[str, Any]] = []
    for f in files:
        name = f.path.name
        index = by_name.get(name)
        row: dict[str, Any] = {"file": name, "entry": index, "step": f.step, "status": "ok"}
        checkpoints.append(row)
        if index is None:
            row["status"] = "no-entry"
            failures.append(f"checkpoint {name} has no transcript entry")
            continue
        if name not in loaded:
            row["status"] = "unreadable"
            failures.append(unreadable[name])
            continue
        config, config_digest, state_digest = loaded[name]
        entry = entries[index]
        if config_digest != entry["config_digest"]:
            row["status"] = "config-differs"
            diff = None if run_config is None else config_diff(config, run_config)
            which = f" ({', '.join(diff)})" if diff else ""
            failures.append(f"checkpoint {name}: its configuration differs from the run's{which}")
        elif state_digest != entry["state_digest"]:
            row["status"] = "state-differs"
            failures.append(f"checkpoint {name} differs from its entry {index}")
        else:
            trusted[index] = f.path
    if entries and entries[-1].get("checkpoint"):
        last = entries[-1]
        if last["checkpoint"] not in {f.path.name for f in files}:
            failures.append(
                f"the final model {last['checkpoint']} (entry {len(entries) - 1}, step "
                f"{last['step']}) is missing"
            )
    return checkpoints, trusted, run_config, failures


def _run_data(
    directory: Path,
    manifest: dict[str, Any] | None,
    x: npt.ArrayLike | None,
    y: npt.ArrayLike | None,
    validation_data: Pair | None,
    test_data: Pair | None,
    data: str | os.PathLike[str] | None,
) -> tuple[RunData, str]:
    """The data to check and replay on, and where it came from: given (``x``, ``y``, ...), or
    read again as the ``nxrs train`` command the manifest records did."""
    if x is not None and y is not None:
        return RunData(x, y, validation=validation_data, test=test_data), "given"
    command = None if manifest is None else manifest.get("command")
    if manifest is None or command is None:
        raise MismatchError(
            f"{directory} was not written by 'nxrs train' (its manifest records no command): "
            "give the run's data (x, y)"
        )
    run_data = RunData.of_command(
        list(command), data=None if data is None else os.fspath(data), cwd=manifest.get("cwd")
    )
    return run_data, "command"


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


def _read_chain(directory: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The transcript's well-formed entries, and the first break of its chain (if any): an
    entry after a break cannot be trusted to be the run's, but the later checks still look
    at every entry, so that one report names everything that differs."""
    transcript = Transcript(directory)
    if not transcript.exists():
        return [], [f"the transcript {TRANSCRIPT_NAME} is missing: nothing to verify against"]
    try:
        raw = transcript.read()
    except (ValueError, OSError) as err:
        return [], [f"the transcript cannot be read: {err}"]
    if not raw:
        return [], [f"the transcript {TRANSCRIPT_NAME} has no entries"]
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
    train_name = "the train split" if source == "command" else "the training data (x, y)"
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
    text = (
        f"segment {k - 1} -> {k} (steps {entries[k - 1]['step']} -> {entries[k]['step']}) "
        "replays to another state"
    )
    if k in trusted and outcome.state is not None:
        where = first_difference(Trainer.from_bytes(outcome.state), Trainer.load(trusted[k]))
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
                job.base = job.base.read_bytes()
            pending.append(task.remote(job, x_ref, y_ref))
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
