"""``python -m nxrs``: the same as the ``nxrs`` command."""

from nxrs.cli import run

run()
