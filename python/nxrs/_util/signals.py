"""SIGINT and SIGTERM during a run: ``stop_signals`` turns them into a flag that ``fit`` reads
at each step boundary, so a stop saves the step reached instead of interrupting it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["StopFlag", "stop_signals"]


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
