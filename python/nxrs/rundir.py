"""A run directory: the checkpoints of one training run, its manifest and its lock.

``fit(checkpoint=DIR)`` and ``nxrs train --ckpt-dir DIR`` keep in ``DIR``:

- the checkpoints, ``step-<12 digits>.nxck`` (a ``CheckpointManager``'s, ``keep=3``);
- ``nxrs-run.json``, the manifest: a small JSON document for people and scripts (see
  ``docs/RUNS.md``): the configuration, the data's fingerprint, nxrs's version, when the run
  started, the plan (epochs, steps), the newest checkpoint written, and the history of starts,
  stops, resumes and failed saves with their reasons. It is rewritten crash-safely (temporary
  file, fsync, rename, directory fsync), so it is always the complete old or new document;
- ``.nxrs-run.lock``, locked (``fcntl.flock``, exclusive) by the process training in ``DIR``.
  The kernel drops the lock when that process ends, however it ends, so a killed run never
  blocks a restart; the file itself stays (deleting lock files invites races);
- ``previous/<UTC time>/``: earlier runs moved aside by ``resume=False`` / ``--restart``.

A second process pointed at a locked directory gets ``RunLockedError`` and changes nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn, Optional

from nxrs._nxrs import MismatchError, NxrsError

__all__ = [
    "EVENTS_KEPT",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "CheckpointSaveError",
    "ManifestError",
    "RunDirectory",
    "RunLockedError",
    "RunStopped",
    "SaveFailedWarning",
    "finite_or_null",
    "json_text",
]

MANIFEST_NAME = "nxrs-run.json"
LOCK_NAME = ".nxrs-run.lock"
PREVIOUS_NAME = "previous"
MANIFEST_FORMAT = "nxrs-run/1"
_MANIFEST_TEMP = f".{MANIFEST_NAME}.tmp."


class RunLockedError(NxrsError):
    """Another live process holds the run directory's lock."""


class ManifestError(MismatchError):
    """The run directory's manifest is not a valid nxrs run manifest: not JSON, another format,
    or a field missing or of the wrong type (``MANIFEST_SCHEMA``).

    A ``MismatchError``: ``fit`` refuses to resume such a directory as it refuses one holding
    another run (``nxrs train`` exit 3; ``resume=False`` / ``--restart`` moves it aside), and
    ``nxrs status`` reports it in one line (exit 1).
    """


class CheckpointSaveError(OSError):
    """A checkpoint that had to be written (at the end of a run, or when stopping on a signal)
    could not be: the newest valid checkpoint in the directory is the previous one."""


class SaveFailedWarning(UserWarning):
    """A periodic checkpoint (or a manifest update) could not be written; training goes on and
    the next save point tries again. The previous checkpoint is intact."""


class RunStopped(KeyboardInterrupt):
    """``fit`` stopped on SIGINT or SIGTERM after saving a checkpoint of the step it reached.

    A ``KeyboardInterrupt``, so code that handles Ctrl-C handles it. ``signal`` is the signal's
    number, ``step`` the step saved and ``checkpoint`` the file (None without a checkpoint).
    """

    def __init__(self, signum: int, step: int, checkpoint: Path | None) -> None:
        name = signal.Signals(signum).name
        where = f"saved {checkpoint}" if checkpoint is not None else "no checkpoint configured"
        super().__init__(f"stopped by {name} at step {step}; {where}")
        self.signal = signum
        self.step = step
        self.checkpoint = checkpoint


