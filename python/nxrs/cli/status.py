"""``nxrs status DIR``: a run directory's manifest, progress, checkpoints and history
(``run_status``), in human terms or as JSON."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any

import nxrs
from nxrs._nxrs import NxrsError
from nxrs._runs.checkpoints import CheckpointManager, list_checkpoints
from nxrs._runs.directory import ObjectRunDirectory, open_run_directory
from nxrs._runs.errors import MANIFEST_NAME
from nxrs._runs.transcript import TRANSCRIPT_NAME, Transcript
from nxrs._trainer import Trainer
from nxrs._util.files import json_text
from nxrs.cli._common import error_line, nonempty_location
from nxrs.data import _describe_split, _is_text_source

HELP = "print a run directory's configuration, progress, checkpoints and history"
DESCRIPTION = (
    "Print what nxrs train --ckpt-dir DIR (or fit(checkpoint=DIR)) keeps in DIR: "
    "configuration, progress (step, epoch, percentage of the plan), each checkpoint and "
    "whether the newest validates (every checksum), whether a process holds the lock, and "
    "the history of starts, stops and resumes. Exit status 1 when the newest checkpoint is "
    "damaged, DIR holds no run manifest, or the run's transcript or manifest lacks its newest "
    "checkpoint (a run that could not write them, or was killed between the checkpoint and "
    "them: resuming it writes them), 0 otherwise."
)
EPILOG = """\
examples:
  nxrs status run
  nxrs status run --json | jq .progress
