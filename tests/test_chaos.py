"""Preemption chaos: ``nxrs train`` and ``fit`` killed at random instants (SIGKILL, SIGTERM,
SIGINT), many times, restarted with the same command each time, end byte-identical to an
uninterrupted run; a save that fails part-way (a file-size limit) keeps the previous checkpoint;
a second process on the same directory is refused and a killed one's lock blocks nothing.

Each harness prints its seed, the kills survived and the time taken (outside pytest's capture).
``NXRS_CHAOS_KILLS=1000`` (default 30) runs the soak; ``NXRS_CHAOS_SEED`` replays the delays of
a run (the instants themselves also depend on the machine's timing).
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs._runs.directory import RunDirectory
from nxrs._runs.errors import MANIFEST_NAME

KILLS = int(os.environ.get("NXRS_CHAOS_KILLS", "30"))
#: Layers, batch size, epochs and checkpoint interval of the run the harnesses interrupt:
#: 100 steps per epoch (800 training samples) of about 1 ms each, a checkpoint every 4 steps
#: (saves are a good part of the time, so many kills land inside one).
LAYERS = "16,32,4"
BATCH = 8
EPOCHS = max(3, KILLS // 10)
EVERY = 4
#: The random instant of a kill: uniform in [0, max(MAX_DELAY, T)] seconds after the process
#: starts, T the wall time of the same process uninterrupted (interpreter start-up, data loading,
#: resume, training and saves all get their share, however slow the machine is today).
MAX_DELAY = 1.2
#: What a child prints once its third-party imports are done, before it imports nxrs.
IMPORTED = "child: third-party imports done"
#: The fewest stops handled (SIGTERM, SIGINT) and resumes from a checkpoint a harness must see:
#: the signals keep coming until there are that many, so a handler that never runs or a resume
#: that silently starts over fails the harness instead of going unnoticed.
FLOOR = max(1, KILLS // 3)


def seed_of() -> int:
    fixed = os.environ.get("NXRS_CHAOS_SEED")
    return int(fixed) if fixed else random.SystemRandom().randrange(2**32)


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """A line on the terminal whatever pytest's capture mode (no warning involved)."""
    with capsys.disabled():
        print(f"\n[chaos] {line}", flush=True)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(1000, 16)).astype(np.float32)
    y = (np.argmax(x[:, :4], axis=1)).astype(np.int64)
    path = tmp_path_factory.mktemp("chaos-data") / "data.npz"
    np.savez(path, X=x, y=y)
    return path


def train_argv(data: Path, directory: Path | None, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "nxrs", "train", "--data", str(data), "--layers", LAYERS]
    argv += ["--batch-size", str(BATCH), "--epochs", str(EPOCHS), "--lr", "0.01", "--json"]
    if directory is not None:
        argv += ["--ckpt-dir", str(directory), "--every", str(EVERY)]
    return argv + list(extra)


def temporary_files(directory: Path) -> list[str]:
    return [
        p.name
        for p in directory.iterdir()
        if ".nxck-tmp." in p.name or p.name.startswith(f".{MANIFEST_NAME}.tmp.")
    ]


def check_nothing_torn(directory: Path) -> int:
    """Every checkpoint file validates and the manifest parses; returns the newest step."""
    newest = -1
    for path in sorted(directory.glob("step-*.nxck")):
        t = nxrs.Trainer.load(path)  # every checksum; raises on a torn file
        assert int(path.stem.split("-")[1]) == t.steps, path
        newest = max(newest, t.steps)
    RunDirectory(directory).read_manifest()  # raises on a torn document
    return newest


@dataclass
class Attempt:
    returncode: int
    signal: int | None
    delay: float | None
    stdout: str
    stderr: str
    #: The step of the checkpoint it said it resumed from (None: it said no such thing).
    resumed: int | None = None


@dataclass
class Chaos:
    kills: int = 0
    rounds: int = 0
    attempts: list[list[Attempt]] = field(default_factory=list)
    finals: list[dict[str, Any]] = field(default_factory=list)
    #: Signals the process handled: it saved the step it stopped at and exited 128 + signal.
    handled: int = 0
    #: Processes that resumed from a checkpoint (step > 0) of the one before.
    resumes: int = 0

    @property
    def processes(self) -> int:
        return sum(map(len, self.attempts))