def now() -> str:
    """The current UTC time, ISO 8601 to the millisecond."""
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finite_or_null(document: Any) -> Any:
    """``document`` (dicts, lists, tuples, scalars) with every non-finite float (a diverged
    run's loss) replaced by None: strict JSON has no NaN or infinity."""
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {k: finite_or_null(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [finite_or_null(v) for v in document]
    return document


def json_text(document: Any, indent: int | None = None) -> str:
    """``document`` as strict JSON text (RFC 8259: non-finite floats as null), one line without
    ``indent``; no newline at the end. Every JSON nxrs writes (files and ``--json`` output)
    goes through here, so no reader meets Python's bare ``NaN`` or ``Infinity``."""
    return json.dumps(finite_or_null(document), indent=indent, allow_nan=False)


def write_json_atomically(path: Path, document: Any) -> None:
    """Writes ``document`` to ``path`` as strict JSON (``json_text``), as
    ``write_bytes_atomically`` writes."""
    write_bytes_atomically(path, (json_text(document, indent=1) + "\n").encode())


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path``: temporary file, fsync, rename, directory fsync. On any
    failure the temporary file is removed and ``path`` is unchanged."""
    temp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_directory(path.parent)


@dataclass
class StopFlag:
    """Set by the SIGINT/SIGTERM handlers ``stop_signals`` installs: the first signal's number
    and how many arrived."""

    signum: Optional[int] = None  # noqa: UP045 (a dataclass field evaluated on Python 3.9)
    count: int = 0
    installed: bool = False
    _previous: dict[int, Any] = field(default_factory=dict)


def _handler(flag: StopFlag) -> Any:
    def handle(signum: int, frame: object) -> None:
        flag.count += 1
        if flag.signum is None:
            flag.signum = signum
        else:
            # A second signal while stopping: say so, change nothing (the save goes on).
            with contextlib.suppress(OSError):
                os.write(2, b"nxrs: already stopping; saving the checkpoint, please wait\n")

    return handle


@contextlib.contextmanager
def stop_signals(flag: StopFlag | None = None) -> Iterator[StopFlag]:
    """Within the block, SIGINT and SIGTERM set ``flag`` instead of interrupting (main thread
    only: elsewhere nothing is installed and ``flag.installed`` is False); the previous handlers
    are restored after it. A flag that is already installed is passed through."""
    if flag is not None and flag.installed:
        yield flag
        return
    flag = StopFlag() if flag is None else flag
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    handle = _handler(flag)
    for signum in (int(signal.SIGINT), int(signal.SIGTERM)):
        flag._previous[signum] = signal.signal(signum, handle)
    flag.installed = True
    try:
        yield flag
    finally:
        for signum, previous in flag._previous.items():
            # None: the previous handler was not installed from Python; SIG_DFL is the nearest.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        flag._previous.clear()
        flag.installed = False


def _host() -> str:
    return socket.gethostname()


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
_INTEGER = _is("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_COUNT = _is("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)
_OBJECT = _is("an object", lambda v: isinstance(v, dict))


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
    {"command": _array(_STRING), "events_omitted": _counts()},
)

#: The history a manifest keeps: the run's first event and the newest ``EVENTS_KEPT``; the
#: ones dropped between them are counted by kind in ``events_omitted``. (A run resumed many
#: times would otherwise grow its manifest, rewritten at every save, without bound.)
EVENTS_KEPT = 100


def add_event(manifest: dict[str, Any], entry: dict[str, Any]) -> None:
    """Appends ``entry`` to the manifest's history, keeping it to the first event and the
    newest ``EVENTS_KEPT`` (the others counted in ``events_omitted``)."""
    events: list[dict[str, Any]] = manifest["events"]
    events.append(entry)
    while len(events) > EVENTS_KEPT + 1:
        dropped = events.pop(1)
        omitted: dict[str, int] = manifest.setdefault("events_omitted", {})
        omitted[dropped["event"]] = omitted.get(dropped["event"], 0) + 1


class RunDirectory:
    """The manifest and lock of one run directory (the checkpoints are a manager's)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest_path = self.directory / MANIFEST_NAME
        self.lock_path = self.directory / LOCK_NAME
        self._lock: IO[str] | None = None

    # ------------------------------------------------------------------ lock

    def acquire(self) -> None:
        """Takes the directory's lock (creating the directory); RunLockedError if another
        process holds it. Then removes the manifest's temporary files left by killed writers."""
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        f = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            # A few tries: ``holder()`` (nxrs status) takes a shared lock for an instant.
            for attempt in range(10):
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 9:
                        raise
                    time.sleep(0.02)
        except OSError as err:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLockedError(
                    f"{self.directory} is in use by {holder}: one run per directory (wait for "
                    "it to stop, or stop it; a killed process's lock is released by the system)"
                ) from None
            raise
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()} on {_host()} since {now()}\n")
        f.flush()
        self._lock = f
        for child in self.directory.iterdir():
            if child.name.startswith(_MANIFEST_TEMP):
                child.unlink(missing_ok=True)

    def release(self) -> None:
        """Releases the lock (closing the file releases it)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def holder(self) -> str | None:
        """Who holds the lock now (its file's line), or None when nobody does."""
        import fcntl

        if not self.lock_path.is_file():
            return None
        with open(self.lock_path, encoding="utf-8") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return f.read().strip() or "another process"
            return None

    # ------------------------------------------------------------------ manifest

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, checked against ``MANIFEST_SCHEMA``, or None when the directory has
        none. ManifestError (a MismatchError) when it is not a valid manifest."""
        try:
            data = self.manifest_path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            manifest = json.loads(data)
        except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
            self._refuse(f"not a JSON document: {err}")
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            self._refuse(f"not an nxrs run manifest ({MANIFEST_FORMAT})")
        error = MANIFEST_SCHEMA(manifest, "manifest")
        if error is not None:
            self._refuse(f"not a valid nxrs run manifest: {error}")
        return manifest

    def _refuse(self, why: str) -> NoReturn:
        raise ManifestError(
            f"{self.manifest_path}: {why}; restart to move the directory's run aside "
            "(resume=False, nxrs train --restart) or use another directory"
        )

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest["updated"] = now()
        write_json_atomically(self.manifest_path, manifest)

    def move_aside(self, files: list[Path]) -> Path | None:
        """Moves ``files`` and the manifest into ``previous/<UTC time>/``; returns that folder
        (None when there was nothing to move)."""
        files = [p for p in files if p.exists()]
        if self.manifest_path.exists():
            files.append(self.manifest_path)
        if not files:
            return None
        stamp = now().replace(":", "").replace("-", "")
        target = self.directory / PREVIOUS_NAME / stamp
        k = 1
        while target.exists():
            k += 1
            target = self.directory / PREVIOUS_NAME / f"{stamp}-{k}"
        target.mkdir(parents=True)
        for p in files:
            os.replace(p, target / p.name)
        _fsync_directory(target)
        _fsync_directory(self.directory)
        return target


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


def describe_end(manifest: dict[str, Any]) -> str:
    """How the previous process in this directory ended, from its manifest."""
    state = manifest.get("state")
    events = manifest.get("events") or [{}]
    last = events[-1]
    if state == "stopped":
        return f"stopped ({last.get('reason', 'signal')})"
    if state == "complete":
        return "complete"
    if state == "failed":
        return f"failed ({last.get('error', 'error')})"
    return "unclean (no stop recorded: killed or crashed)"


def warn_save_failed(message: str) -> None:
    import warnings

    warnings.warn(message, SaveFailedWarning, stacklevel=3)


def stderr_line(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- nxrs status


def run_status(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``nxrs status`` reports: the manifest, every checkpoint file with the validity of
    the newest ones (read newest first until one validates), the lock, and ``ok`` (False when
    the newest checkpoint is damaged or the directory holds no run)."""
    from nxrs._trainer import Trainer

    run = RunDirectory(directory)
    if not run.directory.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(run.directory))
    manifest = run.read_manifest()
    # Listed as a CheckpointManager lists them, without making one: its constructor sweeps
    # temporary files, and status only looks.
    entries = []
    with os.scandir(run.directory) as children:
        for child in children:
            match = re.fullmatch(r"step-([0-9]{12})\.nxck", child.name)
            if match and child.is_file(follow_symlinks=False):
                entries.append((int(match.group(1)), run.directory / child.name))
    entries.sort()
    checkpoints: list[dict[str, Any]] = []
    resumable = None
    for step, path in reversed(entries):
        row: dict[str, Any] = {"file": path.name, "step": step, "bytes": None}
        if resumable is None:
            try:
                row["bytes"] = path.stat().st_size
                t = Trainer.load(path)
                row.update(valid=True, epoch=t.epoch, batch=t.batch, error=None)
                resumable = path.name
            except (OSError, NxrsError) as err:
                row.update(valid=False, error=f"{type(err).__name__}: {err}")
        else:
            row["valid"] = None  # not checked: an older file than the one a resume would use
        checkpoints.append(row)
    temporary = sorted(
        c.name
        for c in run.directory.iterdir()
        if ".nxck-tmp." in c.name or _MANIFEST_TEMP in c.name
    )
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
    return {
        "directory": str(run.directory),
        "manifest": manifest,
        "running": run.holder(),
        "checkpoints": checkpoints,
        "resume_from": resumable,
        "resume_step": None if done is None else done["step"],
        "resume_epoch": None if done is None else done.get("epoch"),
        "percent": percent,
        "beyond_plan": beyond,
        "progress": progress,
        "temporary_files": temporary,
        "ok": manifest is not None and newest_ok,
    }


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
                f", test size {file.get('test_size')}, split seed {file.get('split_seed')}"
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
    if not status["ok"]:
        lines.append(
            "  PROBLEM: "
            + ("no run manifest" if manifest is None else "the newest checkpoint is damaged")
        )
    return "\n".join(lines) + "\n"
