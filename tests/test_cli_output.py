"""What becomes of the command line's output never changes its exit status, and every failure
is one line (docs/cli.md): output piped into a reader that goes away (``nxrs train |
head -1``), stdout or stderr closed (``>&-``, ``2>&-``), a store or a Ray cluster that cannot
be reached; and the help says what ``nxrs train`` trains. Every check runs a real
``python -m nxrs`` process."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nxrs

#: The smallest run: a 2-unit hidden layer, one epoch.
TINY = ("--epochs", "1", "--hidden", "2", "--batch-size", "4")


def nxrs_cli(cwd: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("capture_output", True)
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args], text=True, timeout=300, cwd=cwd, **kwargs
    )


def in_shell(cwd: Path, redirection: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``nxrs ARGS REDIRECTION`` as a shell runs it (``>&-`` closes stdout before nxrs
    starts); stdout and stderr captured unless the redirection closes them."""
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirection}', "sh", sys.executable, "-m", "nxrs", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def with_reader_gone(cwd: Path, stream: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``nxrs ARGS`` with ``stream`` ("stdout" or "stderr") a pipe whose reader has gone:
    every write to it fails with EPIPE, as after ``| head -1`` has read its line."""
    read, write = os.pipe()
    os.close(read)
    try:
        return nxrs_cli(
            cwd,
            *args,
            capture_output=False,
            stdout=write if stream == "stdout" else subprocess.PIPE,
            stderr=write if stream == "stderr" else subprocess.PIPE,
        )
    finally:
        os.close(write)


def completed(cwd: Path, run: str, epochs: int) -> None:
    """The run directory ``run`` holds a completed run of ``epochs`` epochs that verifies."""
    manifest = json.loads((cwd / run / "nxrs-run.json").read_text())
    assert manifest["state"] == "complete", manifest
    latest = nxrs.CheckpointManager(cwd / run).latest()
    assert latest is not None and nxrs.Trainer.load(latest.path).epoch == epochs
    verify = nxrs_cli(cwd, "verify", run)
    assert verify.returncode == 0, verify.stderr


# --- output cut short --------------------------------------------------------------------------


@pytest.mark.parametrize("json_output", [False, True])
def test_a_completed_run_exits_0_when_its_reader_went_away(
    json_output: bool, tmp_path: Path
) -> None:
    argv = [*TINY, "--ckpt-dir", "run", *(["--json"] if json_output else [])]
    proc = with_reader_gone(tmp_path, "stdout", "train", *argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    completed(tmp_path, "run", 1)


def test_a_completed_run_exits_0_when_its_stderr_reader_went_away(tmp_path: Path) -> None:
    # The first run done, the second resumes it, which says so on stderr (and goes on).
    assert nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", "run").returncode == 0
    argv = ["train", "--epochs", "3", "--hidden", "2", "--batch-size", "4", "--ckpt-dir", "run"]
    assert "resuming" in nxrs_cli(tmp_path, *argv, "--epochs", "2").stderr
    proc = with_reader_gone(tmp_path, "stderr", *argv)
    assert proc.returncode == 0
    assert "state hash" in proc.stdout
    completed(tmp_path, "run", 3)


def test_a_failure_keeps_its_status_when_its_reader_went_away(tmp_path: Path) -> None:
    proc = with_reader_gone(tmp_path, "stderr", "train", *TINY, "--data", "missing.csv")
    assert proc.returncode == 1


@pytest.mark.parametrize("json_output", [False, True])
def test_a_run_with_stdout_closed_completes_and_exits_0(json_output: bool, tmp_path: Path) -> None:
    argv = [*TINY, "--ckpt-dir", "run", *(["--json"] if json_output else [])]
    proc = in_shell(tmp_path, ">&-", "train", *argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    # Nothing meant for stdout went into a file that took its descriptor.
    completed(tmp_path, "run", 1)


def test_a_run_with_stderr_closed_completes_and_exits_0(tmp_path: Path) -> None:
    assert nxrs_cli(tmp_path, "train", *TINY, "--ckpt-dir", "run").returncode == 0
    argv = ["train", "--epochs", "2", "--hidden", "2", "--batch-size", "4", "--ckpt-dir", "run"]
    proc = in_shell(tmp_path, "2>&-", *argv)  # its "resuming" line has nowhere to go
    assert proc.returncode == 0
    assert "state hash" in proc.stdout
    completed(tmp_path, "run", 2)


def test_a_failure_with_stdout_closed_is_one_line_with_its_status(tmp_path: Path) -> None:
    proc = in_shell(tmp_path, ">&-", "train", *TINY, "--data", "missing.csv")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "missing.csv" in proc.stderr, proc.stderr


# --- a store or a Ray cluster that cannot be reached: one line ---------------------------------


@contextlib.contextmanager
def denying_store(status: int) -> Iterator[str]:
    """A local HTTP server that answers every request with ``status`` and a JSON error, as
    Google Cloud Storage answers a caller without access (401: gcsfs logs the traceback of a
    request it does not retry; 403: its error's message is two lines); its endpoint."""

    class Deny(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            body = json.dumps({"error": {"code": status, "message": "no access"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("command", [["train", *TINY, "--ckpt-dir"], ["status"]])
def test_a_store_that_refuses_is_one_line(
    status: int, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gcsfs")
    with denying_store(status) as endpoint:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        monkeypatch.setenv("FSSPEC_GCS_TOKEN", "anon")
        monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        proc = nxrs_cli(tmp_path, *command, "gs://bucket/run")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nxrs ") and "no access" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        # Ray starts the local cluster's GCS, then connects to it no time (an error of
        # Ray's own, raised with its traceback).
        ("RAY_NUM_REDIS_GET_RETRIES", "0", "UnboundLocalError"),
        # Ray's session directory cannot be made (after Ray's own warning line).
        ("RAY_TMPDIR", "{tmp}/file/ray", "Not a directory"),
    ],
)
def test_a_ray_that_cannot_start_is_one_line(
    variable: str, value: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    proc = nxrs_cli(tmp_path, "sweep", "--dir", "s", "--epochs", "1", "--grid", "lr=0.1")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(
        "nxrs sweep: ConnectionError: Ray could not start a local cluster: "
    ), proc.stderr
    assert says in proc.stderr, proc.stderr


# --- the help -----------------------------------------------------------------------------------


def test_the_help_says_train_trains_layer_models_too(tmp_path: Path) -> None:
    listing = nxrs_cli(tmp_path, "--help").stdout
    line = next(line for line in listing.splitlines() if line.split()[:1] == ["train"])
    assert "layer model" in line and "MLP" in line, line
    described = nxrs_cli(tmp_path, "train", "--help").stdout
    assert "--model" in described.split("options:")[0], described