#: What ``fit`` says when it restores a checkpoint (``nxrs train`` and the fit child print it).
RESUME_LINE = re.compile(r"resuming .* from step-(\d+)\.nxck: step (\d+),")


def check_resume(attempt: Attempt, newest: int) -> None:
    """A process that resumed did so from the newest checkpoint of the directory, and one that
    got as far as training (it completed or saved a stop) with a checkpoint there resumed."""
    match = RESUME_LINE.search(attempt.stderr)
    if match is not None:
        attempt.resumed = int(match.group(2))
        assert int(match.group(1)) == attempt.resumed == newest, (newest, attempt.stderr)
    elif newest > 0 and (attempt.returncode == 0 or attempt.returncode - 128 == attempt.signal):
        raise AssertionError(f"it did not resume from step {newest}: {attempt.stderr}")


def kill_and_restart(
    argv_for: Callable[[Path], Sequence[str]],
    base: Path,
    signals: Sequence[int],
    rng: random.Random,
    kills: int,
    after_attempt: Callable[[Path, Attempt], None] = lambda d, a: None,
    enough: Callable[[Chaos], bool] = lambda chaos: True,
    max_delay: float = MAX_DELAY,
) -> Chaos:
    """Runs ``argv_for(directory)`` again and again, sending one of ``signals`` at a random
    instant, until ``kills`` processes have been killed by it, ``enough(chaos)`` holds (a floor
    on handled stops or resumes: a harness whose signals all landed where nothing is checked
    tests nothing) and the run has completed (exit 0, the summary's JSON on stdout). A run that
    completes before that starts a new round in a fresh directory. After every attempt nothing
    in the directory is torn, and every resume is from the newest checkpoint."""
    chaos = Chaos()
    # Far more processes than a working build needs for the floor: past it, the floor failed.
    most = 10 * kills + 20

    def signalling() -> bool:
        return chaos.kills < kills or not enough(chaos)

    while signalling() or not chaos.finals:
        directory = base / f"round{chaos.rounds}"
        chaos.rounds += 1
        chaos.attempts.append([])
        newest = -1
        while True:
            assert chaos.processes < most, (
                f"{chaos.processes} processes, {chaos.kills} kills, {chaos.handled} stops "
                f"handled, {chaos.resumes} resumes: the floor was never reached"
            )
            proc = subprocess.Popen(
                list(argv_for(directory)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            sent = delay = None
            if signalling():
                delay = rng.uniform(0, max_delay)
                try:
                    proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    sent = rng.choice(list(signals))
                    proc.send_signal(sent)
            out, err = proc.communicate(timeout=300)
            attempt = Attempt(proc.returncode, sent, delay, out, err)
            chaos.attempts[-1].append(attempt)
            if sent is not None and proc.returncode != 0:
                chaos.kills += 1
                expected = {-sent, 128 + sent}
                if sent == signal.SIGINT and IMPORTED not in err:
                    # Interrupted in CPython's start-up or numpy's import, before any of our
                    # code: numpy turns the KeyboardInterrupt into an ImportError (exit 1).
                    expected.add(1)
                assert proc.returncode in expected, (proc.returncode, err)
                chaos.handled += proc.returncode == 128 + sent
            else:
                assert proc.returncode == 0, err
            check_resume(attempt, newest)
            chaos.resumes += (attempt.resumed or 0) > 0
            if directory.exists():
                newest = check_nothing_torn(directory)
            after_attempt(directory, attempt)
            if proc.returncode == 0:
                final = json.loads(out.strip().splitlines()[-1])
                if "ran" in final:  # the steps this process took: the rest, not the whole run
                    assert final["ran"] == final["steps"] - (attempt.resumed or 0), final
                chaos.finals.append(final)
                break
        assert temporary_files(directory) == [], "a temporary file was left behind"
        manifest = RunDirectory(directory).read_manifest()
        assert manifest is not None and manifest["state"] == "complete"
    return chaos


def check_final(chaos: Chaos, base: Path, reference: str) -> None:
    for k, final in enumerate(chaos.finals):
        assert final["state_hash"] == reference, f"round {k}"
        directory = base / f"round{k}"
        latest = nxrs.CheckpointManager(directory).latest()
        assert latest is not None
        assert f"{nxrs.Trainer.load(latest.path).state_hash():016x}" == reference


def uninterrupted(argv: Sequence[str]) -> tuple[str, float]:
    """The state hash a command ends with, uninterrupted, and the seconds it took."""
    start = time.monotonic()
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    state_hash: str = json.loads(proc.stdout.strip().splitlines()[-1])["state_hash"]
    return state_hash, seconds


def reference_run(data: Path, directory: Path) -> tuple[str, float]:
    """The uninterrupted run's hash (without a run directory) and the seconds the harness's
    command takes uninterrupted (with its checkpoints, in ``directory``), which ends the same."""
    reference, _ = uninterrupted(train_argv(data, None))
    same, seconds = uninterrupted(train_argv(data, directory))
    assert same == reference
    return reference, seconds


def test_sigkill_at_random_instants(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = seed_of()
    report(capsys, f"SIGKILL harness: seed {seed}, {KILLS} kills wanted")
    start = time.monotonic()
    reference, seconds = reference_run(data_file, tmp_path / "uninterrupted")
    chaos = kill_and_restart(
        lambda d: train_argv(data_file, d),
        tmp_path,
        [signal.SIGKILL],
        random.Random(seed),
        KILLS,
        enough=lambda chaos: chaos.resumes >= FLOOR,
        max_delay=max(MAX_DELAY, seconds),
    )
    check_final(chaos, tmp_path, reference)
    assert chaos.resumes >= FLOOR
    report(
        capsys,
        f"SIGKILL: survived {chaos.kills} kills (each within {max(MAX_DELAY, seconds):.1f} s of "
        f"a start) in {chaos.rounds} run(s), {chaos.processes} "
        f"processes, {chaos.resumes} resumed from the newest checkpoint, "
        f"{time.monotonic() - start:.1f} s; final hash {reference} = the uninterrupted run's "
        f"(seed {seed})",
    )


STOP_LINE = re.compile(r"stopped by (SIG[A-Z]+) at step (\d+); saved (\S+?);")


def test_sigterm_saves_exactly_the_step_it_stopped_at(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = seed_of()
    report(capsys, f"SIGTERM harness: seed {seed}, {KILLS} stops wanted")
    start = time.monotonic()
    reference, seconds = reference_run(data_file, tmp_path / "uninterrupted")
    stops: dict[str, list[int]] = {}

    def after(directory: Path, attempt: Attempt) -> None:
        if attempt.returncode != 143:
            return
        match = STOP_LINE.search(attempt.stderr)
        assert match is not None, attempt.stderr
        step = int(match.group(2))
        # The checkpoint it names holds exactly that step, and the manifest says so.
        assert nxrs.Trainer.load(match.group(3)).steps == step
        manifest = RunDirectory(directory).read_manifest()
        assert manifest is not None and manifest["state"] == "stopped"
        last = manifest["events"][-1]
        assert (last["event"], last["step"], last["reason"]) == ("stop", step, "SIGTERM")
        stops.setdefault(directory.name, []).append(step)

    chaos = kill_and_restart(
        lambda d: train_argv(data_file, d),
        tmp_path,
        [signal.SIGTERM],
        random.Random(seed),
        KILLS,
        after,
        enough=lambda chaos: chaos.handled >= FLOOR,
        max_delay=max(MAX_DELAY, seconds),
    )
    check_final(chaos, tmp_path, reference)
    assert chaos.handled == sum(map(len, stops.values())) >= FLOOR
    early = 0
    for k in range(chaos.rounds):
        early += sum(a.returncode == -signal.SIGTERM for a in chaos.attempts[k])
        manifest = RunDirectory(tmp_path / f"round{k}").read_manifest()
        assert manifest is not None
        events = manifest["events"]
        # The history keeps the first event and the newest ones (docs/RUNS.md); the ones
        # dropped between them are counted by kind, and the pairs below never span that gap.
        omitted = manifest.get("events_omitted", {})
        pairs = list(zip(events, events[1:]))[1 if omitted else 0 :]
        # No step lost, none repeated: every resume starts at the step of the stop (or start)
        # before it, and the stops in the manifest are the ones the processes reported.
        for before, now in pairs:
            if now["event"] == "resume":
                assert before["event"] in ("start", "stop", "resume", "complete"), (before, now)
                assert now["step"] == before["step"], (before, now)
                if before["event"] == "stop":
                    assert now["previous_end"] == "stopped (SIGTERM)"
        recorded = [e["step"] for e in events if e["event"] == "stop"]
        reported = stops.get(f"round{k}", [])
        assert omitted.get("stop", 0) + len(recorded) == len(reported)
        assert recorded == reported[len(reported) - len(recorded) :]
        assert recorded == sorted(recorded)
    report(
        capsys,
        f"SIGTERM: survived {chaos.kills} signals ({chaos.handled} stops saved at the exact "
        f"step, {early} outside the handlers: interpreter start-up or exit; {chaos.resumes} "
        f"resumes) in "
        f"{chaos.rounds} run(s) (each within {max(MAX_DELAY, seconds):.1f} s of a start), "
        f"{time.monotonic() - start:.1f} s; final hash {reference} = "
        f"the uninterrupted run's (seed {seed})",
    )


FIT_CHILD = """
import json, sys
import numpy as np
print("@IMPORTED@", file=sys.stderr, flush=True)
import nxrs
from nxrs._runs.errors import RunStopped

d = np.load(sys.argv[1])
t = nxrs.Trainer(layers=[16, 32, 4], batch_size=8, lr=0.01, seed=5)
try:
    history = t.fit(  # with what it says on a resume printed (_say)
        d["X"], d["y"], epochs=int(sys.argv[3]), checkpoint=sys.argv[2], every=4,
        _say=lambda line: print(line, file=sys.stderr, flush=True),
    )
except RunStopped as stopped:
    sys.exit(128 + stopped.signal)
summary = {"state_hash": f"{t.state_hash():016x}", "steps": t.steps, "ran": history.steps}
print(json.dumps(summary))
""".replace("@IMPORTED@", IMPORTED)


def test_fit_in_a_child_killed_and_stopped_at_random_instants(
    data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = seed_of()
    report(capsys, f"fit harness: seed {seed}, {KILLS} kills wanted (SIGKILL, SIGTERM, SIGINT)")
    start = time.monotonic()
    with np.load(data_file) as d:
        straight = nxrs.Trainer(layers=[16, 32, 4], batch_size=8, lr=0.01, seed=5)
        straight.fit(d["X"], d["y"], epochs=EPOCHS)
    reference = f"{straight.state_hash():016x}"

    def child(directory: Path) -> list[str]:
        return [sys.executable, "-c", FIT_CHILD, str(data_file), str(directory), str(EPOCHS)]

    same, seconds = uninterrupted(child(tmp_path / "uninterrupted"))
    assert same == reference
    chaos = kill_and_restart(
        child,
        tmp_path,
        [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
        random.Random(seed),
        KILLS,
        enough=lambda chaos: chaos.resumes >= FLOOR and chaos.handled >= FLOOR // 2,
        max_delay=max(MAX_DELAY, seconds),
    )
    check_final(chaos, tmp_path, reference)
    assert chaos.resumes >= FLOOR and chaos.handled >= FLOOR // 2
    by_signal = {
        signal.Signals(s).name: sum(
            a.signal == s and a.returncode != 0 for r in chaos.attempts for a in r
        )
        for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
    }
    report(
        capsys,
        f"fit: survived {chaos.kills} kills {by_signal} ({chaos.handled} stops handled, "
        f"{chaos.resumes} resumes; each within {max(MAX_DELAY, seconds):.1f} s of a start) in "
        f"{chaos.rounds} run(s), "
        f"{time.monotonic() - start:.1f} s; final hash {reference} = the uninterrupted run's "
        f"(seed {seed})",
    )


def test_a_save_that_fails_part_way_keeps_the_previous_checkpoint(
    data_file: Path, tmp_path: Path
) -> None:
    """A file-size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so writes fail with EFBIG)
    below a checkpoint's size: every save fails part-way, like a full disk."""
    layers = ["--layers", "16,256,4"]  # a checkpoint of about 55 KB, the manifest a few KB
    first = subprocess.run(
        [*train_argv(data_file, tmp_path, *layers), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr
    saved = nxrs.CheckpointManager(tmp_path).latest()
    assert saved is not None
    size = saved.path.stat().st_size
    before = saved.path.read_bytes()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, resource.RLIM_INFINITY))

    full = subprocess.run(
        [*train_argv(data_file, tmp_path, *layers), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
    )
    assert full.returncode == 5, full.stderr
    assert "warning: the checkpoint of step" in full.stderr  # periodic saves: reported, retried
    assert full.stderr.count("could not be saved") >= 3
    assert f"the newest checkpoint of this run is still step {saved.step}" in full.stderr
    assert "File too large" in full.stderr
    # The previous checkpoint is intact and the newest valid one; nothing half-written is left.
    assert saved.path.read_bytes() == before
    latest = nxrs.CheckpointManager(tmp_path).latest()
    assert latest == saved
    assert temporary_files(tmp_path) == []
    manifest = RunDirectory(tmp_path).read_manifest()
    assert manifest is not None and manifest["state"] == "failed"
    assert any(e["event"] == "save-failed" for e in manifest["events"])
    # Without the limit the same command resumes from it and ends as an uninterrupted run.
    again = subprocess.run(
        [*train_argv(data_file, tmp_path, *layers), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert f"from {saved.path.name}" in again.stderr
    straight = subprocess.run(
        [*train_argv(data_file, None, *layers), "--epochs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(again.stdout)["state_hash"] == json.loads(straight.stdout)["state_hash"]


def test_a_transcript_the_disk_cannot_hold_fails_the_run_and_the_next_one_writes_it(
    data_file: Path, tmp_path: Path
) -> None:
    """A file-size limit (RLIMIT_FSIZE: a write past it moves what fits, then fails, EFBIG, as
    a write to a full disk fails with ENOSPC) above a checkpoint's and the manifest's size but
    below what the transcript grows to: every checkpoint is saved, the transcript's later
    entries are not. The run ends with exit 5 saying what is missing, and nxrs status says so;
    the same command without the limit writes them, and the run verifies."""
    argv = train_argv(data_file, tmp_path)
    limit = 24 * 1024

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    full = subprocess.run(argv, capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert full.returncode == 5, full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert re.match(r"nxrs train: the transcript .* lacks \d+ entries, steps \d+ to \d+ ", last)
    assert "File too large" in last and "run the same command again" in last
    assert "nxrs train: warning: the transcript" in full.stderr  # at the saves before
    transcript = tmp_path / "nxrs-transcript.jsonl"
    text = transcript.read_bytes()
    assert len(text) <= limit and text.endswith(b"\n")  # cut back to its last whole line
    recorded = [json.loads(line)["step"] for line in text.splitlines()]
    newest = check_nothing_torn(tmp_path)
    assert newest == EPOCHS * 100 and recorded[-1] < newest
    status = subprocess.run(
        [sys.executable, "-m", "nxrs", "status", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert status.returncode == 1
    assert f"PROBLEM: the transcript has no entry for step-{newest:012d}.nxck" in status.stdout
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    straight = subprocess.run(
        train_argv(data_file, None), capture_output=True, text=True, timeout=300
    )
    assert json.loads(again.stdout)["state_hash"] == json.loads(straight.stdout)["state_hash"]
    verified = subprocess.run(
        [sys.executable, "-m", "nxrs", "verify", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_second_process_is_refused_and_a_killed_ones_lock_blocks_nothing(
    data_file: Path, tmp_path: Path
) -> None:
    argv = [*train_argv(data_file, tmp_path), "--epochs", "1000"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / MANIFEST_NAME).exists() or RunDirectory(tmp_path).holder() is None:
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert second.returncode == 4, second.stderr
        assert f"in use by process {first.pid}" in second.stderr
    finally:
        first.kill()
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    third = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (RunDirectory(tmp_path).holder() or "").startswith(f"process {third.pid} "):
        assert time.monotonic() < deadline and third.poll() is None
        time.sleep(0.05)
    third.send_signal(signal.SIGTERM)
    _, err = third.communicate(timeout=120)
    assert third.returncode == 143, err
    assert "resuming" in err and "the previous process: unclean" in err
    manifest = RunDirectory(tmp_path).read_manifest()
    assert manifest is not None
    assert [e["event"] for e in manifest["events"]] == ["start", "resume", "stop"]