"""


def add_arguments(status: argparse.ArgumentParser) -> None:
    status.add_argument("directory", type=nonempty_location)
    status.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        status = run_status(args.directory)
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs status: {error_line(err)}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json_text(status, indent=1) + "\n")
    else:
        sys.stdout.write(format_status(status))
    return 0 if status["ok"] else 1


def format_status(status: dict[str, Any]) -> str:
    """``run_status`` in human terms."""
    lines = [f"run directory {status['directory']}"]
    manifest = status["manifest"]
    # A token stream's steps draw their windows at random: it has no epochs or batches to show.
    stream = _is_text_source((manifest or {}).get("data_source"))

    def position(epoch: object, batch: object) -> str:
        return "" if stream else f" (epoch {epoch}, batch {batch})"

    if manifest is None:
        lines.append(f"  no manifest ({MANIFEST_NAME}): not a run directory of nxrs train or fit")
    else:
        config = manifest.get("config", {})
        data = manifest.get("data", {})
        lines.append(
            f"  state {manifest.get('state')}, started {manifest.get('started')}, updated "
            f"{manifest.get('updated')}, nxrs {manifest.get('nxrs_version')}"
        )
        if "command" in manifest:
            lines.append("  command " + " ".join(manifest["command"]))
        lines.append(
            f"  configuration layers {config.get('layers')}, {config.get('optimizer')} "
            f"lr={config.get('lr')}, batch {config.get('batch_size')}, math "
            f"{config.get('math')}, seed {config.get('seed')}"
        )
        lines.append(f"  data {data.get('samples')} samples, fingerprint {data.get('fingerprint')}")
        file = data.get("file")
        if isinstance(file, dict):
            lines.append(
                f"  data file {file.get('samples')} samples, fingerprint {file.get('fingerprint')}"
                f", {_describe_split(file)}"
            )
        plan = manifest.get("plan", {})
        epochs = "" if stream else f"{plan.get('epochs')} epoch(s), "
        if status["resume_step"] is not None and status.get("beyond_plan"):
            lines.append(
                f"  progress step {status['resume_step']}"
                + ("" if stream else f", epoch {status['resume_epoch']}")
                + f": past the plan of the newest command ({epochs}{plan.get('steps')} steps), "
                "which had nothing to train"
            )
        elif status["resume_step"] is not None:
            pct = "" if status["percent"] is None else f" ({status['percent']}% of the plan)"
            lines.append(
                f"  progress step {status['resume_step']} of {plan.get('steps')}{pct}"
                + ("" if stream else f", epoch {status['resume_epoch']} of {plan.get('epochs')}")
            )
        else:
            lines.append(f"  progress no valid checkpoint yet (plan: {plan.get('steps')} steps)")
    running = status["running"]
    lines.append(f"  lock {'held by ' + running if running else 'free (no process running)'}")
    if not status["checkpoints"]:
        lines.append("  checkpoints none")
    for c in status["checkpoints"]:
        if c["valid"] is True:
            verdict = "valid" + position(c["epoch"], c["batch"])
        elif c["valid"] is False:
            verdict = f"DAMAGED: {c['error']}"
        else:
            verdict = "not checked (older)"
        lines.append(f"  checkpoint {c['file']}  step {c['step']}  {verdict}")
    if status["resume_from"] is not None:
        lines.append(f"  a resume starts from {status['resume_from']}")
    transcript = status.get("transcript")
    if transcript is not None and transcript["error"] is not None:
        lines.append(f"  transcript DAMAGED: {transcript['error']}")
    elif transcript is not None:
        lines.append(
            f"  transcript {transcript['entries']} entries, the newest at step "
            f"{transcript['last_step']} (state digest {transcript['last_state_digest']}); "
            "nxrs verify checks them"
        )
        if transcript["torn_bytes"]:
            lines.append(
                f"  transcript ends in a torn line of {transcript['torn_bytes']} bytes (an append "
                "that did not finish: no entry; the next run cuts it off)"
            )
    if status["temporary_files"]:
        lines.append(
            f"  temporary files of interrupted saves (removed by the next run): "
            f"{', '.join(status['temporary_files'])}"
        )
    if manifest is not None:
        lines.append("  history")
        omitted = manifest.get("events_omitted") or {}
        for index, e in enumerate(manifest.get("events", [])):
            if index == 1 and omitted:
                kinds = ", ".join(f"{n} {kind}" for kind, n in omitted.items())
                lines.append(f"    ... {sum(omitted.values())} events not kept ({kinds})")
            extra = [
                f"{k} {e[k]}"
                for k in ("reason", "checkpoint", "previous_end", "moved_aside", "error")
                if k in e
            ]
            lines.append(
                f"    {e.get('time')}  {e.get('event'):<11} step {e.get('step')}"
                f"{position(e.get('epoch'), e.get('batch'))}  pid {e.get('pid')}"
                + ("  " + "; ".join(extra) if extra else "")
            )
    problems = list(status["records_missing"])
    if manifest is None:
        problems.insert(0, "no run manifest")
    elif status["checkpoints"] and status["checkpoints"][0]["valid"] is not True:
        problems.insert(0, "the newest checkpoint is damaged")
    lines.extend(f"  PROBLEM: {problem}" for problem in problems)
    if status["records_missing"]:
        lines.append("  (running the same command again resumes the run and writes them)")
    return "\n".join(lines) + "\n"


def run_status(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``nxrs status`` reports: the manifest, every checkpoint file with the validity of
    the newest ones (read newest first until one validates), the lock, what the records lack
    (``records_missing``), and ``ok`` (False when the newest checkpoint is damaged, the
    directory holds no run, or the records lack its newest valid checkpoint)."""
    run = open_run_directory(directory)
    if not run.exists():
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(run.directory))
    manifest = run.read_manifest()
    if isinstance(run, ObjectRunDirectory):
        # A store's listing; the newest checkpoints are read from the local cache (downloaded
        # into it when it does not hold them).
        manager = CheckpointManager(run.directory)
        entries, local_copy = manager.list(), manager._local_copy
    else:
        # Listed as a CheckpointManager lists them, without making one: its constructor sweeps
        # temporary files, and status only looks.
        entries, local_copy = list_checkpoints(run.directory), lambda entry: entry.path
    checkpoints: list[dict[str, Any]] = []
    resumable = None
    for entry in reversed(entries):
        step, path = entry.step, entry.path
        row: dict[str, Any] = {"file": path.name, "step": step, "bytes": None}
        if resumable is None:
            try:
                path = local_copy(entry)
                row["bytes"] = path.stat().st_size
                t = Trainer.load(path)
                row.update(valid=True, epoch=t.epoch, batch=t.batch, error=None)
                resumable = path.name
            except (OSError, NxrsError) as err:
                row.update(valid=False, error=f"{type(err).__name__}: {err}")
        else:
            row["valid"] = None  # not checked: an older file than the one a resume would use
        checkpoints.append(row)
    temporary = run.temporary_files()
    newest_ok = not checkpoints or checkpoints[0]["valid"] is True
    plan = (manifest or {}).get("plan") or {}
    progress = (manifest or {}).get("progress") or None
    done = None
    if resumable is not None:
        done = next(c for c in checkpoints if c["file"] == resumable)
    percent = None
    beyond = False
    if done is not None and plan.get("steps"):
        # The plan is the newest invocation's (its --epochs); a resume asking for fewer epochs
        # than the run had reached trains nothing, and the run is past that plan, not at 200%.
        beyond = done["step"] > plan["steps"]
        percent = 100.0 if beyond else round(100 * done["step"] / plan["steps"], 1)
    running = run.holder()
    transcript = _transcript_summary(run.transcript())
    # A running process may be between a checkpoint and its records: only a run no process
    # holds is judged.
    missing = [] if running is not None else _records_missing(manifest, transcript, done)
    return {
        "directory": str(run.directory),
        "manifest": manifest,
        "running": running,
        "checkpoints": checkpoints,
        "resume_from": resumable,
        "resume_step": None if done is None else done["step"],
        "resume_epoch": None if done is None else done.get("epoch"),
        "percent": percent,
        "beyond_plan": beyond,
        "progress": progress,
        "temporary_files": temporary,
        "transcript": transcript,
        "records_missing": missing,
        "ok": manifest is not None and newest_ok and not missing,
    }


