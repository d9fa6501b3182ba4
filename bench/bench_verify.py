"""``nxrs verify``'s cost against training's, side by side in one process (the goals for
verification's cost).

Run from the repository root::

    python bench/bench_verify.py           # a 100-checkpoint digits run
    python bench/bench_verify.py --quick   # a 20-checkpoint one

Rows (wall-clock seconds, best of the repeats; the data is loaded once, outside the timings):

* training: ``nxrs train --data digits --ckpt-dir DIR --every K --keep all`` (in this process:
  ``nxrs.cli.main``), which saves the checkpoints and the transcript; and the same command
  without a run directory (no saves), for scale: both read the data as ``nxrs verify`` does;
* ``verify --all``: every segment replayed (what a full audit costs; the goal: no more than
  training, i.e. a ratio <= 1);
* ``verify`` (8 segments chosen by the seed, plus the last): the goal is under 10% of training;
* per segment: ``verify --all``'s time over the number of segments, and a segment's replay alone
  (the report's timing of each: loading its start, the steps, the digest of its end), against
  the same training on one thread without saves over the same number of segments (each segment
  replays on one thread): replaying a segment costs no more than training it.

Verification replays on the threads it is given (``--threads``, default: the cores), each
segment on one thread; training uses the same threads for each step. Both give the same bits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import nxrs
from nxrs.cli import main as cli


def timed(run: object, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 checkpoints instead of 100")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    checkpoints = 20 if args.quick else 100
    epochs = 4 if args.quick else 20
    # digits: 1,438 training samples, batch 32 -> 45 steps per epoch.
    every = epochs * 45 // checkpoints
    threads = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="nxrs-bench-verify-"))
    run = root / "run"
    command = ["train", "--data", "digits", "--epochs", str(epochs), "--ckpt-dir", str(run)]
    command += ["--every", str(every), "--keep", "all", "--json", "--restart"]

    def train(saving: bool = True, threads: int | None = None) -> None:
        args = command if saving else [*command[: command.index("--ckpt-dir")], "--json"]
        if threads is not None:
            args = [*args, "--threads", str(threads)]
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            assert cli(args) == 0

    try:
        bare_s, _ = timed(lambda: train(saving=False), args.repeats)
        one_s, _ = timed(lambda: train(saving=False, threads=1), args.repeats)
        train_s, _ = timed(train, args.repeats)
        kept = len(list(run.glob("*.nxck")))
        all_s, report_all = timed(lambda: nxrs.verify(run, segments="all"), args.repeats)
        some_s, report = timed(lambda: nxrs.verify(run, segments=8), args.repeats)
        assert report_all.ok and report.ok, (report_all.first_failure, report.first_failure)
        segments = len(report_all.segments)
        print(f"digits, {epochs} epochs, {kept} checkpoints ({segments} segments), "
              f"{threads} thread(s), nxrs {nxrs.__version__}")  # fmt: skip
        print(f"{'':28}{'seconds':>10}{'vs training':>14}{'vs no saves':>14}")
        print(f"{'training (with saves)':28}{train_s:10.3f}{1.0:13.3f}x")
        print(f"{'training (no run directory)':28}{bare_s:10.3f}{bare_s / train_s:13.3f}x")
        print(f"{'verify --all':28}{all_s:10.3f}{all_s / train_s:13.3f}x"
              f"{all_s / bare_s:13.3f}x   (goal <= 1)")  # fmt: skip
        print(f"{'verify (8 + last segment)':28}{some_s:10.3f}{some_s / train_s:13.3f}x"
              f"{some_s / bare_s:13.3f}x   (goal < 0.10)")  # fmt: skip
        # A segment's replay alone (the report's own timing of each), against the same steps
        # of the training without saves: what replaying costs beside reading checkpoints.
        # Each segment replays on one thread: against training on one thread, no saves.
        replay_s = sum(s.seconds for s in report_all.segments) / segments
        per_one, per_verify = one_s / segments, all_s / segments
        rows = (
            ("one segment: train, 1 thread", per_one, "   (no saves)"),
            ("one segment: verify --all", per_verify, ""),
            (
                "one segment: replay alone",
                replay_s,
                "   (goal <= 1; loads its start, digests its end)",
            ),
        )
        for label, seconds, note in rows:
            print(f"{label:28}{seconds:10.4f}{'':14}{seconds / per_one:13.3f}x{note}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
