"""``nxrs.sweep``: many trainings at once, as Ray tasks, each resumable from its own run directory.

Every configuration trains with ``fit`` in its own run directory under the sweep's directory
(``run-<digest>``, named by a digest of the configuration and epoch count, so running the same
sweep again finds each run where it was). A task whose process dies (a killed worker, a lost
node) is retried by Ray (``max_retries``) and resumes from its newest checkpoint instead of
starting over; as every checkpoint is exact, each result is bit-identical to running that
configuration alone, however often it was interrupted. The driver can die too: calling
``sweep`` again resumes every unfinished run and re-reads the finished ones.

The results are records (plain dicts), one per configuration in the order given, also written
as ``sweep.json`` and ``sweep.csv`` in the sweep's directory at the end; ``to_pandas()`` gives
a DataFrame when pandas is installed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, InputError
from nxrs._runs.directory import RunDirectory
from nxrs._train.fit import NothingToTrainWarning
from nxrs._trainer import Trainer
from nxrs._util.checks import count, save_points
from nxrs._util.files import json_text, write_bytes_atomically, write_json_atomically
from nxrs._util.signals import StopFlag

__all__ = ["SweepResults", "sweep", "train_config"]

log = logging.getLogger("nxrs.sweeps")

#: The files ``sweep`` writes in its directory at the end.
JSON_NAME = "sweep.json"
CSV_NAME = "sweep.csv"

#: The columns of a record besides the configuration's keys, in CSV order.
RESULT_FIELDS = (
    "index",
    "epochs",
    "steps",
    "train_loss",
    "train_accuracy",
    "val_loss",
    "val_accuracy",
    "state_hash",
    "state_digest",
    "seconds",
    "resumed_from_step",
    "run_dir",
    "error",
    "diverged",
)


class SweepResults(list):  # type: ignore[type-arg]
    """The records of a sweep (a list of dicts, one per configuration, in the order given).

    Each record holds ``config`` (the configuration as given), ``index``, ``epochs``, ``steps``,
    ``train_loss``/``train_accuracy`` (``Trainer.evaluate`` on the training data after the run),
    ``val_loss``/``val_accuracy`` (on ``validation_data``, else None), ``state_hash`` (the
    full-state hash, 16 hex digits), ``state_digest`` (its SHA-256 state digest, the one the
    run directory's transcript ends with, for ``nxrs verify``), ``seconds`` (wall time of the
    attempt that finished),
    ``resumed_from_step`` (the checkpoint step that attempt resumed from, None for a fresh
    start), ``run_dir``, ``error`` (None, or why the configuration failed after its retries) and
    ``diverged`` (whether a final loss is not finite: NaN or infinity; None for a failed
    configuration). ``json_path`` and ``csv_path`` are the files written; ``sweep.json`` is
    strict JSON, a non-finite loss in it is null.
    """

    json_path: Path | None = None
    csv_path: Path | None = None

    def rows(self) -> list[dict[str, Any]]:
        """The records flattened as in the CSV file: the configuration's keys as columns
        (lists as JSON text), then ``RESULT_FIELDS``."""
        keys: list[str] = []
        for record in self:
            keys.extend(k for k in record["config"] if k not in keys)
        rows = []
        for record in self:
            row: dict[str, Any] = {}
            for key in keys:
                value = record["config"].get(key)
                row[key] = json_text(value) if isinstance(value, (list, tuple)) else value
            row.update({field: record.get(field) for field in RESULT_FIELDS})
            rows.append(row)
        return rows

    def to_pandas(self) -> Any:
        """The records as a pandas DataFrame, one row per configuration (``rows()``)."""
        try:
            import pandas as pd  # type: ignore[import-untyped,unused-ignore]
        except ImportError as err:
            raise ImportError(
                "SweepResults.to_pandas needs pandas, which is not installed: pip install pandas"
            ) from err
        return pd.DataFrame(self.rows())


def sweep(
    configs: Iterable[Mapping[str, Any]],
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    epochs: int,
    directory: str | os.PathLike[str],
    validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
    every: int | None = None,
    every_seconds: float | None = 30.0,
    max_retries: int = 3,
    ray_address: str | None = None,
    _file: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
) -> SweepResults:
    """Trains every configuration of ``configs`` on ``(x, y)`` for ``epochs`` epochs, as Ray
    tasks (as many at once as the cluster has CPUs), and returns their records.

    A configuration is a mapping of ``Trainer`` keywords (``layers``, ``lr``, ``batch_size``,
    ``seed``, ...), optionally with ``epochs`` overriding the sweep's. Every configuration is
    built once on the driver first, so a bad one raises ``ConfigError`` (or ``TypeError`` for
    an unknown keyword) before anything runs; so do two that train the same run, an empty
    ``configs``, and ``epochs`` (at least 1), ``every`` (at least 1), ``every_seconds`` (positive)
    or ``max_retries`` (at least 0) out of range or not counts (``nxrs._util.checks``).

    Each trains with ``fit(checkpoint=directory/run-<digest>, every=every,
    every_seconds=every_seconds)``; a task whose process dies is retried up to ``max_retries``
    times and resumes from its newest checkpoint. A configuration that still fails (or raises)
    gets its ``error`` in its record, and the others go on. ``ray_address``: the cluster to use
    (else ``RAY_ADDRESS``, else a local cluster sized to this machine; an already initialised
    Ray is used as it is). Every node needs nxrs installed and ``directory`` on a file system
    they share. The data is checked against every configuration's model on the driver first,
    so a label that does not fit one is an ``InputError`` naming it before anything runs.
    ``_file``: the whole file ``(x, y)`` and ``validation_data`` were split from (``nxrs
    sweep``'s), checked instead, so a sample index in an error is the file's row, as ``nxrs
    train`` reports it.
    """
    from nxrs._train import distributed as distributed

    epochs = count("epochs", epochs, minimum=1)
    max_retries = count("max_retries", max_retries, minimum=0)
    # Every configuration trains in its own run directory under ``directory``.
    every, every_seconds = save_points(every, every_seconds, checkpointed=True)
    given = [dict(c) if isinstance(c, Mapping) else c for c in configs]
    x = np.asarray(x)
    y = np.asarray(y)
    if validation_data is not None:
        if not isinstance(validation_data, tuple) or len(validation_data) != 2:
            raise InputError("validation_data must be a tuple (x, y)")
        validation_data = (np.asarray(validation_data[0]), np.asarray(validation_data[1]))
    if _file is not None:
        data = [(np.asarray(_file[0]), np.asarray(_file[1]))]
    else:
        data = [(x, y)] if validation_data is None else [(x, y), validation_data]
    plans = _plans(given, epochs, data)
    # Absolute: Ray's worker processes do not share the driver's working directory.
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    ray = distributed.connect(ray_address)
    x_ref, y_ref = ray.put(x), ray.put(y)
    val_ref = None if validation_data is None else ray.put(validation_data)
    # Only a lost process is retried (retry_exceptions=False): an error of the configuration
    # itself would fail again the same way.
    task = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(train_config)
    pending = {}
    for index, (kwargs, plan_epochs, digest) in enumerate(plans):
        run_dir = str(root / f"run-{digest}")
        ref = task.remote(kwargs, plan_epochs, x_ref, y_ref, val_ref, run_dir, every, every_seconds)
        pending[ref] = index
    records: list[dict[str, Any] | None] = [None] * len(plans)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(done[0])
        record: dict[str, Any] = {"index": index, "config": given[index]}
        record.update(dict.fromkeys(RESULT_FIELDS[1:]))
        try:
            record.update(ray.get(done[0]))
        except Exception as err:  # the task's own error, or its process lost max_retries times
            # A task's error carries the configuration's exception as its cause.
            cause = getattr(err, "cause", None) or err
            record["error"] = f"{type(cause).__name__}: {cause}"
            record["epochs"] = plans[index][1]
            record["run_dir"] = str(root / f"run-{plans[index][2]}")
            log.error("configuration %d failed: %s", index, record["error"])
        records[index] = record
        finished = len(plans) - len(pending)
        log.info("configuration %d done (%d of %d): %s", index, finished, len(plans),
                 record_summary(record))  # fmt: skip
    results = SweepResults(r for r in records if r is not None)
    _write(results, root)
    return results


def _plans(
    configs: list[Any], epochs: int, data: Sequence[tuple[npt.ArrayLike, npt.ArrayLike]] = ()
) -> list[tuple[dict[str, Any], int, str]]:
    """Each configuration as (Trainer keywords, epochs, run digest), every one checked, with
    each of ``data``'s ``(x, y)`` meeting its model's data rule (each task checks its data again
    when it builds its dataset)."""
    if not configs:
        raise ConfigError("sweep needs at least one configuration")
    plans = []
    seen: dict[str, int] = {}
    # The data rule depends on the model's inputs, outputs and loss only: once per kind.
    fitted: set[tuple[int, int, str]] = set()
    for index, config in enumerate(configs):
        if not isinstance(config, Mapping):
            raise ConfigError(f"configuration {index} is a {type(config).__name__}, not a mapping")
        kwargs = {k: v for k, v in config.items() if k != "epochs"}
        plan_epochs = count(f"configuration {index}: epochs", config.get("epochs", epochs), 1)
        try:
            trainer = Trainer(**kwargs)
        except ConfigError as err:
            raise ConfigError(f"configuration {index} ({config}): {err}") from err
        except TypeError as err:
            raise TypeError(f"configuration {index} ({config}): {err}") from err
        shape = (trainer.sizes[0], trainer.sizes[-1], trainer.config["loss"])
        if shape not in fitted:
            try:
                for x, y in data:
                    trainer._dataset(x, y)
            except InputError as err:
                raise InputError(f"configuration {index} ({config}): {err}") from err
            fitted.add(shape)
        identity = json.dumps({"config": trainer.config, "epochs": plan_epochs}, sort_keys=True)
        digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
        if digest in seen:
            raise ConfigError(
                f"configurations {seen[digest]} and {index} train the same run ({config})"
            )
        seen[digest] = index
        plans.append((kwargs, plan_epochs, digest))
    return plans


def train_config(
    kwargs: Mapping[str, Any],
    epochs: int,
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | None,
    run_dir: str | os.PathLike[str],
    every: int | None,
    every_seconds: float | None,
) -> dict[str, Any]:
    """Trains one configuration (``Trainer(**kwargs)``) in the run directory ``run_dir``, as a
    sweep's task does, resuming from its newest checkpoint; returns its record (without
    ``index`` and ``config``)."""
    start = time.perf_counter()
    trainer = Trainer(**kwargs)
    with warnings.catch_warnings():
        # A finished run, read again by a sweep run again: nothing to train is what is expected.
        warnings.simplefilter("ignore", NothingToTrainWarning)
        trainer.fit(
            x,
            y,
            epochs,
            validation_data=validation_data,
            checkpoint=run_dir,
            every=every,
            every_seconds=every_seconds,
            progress=False,
            # Ray owns its worker processes' signals (it stops and kills them itself): a flag
            # marked installed tells fit to leave the handlers alone.
            _stop=StopFlag(installed=True),
        )
    train_loss, train_accuracy = trainer.evaluate(x, y)
    val_loss = val_accuracy = None
    if validation_data is not None:
        val_loss, val_accuracy = trainer.evaluate(*validation_data)
    losses = (train_loss, val_loss)
    return {
        "epochs": epochs,
        "steps": trainer.steps,
        "train_loss": train_loss,
        "train_accuracy": train_accuracy,
        "val_loss": val_loss,
        "val_accuracy": val_accuracy,
        "state_hash": f"{trainer.state_hash():016x}",
        "state_digest": trainer.state_digest(),
        "seconds": round(time.perf_counter() - start, 3),
        "resumed_from_step": _resumed_from(Path(run_dir)),
        "run_dir": str(run_dir),
        "error": None,
        "diverged": not all(v is None or math.isfinite(v) for v in losses),
    }


def _resumed_from(run_dir: Path) -> int | None:
    """The step this process's ``fit`` resumed from: the newest start or resume in the
    manifest is the one it recorded (it held the directory's lock)."""
    manifest = RunDirectory(run_dir).read_manifest()
    assert manifest is not None  # fit has just written it
    for entry in reversed(manifest["events"]):
        if entry["event"] in ("start", "resume"):
            step: int | None = entry["step"] if entry.get("checkpoint") else None
            return step
    return None


def record_summary(record: Mapping[str, Any]) -> str:
    """A record in one line (the sweep's log, ``nxrs sweep``'s output)."""
    if record.get("error") is not None:
        return f"error: {record['error']}"
    parts = [f"{key} {record[key]:.4f}" for key in ("train_accuracy", "val_accuracy", "val_loss")
             if record.get(key) is not None]  # fmt: skip
    resumed = record.get("resumed_from_step")
    parts.append(f"state hash {record['state_hash']}")
    parts.append(f"{record['seconds']:.1f} s")
    if resumed is not None:
        parts.append(f"resumed from step {resumed}")
    return ", ".join(parts)


def _write(results: SweepResults, root: Path) -> None:
    """``sweep.json`` (the records) and ``sweep.csv`` (``rows()``), each replaced atomically."""
    results.json_path = root / JSON_NAME
    write_json_atomically(results.json_path, list(results))
    rows = results.rows()
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    results.csv_path = root / CSV_NAME
    write_bytes_atomically(results.csv_path, text.getvalue().encode())
