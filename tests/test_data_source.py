"""The run manifest records how ``nxrs train`` read its data (``data_source``: ``--data``,
``--target``, ``--task``), and replay (``nxrs.verify``, ``nxrs.diff``) reads the data again
by that record, through ``nxrs.data``, without the command line: the library never imports
``nxrs.cli``. A manifest of an older nxrs, which records only the command line, is read again
by the command line's own reader, which ``nxrs verify`` and ``nxrs diff`` hand the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nxrs
from nxrs.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``nxrs train`` run on a CSV file named relative to where it ran, its label column
    not the last, its task given."""
    home = tmp_path_factory.mktemp("data-source")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((60, 4)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1)
    rows = ["label,a,b,c,d"] + [f"{c}," + ",".join(f"{v:.6f}" for v in r) for c, r in zip(y, x)]
    (home / "data.csv").write_text("\n".join(rows) + "\n")
    here = os.getcwd()
    os.chdir(home)
    try:
        argv = ["train", "--data", "data.csv", "--target", "label", "--task", "classify"]
        argv += ["--layers", "4,8,3", "--batch-size", "8", "--epochs", "2", "--every", "3"]
        assert main([*argv, "--keep", "all", "--ckpt-dir", "run", "--json"]) == 0
    finally:
        os.chdir(here)
    return home / "run"


def manifest(run: Path) -> dict[str, object]:
    document: dict[str, object] = json.loads((run / "nxrs-run.json").read_text())
    return document


def test_the_manifest_records_the_data_source(run: Path) -> None:
    recorded = manifest(run)["data_source"]
    assert recorded == {"data": "data.csv", "target": "label", "task": "classify"}


def test_the_library_replays_by_the_record_without_the_command_line(run: Path) -> None:
    # Another process, so that no test of this one has imported the CLI already: verify and
    # diff read the data again, and nxrs.cli is never imported.
    code = (
        "import sys, nxrs\n"
        f"report = nxrs.verify({str(run)!r}, segments='all')\n"
        "assert report.ok, report.first_failure\n"
        "assert report.to_dict()['data']['source'] == 'command', report.to_dict()['data']\n"
        f"assert nxrs.diff({str(run)!r}, {str(run)!r}).identical\n"
        "assert not [m for m in sys.modules if m.startswith('nxrs.cli')], 'nxrs.cli imported'\n"
    )
    # Run from elsewhere: the record's relative path is read from the manifest's cwd.
    env = {**os.environ, "PYTHONPATH": str(Path(nxrs.__file__).parents[1])}
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/", env=env)


def test_an_old_manifest_is_read_again_by_the_command_line_only(run: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    for f in run.iterdir():
        if f.is_file():
            (old / f.name).write_bytes(f.read_bytes())
    document = manifest(old)
    del document["data_source"]  # as an nxrs before the record wrote it
    (old / "nxrs-run.json").write_text(json.dumps(document))
    with pytest.raises(nxrs.MismatchError, match="records its command line but not its data"):
        nxrs.verify(old)
    assert main(["verify", str(old), "--all"]) == 0
    assert main(["diff", str(old), str(run)]) == 0
