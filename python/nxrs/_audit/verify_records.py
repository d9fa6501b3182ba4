"""``nxrs.verify``'s checks of a run's records: the transcript's hash chain (check 1, read as one
snapshot of a run that may be training) and every checkpoint file against its entry (check 2)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nxrs._nxrs import CheckpointError
from nxrs._runs.checkpoints import CheckpointEntry, list_checkpoints
from nxrs._runs.directory import RunDirectory
from nxrs._runs.object_checkpoints import local_copy
from nxrs._runs.transcript import ENTRY_KEYS, TRANSCRIPT_NAME, Transcript, entry_digest
from nxrs._trainer import Trainer
from nxrs._util.config import config_diff


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
