"""``nxrs status DIR``: a run directory's manifest, progress, checkpoints and history
(``nxrs._rundir.run_status``), in human terms or as JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import nxrs
from nxrs._files import json_text
from nxrs._rundir import MANIFEST_NAME, run_status
from nxrs.cli._common import error_line, nonempty_location
from nxrs.data import _describe_split

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
        if status["resume_step"] is not None and status.get("beyond_plan"):
            lines.append(
                f"  progress step {status['resume_step']}, epoch {status['resume_epoch']}: past "
                f"the plan of the newest command ({plan.get('epochs')} epoch(s), "
                f"{plan.get('steps')} steps), which had nothing to train"
            )
        elif status["resume_step"] is not None:
            pct = "" if status["percent"] is None else f" ({status['percent']}% of the plan)"
            lines.append(
                f"  progress step {status['resume_step']} of {plan.get('steps')}{pct}, epoch "
                f"{status['resume_epoch']} of {plan.get('epochs')}"
            )
        else:
            lines.append(f"  progress no valid checkpoint yet (plan: {plan.get('steps')} steps)")
    running = status["running"]
    lines.append(f"  lock {'held by ' + running if running else 'free (no process running)'}")
    if not status["checkpoints"]:
        lines.append("  checkpoints none")
    for c in status["checkpoints"]:
        if c["valid"] is True:
            verdict = f"valid (epoch {c['epoch']}, batch {c['batch']})"
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
                f"    {e.get('time')}  {e.get('event'):<11} step {e.get('step')} (epoch "
                f"{e.get('epoch')}, batch {e.get('batch')})  pid {e.get('pid')}"
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