def _records_missing(
    manifest: dict[str, Any] | None,
    transcript: dict[str, Any] | None,
    newest: dict[str, Any] | None,
) -> list[str]:
    """What the run's records (its transcript, its manifest) lack of its newest valid
    checkpoint ``newest`` (``run_status``'s row): written by a process that could not write
    them (a disk full, a store unreachable: it ended with exit 5) or killed between the
    checkpoint and them. Resuming the run writes them."""
    if newest is None:
        return []
    name, step = newest["file"], newest["step"]
    missing = []
    if transcript is None:
        missing.append(f"the transcript {TRANSCRIPT_NAME} is missing")
    elif transcript["error"] is None and not (
        isinstance(transcript["last_step"], int) and transcript["last_step"] >= step
    ):
        missing.append(
            f"the transcript has no entry for {name} (its last entry is of step "
            f"{transcript['last_step']})"
        )
    progress = (manifest or {}).get("progress")
    if manifest is not None and (progress is None or progress["step"] < step):
        recorded = "none" if progress is None else progress["checkpoint"]
        missing.append(f"the manifest does not record {name} (its newest checkpoint: {recorded})")
    return missing


def _transcript_summary(transcript: Transcript) -> dict[str, Any] | None:
    """The transcript's size and newest entry for ``nxrs status`` (None when there is none;
    ``error`` when it cannot be read). Its chain is ``nxrs verify``'s to check."""
    if not transcript.exists():
        return None
    try:
        entries = transcript.read()
    except (OSError, ValueError) as err:
        return {"entries": None, "torn_bytes": None, "error": str(err)}
    last = entries[-1] if entries else {}
    return {
        "entries": len(entries),
        "last_step": last.get("step"),
        "last_state_digest": last.get("state_digest"),
        "torn_bytes": transcript.torn,
        "error": None,
    }
