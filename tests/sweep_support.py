"""Helpers shared by the sweep tests (not a test module)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def kill_first_checkpointed(root: Path, killed: list[int], deadline: float) -> None:
    """SIGKILLs the process training the first run under ``root`` that has a checkpoint (its
    pid from the run manifest's start event)."""
    while time.monotonic() < deadline:
        for manifest in root.glob("run-*/nxrs-run.json"):
            try:
                pid = json.loads(manifest.read_text())["events"][0]["pid"]
            except (OSError, ValueError, LookupError):
                continue
            if any(manifest.parent.glob("step-*.nxck")):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.01)


@contextmanager
def killing_first_checkpointed(root: Path, seconds: float = 120) -> Iterator[None]:
    """Runs ``kill_first_checkpointed`` beside the block (for at most ``seconds``), and asserts
    after it that a process was killed."""
    killed: list[int] = []
    killer = threading.Thread(
        target=kill_first_checkpointed, args=(root, killed, time.monotonic() + seconds)
    )
    killer.start()
    try:
        yield
    finally:
        killer.join()
    assert killed, "the task's process was never seen to checkpoint"
