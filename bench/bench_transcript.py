"""The transcript's cost per save (``docs/RUNS.md``, "The transcript"): what writing one new
entry costs in a run whose transcript already holds 100, 1,000 and 10,000 entries, side by
side for the way nxrs wrote it before (the whole file rewritten at every save: temporary file,
fsync, rename, directory fsync; on a store one PUT of the whole object) and the way it writes
it now (an append and an fsync; on a store a new segment object, with the merges of segments
that come due, and one listing that checks the transcript's objects are all there).

Run from the repository root::

    python bench/bench_transcript.py                 # a local directory (this machine's disk)
    python bench/bench_transcript.py --store s3      # also the S3 emulator (moto, the tests')
    python bench/bench_transcript.py --store gs      # gcp-storage-emulator; az: the tests' own

Each row times ``--saves`` saves (default 64 locally, 32 on a store) after the transcript was
grown to its size, one entry each, and prints the median per save; the ratios compare each size
with 100 entries (the goal: within 1.5x at 10,000 for the appends). The entries are of the
real format (``Transcript.add``) for a made-up state. On a store (an emulator on the loopback
address) the times are the emulator's and nxrs's, not a network's: a real store adds its
latency to every request, the same for both ways.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nxrs._runs.async_save import SavedState
from nxrs._runs.directory import ObjectRunDirectory
from nxrs._runs.transcript import TRANSCRIPT_NAME, DataDigests, Transcript, canonical
from nxrs._util.files import write_bytes_atomically

SIZES = (100, 1_000, 10_000)
DATA = DataDigests(digest="d" * 64, train="t" * 64, validation=None, test="e" * 64)


def state(step: int) -> SavedState:
    return SavedState(step, step // 100, step % 100, f"{step:064x}", "c" * 64)


def grown(transcript: Transcript, entries: int, each: bool = False) -> None:
    """Adds entries to ``transcript`` until it holds ``entries``, all written: at once, or
    ``each`` written as it is added (as a run writes them: on a store the segments and their
    merges are then those of a real run)."""
    for step in range(len(transcript.entries), entries):
        transcript.add(state(step), "checkpoint", f"step-{step:012d}.nxck", DATA)
        if each:
            transcript.write()
    transcript.write()


def rewrite_whole(transcript: Transcript, write: Callable[[bytes], None]) -> Callable[[], None]:
    """One save as nxrs made it before: the entry added, the whole text written again."""

    def save() -> None:
        transcript.add(state(len(transcript.entries)), "checkpoint", "step.nxck", DATA)
        write(b"".join(canonical(e) + b"\n" for e in transcript.entries))

    return save


def file_writer(path: Path) -> Callable[[bytes], None]:
    """The whole text written as nxrs wrote it before: temporary file, fsync, rename."""
    return lambda text: write_bytes_atomically(path, text)


def object_writer(run: ObjectRunDirectory, version: str) -> Callable[[bytes], None]:
    """The whole text as one object, by one conditional PUT (of the version it replaces)."""
    current = [version]

    def put(text: bytes) -> None:
        current[0] = run._lease.write(TRANSCRIPT_NAME, text, current[0])

    return put


def append(transcript: Transcript) -> Callable[[], None]:
    """One save as nxrs makes it now: the entry added, ``Transcript.write``."""

    def save() -> None:
        transcript.add(state(len(transcript.entries)), "checkpoint", "step.nxck", DATA)
        transcript.write()

    return save


def per_save(save: Callable[[], None], saves: int) -> float:
    """The median time of ``saves`` saves: an fsync on a virtual machine's disk has a long
    tail (a few saves of 5 ms among saves of 0.3 ms) that would decide a mean of sub-ms costs."""
    save()  # untimed: the first write after growing may differ
    times = []
    for _ in range(saves):
        start = time.perf_counter()
        save()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(title: str, rows: dict[str, dict[int, float]]) -> None:
    print(title)
    print(f"  {'entries':>8}" + "".join(f"  {kind:>22}" for kind in rows))
    for size in SIZES:
        cells = "".join(
            f"  {times[size] * 1e3:>9.3f} ms ({times[size] / times[SIZES[0]]:>5.2f}x)"
            for times in rows.values()
        )
        print(f"  {size:>8}{cells}")
    for kind, times in rows.items():
        ratio = times[SIZES[-1]] / times[SIZES[0]]
        print(f"  {kind}: {SIZES[-1]:,} entries cost {ratio:.2f}x what {SIZES[0]} cost per save")


def local(saves: int) -> None:
    rows: dict[str, dict[int, float]] = {"rewrite whole (before)": {}, "append (now)": {}}
    for size in SIZES:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / TRANSCRIPT_NAME
            old = Transcript(directory)
            grown(old, size)
            rows["rewrite whole (before)"][size] = per_save(
                rewrite_whole(old, file_writer(path)), saves
            )
        with tempfile.TemporaryDirectory() as directory:
            new = Transcript(directory)
            grown(new, size)
            rows["append (now)"][size] = per_save(append(new), saves)
    table(f"a local directory ({tempfile.gettempdir()}), median of {saves} saves:", rows)


def store(scheme: str, saves: int) -> None:
    starter = importlib.import_module(
        {"s3": "s3_support", "gs": "gcs_support", "az": "azure_support"}[scheme]
    )
    rows: dict[str, dict[int, float]] = {"rewrite whole (before)": {}, "segments (now)": {}}
    with starter.emulator() as server, tempfile.TemporaryDirectory() as cache:
        os.environ.update(server.environment(server.endpoint), NXRS_CACHE_DIR=cache)
        import fsspec.config

        fsspec.config.set_conf_env(fsspec.config.conf)  # the FSSPEC_* variables just set
        for size in SIZES:
            run = ObjectRunDirectory(server.url("bench"))
            run.acquire()
            try:
                transcript = run.transcript()
                grown(transcript, size)
                put = object_writer(run, transcript._parts[0].version)
                rows["rewrite whole (before)"][size] = per_save(
                    rewrite_whole(transcript, put), saves
                )
            finally:
                run.release()
        # One run grown save by save, measured as it passes each size.
        run = ObjectRunDirectory(server.url("bench"))
        run.acquire()
        try:
            transcript = run.transcript()
            for size in SIZES:
                grown(transcript, size, each=True)
                rows["segments (now)"][size] = per_save(append(transcript), saves)
        finally:
            run.release()
    table(f"{scheme}:// ({type(server).__name__}), median of {saves} saves:", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("s3", "gs", "az"), help="also this store's emulator")
    parser.add_argument("--saves", type=int, default=None, help="saves timed per row")
    args = parser.parse_args()
    local(args.saves or 64)
    if args.store is not None:
        store(args.store, args.saves or 32)


if __name__ == "__main__":
    main()
