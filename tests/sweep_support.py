"""Helpers shared by the sweep tests (not a test module)."""

from __future__ import annotations

import json
import os
import signal
import time
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
