"""Locations and paths as users type them: a mistyped storage URL is an error wherever a run
directory is taken (never a local directory named ``s3:``), a URL where only a local path is
taken is refused, and paths with colons that are not schemes stay paths (docs/RUNS.md, "What
is a URL"; docs/cli.md); ``--plot`` is checked before training; an empty ``--model`` is a
usage error. Every CLI check runs a real ``python -m nxrs`` process in a fresh working
directory: its exit status, ONE line on stderr, and nothing written where it ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nxrs
from nxrs._storage.store import is_url

#: The smallest run: a 2-unit hidden layer, one epoch.
TINY = ("--epochs", "1", "--hidden", "2", "--batch-size", "4")

#: Text that starts with a scheme but is no URL nxrs takes.
NOT_URLS = [
    "s3:/bucket/run",  # one slash
    "s3:bucket/run",
    "s3://",  # no bucket
    "s3:///run",
    "gs:/bucket/run",
    "az:container/run",
    "S3:/Bucket/run",
    "file:///abs/run",
    "file:run",
    "memory://run",
    "https://example.com/run",
    "c3po:run",
]


def nxrs_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def one_line(proc: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert proc.stderr.startswith("nxrs ") and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


def commands(location: str) -> list[list[str]]:
    """Every command that takes a run directory, given ``location``."""
    return [
        ["train", *TINY, "--ckpt-dir", location],
        ["status", location],
        ["verify", location],
        ["diff", location, "run"],
        ["diff", "run", location],
    ]


#: Each text with nxrs train, and three of them with every command.
CASES = [(location, commands(location)[0]) for location in NOT_URLS] + [
    (location, argv)
    for location in ["s3:/bucket/run", "s3://", "file:///abs/run"]
    for argv in commands(location)[1:]
]


@pytest.mark.parametrize(("location", "argv"), CASES)
def test_a_location_with_a_scheme_that_is_no_url_nxrs_takes_is_a_usage_error(
    location: str, argv: list[str], tmp_path: Path
) -> None:
    proc = nxrs_cli(tmp_path, *argv)
    # The message names the location and the URLs nxrs takes.
    one_line(proc, 2, repr(location), "s3://bucket/path", "gs://bucket/path", "az://")
    assert list(tmp_path.iterdir()) == []  # no local directory made of it


def test_file_urls_name_the_path_to_give_instead(tmp_path: Path) -> None:
    proc = nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", f"file://{tmp_path}/run")
    one_line(proc, 2, f"give the local directory as a path: {tmp_path}/run")


def test_paths_with_colons_that_are_not_schemes_stay_local_paths(tmp_path: Path) -> None:
    # A colon after the first separator, and a first name with a colon written ./a:b.
    for location in ["runs/a:b", "./s3:bucket", "./file:run"]:
        proc = nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", location, "--json")
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / location / "nxrs-run.json").is_file()
        status = nxrs_cli(tmp_path, "status", location)
        assert status.returncode == 0, status.stderr


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("s3://bucket/run", True),
        ("s3a://bucket", True),
        ("GS://bucket/a/b:c", True),
        ("gcs://bucket/run/", True),
        ("az://container/run", True),
        ("abfss://container/run", True),
        ("runs/a:b", False),
        ("./s3:/bucket", False),
        ("C:\\runs\\a", False),  # a Windows drive letter is no scheme
        ("C:/runs/a", False),
        ("c:run", False),
        ("run", False),
        ("/abs/s3://x", False),
        ("", False),
    ],
)
def test_what_is_a_url(text: str, url: bool) -> None:
    assert is_url(text) is url


def test_a_path_object_is_always_a_local_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert is_url(Path("s3:/bucket")) is False
    manager = nxrs.CheckpointManager(Path("s3:x"))
    assert manager.directory == Path("s3:x") and (tmp_path / "s3:x").is_dir()


@pytest.mark.parametrize("location", NOT_URLS)
def test_library_callers_get_a_config_error_and_nothing_is_made(
    location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    x = np.zeros((8, 3), np.float32)
    y = np.arange(8) % 2
    t = nxrs.Trainer(layers=[3, 2])
    with pytest.raises(nxrs.ConfigError, match="s3://bucket/path"):
        t.fit(x, y, epochs=1, checkpoint=location, progress=False)
    assert t.steps == 0
    with pytest.raises(nxrs.ConfigError, match="s3://bucket/path"):
        nxrs.CheckpointManager(location)
    with pytest.raises(nxrs.ConfigError, match="s3://bucket/path"):
        nxrs.verify(location)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["train", *TINY, "--plot", "s3://bucket/c.png"],
        ["train", *TINY, "--data", "s3://bucket/data.csv"],
        ["train", *TINY, "--model", "gs://bucket/model.json"],
        ["inspect", "s3://bucket/run/step-000000000001.nxck"],
        ["sweep", "--dir", "s3://bucket/sweep", "--grid", "lr=0.1"],
        ["gate", "--workdir", "s3:/tmp"],
    ],
)
def test_a_url_where_a_local_path_is_taken_is_a_usage_error(
    argv: list[str], tmp_path: Path
) -> None:
    one_line(nxrs_cli(tmp_path, *argv), 2, "a local path is expected")
    assert list(tmp_path.iterdir()) == []


# --- --plot: checked before training --------------------------------------------------------


@pytest.mark.parametrize(
    ("plot", "fragment"),
    [
        (".", "'.' names a directory"),
        ("sub", "'sub' names a directory"),
        ("curves/", "'curves/' names a directory"),
        ("missing/dir/c.png", "'missing/dir' does not exist"),
        ("file.txt/c.png", "'file.txt' is not a directory"),
    ],
)
def test_a_plot_path_that_cannot_be_written_is_refused_before_training(
    plot: str, fragment: str, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "file.txt").write_text("")
    before = sorted(tmp_path.iterdir())
    proc = nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", "run", "--plot", plot)
    one_line(proc, 2, "argument --plot", fragment)
    assert proc.stdout == ""
    assert sorted(tmp_path.iterdir()) == before  # no run started, no directory made


def test_a_plot_format_matplotlib_does_not_write_is_refused_before_training(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    proc = nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", "run", "--plot", "c.txt")
    one_line(proc, 1, "--plot c.txt: matplotlib writes no .txt files", ".png")
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_plot_in_an_existing_directory_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "plots").mkdir()
    proc = nxrs_cli(tmp_path, "train", *TINY, "--plot", "plots/c.png", "--json")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "plots" / "c.png").read_bytes().startswith(b"\x89PNG")


# --- --model: an empty name -------------------------------------------------------------------


@pytest.mark.parametrize("command", [["train", *TINY], ["sweep", "--dir", "s", "--grid", "lr=1"]])
def test_an_empty_model_is_a_usage_error(command: list[str], tmp_path: Path) -> None:
    one_line(nxrs_cli(tmp_path, *command, "--model", ""), 2, "argument --model: an empty path")
