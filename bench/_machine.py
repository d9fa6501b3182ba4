"""What the benchmarks print about the machine they ran on (shared by the bench scripts)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_machine() -> None:
    """Prints the platform, CPU, load average and Python (each script adds its libraries)."""
    print("machine")
    print(f"  platform : {platform.platform()}")
    print(f"  cpu      : {cpu_model()} ({os.cpu_count() or 0} logical CPUs)")
    if hasattr(os, "getloadavg"):
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"  load avg : {load} (1, 5, 15 min, at the end: other work shares the CPUs)")
    print(f"  python   : {platform.python_implementation()} {platform.python_version()}")
