"""``nxrs.verify``'s replays (check 4): the segments chosen, each replayed from the nearest
earlier trusted state, in threads of this process or as Ray tasks, and each segment's result."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy.typing as npt

from nxrs._audit.replay import RunData, first_difference, replay
from nxrs._trainer import Trainer
from nxrs._util.progress import progress_bar


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


def _run_job(job: _Job, x: npt.ArrayLike, y: npt.ArrayLike | None) -> _Outcome:
    """Replays one job (in a thread of this process or in a Ray task); ``y`` None: ``x`` is a
    token stream."""
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
    bar = progress_bar(progress, sum(len(job.segments) for job in jobs), "segment")
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
    from nxrs._train import distributed as _distributed

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
