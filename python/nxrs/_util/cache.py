"""Where nxrs keeps local copies of remote things (checkpoints of run directories on object
storage, downloaded data sets): one directory, chosen by one rule."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """Where nxrs keeps local copies of objects: ``NXRS_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/nxrs``, else ``~/.cache/nxrs``."""
    if "NXRS_CACHE_DIR" in os.environ:
        return Path(os.environ["NXRS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nxrs"
